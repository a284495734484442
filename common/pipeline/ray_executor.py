"""The Ray executor (``run.executor: ray``): the memory stages 02-07 as one Ray task per memory.

The seam is the run directory. A memory's task gets the memory's slice of every artifact (its
sessions, questions, gold rows, the rows earlier invocations made, its index directory), writes
it into a scratch run directory on the worker and runs the ordinary stage functions there
(``common.pipeline.stages`` through ``engine.run_stage``: resume, stale rows, failed rows redone,
dedup, exactly as in one process). It sends back the rows, manifests and per-memory files the
stages wrote, and the calls it made per stage. The driver, the only writer of the real run
directory, then writes each stage's artifact (the memories' rows in the order the local engine
writes them), its files and its manifest (counts summed, the LLM summary from the driver's
client), in stage order, so resume, the ledger, the dry run, fingerprints and reports cannot
tell which executor ran. Judging and aggregation stay on the driver.

The caches: a worker never opens the run's SQLite files. Its LLM and embedding caches are shards
(``common.core.cache_shards``) backed by an actor on the driver's node that serves the run's
caches: misses are read through it, new entries are merged into it by key every
``llm.shard_flush_calls`` entries and when the task ends. A task killed with its worker is
retried by Ray (``MAX_RETRIES``); its merged calls are cache hits the second time.

The endpoint bounds stay global: each endpoint has an actor holding ``bound`` leases; a worker's
pool takes one for each request attempt besides its own per-process bound, so however many
workers run, no endpoint has more than its bound of requests in flight. A lease whose holder
process died (a killed worker on the driver's node) is taken back at once; any other expires
after the role's timeout (the request it covered has timed out by then).
"""
from __future__ import annotations

import asyncio
import dataclasses
import json
import logging
import os
import shutil
import tempfile
import threading
import time
import uuid
from collections import defaultdict
from pathlib import Path
from typing import Any, Iterator, Optional

from common.core import artifacts
from common.core.cache_shards import CacheStore, Remote, ResponseRow, ShardedEmbeddingCache, ShardedResponseCache
from common.core.config import ROLES, Config, resolve_path
from common.core.endpoints import EndpointPool, EndpointSpec
from common.core.io import read_jsonl, write_json, write_jsonl
from common.core.llm import CallStats, EndpointNotConfigured, LLMClient, ResponseCache, resolve_endpoints
from common.core.schema import Session, from_dict
from common.method.dedup import session_content_key
from common.pipeline import engine
from common.pipeline.graph import Stage
from common.systems import identity

MAX_RETRIES = 3  # a task whose worker died is run again (Ray's system-failure retries)
# Per-memory directories a stage writes besides its rows: the index (04), a system's state (06).
MEMORY_DIRS = ("04_index/{mid}", "06_retrieve/memory/{mid}")
# The stages whose rows are deduplicated across memories (shared sessions, their episodes): a
# task runs them over its own sessions plus the representatives other memories hold.
SHARED_STAGES = ("02_episodes", "03_extract")
_SHARED_ARTIFACTS = ("sessions", "episodes", "records")
# Manifest fields the driver sets itself rather than summing the memories'.
_OWN_FIELDS = {"stage", "finished_at", "wall_seconds", "code", "inputs", "outputs", "rows", "config", "llm"}
_ROOT = Path(__file__).resolve().parents[2]
FORWARDED_ENV = ("OPENAI_", "HARNESS_", "HF_", "TRANSFORMERS_")


