"""02_episodes (LoCoMo): partition every session into theme-coherent episodes (LLM role: partition).

Reads: 01_sessions.jsonl
Writes: 02_episodes.jsonl (and 02_episodes.manifest.json)
LLM role: partition

Run from the repository root: python -m LoCoMo.02_episodes [--config configs/locomo.yaml] [--set key=value]
"""
from common.pipeline import cli

if __name__ == "__main__":
    cli.main("02_episodes", benchmark="locomo", doc=__doc__)
