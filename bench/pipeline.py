"""The LoCoMo pipeline as `make locomo` runs it, one measured child process per stage.

Every run the bench makes is described by a ``PipelineRun``: the config file plus the
``--set`` overrides that point it at the fake server and at bench-private results and caches.
The same overrides serve the stage-by-stage cold run and the `make locomo` warm rerun, so the
rerun sees exactly the settings (and the cache keys) of the run it repeats.
"""
from __future__ import annotations

import contextlib
import json
import os
import shutil
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator

from bench.machine import load_average
from bench.procs import Measured, run_measured, tail
from common.core.config import REPO_ROOT, ROLES, Config, load_config
from common.pipeline.graph import STAGES

# The stage ids in graph order (the one declaration the Makefile reads too).
LOCOMO_STAGES = tuple(s.id for s in STAGES)
# Prompt kinds the fake server recognises, per LLM stage (repairs belong to their stage): the graph's.
LLM_STAGE_KINDS: dict[str, tuple[str, ...]] = {s.id: s.prompt_kinds for s in STAGES if s.prompt_kinds}
# Stages that load the sentence-transformers model (their RSS holds its weights): the graph's.
MODEL_STAGES = tuple(s.id for s in STAGES if s.loads_model)


class BenchError(RuntimeError):
    """A bench step could not run (one line: what failed and where its log is)."""


@dataclass
class PipelineRun:
    """One bench pipeline run: config file, overrides and where its artifacts go."""

    name: str
    config: str
    overrides: list[str]
    package: str = "LoCoMo"  # the benchmark's script package (LongMemEval for `make bench-scale`)

    def cfg(self) -> Config:
        return load_config([self.config], self.overrides)

    @property
    def run_dir(self) -> Path:
        return self.cfg().run_dir

    def stage_command(self, stage: str) -> list[str]:
        """What the Makefile's `locomo` loop runs for ``stage``."""
        return [sys.executable, "-m", f"{self.package}.{stage}", "--config", self.config,
                *[a for o in self.overrides for a in ("--set", o)]]

    def whole_command(self) -> list[str]:
        """What `make locomo` runs: every stage of the graph in one process (common.pipeline.run_all)."""
        return [sys.executable, "-m", "common.pipeline.run_all", self.cfg().benchmark, "--config", self.config,
                *[a for o in self.overrides for a in ("--set", o)]]

    def make_command(self) -> list[str] | None:
        """`make locomo` with the same config and overrides; None when make is not installed."""
        make = shutil.which("make")
        if make is None:
            return None
        if any(" " in o for o in self.overrides):
            raise BenchError(f"an override contains a space, which make's SET cannot carry: {self.overrides}")
        return [make, "-s", "-C", str(REPO_ROOT), "locomo", f"PY={sys.executable}", f"CONFIG={self.config}",
                f"SET={' '.join(self.overrides)}"]

    def manifest(self, stage: str) -> dict[str, Any]:
        name = f"08_judge_{self.cfg().judge.name}" if stage == "08_judge" else stage
        path = self.run_dir / f"{name}.manifest.json"
        return json.loads(path.read_text(encoding="utf-8")) if path.exists() else {}


def bench_overrides(*, workdir: Path, name: str, concurrency: int, base_url: str,
                    conversations: list[str], llm_cache: Path, embedding_cache: Path) -> list[str]:
    """Overrides that keep a bench run's results and caches in ``workdir`` and its calls local.

    Every role's base_url is pinned to the fake server, so a config naming a real endpoint for
    some role can never be called (nor billed) by the bench.
    """
    sets = [f"run.results_dir={workdir / 'results'}", f"run.name={name}",
            f"llm.cache_path={llm_cache}", f"embedding.cache_path={embedding_cache}",
            f"llm.concurrency={concurrency}"]
    sets += [f"models.{role}.base_url={base_url}" for role in ROLES]
    if conversations:
        sets.append(f"data.memories=[{','.join(conversations)}]")
    return sets


def child_env(base_url: str) -> dict[str, str]:
    """The stage processes' environment: the fake endpoint, no API key, no model hub."""
    env = {k: v for k, v in os.environ.items() if k != "OPENAI_API_KEY"}
    env["OPENAI_BASE_URL"] = base_url
    env.setdefault("HF_HUB_OFFLINE", "1")
    env.setdefault("TRANSFORMERS_OFFLINE", "1")
    return env


@contextlib.contextmanager
def endpoint_env(base_url: str) -> Iterator[None]:
    """This process's own calls (an HTTP embedding backend in item 2) go to the fake server too."""
    saved = {k: os.environ.get(k) for k in ("OPENAI_BASE_URL", "OPENAI_API_KEY")}
    os.environ.pop("OPENAI_API_KEY", None)
    os.environ["OPENAI_BASE_URL"] = base_url
    try:
        yield
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


