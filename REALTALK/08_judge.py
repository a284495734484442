"""08_judge (REALTALK): the LoCoMo judge's label and the official GPT score (role gpt_score) of each answer.

Reads: 07_answer.jsonl, 01_gold.jsonl
Writes: 08_judge_{judge}.jsonl (and 08_judge.manifest.json)
LLM role: judge

Run from the repository root: python -m REALTALK.08_judge [--config configs/realtalk.yaml] [--set key=value]
"""
from common.pipeline import cli

if __name__ == "__main__":
    cli.main("08_judge", benchmark="realtalk", doc=__doc__)
