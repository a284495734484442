"""03_extract (LongMemEval): extract entity-property records per episode (LLM role: extract) -> 03_records.jsonl.

Run from the repository root: python -m LongMemEval.03_extract [--config configs/longmemeval.yaml] [--set key=value]
"""
from common import stages

if __name__ == "__main__":
    stages.main("extract", benchmark="longmemeval", doc=__doc__)
