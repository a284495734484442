"""01_preprocess (BEAM): read a tier folder (each chat's chat_trunecated.json, else chat.json, and its probing
questions); write one memory per chat, 01_questions.jsonl (question text only) and the separate 01_gold.jsonl
(ability, answer, rubric, source_chat_ids as evidence, the other fields as details).

Reads: the benchmark file (data.path)
Writes: 01_sessions.jsonl, 01_questions.jsonl, 01_gold.jsonl, 01_session_sources.jsonl, config.resolved.yaml,
  fingerprint.json
  (and 01_preprocess.manifest.json)
LLM role: none

Run from the repository root: python -m BEAM.01_preprocess [--config configs/beam.yaml] [--set key=value]
"""
from common.pipeline import cli

if __name__ == "__main__":
    cli.main("01_preprocess", benchmark="beam", doc=__doc__)
