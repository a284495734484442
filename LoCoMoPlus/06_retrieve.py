"""06_retrieve (LoCoMoPlus): select episodes (structured match + dense fallback, budget by query type); resolve bridges.

Reads: 05_plan.jsonl, 04_index.jsonl, 01_sessions.jsonl, 01_questions.jsonl
Writes: 06_retrieve.jsonl (and 06_retrieve.manifest.json)
LLM role: bridge (only when a plan declares a bridge)

Run from the repository root: python -m LoCoMoPlus.06_retrieve [--config configs/locomo_plus.yaml] [--set key=value]
"""
from common.pipeline import cli

if __name__ == "__main__":
    cli.main("06_retrieve", benchmark="locomo_plus", doc=__doc__)
