"""05_plan (LoCoMo): plan each question's evidence requirements (LLM role: plan) -> 05_plans.jsonl.

Run from the repository root: python -m LoCoMo.05_plan [--config configs/locomo.yaml] [--set key=value]
"""
from common import stages

if __name__ == "__main__":
    stages.main("plan", benchmark="locomo", doc=__doc__)
