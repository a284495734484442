"""09_aggregate (LoCoMoPlus): accuracy with k/n and CI, diagnostics, ledger and tables.

Reads: 08_judge_{judge}.jsonl, 01_gold.jsonl, 07_answer.jsonl, 06_retrieve.jsonl
Writes: metrics.json, ledger.json, table_{judge}.md (and 09_aggregate.manifest.json)
LLM role: none

Run from the repository root: python -m LoCoMoPlus.09_aggregate [--config configs/locomo_plus.yaml] [--set key=value]
"""
from common.pipeline import cli

if __name__ == "__main__":
    cli.main("09_aggregate", benchmark="locomo_plus", doc=__doc__)
