"""04_index (BEAM): embed episodes, records and turn chunks; write the per-memory index.

Reads: 02_episodes.jsonl, 03_extract.jsonl, 01_sessions.jsonl
Writes: 04_index.jsonl (and 04_index.manifest.json)
LLM role: none

Run from the repository root: python -m BEAM.04_index [--config configs/beam.yaml] [--set key=value]
"""
from common.pipeline import cli

if __name__ == "__main__":
    cli.main("04_index", benchmark="beam", doc=__doc__)
