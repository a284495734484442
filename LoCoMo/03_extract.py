"""03_extract (LoCoMo): extract entity-property records per episode (LLM role: extract).

Reads: 02_episodes.jsonl, 01_sessions.jsonl
Writes: 03_extract.jsonl (and 03_extract.manifest.json)
LLM role: extract

Run from the repository root: python -m LoCoMo.03_extract [--config configs/locomo.yaml] [--set key=value]
"""
from common.pipeline import cli

if __name__ == "__main__":
    cli.main("03_extract", benchmark="locomo", doc=__doc__)
