"""02_episodes (LongMemEval): partition every session into theme-coherent episodes (LLM role: partition) -> 02_episodes.jsonl.

Run from the repository root: python -m LongMemEval.02_episodes [--config configs/longmemeval.yaml] [--set key=value]
"""
from common import stages

if __name__ == "__main__":
    stages.main("episodes", benchmark="longmemeval", doc=__doc__)
