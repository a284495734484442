"""Run a group of experiments from ``configs/experiments.yaml``: the ablations or the baselines.

Each variant is an ordinary run (``results/<benchmark>/<run>/``, stages 01-09) whose config is
the benchmark's main config plus the variant's overrides. Work that a variant shares with
another (the same partition, extraction, plan or judge request) is served from the shared LLM
and embedding caches, so changing one design choice pays only for what that choice changes.

    python -m common.pipeline.runner ablations --benchmark locomo [--subset all] [--only base,dense_only]
    python -m common.pipeline.runner baselines --benchmark locomo [--only oracle]
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

from common.core import progress
from common.core.config import ConfigError, load_config
from common.core.llm import EndpointNotConfigured
from common.pipeline import experiments as exp_mod
from common.pipeline.engine import Run, StageFailed, run_pipeline


@dataclass
class Outcome:
    variant: str
    run_dir: Path
    ok: bool
    seconds: float
    error: str = ""
    accuracy: Optional[dict] = None


def plan_runs(group: str, benchmark: str, exp: exp_mod.Experiments, subset_choice: Optional[str],
              only: Optional[list[str]]) -> list[tuple[exp_mod.Variant, list[str]]]:
    """(variant, overrides) for every run of the group, in the order of the experiments file."""
    if group == "ablations":
        subset = exp.subset(benchmark, subset_choice)
        variants = exp.variants
        base = [f"data.subset={subset.path}"] if subset else []
        name = lambda v: exp.ablation_run(v.name, subset)  # noqa: E731
    elif group == "baselines":
        variants, base = exp.baselines, []
        name = lambda v: exp.baseline_run(v.name)  # noqa: E731
    else:
        raise ConfigError(f"unknown experiment group {group!r} (ablations | baselines)")
    if only:
        known = {v.name for v in variants}
        unknown = [o for o in only if o not in known]
        if unknown:
            raise ConfigError(f"--only: unknown {group} variant(s) {unknown}; known: {sorted(known)}")
        variants = [v for v in variants if v.name in only]
    return [(v, [*base, *v.overrides(), f"run.name={name(v)}"]) for v in variants]


def run_variant(configs: list[str], overrides: list[str], variant: str, force: bool = False) -> Outcome:
    cfg = load_config(configs, overrides)
    run = Run(cfg, force=force, progress=progress.interactive())
    started = time.time()
    print(f"\n=== {variant}: {cfg.run_dir}", flush=True)
    try:
        run_pipeline(run)
    except (StageFailed, EndpointNotConfigured, ValueError, RuntimeError, OSError) as exc:
        return Outcome(variant, cfg.run_dir, False, time.time() - started, " ".join(str(exc).split()))
    metrics = json.loads((cfg.run_dir / "metrics.json").read_text(encoding="utf-8"))
    acc = metrics["judges"].get(cfg.judge.name, {}).get("overall")
    return Outcome(variant, cfg.run_dir, True, time.time() - started, accuracy=acc)


def summary(outcomes: list[Outcome]) -> str:
    lines = ["| variant | run | accuracy (k/n) | seconds |", "|---|---|---|---|"]
    for o in outcomes:
        if o.ok and o.accuracy and o.accuracy.get("accuracy") is not None:
            acc = f"{100 * o.accuracy['accuracy']:.2f}% ({o.accuracy['k']}/{o.accuracy['n']})"
        else:
            acc = f"FAILED: {o.error}" if not o.ok else "n/a"
        lines.append(f"| {o.variant} | {o.run_dir} | {acc} | {o.seconds:.1f} |")
    return "\n".join(lines)


def main(argv: Optional[list[str]] = None, *, group: Optional[str] = None, benchmark: Optional[str] = None) -> int:
    p = argparse.ArgumentParser(prog="python -m common.pipeline.runner", description=__doc__.split("\n\n")[0])
    if group is None:
        p.add_argument("group", choices=("ablations", "baselines"))
    if benchmark is None:
        p.add_argument("--benchmark", choices=tuple(exp_mod.MAIN_CONFIGS), default="locomo")
    p.add_argument("--config", action="append", default=None, help="main config (default: the benchmark's)")
    p.add_argument("--experiments", default=exp_mod.DEFAULT_PATH)
    p.add_argument("--subset", default=None, help="ablations: a subset file, or 'all' (default: experiments.yaml)")
    p.add_argument("--only", default=None, help="comma-separated variant names")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="override for every variant")
    p.add_argument("--limit", type=int, default=None, help="first N questions per memory (debug runs)")
    p.add_argument("--force", action="store_true")
    a = p.parse_args(argv)
    group = group or a.group
    benchmark = benchmark or a.benchmark
    for var, value in (("TOKENIZERS_PARALLELISM", "false"), ("TRANSFORMERS_VERBOSITY", "error"),
                       ("HF_HUB_DISABLE_PROGRESS_BARS", "1")):
        os.environ.setdefault(var, value)
    try:
        exp = exp_mod.load(a.experiments)
        configs = a.config or [exp_mod.MAIN_CONFIGS[benchmark]]
        shared = list(a.set) + ([f"data.question_limit={a.limit}"] if a.limit is not None else [])
        runs = plan_runs(group, benchmark, exp, a.subset, a.only.split(",") if a.only else None)
        for _, overrides in runs:  # validate every variant before paying for any of them
            cfg = load_config(configs, shared + overrides)
            if cfg.benchmark != benchmark:
                raise ConfigError(f"benchmark: the config is for {cfg.benchmark!r}, not {benchmark!r}")
    except ConfigError as exc:
        print(f"config error: {exc}", file=sys.stderr)
        return 2
    outcomes = [run_variant(configs, shared + overrides, v.name, a.force) for v, overrides in runs]
    print(f"\n{group} ({benchmark}):\n{summary(outcomes)}", flush=True)
    failed = [o.variant for o in outcomes if not o.ok]
    if failed:
        print(f"error: {len(failed)} of {len(outcomes)} {group} runs failed: {', '.join(failed)}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
