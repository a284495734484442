"""08_judge (LoCoMo): judge each scored answer against the gold answer (LLM role: judge) -> 08_judge_<judge.name>.jsonl.

Run from the repository root: python -m LoCoMo.08_judge [--config configs/locomo.yaml] [--set key=value]
"""
from common import stages

if __name__ == "__main__":
    stages.main("judge", benchmark="locomo", doc=__doc__)
