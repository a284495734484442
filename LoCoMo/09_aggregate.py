"""09_aggregate (LoCoMo): accuracy per category with k/n, diagnostics -> metrics.json, table_<judge>.md/.csv.

Run from the repository root: python -m LoCoMo.09_aggregate [--config configs/locomo.yaml] [--set key=value]
"""
from common import stages

if __name__ == "__main__":
    stages.main("aggregate", benchmark="locomo", doc=__doc__)
