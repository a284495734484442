"""02_episodes (LongMemEval): partition every session into theme-coherent episodes (LLM role: partition).

Reads: 01_sessions.jsonl
Writes: 02_episodes.jsonl (and 02_episodes.manifest.json)
LLM role: partition

Run from the repository root: python -m LongMemEval.02_episodes [--config configs/longmemeval.yaml] [--set key=value]
"""
from common.pipeline import cli

if __name__ == "__main__":
    cli.main("02_episodes", benchmark="longmemeval", doc=__doc__)
