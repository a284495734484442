"""02_episodes (LoCoMo): partition every session into theme-coherent episodes (LLM role: partition) -> 02_episodes.jsonl.

Run from the repository root: python -m LoCoMo.02_episodes [--config configs/locomo.yaml] [--set key=value]
"""
from common import stages

if __name__ == "__main__":
    stages.main("episodes", benchmark="locomo", doc=__doc__)
