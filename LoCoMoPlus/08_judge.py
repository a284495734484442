"""08_judge (LoCoMoPlus): LLM judge of each scored answer (one file per judge, never averaged).

Reads: 07_answer.jsonl, 01_gold.jsonl
Writes: 08_judge_{judge}.jsonl (and 08_judge.manifest.json)
LLM role: judge

Run from the repository root: python -m LoCoMoPlus.08_judge [--config configs/locomo_plus.yaml] [--set key=value]
"""
from common.pipeline import cli

if __name__ == "__main__":
    cli.main("08_judge", benchmark="locomo_plus", doc=__doc__)
