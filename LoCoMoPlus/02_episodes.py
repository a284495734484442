"""02_episodes (LoCoMoPlus): cut each session into theme-coherent episodes.

Reads: 01_sessions.jsonl
Writes: 02_episodes.jsonl (and 02_episodes.manifest.json)
LLM role: partition

Run from the repository root: python -m LoCoMoPlus.02_episodes [--config configs/locomo_plus.yaml] [--set key=value]
"""
from common.pipeline import cli

if __name__ == "__main__":
    cli.main("02_episodes", benchmark="locomo_plus", doc=__doc__)
