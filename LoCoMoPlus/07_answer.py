"""07_answer (LoCoMoPlus): answer from the ORIGINAL episodes in the evidence buffer.

Reads: 01_questions.jsonl, 05_plan.jsonl, 06_retrieve.jsonl
Writes: 07_answer.jsonl (and 07_answer.manifest.json)
LLM role: answer

Run from the repository root: python -m LoCoMoPlus.07_answer [--config configs/locomo_plus.yaml] [--set key=value]
"""
from common.pipeline import cli

if __name__ == "__main__":
    cli.main("07_answer", benchmark="locomo_plus", doc=__doc__)
