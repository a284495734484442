"""01_preprocess (REALTALK): read the folder of the ten chat files (LoCoMo's layout, turns' clean_text); write one
memory per chat, 01_questions.jsonl (question text only) and the separate 01_gold.jsonl (answer, category, evidence,
each question's data quirks).

Reads: the benchmark file (data.path)
Writes: 01_sessions.jsonl, 01_questions.jsonl, 01_gold.jsonl, 01_session_sources.jsonl, config.resolved.yaml,
  fingerprint.json
  (and 01_preprocess.manifest.json)
LLM role: none

Run from the repository root: python -m REALTALK.01_preprocess [--config configs/realtalk.yaml] [--set key=value]
"""
from common.pipeline import cli

if __name__ == "__main__":
    cli.main("01_preprocess", benchmark="realtalk", doc=__doc__)
