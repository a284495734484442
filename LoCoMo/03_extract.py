"""03_extract (LoCoMo): extract entity-property records per episode (LLM role: extract) -> 03_records.jsonl.

Run from the repository root: python -m LoCoMo.03_extract [--config configs/locomo.yaml] [--set key=value]
"""
from common import stages

if __name__ == "__main__":
    stages.main("extract", benchmark="locomo", doc=__doc__)
