"""The engine that runs a stage of the graph: resumable row loops, manifests, protocol checks.

A stage function (``common.pipeline.stages``) reads its inputs through ``Run.path``, maps its
work over rows with ``run_rows`` (resume, concurrency, failures redone, stale rows redone,
manifest, one summary line) and returns. ``run_stage`` checks the stage's LLM endpoint first,
so a missing endpoint fails in one line before any input is read; ``run_pipeline`` runs the
graph in order in one process (runners, the demo). A run starts through
``common.pipeline.api.evaluate`` (the numbered scripts and ``make locomo``, through ``cli``).
"""
from __future__ import annotations

import contextlib
import dataclasses
import importlib
import json
import logging
import sqlite3
import sys
import time
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any, Callable, Iterator, Optional

from common.benchmarks.registry import adapter
from common.core import artifacts, fingerprint, progress
from common.core.batch import BatchOptions
from common.core.config import ROLES, Config, ConfigError, resolve_path
from common.core.embeddings import Embedder
from common.core.endpoints import cause_hint
from common.core.io import StageWriter, content_digest, read_jsonl, write_json, write_manifest
from common.core.llm import EndpointNotConfigured, LLMClient, ResponseCache, RetryPolicy, resolve_endpoint
from common.core.schema import Episode, PartitionRow, Question, Session, from_dict, to_dict
from common.evaluation.scoring import POLICIES
from common.method.render import MemoryView
from common.pipeline import invocation, ledger, preflight
from common.pipeline.graph import STAGES, Stage, by_name, memory_stages
from common.systems.registry import uses_stage

log = logging.getLogger("harness")


class StageFailed(RuntimeError):
    """A stage finished but too many of its rows failed (``run.max_error_rate``)."""


class PaidCache(ResponseCache):
    """The run's response cache, remembering the replies this process paid for (each ``put``
    follows a call that was answered), so that a Ctrl-C can keep the ones no row records yet
    (``interrupted``): the resume reads them from the cache, and the ledger still counts them paid."""

    def __init__(self, path: str, mode: str = "rw"):
        super().__init__(path, mode)
        self.paid: dict[str, dict[str, Any]] = {}

    def put(self, key: str, request: dict[str, Any], response: str, usage: dict[str, int], latency: float = 0.0):
        super().put(key, request, response, usage, latency)
        self.paid[key] = {"model": request.get("model"), "usage": dict(usage), "latency": latency}


@dataclasses.dataclass
class Run:
    cfg: Config
    force: bool = False
    progress: bool = True
    _client: LLMClient | None = None
    # The row loop running now: (stage, rows done, rows in all), for the line a Ctrl-C prints.
    at: tuple[str, int, int] | None = None

    @property
    def dir(self) -> Path:
        return self.cfg.run_dir

    def path(self, name: str) -> Path:
        """The file of an artifact (``common.core.artifacts``), or a plain file name in the run."""
        return artifacts.path(self.dir, name)

    def judge_path(self, name: Optional[str] = None) -> Path:
        return artifacts.judge_path(self.dir, name or self.cfg.judge.name)

    def client(self, roles: tuple[str, ...]) -> LLMClient:
        """The shared LLM client; fails at once, in one line, when a role has no endpoint."""
        if self._client is None:
            c = self.cfg.llm
            self._client = self.client_class()(
                {r: self.cfg.role(r) for r in ROLES},
                cache=self.response_cache(),
                retry=RetryPolicy(c.max_attempts, c.initial_wait, c.max_wait),
                concurrency=c.concurrency,
                cooldown=c.endpoint_cooldown,
                batch=BatchOptions(c.batch_roles(ROLES), self.dir / "batches", c.batch_poll_seconds,
                                   c.batch_completion_window, c.batch_max_requests, c.batch_on_expiry,
                                   c.max_attempts),
            )
        self._client.check_endpoints(roles)
        preflight.check_reachable(roles, self._client.settings)  # a dead server fails now, not after retries
        return self._client

    # The two seams a Ray worker's run overrides (common.pipeline.ray_executor): its cache is a
    # shard of the run's, its endpoint pools take the cluster-wide bound.
    def response_cache(self) -> ResponseCache:
        c = self.cfg.llm
        # llm.cache_url (a shared PostgreSQL database) wins over the run's sqlite file.
        where = c.cache_url or str(resolve_path(c.cache_path))
        try:
            return PaidCache(where, c.cache_mode)
        except (OSError, sqlite3.Error) as exc:  # a path that cannot hold the file: the key, in one line
            key = "llm.cache_url" if c.cache_url else "llm.cache_path"
            raise ConfigError(f"{key}: cannot open the LLM cache {where} ({exc})") from None

    def client_class(self) -> type[LLMClient]:
        return LLMClient

    @property
    def llm(self) -> LLMClient:
        """The client made by ``client(roles)``, which ``run_rows`` calls before any row's work."""
        if self._client is None:
            raise RuntimeError("no LLM client yet: Run.client(roles) makes it")
        return self._client

    def embedder(self) -> Any:
        emb = self.cfg.embedding
        # llm.cache_url holds both caches (a shared database); else the embedding cache's own file.
        cache = self.cfg.llm.cache_url or (str(resolve_path(emb.cache_path)) if emb.cache_path else "")
        return Embedder.from_config(dataclasses.replace(emb, cache_path=cache))