@dataclass
class StageResult:
    """One stage process: its measurement, the requests the server saw, its manifest figures."""

    stage: str
    process: Measured
    requests: dict[str, int] = field(default_factory=dict)  # prompt kind -> requests during the stage
    manifest: dict[str, Any] = field(default_factory=dict)
    load_after: list[float] | None = None  # 1/5/15-min load average when the stage ended

    @property
    def request_count(self) -> int:
        return sum(self.requests.values())


def _manifest_figures(m: dict[str, Any]) -> dict[str, Any]:
    keep = ("wall_seconds", "rows", "resumed_rows", "new_rows", "failed_rows", "llm", "dedup", "embedding")
    return {k: m[k] for k in keep if k in m}


def _delta(after: dict[str, int], before: dict[str, int]) -> dict[str, int]:
    return {k: n - before.get(k, 0) for k, n in sorted(after.items()) if n - before.get(k, 0)}


def run_stages(run: PipelineRun, server: Any, stages: tuple[str, ...], logs: Path) -> list[StageResult]:
    """Run ``stages`` in order, each in its own measured process; stop at the first failure."""
    env = child_env(server.base_url)
    out = []
    for stage in stages:
        before = server.counts_by_kind()
        proc = run_measured(run.stage_command(stage), env=env, log=logs / f"{run.name}.{stage}.log")
        if proc.returncode != 0:
            raise BenchError(f"{run.name}: {stage} exited {proc.returncode} (log {proc.log}): {tail(proc.log)}")
        out.append(StageResult(stage, proc, _delta(server.counts_by_kind(), before),
                               _manifest_figures(run.manifest(stage)), load_average()))
        print(f"  {run.name} {stage}: {proc.wall_seconds:.1f}s, {out[-1].request_count} requests, "
              f"peak RSS {proc.peak_rss_bytes / 2**20:.0f} MiB", flush=True)
    return out


def _manifest_calls(m: dict[str, Any]) -> int:
    llm = m.get("llm") or {}
    return int(llm.get("calls", 0) - llm.get("cached", 0)) if llm else 0


def run_whole(run: PipelineRun, server: Any, logs: Path) -> tuple[Measured, list[StageResult]]:
    """The whole graph in ONE measured process, as `make locomo` runs it.

    The server cannot tell the stages of one process apart, so each stage's requests are the calls
    its manifest says it sent (under its first prompt kind, or the stage's id: 06's bridge calls); their
    sum must be what the server saw.
    """
    before = server.counts_by_kind()
    proc = run_measured(run.whole_command(), env=child_env(server.base_url), log=logs / f"{run.name}.whole.log")
    if proc.returncode != 0:
        raise BenchError(f"{run.name}: the pipeline exited {proc.returncode} (log {proc.log}): {tail(proc.log)}")
    seen = sum(_delta(server.counts_by_kind(), before).values())
    out = []
    for stage in LOCOMO_STAGES:
        m = run.manifest(stage)
        kinds = LLM_STAGE_KINDS.get(stage)
        calls = _manifest_calls(m)
        out.append(StageResult(stage, proc, {kinds[0] if kinds else stage: calls} if calls else {},
                               _manifest_figures(m)))
    counted = sum(r.request_count for r in out)
    if counted != seen:
        raise BenchError(f"{run.name}: the manifests count {counted} calls, the server saw {seen} (log {proc.log})")
    print(f"  {run.name} (one process): {proc.wall_seconds:.1f}s, {seen} requests", flush=True)
    return proc, out


def rerun_with_make(run: PipelineRun, server: Any, logs: Path) -> tuple[Measured, dict[str, int], str]:
    """Run the whole pipeline again the way a user would (`make locomo`), else stage by stage."""
    env = child_env(server.base_url)
    before = server.counts_by_kind()
    cmd = run.make_command()
    via = "make locomo"
    if cmd is None:  # no make: the same nine commands in one shell, measured as one
        via = "stage commands (make not installed)"
        script = " && ".join(" ".join(_quote(a) for a in run.stage_command(s)) for s in LOCOMO_STAGES)
        cmd = ["/bin/sh", "-c", script]
    proc = run_measured(cmd, env=env, log=logs / f"{run.name}.warm_rerun.log")
    if proc.returncode != 0:
        raise BenchError(f"{run.name}: warm rerun exited {proc.returncode} (log {proc.log}): {tail(proc.log)}")
    return proc, _delta(server.counts_by_kind(), before), via


def _quote(arg: str) -> str:
    import shlex

    return shlex.quote(arg)
