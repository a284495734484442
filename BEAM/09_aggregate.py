"""09_aggregate (BEAM): score per ability (per chat, then the mean over chats), evidence recall over source_chat_ids.

Reads: 08_judge_{judge}.jsonl, 01_gold.jsonl, 07_answer.jsonl, 06_retrieve.jsonl
Writes: metrics.json, ledger.json, table_{judge}.md (and 09_aggregate.manifest.json)
LLM role: none

Run from the repository root: python -m BEAM.09_aggregate [--config configs/beam.yaml] [--set key=value]
"""
from common.pipeline import cli

if __name__ == "__main__":
    cli.main("09_aggregate", benchmark="beam", doc=__doc__)
