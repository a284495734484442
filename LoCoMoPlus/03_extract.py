"""03_extract (LoCoMoPlus): extract [entity][type][property:value] records per episode, with source turns.

Reads: 02_episodes.jsonl, 01_sessions.jsonl
Writes: 03_extract.jsonl (and 03_extract.manifest.json)
LLM role: extract

Run from the repository root: python -m LoCoMoPlus.03_extract [--config configs/locomo_plus.yaml] [--set key=value]
"""
from common.pipeline import cli

if __name__ == "__main__":
    cli.main("03_extract", benchmark="locomo_plus", doc=__doc__)