# ----------------------------------------------------------------------------- cluster
def connect(cfg: Config) -> Any:
    """Join the cluster named by RAY_ADDRESS or ``run.ray_address``, or start a local one."""
    address = os.environ.get("RAY_ADDRESS") or cfg.run.ray_address
    if not address:
        # A cluster for this run only: on the loopback interface (Ray reads this when imported and
        # would otherwise name, and listen on, the machine's network address).
        os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")
    import ray

    if ray.is_initialized():
        return ray
    # The workers import this checkout (on other nodes: the same path; docs/scale.md) and reach the
    # endpoints as the driver does: its endpoint and key variables travel with the job (never a file).
    forwarded = {k: v for k, v in os.environ.items() if k.startswith(FORWARDED_ENV) or k == "OMP_NUM_THREADS"}
    env = {"env_vars": {**forwarded, "PYTHONPATH": str(_ROOT)}}
    if address:
        ray.init(address=address, runtime_env=env, logging_level=logging.WARNING)
    else:
        # address="local": a new cluster, never one a `ray start` on this machine left running.
        ray.init(address="local", num_cpus=cfg.run.ray_cpus or os.cpu_count(), include_dashboard=False,
                 _node_ip_address="127.0.0.1", runtime_env=env, logging_level=logging.WARNING)
    return ray


class _RayRemote:
    """The driver-side cache actor as a ``Remote`` (each call waits for the actor's answer)."""

    def __init__(self, actor: Any):
        self.actor = actor

    def get(self, key: str) -> Optional[ResponseRow]:
        import ray
        return ray.get(self.actor.get.remote(key))

    def put_many(self, rows: list[ResponseRow]) -> int:
        import ray
        return ray.get(self.actor.put_many.remote(rows))

    def vectors(self, namespace: str, hashes: list[str], dim: Optional[int]) -> dict[str, bytes]:
        import ray
        return ray.get(self.actor.vectors.remote(namespace, hashes, dim))

    def put_vectors(self, namespace: str, items: list[tuple[str, bytes]]) -> int:
        import ray
        return ray.get(self.actor.put_vectors.remote(namespace, items))


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)  # signal 0: only asks whether the process exists
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


class Leases:
    """``bound`` leases of one endpoint (the body of its actor; plain Python for the tests)."""

    def __init__(self, bound: int, node: str = ""):
        self.bound, self.node = int(bound), node
        self.held: dict[str, tuple[float, str, int]] = {}  # lease -> (expiry, node, pid)
        self.peak = 0

    def _reclaim(self) -> None:
        now = time.monotonic()
        for lease, (expiry, node, pid) in list(self.held.items()):
            if expiry < now or (node == self.node and not _alive(pid)):
                del self.held[lease]

    def try_take(self, seconds: float, node: str, pid: int) -> Optional[str]:
        self._reclaim()
        if len(self.held) >= self.bound:
            return None
        lease = uuid.uuid4().hex
        self.held[lease] = (time.monotonic() + seconds, node, pid)
        self.peak = max(self.peak, len(self.held))
        return lease

    def give_back(self, lease: str) -> None:
        self.held.pop(lease, None)


class _BoundActor:
    """One endpoint's leases as an async actor: a waiting worker does not hold up the others."""

    def __init__(self, bound: int, node: str):
        self.leases = Leases(bound, node)
        self.freed: Optional[asyncio.Event] = None

    async def take(self, seconds: float, node: str, pid: int) -> str:
        if self.freed is None:
            self.freed = asyncio.Event()
        while True:
            lease = self.leases.try_take(seconds, node, pid)
            if lease is not None:
                return lease
            self.freed.clear()
            try:  # woken by a release, or soon after to take back leases of dead holders
                await asyncio.wait_for(self.freed.wait(), timeout=0.2)
            except asyncio.TimeoutError:
                pass

    async def give_back(self, lease: str) -> None:
        self.leases.give_back(lease)
        if self.freed is not None:
            self.freed.set()

    async def peak(self) -> int:
        return self.leases.peak


