"""The Ray executor (``run.executor: ray``): the memory stages 02-07 as one Ray task per memory.

The seam is the run directory. A memory's task (``ray_worker.run_memory``) gets the memory's
slice of every artifact (``ray_merge.memory_slices``), runs the ordinary stage functions in a
scratch run directory on its worker and sends back the rows, manifests, per-memory files and
calls. The driver, the only writer of the real run directory, writes each stage's artifact and
manifest in stage order (``ray_merge.write_stage``), so resume, the ledger, the dry run,
fingerprints and reports cannot tell which executor ran. Judging and aggregation stay on the driver.

The modules, by concern: ``ray_cluster`` (joining the cluster, token authentication),
``ray_worker`` (a memory's task), ``ray_merge`` (slices out, rows and manifests back),
``ray_bounds`` (the endpoints' cluster-wide bounds), and this one: the actors of one group of
stages, the tasks, and a memory's failure kept to that memory.

The caches: a worker never opens the run's SQLite files. Its LLM and embedding caches are shards
(``common.core.cache_shards``) backed by an actor on the driver's node that serves the run's
caches (``common.core.cache_claims.ClaimingStore``): a key a worker misses is claimed there, so one
request per key is in flight across the cluster (another worker asking for it waits for the
reply); a claimed key's reply is merged at once, other new entries every
``llm.shard_flush_calls`` and when the task ends. A task killed with its worker is retried by Ray
(``MAX_RETRIES``); its merged calls are cache hits the second time, its claims lapse.

A memory whose task raises is that memory's counted failure (``memory_failed``): the other
memories' rows are written, and the next run redoes it.
"""
from __future__ import annotations

import contextlib
import time
from typing import Any, Iterator, Optional

from common.core.cache_claims import ClaimingStore, Holder
from common.core.cache_shards import ResponseRow
from common.core.config import resolve_path
from common.core.io import read_jsonl
from common.pipeline import engine, ledger
from common.pipeline.graph import Stage
from common.pipeline.ray_bounds import Leases, SharedBoundPool, bound_actors  # noqa: F401 - the seam's names
from common.pipeline.ray_cluster import ClusterError, connect  # noqa: F401 - the seam's names
from common.pipeline.ray_merge import _merge_extra, memory_slices, write_stage  # noqa: F401 - the seam's names
from common.pipeline.ray_worker import MemoryResult, MemoryTask, run_memory

MAX_RETRIES = 3  # a task whose worker died is run again (Ray's system-failure retries)
STORE_THREADS = 64  # the cache actor's concurrent calls: claims wait in it (at most CLAIM_WAIT each)


class _RayRemote:
    """The driver-side cache actor as a ``Remote`` (each call waits for the actor's answer)."""

    def __init__(self, actor: Any):
        self.actor = actor

    def get(self, key: str) -> Optional[ResponseRow]:
        import ray
        return ray.get(self.actor.get.remote(key))

    def put_many(self, rows: list[ResponseRow], holder_id: str = "") -> int:
        import ray
        return ray.get(self.actor.put_many.remote(rows, holder_id))

    def claim(self, key: str, holder: Holder) -> tuple[Optional[ResponseRow], bool]:
        import ray
        return ray.get(self.actor.claim.remote(key, holder))

    def release(self, keys: list[str], holder_id: str) -> int:
        import ray
        return ray.get(self.actor.release.remote(keys, holder_id))

    def renew(self, keys: list[str], holder_id: str) -> int:
        import ray
        return ray.get(self.actor.renew.remote(keys, holder_id))

    def vectors(self, namespace: str, hashes: list[str], dim: Optional[int]) -> dict[str, bytes]:
        import ray
        return ray.get(self.actor.vectors.remote(namespace, hashes, dim))

    def put_vectors(self, namespace: str, items: list[tuple[str, bytes]]) -> int:
        import ray
        return ray.get(self.actor.put_vectors.remote(namespace, items))


