"""A memory's Ray task: the ordinary stages 02-07 in a scratch run directory on its worker.

A memory's task gets the memory's slice of every artifact (``ray_merge.memory_slices``), writes it
into a scratch run directory and runs the ordinary stage functions there (``engine.run_stage``:
resume, stale rows, failed rows redone, dedup, exactly as in one process). It sends back the rows,
manifests and per-memory files the stages wrote and the calls it made per stage. A stage that
raises ends the task with that memory's failure (``MemoryResult.failed``), the stages before it
kept: the driver counts it and writes every other memory's rows.

Its caches are shards of the run's (``common.core.cache_shards``) that claim a key they miss
(``common.core.cache_claims``), and its endpoint pools take the cluster-wide leases
(``ray_bounds``).
"""
from __future__ import annotations

import contextlib
import dataclasses
import io
import json
import os
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any, Iterator, Optional

from common.core import artifacts
from common.core.cache_claims import ClaimingResponseCache
from common.core.cache_shards import Remote, ShardedEmbeddingCache
from common.core.config import ROLES, Config
from common.core.endpoints import EndpointPool, EndpointSpec
from common.core.io import read_jsonl, write_jsonl
from common.core.llm import LLMClient, ResponseCache
from common.pipeline import engine
from common.pipeline.ray_bounds import SharedBoundPool

# Per-memory directories a stage writes besides its rows: the index (04), a system's state (06).
MEMORY_DIRS = ("04_index/{mid}", "06_retrieve/memory/{mid}")
# The stages whose rows are deduplicated across memories (shared sessions, their episodes): a
# task runs them over its own sessions plus the representatives other memories hold.
SHARED_STAGES = ("02_episodes", "03_extract")
SHARED_ARTIFACTS = ("sessions", "episodes", "records")


def _node_id() -> str:
    """The Ray node this process runs on ("" outside a Ray worker)."""
    try:
        import ray
        return str(ray.get_runtime_context().get_node_id()) if ray.is_initialized() else ""
    except Exception:  # noqa: BLE001 - no Ray here: claims then expire by lease only
        return ""


@dataclasses.dataclass
class Shard:
    """What a worker needs to reach the run's caches and the endpoints' bounds."""

    cache: Remote
    bounds: dict[str, Any]
    flush_every: int
    lease_seconds: float
    directory: Path
    node: str = ""  # the worker's Ray node (a claim's holder on the cache's node is checked by pid)


class WorkerRun(engine.Run):
    """A run in a worker's scratch directory whose caches are shards and whose pools are bounded."""

    shard: Optional[Shard] = None
    _responses: Optional[ClaimingResponseCache] = None
    _embeddings: Optional[ShardedEmbeddingCache] = None

    def response_cache(self) -> ResponseCache:
        assert self.shard is not None
        # A miss claims its key across the cluster (common.core.cache_claims): one request per key in flight.
        self._responses = ClaimingResponseCache(str(self.shard.directory / "llm.sqlite"), self.cfg.llm.cache_mode,
                                                self.shard.cache, self.shard.flush_every, node=self.shard.node)
        return self._responses

    def client_class(self) -> type[LLMClient]:
        assert self.shard is not None
        bounds, lease = self.shard.bounds, self.shard.lease_seconds

        class BoundedClient(LLMClient):
            def new_pool(self, specs: tuple[EndpointSpec, ...]) -> EndpointPool:
                return SharedBoundPool(specs, self.concurrency, cooldown=self.cooldown, bounds=bounds,
                                       lease_seconds=lease)

            @contextlib.contextmanager
            def _single_flight(self, key: str) -> Iterator[None]:
                # The in-process single flight, and the key's cluster-wide claim given up when the
                # request ends without a reply merged (it failed, or the task is stopping).
                with super()._single_flight(key):
                    try:
                        yield
                    finally:
                        if isinstance(self.cache, ClaimingResponseCache):
                            self.cache.give_up(key)

        return BoundedClient

    def embedder(self) -> Any:
        emb = super().embedder()
        if emb.cache is not None and self.shard is not None:
            if self._embeddings is None:
                self._embeddings = ShardedEmbeddingCache(self.shard.directory / "embeddings.sqlite", self.shard.cache,
                                                         self.shard.flush_every)
            emb.cache = self._embeddings
        return emb

    def flush(self) -> None:
        for cache in (self._responses, self._embeddings):
            if cache is not None:
                cache.flush()

    def close(self) -> None:
        if self._responses is not None:
            self._responses.close()  # its claims given back, its renewal stopped


@dataclasses.dataclass
class MemoryTask:
    cfg: Config
    memory_id: str
    stages: tuple[str, ...]
    files: dict[str, bytes]  # the memory's slice of the run directory, by relative path
    force: bool


@dataclasses.dataclass
class StageOutput:
    rows: Optional[list[dict[str, Any]]]  # None: the stage wrote no artifact (skipped)
    manifest: dict[str, Any]
    calls: dict[str, dict[str, Any]]  # role -> this stage's CallStats fields (latencies included)


