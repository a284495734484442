"""06_retrieve (LongMemEval): select episodes by structured matching with lexical/dense fallback; render the buffer -> 06_retrievals.jsonl.

Run from the repository root: python -m LongMemEval.06_retrieve [--config configs/longmemeval.yaml] [--set key=value]
"""
from common import stages

if __name__ == "__main__":
    stages.main("retrieve", benchmark="longmemeval", doc=__doc__)