def _cache_locations(run: engine.Run) -> tuple[str, str]:
    """The run's LLM and embedding caches, as the local engine opens them: ``llm.cache_url`` (one
    shared PostgreSQL database) holds both; else the run's two SQLite files on the driver's disk."""
    if run.cfg.llm.cache_url:
        return run.cfg.llm.cache_url, run.cfg.llm.cache_url
    emb = run.cfg.embedding
    return str(resolve_path(run.cfg.llm.cache_path)), str(resolve_path(emb.cache_path)) if emb.cache_path else ""


def _one_line(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {' '.join(str(exc).split())[:300]}"


def dispatch(run: engine.Run, tasks: list[MemoryTask]) -> dict[str, MemoryResult]:
    """Run the memories' tasks on the Ray cluster; their results by memory (a task that could not
    run at all, its retries spent, is that memory's failure)."""
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    ray = connect(run.cfg)  # ClusterError: one line saying why and what to do
    node_id = ray.get_runtime_context().get_node_id()
    here = NodeAffinitySchedulingStrategy(node_id, soft=False)
    store = ray.remote(num_cpus=0, max_concurrency=STORE_THREADS)(ClaimingStore).options(
        scheduling_strategy=here).remote(*_cache_locations(run), node=node_id)
    bounds = bound_actors(ray, run.cfg, node_id)
    remote = _RayRemote(store)
    task_fn = ray.remote(num_cpus=run.cfg.run.ray_task_cpus, num_gpus=run.cfg.run.ray_task_gpus,
                         max_retries=MAX_RETRIES)(run_memory)
    refs = {t.memory_id: task_fn.options(name=f"memory:{t.memory_id}").remote(t, remote, bounds) for t in tasks}
    results: dict[str, MemoryResult] = {}
    try:
        for task in tasks:
            try:
                results[task.memory_id] = ray.get(refs[task.memory_id])
            except Exception as exc:  # noqa: BLE001 - that memory's failure; the others go on
                results[task.memory_id] = MemoryResult(task.memory_id, {}, {}, 0, 0,
                                                       (task.stages[0], _one_line(exc)))
    except KeyboardInterrupt:
        with contextlib.suppress(Exception):  # the line Ctrl-C prints is what matters
            _keep_paid(run, tasks, ray.get(store.paid_replies.remote(), timeout=10))
        raise
    finally:
        ray.kill(store)
        for actor in bounds.values():
            ray.kill(actor)
    return results


def dispatch_in_process(run: engine.Run, tasks: list[MemoryTask]) -> dict[str, MemoryResult]:
    """The same tasks one after the other in this process, through the same shards and claims
    (the fast tests)."""
    store = ClaimingStore(*_cache_locations(run))
    results = {}
    try:
        for t in tasks:
            try:
                results[t.memory_id] = run_memory(t, store, {})
            except Exception as exc:  # noqa: BLE001 - as dispatch: that memory's failure
                results[t.memory_id] = MemoryResult(t.memory_id, {}, {}, 0, 0, (t.stages[0], _one_line(exc)))
    except KeyboardInterrupt:
        _keep_paid(run, tasks, store.paid_replies())
        raise
    return results


def _keep_paid(run: engine.Run, tasks: list[MemoryTask], paid: dict[str, dict[str, Any]]) -> None:
    """Ctrl-C while the tasks run: the replies the workers merged are paid, and no row of this group
    is written yet; kept for the ledger (``ledger.keep_unwritten``) as the local engine keeps its own."""
    if paid and tasks:
        ledger.keep_unwritten(run.dir, tasks[0].stages[0], paid)


def run_stages(run: engine.Run, stages: tuple[Stage, ...]) -> Iterator[Stage]:
    """Run consecutive memory stages as one task per memory (``dispatch``); write each stage's
    artifacts and manifest here, in stage order, yielding each stage once written. A stage over
    its error rate (rows or memories) stops the run once every stage's rows are written."""
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
    stop: Optional[str] = None
    for node in stages:
        line = write_stage(run, client, node, memory_ids, results, started)  # every stage written, then the stop
        stop = stop or line
        if stop and node is stages[-1]:
            raise engine.StageFailed(stop)
        yield node