@dataclasses.dataclass
class MemoryResult:
    memory_id: str
    stages: dict[str, StageOutput]
    files: dict[str, bytes]  # the memory's directories after the stages (MEMORY_DIRS)
    pid: int
    flushed: int
    # (stage id, "<exception>: <message>") of the stage that raised; the stages after it did not run.
    failed: Optional[tuple[str, str]] = None
    log: str = ""  # what the stages printed in the worker (their lines; the driver prints merged ones)
    # The task body's start and end (time.time() on the worker's node): where a group's wall went,
    # before the first task ran (joining, actors, a worker's start and imports), in tasks, after.
    started_at: float = 0.0
    finished_at: float = 0.0


def _raw_stats(client: Optional[LLMClient]) -> dict[str, dict[str, Any]]:
    if client is None:
        return {}
    return {role: dataclasses.asdict(s) for role, s in client.stats.items()}


def _delta(before: dict[str, dict[str, Any]], after: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
    out = {}
    for role, now in after.items():
        base = before.get(role, {})
        d: dict[str, Any] = {}
        for k, v in now.items():
            if k == "latencies":
                d[k] = v[len(base.get(k, [])):]
            elif k == "failures":
                d[k] = {c: n - base.get(k, {}).get(c, 0) for c, n in v.items() if n - base.get(k, {}).get(c, 0)}
            else:
                d[k] = v - base.get(k, 0)
        if any(d[k] for k in d):
            out[role] = d
    return out


def run_memory(task: MemoryTask, cache: Remote, bounds: dict[str, Any]) -> MemoryResult:
    """The body of one memory's Ray task (callable in-process too, as the fast tests do)."""
    started_at = time.time()
    scratch = Path(tempfile.mkdtemp(prefix=f"ensimem-{task.memory_id[:40].replace('/', '_')}-"))
    run: Optional[WorkerRun] = None
    try:
        cfg = dataclasses.replace(task.cfg, run=dataclasses.replace(
            task.cfg.run, results_dir=str(scratch / "results"), executor="local",
            max_error_rate=1.0))  # the driver applies the error rate to the whole stage
        lease = max((cfg.role(r).timeout for r in ROLES), default=600.0) + 5.0
        run = WorkerRun(cfg, force=task.force, progress=False)
        run.shard = Shard(cache, bounds, cfg.llm.shard_flush_calls, lease, scratch / "shard", _node_id())
        run.dir.mkdir(parents=True, exist_ok=True)
        for rel, blob in task.files.items():
            path = run.dir / rel
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(blob)
        outputs: dict[str, StageOutput] = {}
        failed: Optional[tuple[str, str]] = None
        # The stages' own lines (one per stage, with the scratch path) stay here: the driver prints
        # the stage's merged line, and Ray would forward these to the driver's terminal besides it.
        said = io.StringIO()
        with contextlib.redirect_stdout(said):
            for stage_id in task.stages:
                node = engine.by_name(stage_id)
                if node.id not in SHARED_STAGES:
                    _drop_foreign_rows(run, task.memory_id)
                before = _raw_stats(run._client)
                try:
                    engine.run_stage(run, node)
                except Exception as exc:  # noqa: BLE001 - this memory's failure (the driver counts it)
                    failed = (node.id, f"{type(exc).__name__}: {' '.join(str(exc).split())[:300]}")
                    break
                manifest_path = artifacts.manifest_path(run.dir, node.id)
                out = node.output(run.dir, cfg.judge.name)
                outputs[node.id] = StageOutput(
                    [r for r in read_jsonl(out) if r.get("memory_id", task.memory_id) == task.memory_id]
                    if out.exists() else None,
                    json.loads(manifest_path.read_text(encoding="utf-8")) if manifest_path.exists() else {},
                    _delta(before, _raw_stats(run._client)))
                run.flush()  # what this stage paid for is in the run's cache before the next starts
        files = {}
        for pattern in MEMORY_DIRS:
            base = run.dir / pattern.format(mid=task.memory_id)
            if base.is_dir():
                files.update({str(p.relative_to(run.dir)): p.read_bytes() for p in sorted(base.rglob("*"))
                              if p.is_file()})
        run.flush()
        flushed = run._responses.flushed if run._responses is not None else 0
        return MemoryResult(task.memory_id, outputs, files, os.getpid(), flushed, failed, said.getvalue(),
                            started_at, time.time())
    finally:
        if run is not None:
            with contextlib.suppress(Exception):  # what was paid is merged even when the task fails
                run.flush()
                run.close()
        shutil.rmtree(scratch, ignore_errors=True)


def _drop_foreign_rows(run: engine.Run, memory_id: str) -> None:
    """Past the shared stages, the other memories' representatives leave the scratch run: the
    index, plans and answers are this memory's alone."""
    for name in SHARED_ARTIFACTS:
        path = run.path(name)
        if path.exists():
            kept = [r for r in read_jsonl(path) if r.get("memory_id") == memory_id]
            write_jsonl(path, kept)
