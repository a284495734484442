"""01_preprocess (LoCoMoPlus): read locomo_plus.json and locomo10.json; write the ten conversations and one
stitched memory per Cognitive item (cue placed by its time gap), 01_questions.jsonl (question text, date) and the
separate 01_gold.jsonl (category, answer, the judge's evidence text, each item's stitching record).

Reads: the benchmark file (data.path)
Writes: 01_sessions.jsonl, 01_questions.jsonl, 01_gold.jsonl, 01_session_sources.jsonl, config.resolved.yaml,
  fingerprint.json
  (and 01_preprocess.manifest.json)
LLM role: none

Run from the repository root: python -m LoCoMoPlus.01_preprocess [--config configs/locomo_plus.yaml] [--set key=value]
"""
from common.pipeline import cli

if __name__ == "__main__":
    cli.main("01_preprocess", benchmark="locomo_plus", doc=__doc__)
