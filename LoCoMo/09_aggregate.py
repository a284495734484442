"""09_aggregate (LoCoMo): accuracy per category with k/n, diagnostics.

Reads: 08_judge_{judge}.jsonl, 01_gold.jsonl, 07_answer.jsonl, 06_retrieve.jsonl
Writes: metrics.json, ledger.json, table_{judge}.md (and 09_aggregate.manifest.json)
LLM role: none

Run from the repository root: python -m LoCoMo.09_aggregate [--config configs/locomo.yaml] [--set key=value]
"""
from common.pipeline import cli

if __name__ == "__main__":
    cli.main("09_aggregate", benchmark="locomo", doc=__doc__)
