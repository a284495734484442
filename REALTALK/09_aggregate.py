"""09_aggregate (REALTALK): the official token F1 and GPT score per category, the judge's accuracy beside
them (k/n, CIs clustered by chat), data quirks, ledger and tables.

Reads: 08_judge_{judge}.jsonl, 01_gold.jsonl, 07_answer.jsonl, 06_retrieve.jsonl
Writes: metrics.json, ledger.json, table_{judge}.md (and 09_aggregate.manifest.json)
LLM role: none

Run from the repository root: python -m REALTALK.09_aggregate [--config configs/realtalk.yaml] [--set key=value]
"""
from common.pipeline import cli

if __name__ == "__main__":
    cli.main("09_aggregate", benchmark="realtalk", doc=__doc__)