class SharedBoundPool(EndpointPool):
    """An endpoint pool that also holds one of the endpoint's cluster-wide leases per request.

    In a pool of one endpoint, a request that ends keeps its lease for this worker's next request
    (at most ``REUSE`` times in a row) and a lease nobody here took within ``IDLE`` seconds goes
    back to the actor: a busy worker does not pay the actor's round trip per request, an idle one
    holds nothing for long, and the bound counts the same leases.
    """

    REUSE = 16
    IDLE = 0.02

    def __init__(self, specs: tuple[EndpointSpec, ...], default_concurrency: int, *, cooldown: float,
                 bounds: dict[str, Any], lease_seconds: float):
        super().__init__(specs, default_concurrency, cooldown=cooldown)
        # A passed-on lease lives through up to REUSE requests: its expiry covers all of them.
        self.shared, self.lease_seconds = bounds, lease_seconds * (self.REUSE + 1)
        self._held: dict[tuple[int, str], list[tuple[str, int]]] = defaultdict(list)  # (thread, url) -> leases
        self._idle: dict[str, list[tuple[str, int, float]]] = defaultdict(list)  # url -> (lease, uses, since)
        self._leases_lock = threading.Lock()
        self._reaper: Optional[threading.Thread] = None

    def acquire(self) -> str:
        url = super().acquire()
        actor = self.shared.get(url)
        if actor is None:
            return url
        with self._leases_lock:
            kept = self._idle[url].pop() if self._idle[url] else None
        if kept is not None:
            passed = (kept[0], kept[1])
        else:
            import ray
            passed = (ray.get(actor.take.remote(self.lease_seconds, ray.get_runtime_context().get_node_id(),
                                                os.getpid())), 0)
        with self._leases_lock:
            self._held[(threading.get_ident(), url)].append(passed)
        return url

    def release(self, url: str, *, ok: bool, connection_error: bool = False) -> None:
        actor = self.shared.get(url)
        if actor is not None:
            with self._leases_lock:
                lease, uses = self._held[(threading.get_ident(), url)].pop()
                keep = len(self.urls) == 1 and uses + 1 < self.REUSE
                if keep:
                    self._idle[url].append((lease, uses + 1, time.monotonic()))
                    if self._reaper is None:
                        self._reaper = threading.Thread(target=self._give_back_idle, daemon=True,
                                                        name="lease-reaper")
                        self._reaper.start()
            if not keep:
                actor.give_back.remote(lease)  # no wait: the actor frees it in arrival order
        super().release(url, ok=ok, connection_error=connection_error)

    def _give_back_idle(self) -> None:
        while True:
            time.sleep(self.IDLE / 2)
            now = time.monotonic()
            with self._leases_lock:
                stale = [(url, lease) for url, kept in self._idle.items() for lease, _, since in kept
                         if now - since >= self.IDLE]
                for url in self._idle:
                    self._idle[url] = [k for k in self._idle[url] if now - k[2] < self.IDLE]
            for url, lease in stale:
                self.shared[url].give_back.remote(lease)


# ----------------------------------------------------------------------------- the worker's run
@dataclasses.dataclass
class Shard:
    """What a worker needs to reach the run's caches and the endpoints' bounds."""

    cache: Remote
    bounds: dict[str, Any]
    flush_every: int
    lease_seconds: float
    directory: Path


