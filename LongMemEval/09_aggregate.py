"""09_aggregate (LongMemEval): accuracy per question type, task-averaged, abstention (k/n), retrieval recall/nDCG -> metrics.json, table_<judge>.md/.csv.

Run from the repository root: python -m LongMemEval.09_aggregate [--config configs/longmemeval.yaml] [--set key=value]
"""
from common import stages

if __name__ == "__main__":
    stages.main("aggregate", benchmark="longmemeval", doc=__doc__)