# ----------------------------------------------------------------------------- loading
def load_sessions(run: Run) -> list[Session]:
    return [from_dict(Session, r) for r in read_jsonl(run.path("sessions"))]


def load_questions(run: Run) -> list[Question]:
    return [from_dict(Question, r) for r in read_jsonl(run.path("questions"))]


def load_views(run: Run) -> dict[str, MemoryView]:
    by_memory: dict[str, list[Session]] = defaultdict(list)
    for s in load_sessions(run):
        by_memory[s.memory_id].append(s)
    return {m: MemoryView(m, ss) for m, ss in by_memory.items()}


def load_episodes(run: Run) -> list[Episode]:
    return [e for r in read_jsonl(run.path("episodes")) for e in from_dict(PartitionRow, r).episodes]


def by_qid(rows: list[dict[str, Any]], cls: type) -> dict[str, Any]:
    return {r["qid"]: from_dict(cls, r) for r in rows}


# ----------------------------------------------------------------------------- helpers
def manifest(run: Run, stage: str, *, extra: dict | None = None, **kw: Any) -> None:
    """Stage manifest with the resolved config, so each artifact names the settings it came from."""
    write_manifest(run.dir, stage, extra={**(extra or {}), "config": dataclasses.asdict(run.cfg)}, **kw)


def digest(obj: Any) -> str:
    """Short content hash of an upstream row: a row whose input changed since it was made is stale."""
    return content_digest(obj)


def _stale(row: dict, key: str, current: dict[str, str]) -> bool:
    # Rows from before digests were kept (no field) are trusted; others must match their input.
    return bool(row.get("input_digest")) and row["input_digest"] != current.get(row[key], row["input_digest"])


