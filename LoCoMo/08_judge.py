"""08_judge (LoCoMo): judge each scored answer against the gold answer (LLM role: judge).

Reads: 07_answer.jsonl, 01_gold.jsonl
Writes: 08_judge_{judge}.jsonl (and 08_judge.manifest.json)
LLM role: judge

Run from the repository root: python -m LoCoMo.08_judge [--config configs/locomo.yaml] [--set key=value]
"""
from common.pipeline import cli

if __name__ == "__main__":
    cli.main("08_judge", benchmark="locomo", doc=__doc__)
