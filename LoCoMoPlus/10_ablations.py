"""10_ablations (LoCoMoPlus): every ablation variant of configs/experiments.yaml, each a full 01-09 run.

Each variant changes ONE design choice (episode granularity, property granularity, retrieval
route, fixed top-k budget); shared work comes from the LLM and embedding caches.
Run from the repository root:
    python -m LoCoMoPlus.10_ablations [--subset all] [--only base,dense_only] [--set key=value]
"""
import sys

from common.pipeline import runner

if __name__ == "__main__":
    sys.exit(runner.main(group="ablations", benchmark="locomo_plus"))