def run_rows(run: Run, name: str, out: Path, key: str, items: list[Any], key_fn: Callable[[Any], str],
               work: Callable[[Any], Any], role: str | None, inputs: list[Path], failed: Callable[[Any], bool],
               redo_failed: bool = True, digest_fn: Callable[[Any], str] | None = None,
               extra: dict[str, Any] | None = None, order: list[str] | None = None) -> list[dict]:
    """Shared loop of the row stages: resume, map concurrently, write as completed, manifest.

    Rows that failed in an earlier invocation are done again (their successful calls come from
    the cache, so only the failed calls are paid for); ``redo_failed=False`` keeps them. With
    ``digest_fn``, each row records the digest of its input and a row whose input has changed
    since (an upstream row was redone) is done again too. ``role=None``: a stage that makes no
    LLM call this time (06 without bridges) runs its items one after the other. ``order``: the keys the
    file keeps, in order (default: the items'); rows of other keys are dropped.
    """
    started = time.time()
    client = run.client((role,)) if role else None
    current = {key_fn(i): digest_fn(i) for i in items} if digest_fn else {}
    redo = (lambda r: (redo_failed and failed(r)) or _stale(r, key, current)) if (redo_failed or digest_fn) else None
    writer = StageWriter(out, key, force=run.force, redo=redo)
    todo = writer.pending(items, key_fn)
    if digest_fn:
        inner = work

        def work(item: Any) -> Any:  # noqa: F811 - stamp each new row with its input digest
            row = inner(item)
            row.input_digest = current[key_fn(item)]
            return row
    done = client.map(work, todo, desc=name, progress=run.progress) if client else (
        (i, work(i)) for i in progress.bar(todo, desc=name, enabled=run.progress))
    written = len(items) - len(todo)
    run.at = (name, written, len(items))
    try:
        for _, row in done:
            writer.write(to_dict(row))
            written += 1
            run.at = (name, written, len(items))
    finally:
        # A Ctrl-C raised here, while a row is written, leaves the map suspended with calls in
        # flight; the traceback would keep it alive past the stop's report. Closing it now waits
        # for those calls (their replies reach the cache, paid) before anything reports the stop.
        close = getattr(done, "close", None)
        if close is not None:
            close()
        rows = writer.close(order=order if order is not None else [key_fn(i) for i in items])
    n_failed = sum(1 for r in rows if failed(r))
    llm = client.summary().get(role, {}) if client and role else {}
    manifest(run, name, inputs=inputs, outputs=[out], rows=len(rows), started=started,
                   extra={**(extra or {}), "resumed_rows": writer.resumed, "redone_rows": writer.redone,
                          "new_rows": len(todo), "failed_rows": n_failed, "llm": llm})
    summary_line(name, rows, writer.resumed, len(todo), n_failed, out, started, llm)
    if rows and n_failed / len(rows) > run.cfg.run.max_error_rate:
        raise StageFailed(f"{name}: {n_failed}/{len(rows)} rows failed (> run.max_error_rate "
                          f"{run.cfg.run.max_error_rate}){dominant_cause(run, role, [r for r in rows if failed(r)])}; "
                          "rerun to retry only the failed rows' calls")
    return rows


def error_cause(row: dict[str, Any]) -> str:
    """The cause of a failed row: the head of its ``<cause>: <detail>`` error (a judge row without
    an answer: the answer's cause)."""
    # A judge row whose second part failed (REALTALK's GPT score) names it in its scores' <part>_error.
    part = next((v for k, v in sorted((row.get("scores") or {}).items()) if k.endswith("_error") and v), "")
    error = str(row.get("error") or row.get("fallback_error") or part or "")
    head, _, rest = error.partition(":")
    if head.strip() == "no_answer":
        head = rest.strip().partition(":")[0]
    return head.strip() or "unknown"


def dominant_cause(run: Run, role: str | None, failed_rows: list[dict[str, Any]]) -> str:
    """"; most rows: <cause> (k of n): <hint>" for a stage that stops on its error rate, or ""."""
    causes = Counter(error_cause(r) for r in failed_rows)
    if not causes:
        return ""
    cause, k = causes.most_common(1)[0]
    url = ""
    if role:
        try:
            url = resolve_endpoint(run.cfg.role(role))[0]
        except (EndpointNotConfigured, ValueError):
            pass
    hint = cause_hint(cause, url)
    # The first such row's own words: a memory system's failure names what it raised.
    first = next((" ".join(str(r.get("error") or "").split()) for r in failed_rows if error_cause(r) == cause), "")
    return (f"; most failed with {cause} ({k} of {len(failed_rows)} rows){': ' + hint if hint else ''}"
            + (f"; the first: {first[:300]}" if first and first != cause else ""))


def summary_line(name: str, rows: list, resumed: int, new: int, failed: int, out: Path, started: float,
             llm: dict | None = None) -> None:
    calls = (f"; llm: {llm.get('calls', 0)} calls, {llm.get('cached', 0)} cached, {llm.get('failed', 0)} failed"
             if llm else "")
    print(f"{name}: {len(rows)} rows ({resumed} resumed, {new} new, {failed} failed) -> "
          f"{out} ({time.time() - started:.1f}s){calls}", flush=True)


