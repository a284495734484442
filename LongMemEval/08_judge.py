"""08_judge (LongMemEval): the official LongMemEval checker (template per question type, abstention by `_abs`;
LLM role: judge).

Reads: 07_answer.jsonl, 01_gold.jsonl
Writes: 08_judge_{judge}.jsonl (and 08_judge.manifest.json)
LLM role: judge

Run from the repository root: python -m LongMemEval.08_judge [--config configs/longmemeval.yaml] [--set key=value]
"""
from common.pipeline import cli

if __name__ == "__main__":
    cli.main("08_judge", benchmark="longmemeval", doc=__doc__)
