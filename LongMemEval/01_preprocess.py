"""01_preprocess (LongMemEval): read longmemeval_{s_cleaned,m_cleaned,oracle}.json; write one memory per question (its haystack), 01_questions.jsonl (question + date only) and the separate 01_gold.jsonl (answer, answer sessions, has_answer turns, question type).

Run from the repository root: python -m LongMemEval.01_preprocess [--config configs/longmemeval.yaml] [--set key=value]
"""
from common import stages

if __name__ == "__main__":
    stages.main("preprocess", benchmark="longmemeval", doc=__doc__)
