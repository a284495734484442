"""Run a benchmark from Python, as ``make locomo`` does: ``evaluate`` returns the run's numbers and files.

The one way a run starts: ``make locomo`` / ``longmemeval`` / ``beam`` (``common.pipeline.run_all``)
and every numbered script (``common.pipeline.cli``) parse their options and call ``evaluate``; a
notebook or a script calls it directly::

    from common.pipeline.api import evaluate

    result = evaluate("locomo", run="try", memories=["conv-26"], limit=20,
                      overrides={"method.name": "mem0"})
    result.accuracy, result.coverage, result.question_set, result.paths["metrics"]

It prints what the command prints (each stage's line, the tables, what the invocation paid) and
raises ``RunError`` with the command's one-line message where the command stops with an error.
Keys and endpoints still come from the environment only (``OPENAI_API_KEY``, ``OPENAI_BASE_URL``).
"""
from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping, Optional, Sequence, Union

from common.core import artifacts, progress
from common.core.config import Config, ConfigError, load_config
from common.core.llm import EndpointNotConfigured
from common.pipeline import dryrun, engine, invocation, warmup
from common.pipeline.graph import STAGES, Stage, by_name

Overrides = Union[Sequence[str], Mapping[str, Any]]


class RunError(RuntimeError):
    """A run that stopped: ``str(exc)`` is the command's one-line message; ``exit_code`` its status."""

    def __init__(self, message: str, exit_code: int = 1) -> None:
        super().__init__(message)
        self.exit_code = exit_code


@dataclass(frozen=True)
class RunResult:
    """What one ``evaluate`` call did, and where the run's numbers are.

    ``stages``: the stages this call ran (none for a dry run or an empty selection); ``calls``:
    this call's LLM calls per stage and role (new, cached, failed, dollars: ``invocation.json``);
    ``estimate``: the dry run's calls, tokens and dollars (``dry_run=True`` only).
    """

    benchmark: str
    name: str
    dir: Path
    config: Config
    stages: tuple[str, ...] = ()
    calls: dict[str, Any] = field(default_factory=dict)
    estimate: Optional[dict[str, Any]] = None

    @property
    def metrics(self) -> Optional[dict[str, Any]]:
        """``metrics.json`` of the run (09_aggregate), or None before it exists."""
        path = artifacts.path(self.dir, "metrics")
        return json.loads(path.read_text(encoding="utf-8")) if path.exists() else None

    @property
    def accuracy(self) -> Optional[float]:
        """The configured judge's overall strict accuracy (BEAM: the headline scoring's overall score)."""
        block = ((self.metrics or {}).get("judges") or {}).get(self.config.judge.name) or {}
        overall = block.get("overall")
        if isinstance(overall, dict):
            return overall.get("accuracy")
        variant = (block.get("variants") or {}).get(block.get("headline") or "official") or {}
        return variant.get("overall")

    @property
    def coverage(self) -> Optional[str]:
        """``PARTIAL 20 / 1,540`` or ``1,540 / 1,540``: what the number covers (metrics.json)."""
        return ((self.metrics or {}).get("coverage") or {}).get("mark")

    @property
    def question_set(self) -> Optional[str]:
        """The id of the questions the number is over (``common.evaluation.coverage.question_set_id``)."""
        return (((self.metrics or {}).get("coverage") or {}).get("question_set") or {}).get("id")

    @property
    def paths(self) -> dict[str, Path]:
        """The run's files that exist: ``run_dir``, ``metrics``, ``ledger``, ``report``, ``export`` and
        each judge's table (``table_<judge>``)."""
        candidates = {"run_dir": self.dir, "metrics": artifacts.path(self.dir, "metrics"),
                      "ledger": self.dir / "ledger.md", "report": self.dir / "report" / "index.html",
                      "export": self.dir / "export" / "questions.jsonl",
                      **{p.stem: p for p in sorted(self.dir.glob("table_*.md"))}}
        return {k: p for k, p in candidates.items() if p.exists()}


def overrides_of(benchmark: str, *, run: Optional[str] = None, limit: Optional[int] = None,
                 memories: Union[str, Sequence[str], None] = None, overrides: Overrides = (),
                 executor: Optional[str] = None) -> list[str]:
    """The ``--set`` list of these options, in the order the command line applies them: the overrides,
    then LIMIT, MEMORIES, RUN and EXECUTOR (the named options win)."""
    if isinstance(overrides, Mapping):  # Python values: JSON is YAML, so each keeps its type
        out = [f"{k}={json.dumps(v)}" for k, v in overrides.items()]
    else:
        out = [str(o) for o in overrides]
    if limit is not None:
        out.append(f"data.question_limit={int(limit)}")
    if memories:
        ids = [m.strip() for m in memories.split(",")] if isinstance(memories, str) else [str(m) for m in memories]
        out.append(f"data.memories={json.dumps([m for m in ids if m])}")
    if run:
        out.append(f"run.name={json.dumps(run)}")
    if executor:
        out.append(f"run.executor={executor}")
    return out