class WorkerRun(engine.Run):
    """A run in a worker's scratch directory whose caches are shards and whose pools are bounded."""

    shard: Optional[Shard] = None
    _responses: Optional[ShardedResponseCache] = None
    _embeddings: Optional[ShardedEmbeddingCache] = None

    def response_cache(self) -> ResponseCache:
        assert self.shard is not None
        self._responses = ShardedResponseCache(str(self.shard.directory / "llm.sqlite"), self.cfg.llm.cache_mode,
                                               self.shard.cache, self.shard.flush_every)
        return self._responses

    def client_class(self) -> type[LLMClient]:
        assert self.shard is not None
        bounds, lease = self.shard.bounds, self.shard.lease_seconds

        class BoundedClient(LLMClient):
            def new_pool(self, specs: tuple[EndpointSpec, ...]) -> EndpointPool:
                return SharedBoundPool(specs, self.concurrency, cooldown=self.cooldown, bounds=bounds,
                                       lease_seconds=lease)

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
    scratch = Path(tempfile.mkdtemp(prefix=f"ensimem-{task.memory_id[:40].replace('/', '_')}-"))
    try:
        cfg = dataclasses.replace(task.cfg, run=dataclasses.replace(
            task.cfg.run, results_dir=str(scratch / "results"), executor="local",
            max_error_rate=1.0))  # the driver applies the error rate to the whole stage
        lease = max((cfg.role(r).timeout for r in ROLES), default=600.0) + 5.0
        run = WorkerRun(cfg, force=task.force, progress=False)
        run.shard = Shard(cache, bounds, cfg.llm.shard_flush_calls, lease, scratch / "shard")
        run.dir.mkdir(parents=True, exist_ok=True)
        for rel, blob in task.files.items():
            path = run.dir / rel
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(blob)
        outputs: dict[str, StageOutput] = {}
        for stage_id in task.stages:
            node = engine.by_name(stage_id)
            if node.id not in SHARED_STAGES:
                _drop_foreign_rows(run, task.memory_id)
            before = _raw_stats(run._client)
            engine.run_stage(run, node)
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
        return MemoryResult(task.memory_id, outputs, files, os.getpid(), flushed)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


# ----------------------------------------------------------------------------- the driver
def _session_of(row: dict[str, Any]) -> str:
    """``memory::session`` of a 02 row (its session key) or a 03 row (its episode id's prefix)."""
    if "session_key" in row:
        return str(row["session_key"])
    return "::".join(str(row.get("episode_id", "")).split("::")[:2])


def _drop_foreign_rows(run: engine.Run, memory_id: str) -> None:
    """Past the shared stages, the other memories' representatives leave the scratch run: the
    index, plans and answers are this memory's alone."""
    for name in _SHARED_ARTIFACTS:
        path = run.path(name)
        if path.exists():
            kept = [r for r in read_jsonl(path) if r.get("memory_id") == memory_id]
            write_jsonl(path, kept)


