"""07_answer (LongMemEval): answer each question from its evidence buffer (LLM role: answer) -> 07_answers.jsonl.

Run from the repository root: python -m LongMemEval.07_answer [--config configs/longmemeval.yaml] [--set key=value]
"""
from common import stages

if __name__ == "__main__":
    stages.main("answer", benchmark="longmemeval", doc=__doc__)
