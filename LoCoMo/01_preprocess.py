"""01_preprocess (LoCoMo): read the raw benchmark file; write 01_sessions.jsonl, 01_questions.jsonl and the separate 01_gold.jsonl.

Run from the repository root: python -m LoCoMo.01_preprocess [--config configs/locomo.yaml] [--set key=value]
"""
from common import stages

if __name__ == "__main__":
    stages.main("preprocess", benchmark="locomo", doc=__doc__)
