"""07_answer (LoCoMo): answer each question from its evidence buffer (LLM role: answer) -> 07_answers.jsonl.

Run from the repository root: python -m LoCoMo.07_answer [--config configs/locomo.yaml] [--set key=value]
"""
from common import stages

if __name__ == "__main__":
    stages.main("answer", benchmark="locomo", doc=__doc__)
