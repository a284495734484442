"""07_answer (LongMemEval): answer each question from its evidence buffer (LLM role: answer).

Reads: 01_questions.jsonl, 05_plan.jsonl, 06_retrieve.jsonl
Writes: 07_answer.jsonl (and 07_answer.manifest.json)
LLM role: answer

Run from the repository root: python -m LongMemEval.07_answer [--config configs/longmemeval.yaml] [--set key=value]
"""
from common.pipeline import cli

if __name__ == "__main__":
    cli.main("07_answer", benchmark="longmemeval", doc=__doc__)
