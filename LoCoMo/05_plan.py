"""05_plan (LoCoMo): plan each question's evidence requirements (LLM role: plan).

Reads: 01_questions.jsonl, 04_index.jsonl
Writes: 05_plan.jsonl (and 05_plan.manifest.json)
LLM role: plan

Run from the repository root: python -m LoCoMo.05_plan [--config configs/locomo.yaml] [--set key=value]
"""
from common.pipeline import cli

if __name__ == "__main__":
    cli.main("05_plan", benchmark="locomo", doc=__doc__)
