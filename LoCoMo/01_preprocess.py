"""01_preprocess (LoCoMo): read the raw benchmark file; write 01_sessions.jsonl, 01_questions.jsonl
and the separate 01_gold.jsonl.

Reads: the benchmark file (data.path)
Writes: 01_sessions.jsonl, 01_questions.jsonl, 01_gold.jsonl, 01_session_sources.jsonl, config.resolved.yaml,
  fingerprint.json
  (and 01_preprocess.manifest.json)
LLM role: none

Run from the repository root: python -m LoCoMo.01_preprocess [--config configs/locomo.yaml] [--set key=value]
"""
from common.pipeline import cli

if __name__ == "__main__":
    cli.main("01_preprocess", benchmark="locomo", doc=__doc__)
