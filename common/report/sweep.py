"""`make sweep`: several systems x benchmarks (x configurations) in one command, ending with one table.

    python -m common.report.sweep --systems ensimem,mem0 --benches locomo,beam [--configs a.yaml,b.yaml]
        [--executor local|ray] [--results results/sweep] [--limit N] [--memories ids] [--set key=value ...]

Each run is the whole pipeline (``common.pipeline.run_all``) of one benchmark with one system
(``method.name``) and, with ``--configs``, one extra config file laid over the benchmark's own;
its results go to ``<results>/<benchmark>/<system>[-<config stem>]/``. With the local executor
the runs go one after the other; with ``ray`` each run is a Ray task (on the driver's node, whose
disk holds the run directories and the caches) whose own memory stages are Ray tasks of the same
cluster (``run.executor: ray``). A run that fails is counted and named, the others go on. At the
end, the systems table of ``common.report.tables.systems`` over ``<results>`` (every finished run,
one row per run and judge), and BEAM's and REALTALK's tables when their runs are among them.
"""
from __future__ import annotations

import argparse
import dataclasses
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Optional

from common.core.config import load_config, resolve_path
from common.pipeline import experiments as exp_mod
from common.pipeline import ray_executor
from common.report.tables.beam import beam_table
from common.report.tables.locomo_plus import locomo_plus_table
from common.report.tables.published import DEFAULT_PUBLISHED, load_published
from common.report.tables.realtalk import realtalk_table
from common.report.tables.runs import Context
from common.report.tables.systems import systems_table
from common.report.tables.writers import markdown

CONFIGS = {"locomo": "configs/locomo.yaml", "longmemeval": "configs/longmemeval.yaml", "beam": "configs/beam.yaml",
           "realtalk": "configs/realtalk.yaml", "locomo_plus": "configs/locomo_plus.yaml"}
ROOT = Path(__file__).resolve().parents[2]


@dataclasses.dataclass(frozen=True)
class SweepRun:
    benchmark: str
    system: str
    config: str  # "" or an extra config file laid over the benchmark's

    @property
    def name(self) -> str:
        return self.system + (f"-{Path(self.config).stem}" if self.config else "")


def plan(systems: list[str], benches: list[str], configs: list[str]) -> list[SweepRun]:
    benches = [b.replace("-", "_") for b in benches]  # BENCHES=locomo-plus, as its make target is named
    unknown = [b for b in benches if b not in CONFIGS]
    if unknown:
        raise ValueError(f"--benches: unknown {unknown}; known: {', '.join(CONFIGS)}")
    missing = [c for c in configs if not (ROOT / c).exists() and not Path(c).exists()]
    if missing:
        raise ValueError(f"--configs: no such file {missing}")
    return [SweepRun(b, s, c) for b in benches for s in systems for c in (configs or [""])]


def command(run: SweepRun, results: Path, executor: str, extra: list[str]) -> list[str]:
    cmd = [sys.executable, "-m", "common.pipeline.run_all", run.benchmark, "--config", CONFIGS[run.benchmark]]
    if run.config:
        cmd += ["--config", run.config]
    cmd += ["--set", f"method.name={run.system}", "--set", f"run.name={run.name}",
            "--set", f"run.results_dir={results}", "--set", f"run.executor={executor}"]
    return cmd + extra


def _run_one(cmd: list[str], log: str, env: dict[str, str]) -> int:
    """One run's process, its output to its log (the body of a run's Ray task too)."""
    Path(log).parent.mkdir(parents=True, exist_ok=True)
    with open(log, "w", encoding="utf-8") as fh:
        return subprocess.run(cmd, cwd=ROOT, env=env, stdout=fh, stderr=subprocess.STDOUT,
                              stdin=subprocess.DEVNULL).returncode