# ----------------------------------------------------------------------------- protocol
def dataset_sha256(run: Run, *, reread: bool = False) -> str:
    """The sha256 of the source file: read at 01, remembered in the run's fingerprint after."""
    stored = json.loads((run.dir / fingerprint.FILE).read_text(encoding="utf-8")) \
        if (run.dir / fingerprint.FILE).exists() else {}
    if stored.get("run") and not reread:
        return stored["run"]["components"]["dataset_sha256"]
    data = adapter(run.cfg.benchmark)
    return data.dataset_sha256(data.data_path(run.cfg))


def check_protocol(run: Run, *, judge: str | None = None, reread: bool = False) -> str:
    """Refuse to add rows to a run made under another protocol; return the fingerprint.

    An imported run keeps the fingerprint of its published source (its answers are not ours to
    re-derive); a new judge may still be added to it.
    """
    if fingerprint.imported(run.dir) is not None:
        fp = str(fingerprint.stored(run.dir, "run"))
    else:
        comps = fingerprint.run_components(run.cfg, dataset_sha256(run, reread=reread))
        fp = fingerprint.check_and_store(run.dir, comps, key="run", force=run.force)
    if judge is None:
        return fp
    jc = fingerprint.judge_components(run.cfg, fp, POLICIES[run.cfg.benchmark])
    return fingerprint.check_and_store(run.dir, jc, key=f"judge:{judge}", force=run.force)


# ----------------------------------------------------------------------------- memory stages
def skipped(run: Run, stage: str) -> bool:
    """A stage the configured system does not use (``MemorySystem.stages``) says so and stops."""
    if uses_stage(run.cfg.method.name, by_name(stage).name):
        return False
    print(f"{stage}: skipped (method {run.cfg.method.name} builds its buffer in 06_retrieve)", flush=True)
    manifest(run, stage, inputs=[], outputs=[], rows=0, started=time.time(),
              extra={"skipped": f"method={run.cfg.method.name}"})
    return True


def run_rows_deduplicated(run: Run, name: str, out: Path, key: str, items: list[Any], key_fn: Callable[[Any], str],
              rep_of: dict[str, Any], work: Callable[[Any], Any], rebase: Callable[[Any, Any], Any],
              role: str, inputs: list[Path], failed: Callable[[Any], bool],
              digest_fn: Callable[[Any], str] | None = None) -> None:
    """Process distinct items first, then serve duplicates from the cache and rebase them.

    Running representatives to completion before any duplicate means two copies of one session
    never race for the same uncached request, so a duplicate costs no call at all.
    """
    started = time.time()
    reps = [i for i in items if rep_of[key_fn(i)] is i]
    # The duplicates' rows stay in the file through the first pass (a failed or stale one is still
    # dropped and redone), so a finished stage rerun serves none of them again, not even from the cache.
    run_rows(run, name, out, key, reps, key_fn, work, role, inputs, failed, digest_fn=digest_fn,
             order=[key_fn(i) for i in items])
    if len(reps) < len(items):
        # The first pass already retried failed representatives; do not pay for them twice.
        run_rows(run, name, out, key, items, key_fn, lambda i: rebase(work(rep_of[key_fn(i)]), i),
                   role, inputs, failed, redo_failed=False, digest_fn=digest_fn)
    path = artifacts.manifest_path(run.dir, name)
    data = json.loads(path.read_text(encoding="utf-8"))
    data["dedup"] = {"instances": len(items), "unique": len(reps), "calls_saved_by_reuse": len(items) - len(reps)}
    # The second pass rewrote the manifest with its own (cache-served, short) time: the stage's
    # wall is both passes, or `make bench-scale` would set the first pass's calls against nothing.
    data["wall_seconds"] = round(time.time() - started, 3)
    write_json(path, data)
    if len(reps) < len(items):
        print(f"{name}: {len(reps)} unique of {len(items)} instances; {len(items) - len(reps)} reused", flush=True)


# ----------------------------------------------------------------------------- running the graph
def check_endpoint(run: Run, stage: Stage) -> None:
    """Fail at once, in one line, when a stage that will call an LLM has no endpoint."""
    cfg = run.cfg
    skip = (stage.name == "episodes" and cfg.episodes.mode != "theme") or not uses_stage(cfg.method.name, stage.name)
    if stage.role and stage.role_required and not skip:
        run.client((stage.role,))