def _by_memory(rows: list[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    out: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for r in rows:
        if "memory_id" in r:
            out[r["memory_id"]].append(r)
    return out


def foreign_representatives(session_rows: list[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    """Per memory, the sessions of OTHER memories that represent some of its own (the run-wide
    first occurrence of the same content, as ``common.method.dedup.representatives`` picks it), in
    the run's order.

    The local engine partitions a shared session once, through its representative, and serves
    every copy from that call (whose prompt names the representative's memory). A task that saw
    only its own memory would send its own, different request for each copy: a call paid once
    per haystack and rows unlike the local engine's. Given these sessions first, the task's own
    dedup picks the same representatives, so its requests are the local engine's, byte for byte
    (a cache hit once another task has merged them)."""
    first: dict[str, dict[str, Any]] = {}
    out: dict[str, list[dict[str, Any]]] = defaultdict(list)
    seen: set[tuple[str, str]] = set()
    for row in session_rows:
        rep = first.setdefault(session_content_key(from_dict(Session, row)), row)
        mid, rep_key = row["memory_id"], f"{rep['memory_id']}::{rep['session_id']}"
        if rep["memory_id"] != mid and (mid, rep_key) not in seen:
            seen.add((mid, rep_key))
            out[mid].append(rep)
    return out


def memory_slices(run: engine.Run, memory_ids: list[str]) -> dict[str, dict[str, bytes]]:
    """Each memory's part of the run directory: its rows of every artifact (its sessions preceded
    by the representatives other memories hold, ``foreign_representatives``), its directories,
    and the run-wide files the stages check (the fingerprint, the resolved config)."""
    shared = {name: (run.dir / name).read_bytes() for name in ("fingerprint.json", "config.resolved.yaml")
              if (run.dir / name).exists()}
    out: dict[str, dict[str, bytes]] = {m: dict(shared) for m in memory_ids}
    lent_keys: dict[str, set[str]] = {}
    for name in ("sessions", "questions", "gold", "session_sources", "episodes", "records", "index", "plans",
                 "retrievals", "answers"):
        path = run.path(name)
        if not path.exists():
            continue
        all_rows = list(read_jsonl(path))
        rows = _by_memory(all_rows)
        if name == "sessions":
            lent = foreign_representatives(all_rows)
            lent_keys = {mid: {f"{r['memory_id']}::{r['session_id']}" for r in rs} for mid, rs in lent.items()}
            foreign: dict[str, list[dict[str, Any]]] = lent
        elif name in ("episodes", "records"):
            # the lent sessions' rows of the shared stages, for a task that starts past 02 (one
            # stage per process) or resumes: its dedup reads the representative's rows
            foreign = {mid: [r for r in all_rows if _session_of(r) in keys] for mid, keys in lent_keys.items()}
        else:
            foreign = {}
        for mid in memory_ids:
            out[mid][path.name] = "".join(json.dumps(r, ensure_ascii=False) + "\n"
                                          for r in foreign.get(mid, []) + rows.get(mid, [])).encode("utf-8")
    for mid in memory_ids:
        for pattern in MEMORY_DIRS:
            base = run.dir / pattern.format(mid=mid)
            if base.is_dir():
                out[mid].update({str(p.relative_to(run.dir)): p.read_bytes() for p in sorted(base.rglob("*"))
                                 if p.is_file()})
    return out


def _order(run: engine.Run, key: str, memory_ids: list[str], rows: list[dict[str, Any]]) -> list[str]:
    """The local engine's row order of an artifact: its input items' order (``run_rows``)."""
    if key == "qid":
        return [q["qid"] for q in read_jsonl(run.path("questions"))]
    if key == "session_key":
        return [f"{s['memory_id']}::{s['session_id']}" for s in read_jsonl(run.path("sessions"))]
    if key == "episode_id":
        return [e["episode_id"] for r in read_jsonl(run.path("episodes")) for e in r.get("episodes", [])]
    if key == "memory_id":
        return memory_ids
    return [r[key] for r in rows]


_KEYS = {"episodes": "session_key", "records": "episode_id", "index": "memory_id", "plans": "qid",
         "retrievals": "qid", "answers": "qid"}


def _merge_extra(manifests: list[dict[str, Any]]) -> dict[str, Any]:
    """The memories' manifest fields added up (counts summed; anything else: the first memory's)."""
    def merge(values: list[Any]) -> Any:
        first = values[0]
        if isinstance(first, bool) or first is None or isinstance(first, str):
            return first
        if isinstance(first, (int, float)):
            return sum(v for v in values if isinstance(v, (int, float)) and not isinstance(v, bool))
        if isinstance(first, dict):
            keys = list(dict.fromkeys(k for v in values if isinstance(v, dict) for k in v))
            return {k: merge([v[k] for v in values if isinstance(v, dict) and k in v]) for k in keys}
        return first

    fields = list(dict.fromkeys(k for m in manifests for k in m if k not in _OWN_FIELDS))
    out = {k: merge([m[k] for m in manifests if k in m]) for k in fields}
    emb = out.get("embedding")
    if isinstance(emb, dict):  # rates are not summed: recomputed from the summed counts
        for rate, over in (("texts_per_second", "encode_seconds"), ("texts_per_cpu_second", "encode_cpu_seconds")):
            if rate in emb:
                emb[rate] = round(emb.get("encoded", 0) / emb[over], 1) if emb.get(over) else None
    for settings in (out.get("ingest"),):  # a setting, not a count
        if isinstance(settings, dict) and "concurrency" in settings:
            settings["concurrency"] = next(m["ingest"]["concurrency"] for m in manifests if "ingest" in m)
    if identity.MANIFEST_KEY in out:  # what ran is one system for every memory: not a sum of departures
        out[identity.MANIFEST_KEY] = next(m[identity.MANIFEST_KEY] for m in manifests if identity.MANIFEST_KEY in m)
    return out


def _add_stats(client: LLMClient, calls: dict[str, dict[str, Any]]) -> None:
    """Count a stage's worker calls in the driver's client, which manifests and the invocation read."""
    for role, d in calls.items():
        stat: CallStats = client._stat(role)
        for k, v in d.items():
            if k == "latencies":
                stat.latencies.extend(v)
            elif k == "failures":
                for cause, n in v.items():
                    stat.failures[cause] = stat.failures.get(cause, 0) + n
            else:
                setattr(stat, k, getattr(stat, k) + v)


def _bounds(ray: Any, cfg: Config, node: str) -> dict[str, Any]:
    """One lease actor per endpoint of every configured role, on the driver's node."""
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    actor_cls = ray.remote(num_cpus=0)(_BoundActor)
    out: dict[str, Any] = {}
    for role in ROLES:
        try:
            specs, _ = resolve_endpoints(cfg.role(role))
        except (EndpointNotConfigured, ValueError, KeyError):
            continue
        for spec in specs:
            if spec.url not in out:
                bound = max(1, spec.concurrency or cfg.llm.concurrency)
                out[spec.url] = actor_cls.options(
                    scheduling_strategy=NodeAffinitySchedulingStrategy(node, soft=False)).remote(bound, node)
    return out


def _cache_locations(run: engine.Run) -> tuple[str, str]:
    """The run's LLM and embedding caches, as the local engine opens them: ``llm.cache_url`` (one
    shared PostgreSQL database) holds both; else the run's two SQLite files on the driver's disk."""
    if run.cfg.llm.cache_url:
        return run.cfg.llm.cache_url, run.cfg.llm.cache_url
    emb = run.cfg.embedding
    return str(resolve_path(run.cfg.llm.cache_path)), str(resolve_path(emb.cache_path)) if emb.cache_path else ""


def dispatch(run: engine.Run, tasks: list[MemoryTask]) -> dict[str, MemoryResult]:
    """Run the memories' tasks on the Ray cluster; their results by memory, or one-line failure."""
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    ray = connect(run.cfg)
    node_id = ray.get_runtime_context().get_node_id()
    here = NodeAffinitySchedulingStrategy(node_id, soft=False)
    store = ray.remote(num_cpus=0, max_concurrency=16)(CacheStore).options(scheduling_strategy=here).remote(
        *_cache_locations(run))
    bounds = _bounds(ray, run.cfg, node_id)
    remote = _RayRemote(store)
    task_fn = ray.remote(num_cpus=run.cfg.run.ray_task_cpus, num_gpus=run.cfg.run.ray_task_gpus,
                         max_retries=MAX_RETRIES)(run_memory)
    refs = {t.memory_id: task_fn.options(name=f"memory:{t.memory_id}").remote(t, remote, bounds) for t in tasks}
    results: dict[str, MemoryResult] = {}
    errors: list[str] = []
    try:
        for mid, ref in refs.items():
            try:
                results[mid] = ray.get(ref)
            except Exception as exc:  # noqa: BLE001 - one line per memory, raised below
                errors.append(f"memory {mid}: {' '.join(str(exc).split())[:300]}")
    finally:
        ray.kill(store)
        for actor in bounds.values():
            ray.kill(actor)
    if errors:
        raise RuntimeError(f"{len(errors)} of {len(tasks)} memories failed on the Ray executor; "
                           f"{errors[0]} (rerun: what was paid for is in the cache)")
    return results


def dispatch_in_process(run: engine.Run, tasks: list[MemoryTask]) -> dict[str, MemoryResult]:
    """The same tasks one after the other in this process, through the same shards (the fast tests)."""
    store = CacheStore(*_cache_locations(run))
    return {t.memory_id: run_memory(t, store, {}) for t in tasks}


def run_stages(run: engine.Run, stages: tuple[Stage, ...]) -> Iterator[Stage]:
    """Run consecutive memory stages as one task per memory (``dispatch``); write each stage's
    artifacts and manifest here, in stage order, yielding each stage once written."""
    started = time.time()
    for node in stages:  # an imported run, a missing endpoint: one line before any task starts
        if engine.fingerprint.imported(run.dir) is not None:
            engine.run_stage(run, node)  # raises the engine's own one-line refusal
        engine.check_endpoint(run, node)
    engine.check_protocol(run)
    client = run.client(())  # the driver's client: the workers' calls are counted in it
    memory_ids = list(dict.fromkeys(s["memory_id"] for s in read_jsonl(run.path("sessions"))))
    slices = memory_slices(run, memory_ids)
    ids = tuple(s.id for s in stages)
    results = dispatch(run, [MemoryTask(run.cfg, mid, ids, slices[mid], run.force) for mid in memory_ids])
    for mid in memory_ids:
        for rel, blob in results[mid].files.items():
            path = run.dir / rel
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(blob)
    for node in stages:
        yield _write_stage(run, client, node, memory_ids, [results[m].stages[node.id] for m in memory_ids], started)


def _write_stage(run: engine.Run, client: LLMClient, node: Stage, memory_ids: list[str],
                 outs: list[StageOutput], started: float) -> Stage:
    """One stage's artifact, manifest and summary line from the memories' outputs."""
    manifests = [o.manifest for o in outs]
    calls: dict[str, dict[str, Any]] = {}
    for o in outs:
        _add_stats(client, o.calls)
        for used in o.calls:
            calls.setdefault(used, {})
    if all("skipped" in m for m in manifests) and manifests:
        print(f"{node.id}: skipped ({manifests[0]['skipped']})", flush=True)
        engine.manifest(run, node.id, inputs=[], outputs=[], rows=0, started=started,
                        extra={"skipped": manifests[0]["skipped"]})
        return node
    artifact = node.writes[0]
    out = node.output(run.dir, run.cfg.judge.name)
    rows = [r for o in outs for r in (o.rows or [])]
    key = _KEYS[artifact]
    position = {k: i for i, k in enumerate(_order(run, key, memory_ids, rows))}
    rows.sort(key=lambda r: position.get(r[key], len(position)))
    write_jsonl(out, rows)
    extra = _merge_extra(manifests)
    role: Optional[str] = next(iter(calls), node.role)
    llm = client.summary().get(role, {}) if any(m.get("llm") for m in manifests) and role else {}
    inputs = [run.dir / p for p in dict.fromkeys(p for m in manifests for p in m.get("inputs", {}))]
    engine.manifest(run, node.id, inputs=inputs, outputs=[out], rows=len(rows), started=started,
                    extra={**extra, "llm": llm, "executor": {"name": "ray", "memories": len(memory_ids)}})
    if "dedup" in extra:  # the local engine times both passes; here: the whole group's wall
        path = artifacts.manifest_path(run.dir, node.id)
        data = json.loads(path.read_text(encoding="utf-8"))
        data["wall_seconds"] = round(time.time() - started, 3)
        write_json(path, data)
    failed = int(extra.get("failed_rows", 0) or 0)
    resumed = int(extra.get("resumed_rows", 0) or 0)
    engine.summary_line(node.id, rows, resumed, int(extra.get("new_rows", len(rows) - resumed) or 0), failed, out,
                        started, llm)
    if rows and failed / len(rows) > run.cfg.run.max_error_rate:
        raise engine.StageFailed(f"{node.id}: {failed}/{len(rows)} rows failed (> run.max_error_rate "
                                 f"{run.cfg.run.max_error_rate}); rerun to retry only the failed rows' calls")
    return node
