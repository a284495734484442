"""03_extract (LongMemEval): extract entity-property records per episode (LLM role: extract).

Reads: 02_episodes.jsonl, 01_sessions.jsonl
Writes: 03_extract.jsonl (and 03_extract.manifest.json)
LLM role: extract

Run from the repository root: python -m LongMemEval.03_extract [--config configs/longmemeval.yaml] [--set key=value]
"""
from common.pipeline import cli

if __name__ == "__main__":
    cli.main("03_extract", benchmark="longmemeval", doc=__doc__)
