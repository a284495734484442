"""04_index (LongMemEval): build the per-memory entity-property index, BM25 tokens and embeddings -> 04_index/ + 04_index.jsonl.

Run from the repository root: python -m LongMemEval.04_index [--config configs/longmemeval.yaml] [--set key=value]
"""
from common import stages

if __name__ == "__main__":
    stages.main("index", benchmark="longmemeval", doc=__doc__)
