"""05_plan (LoCoMoPlus): turn each question into evidence requirements (hops, reasoning type, scope).

Reads: 01_questions.jsonl, 04_index.jsonl
Writes: 05_plan.jsonl (and 05_plan.manifest.json)
LLM role: plan

Run from the repository root: python -m LoCoMoPlus.05_plan [--config configs/locomo_plus.yaml] [--set key=value]
"""
from common.pipeline import cli

if __name__ == "__main__":
    cli.main("05_plan", benchmark="locomo_plus", doc=__doc__)