def resolve(benchmark: str, config: Union[str, Sequence[str], None], sets: list[str]) -> Config:
    """The run's config (``configs/<benchmark>.yaml`` by default), or ``RunError`` naming the key."""
    paths = [config] if isinstance(config, str) else list(config or [f"configs/{benchmark}.yaml"])
    try:
        cfg = load_config(paths, sets)
    except ConfigError as exc:
        raise RunError(f"config error: {exc}") from None
    if cfg.benchmark != benchmark:
        raise RunError(f"config error: benchmark: the config is for {cfg.benchmark!r}, this run is {benchmark!r}")
    return cfg


def _stages(stages: Optional[Sequence[Union[str, Stage]]]) -> tuple[Stage, ...]:
    if stages is None:
        return STAGES
    try:
        return tuple(s if isinstance(s, Stage) else by_name(s) for s in stages)
    except KeyError as exc:  # by_name's one line: the stage asked for and the known ones
        raise RunError(f"error: stages: {exc.args[0]}") from None


def evaluate(benchmark: str, *, config: Union[str, Sequence[str], None] = None, run: Optional[str] = None,
             limit: Optional[int] = None, memories: Union[str, Sequence[str], None] = None,
             overrides: Overrides = (), executor: Optional[str] = None, dry_run: bool = False,
             force: bool = False, stages: Optional[Sequence[Union[str, Stage]]] = None,
             show_progress: Optional[bool] = None) -> RunResult:
    """Run ``benchmark`` (``locomo``, ``longmemeval``, ``beam``; the stages 01-09, or ``stages``).

    Args:
        config: YAML config file(s), later ones winning (default ``configs/<benchmark>.yaml``).
        run: the run's name, ``results/<benchmark>/<run>/`` (``RUN=``).
        limit: questions per memory (``LIMIT=``; drawn across categories unless ``data.limit_rule: first``).
        memories: memory ids, a list or ``"conv-26,conv-41"`` (``MEMORIES=``).
        overrides: ``["method.name=mem0"]`` as ``SET=`` takes them, or ``{"method.options": {"k": 5}}``.
        executor: ``local`` or ``ray`` (``EXECUTOR=``).
        dry_run: count calls, tokens and dollars, make no call, write nothing (``DRY_RUN=1``).
        force: redo the stages instead of resuming (``FORCE=1``).
        stages: stage ids or names to run (``["06_retrieve"]``); default every stage of the graph.
        show_progress: progress bars (default: on a terminal, never in CI).

    Raises:
        RunError: the command's one-line error (a bad config key, no endpoint, a missing data file,
            a stage over its error rate); ``exit_code`` 130 after Ctrl-C, with the line saying
            where the run stopped (rows written and calls made stay; the same call resumes).
    """
    for var, value in (("TOKENIZERS_PARALLELISM", "false"), ("TRANSFORMERS_VERBOSITY", "error"),
                       ("HF_HUB_DISABLE_PROGRESS_BARS", "1")):
        os.environ.setdefault(var, value)  # model loading would drown the one line per stage
    nodes = _stages(stages)
    cfg = resolve(benchmark, config, overrides_of(benchmark, run=run, limit=limit, memories=memories,
                                                  overrides=overrides, executor=executor))
    result = RunResult(benchmark, cfg.run.name, cfg.run_dir, cfg)
    if dry_run:
        try:
            est = dryrun.estimate(cfg)
        except (ConfigError, ValueError, FileNotFoundError) as exc:
            raise RunError(f"error: {' '.join(str(exc).split())}") from None
        print(dryrun.format_estimate(est))
        return RunResult(benchmark, cfg.run.name, cfg.run_dir, cfg, estimate=est)
    if engine.nothing_to_run(cfg):
        print(engine.nothing_to_run(cfg), flush=True)
        return result
    work = engine.Run(cfg, force=force, progress=progress.interactive() if show_progress is None else show_progress)
    try:  # the method and every endpoint the stages will call, before the first one writes anything
        for node in nodes:
            engine.check_endpoint(work, node)
    except (EndpointNotConfigured, ConfigError) as exc:
        raise RunError(f"error: {' '.join(str(exc).split())}") from None
    whole = len(nodes) > 1
    # the later stages' slow imports, while the first ones wait on their endpoints (not for one stage)
    warm = warmup.start(nodes[1:]) if whole else None
    steps = engine.execute(work, nodes)
    record: dict[str, Any] = {}
    for i, node in enumerate(nodes):
        if warm is not None and node.warm_imports:
            warm.join()  # the stage's own imports then find every module loaded, none half-way
        before = invocation.snapshot(work)
        work.at = None
        try:
            done = next(steps)
            assert done is node, f"{done.id} ran where {node.id} was due"
        except KeyboardInterrupt:
            code = engine.interrupted(work, node, before)
            raise RunError(f"interrupted in {node.id}", exit_code=code) from None
        except EndpointNotConfigured as exc:
            raise RunError(f"error: {exc}") from None
        except (engine.StageFailed, FileNotFoundError, ValueError, RuntimeError) as exc:
            engine.log.debug("stage failed", exc_info=True)
            if work._client is not None:  # calls were made (and paid) before it stopped: say so
                invocation.finish(work, node.id, stopped=True, before=before)
            raise RunError(f"error: {' '.join(str(exc).split())}") from None
        record = invocation.finish(work, node.id, before=before, last=(i == len(nodes) - 1) if whole else None)
    return RunResult(benchmark, cfg.run.name, cfg.run_dir, cfg, stages=tuple(n.id for n in nodes),
                     calls=dict(record.get("stages") or {}))
