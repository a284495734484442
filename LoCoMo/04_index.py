"""04_index (LoCoMo): build the per-memory entity-property index, BM25 tokens and embeddings -> 04_index/ + 04_index.jsonl.

Run from the repository root: python -m LoCoMo.04_index [--config configs/locomo.yaml] [--set key=value]
"""
from common import stages

if __name__ == "__main__":
    stages.main("index", benchmark="locomo", doc=__doc__)
