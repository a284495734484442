"""04_index (LongMemEval): build the per-memory entity-property index, BM25 tokens and embeddings.

Reads: 02_episodes.jsonl, 03_extract.jsonl, 01_sessions.jsonl
Writes: 04_index.jsonl (and 04_index.manifest.json)
LLM role: none

Run from the repository root: python -m LongMemEval.04_index [--config configs/longmemeval.yaml] [--set key=value]
"""
from common.pipeline import cli

if __name__ == "__main__":
    cli.main("04_index", benchmark="longmemeval", doc=__doc__)