# The stages that work memory by memory (one Ray task per memory with ``run.executor: ray``):
# declared on the graph (``Stage.per_memory``).
MEMORY_STAGES = tuple(s.id for s in memory_stages())

# Stages that may run on an imported run: another judge over its answers, and the aggregate.
IMPORTED_RUN_STAGES = ("judge", "aggregate")


def run_stage(run: Run, stage: Stage | str) -> None:
    """One stage of the graph, its endpoint checked first."""
    node = by_name(stage) if isinstance(stage, str) else stage
    source = fingerprint.imported(run.dir)
    if source is not None and node.name not in IMPORTED_RUN_STAGES:
        raise RuntimeError(f"{run.dir} was imported from {source.get('file')}: only "
                           f"{', '.join(IMPORTED_RUN_STAGES)} run on it (a new judge, the aggregate)")
    check_endpoint(run, node)
    node.resolve()(run)


def run_pipeline(run: Run, stages: Optional[tuple[Stage, ...]] = None) -> None:
    """The stages of the graph in order in this process (runners, the demo); with
    ``run.executor: ray`` the memory stages run as Ray tasks, one per memory."""
    for _ in execute(run, stages or STAGES):
        pass


# The executors other than this process, named by import path as the graph names its stage
# functions: the engine never imports them (they build on it), and ray is loaded only when asked for.
EXECUTORS = {"ray": "common.pipeline.ray_executor:run_stages"}


def _executor(name: str) -> Callable[[Run, tuple[Stage, ...]], Iterator[Stage]]:
    module, _, attr = EXECUTORS[name].partition(":")
    return getattr(importlib.import_module(module), attr)


def execute(run: Run, stages: tuple[Stage, ...]) -> Iterator[Stage]:
    """Run ``stages`` in order, yielding each stage once its artifacts and manifest are written.

    With ``run.executor: ray``, each run of consecutive memory stages (02-07) is handed to
    ``common.pipeline.ray_executor``, which runs them per memory on the cluster and writes their
    artifacts and manifests here as this engine does; every other stage runs in this process.
    """
    groups: list[list[Stage]] = []
    for node in stages:
        memory_stage = run.cfg.run.executor == "ray" and node.id in MEMORY_STAGES
        if memory_stage and groups and groups[-1][0].id in MEMORY_STAGES:
            groups[-1].append(node)
        else:
            groups.append([node])
    for group in groups:
        if run.cfg.run.executor != "local" and group[0].id in MEMORY_STAGES:
            yield from _executor(run.cfg.run.executor)(run, tuple(group))
        else:
            run_stage(run, group[0])
            yield group[0]


def nothing_to_run(cfg: Config) -> str:
    """The line to print instead of running, when the selection keeps no question (``LIMIT=0``):
    otherwise 02-04 would still partition, extract and index every session for no question."""
    if cfg.data.question_limit != 0:
        return ""
    return (f"nothing to run: LIMIT=0 (data.question_limit: 0) selects no question; nothing was read or "
            f"written in {cfg.run_dir}")


def interrupted(run: Run, node: Stage, before: dict[str, dict[str, int]]) -> int:
    """Ctrl-C: one line on stderr saying where the run stopped and how to go on; the exit status 130.

    The rows written so far stay (each is written whole as it completes) and the calls in flight
    finished into the cache, so the same command resumes where this one stopped. The calls made
    are still recorded in the invocation's file (``invocation.json``); the replies paid for but in
    no row yet are kept (``ledger.keep_unwritten``) so the ledger counts them paid when the resume
    reads them from the cache."""
    with contextlib.suppress(Exception):  # the record is a courtesy; the line below is what matters
        invocation.record(run, node.id, before)
    with contextlib.suppress(Exception):  # the calls answered after the last row written: paid, in no row
        paid = getattr(run._client.cache, "paid", None) if run._client is not None else None
        if paid:
            ledger.keep_unwritten(run.dir, node.id, paid)
    where = f"{run.at[0]} after {run.at[1]} of {run.at[2]} rows" if run.at else node.id
    print(f"interrupted in {where}; run the same command to resume", file=sys.stderr, flush=True)
    return 130
