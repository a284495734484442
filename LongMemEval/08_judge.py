"""08_judge (LongMemEval): the official LongMemEval checker (template per question type, abstention by `_abs`; LLM role: judge) -> 08_judge_<judge.name>.jsonl.

Run from the repository root: python -m LongMemEval.08_judge [--config configs/longmemeval.yaml] [--set key=value]
"""
from common import stages

if __name__ == "__main__":
    stages.main("judge", benchmark="longmemeval", doc=__doc__)
