"""05_plan (LongMemEval): plan each question's evidence requirements (LLM role: plan) -> 05_plans.jsonl.

Run from the repository root: python -m LongMemEval.05_plan [--config configs/longmemeval.yaml] [--set key=value]
"""
from common import stages

if __name__ == "__main__":
    stages.main("plan", benchmark="longmemeval", doc=__doc__)
