"""03_extract (BEAM): extract [entity][type][property:value] records per episode, with source turns.

Reads: 02_episodes.jsonl, 01_sessions.jsonl
Writes: 03_extract.jsonl (and 03_extract.manifest.json)
LLM role: extract

Run from the repository root: python -m BEAM.03_extract [--config configs/beam.yaml] [--set key=value]
"""
from common.pipeline import cli

if __name__ == "__main__":
    cli.main("03_extract", benchmark="beam", doc=__doc__)