def execute(runs: list[SweepRun], results: Path, executor: str, extra: list[str],
            ray_address: str = "") -> dict[SweepRun, int]:
    """Every run's exit code: one after the other (local), or as Ray tasks on the driver's node."""
    logs = results / "sweep-logs"
    env = dict(os.environ)
    if executor != "ray":
        out = {}
        for r in runs:
            print(f"sweep: {r.benchmark} {r.name} ...", flush=True)
            out[r] = _run_one(command(r, results, executor, extra), str(logs / f"{r.benchmark}-{r.name}.log"), env)
        return out
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    cfg = load_config([CONFIGS[runs[0].benchmark]], [f"run.ray_address={ray_address}"] if ray_address else [])
    ray = ray_executor.connect(cfg)
    here = NodeAffinitySchedulingStrategy(ray.get_runtime_context().get_node_id(), soft=False)
    # Each run's process joins this same cluster as a driver of its own (its memory tasks spread out).
    env["RAY_ADDRESS"] = ray.get_runtime_context().gcs_address
    task = ray.remote(num_cpus=0)(_run_one).options(scheduling_strategy=here)
    refs = {r: task.remote(command(r, results, executor, extra), str(logs / f"{r.benchmark}-{r.name}.log"), env)
            for r in runs}
    return {r: int(ray.get(ref)) for r, ref in refs.items()}


def table(results: Path, benches: list[str]) -> str:
    """The systems table over ``results`` (and BEAM's), as markdown."""
    ctx = Context(results, exp_mod.load(exp_mod.DEFAULT_PATH), load_published(DEFAULT_PUBLISHED))
    parts = []
    if any(b != "beam" for b in benches):
        parts.append(markdown(systems_table(ctx)))
    if "beam" in benches:
        parts.append(markdown(beam_table(ctx)))
    if "realtalk" in benches:  # its token F1 and GPT score beside the judge accuracy the systems table shows
        parts.append(markdown(realtalk_table(ctx)))
    if "locomo_plus" in benches:  # its per-category table beside its systems-table row
        parts.append(markdown(locomo_plus_table(ctx)))
    return "\n\n".join(parts)


def main(argv: Optional[list[str]] = None) -> int:
    p = argparse.ArgumentParser(prog="python -m common.report.sweep", description=__doc__.split("\n\n")[0])
    p.add_argument("--systems", default="ensimem", help="comma-separated method.name values")
    p.add_argument("--benches", default="locomo", help=f"comma-separated: {', '.join(CONFIGS)}")
    p.add_argument("--configs", default="", help="comma-separated extra config files (one run per file)")
    p.add_argument("--executor", choices=("local", "ray"), default="local")
    p.add_argument("--ray-address", default="")
    p.add_argument("--results", default="results/sweep", help="where the sweep's runs and table go")
    p.add_argument("--limit", type=int, default=None)
    p.add_argument("--memories", default=None)
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE")
    a = p.parse_args(argv)
    split = (lambda s: [x.strip() for x in s.split(",") if x.strip()])
    try:
        runs = plan(split(a.systems), split(a.benches), split(a.configs))
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    results = resolve_path(a.results)
    extra = ([f"--limit={a.limit}"] if a.limit else []) + ([f"--memories={a.memories}"] if a.memories else [])
    for s in a.set:
        extra += ["--set", s]
    started = time.time()
    codes = execute(runs, results, a.executor, extra, a.ray_address)
    failed = [r for r, code in codes.items() if code != 0]
    for r in failed:
        print(f"sweep: {r.benchmark} {r.name} FAILED (exit {codes[r]}); its log: "
              f"{results / 'sweep-logs' / f'{r.benchmark}-{r.name}.log'}", file=sys.stderr)
    md = table(results, [r.benchmark for r in runs]) if len(failed) < len(runs) else ""
    if md:
        (results / "sweep.md").write_text(md, encoding="utf-8")
        print(md)
    print(f"sweep: {len(runs) - len(failed)} of {len(runs)} runs finished ({time.time() - started:.0f}s, "
          f"executor {a.executor}) -> {results}" + (f"; table: {results / 'sweep.md'}" if md else ""), flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
