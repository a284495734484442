"""04_index (LoCoMoPlus): embed episodes, records and turn chunks; write the per-memory index.

Reads: 02_episodes.jsonl, 03_extract.jsonl, 01_sessions.jsonl
Writes: 04_index.jsonl (and 04_index.manifest.json)
LLM role: none

Run from the repository root: python -m LoCoMoPlus.04_index [--config configs/locomo_plus.yaml] [--set key=value]
"""
from common.pipeline import cli

if __name__ == "__main__":
    cli.main("04_index", benchmark="locomo_plus", doc=__doc__)
