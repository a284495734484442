"""08_judge (BEAM): the official BEAM rubric judge, one call per rubric item (LLM role: judge).

Reads: 07_answer.jsonl, 01_gold.jsonl
Writes: 08_judge_{judge}.jsonl (and 08_judge.manifest.json)
LLM role: judge

Run from the repository root: python -m BEAM.08_judge [--config configs/beam.yaml] [--set key=value]
"""
from common.pipeline import cli

if __name__ == "__main__":
    cli.main("08_judge", benchmark="beam", doc=__doc__)
