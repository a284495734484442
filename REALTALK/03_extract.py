"""03_extract (REALTALK): extract [entity][type][property:value] records per episode, with source turns.

Reads: 02_episodes.jsonl, 01_sessions.jsonl
Writes: 03_extract.jsonl (and 03_extract.manifest.json)
LLM role: extract

Run from the repository root: python -m REALTALK.03_extract [--config configs/realtalk.yaml] [--set key=value]
"""
from common.pipeline import cli

if __name__ == "__main__":
    cli.main("03_extract", benchmark="realtalk", doc=__doc__)
