"""01_preprocess (LongMemEval): read longmemeval_{s_cleaned,m_cleaned,oracle}.json; write one memory per
question (its haystack), 01_questions.jsonl (question + date only) and the separate 01_gold.jsonl
(answer, answer sessions, has_answer turns, question type).

Reads: the benchmark file (data.path)
Writes: 01_sessions.jsonl, 01_questions.jsonl, 01_gold.jsonl, 01_session_sources.jsonl, config.resolved.yaml,
  fingerprint.json
  (and 01_preprocess.manifest.json)
LLM role: none

Run from the repository root: python -m LongMemEval.01_preprocess [--config configs/longmemeval.yaml] [--set key=value]
"""
from common.pipeline import cli

if __name__ == "__main__":
    cli.main("01_preprocess", benchmark="longmemeval", doc=__doc__)
