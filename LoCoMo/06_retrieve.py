"""06_retrieve (LoCoMo): select episodes by structured matching with lexical/dense fallback; render the buffer -> 06_retrievals.jsonl.

Run from the repository root: python -m LoCoMo.06_retrieve [--config configs/locomo.yaml] [--set key=value]
"""
from common import stages

if __name__ == "__main__":
    stages.main("retrieve", benchmark="locomo", doc=__doc__)
