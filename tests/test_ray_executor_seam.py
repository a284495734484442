"""The Ray executor's seam, in this process (no cluster): per-memory tasks through the cache shards,
the driver writing artifacts and manifests exactly as the local engine, the endpoint leases."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pytest

from common.core.cache_shards import CacheStore, ShardedEmbeddingCache, ShardedResponseCache
from common.core.config import load_config
from common.pipeline import engine, ray_executor
from tests.conftest import REPO, TINY_LOCOMO, fake_vectors, rows, run_overrides

MEMORY = ["02_episodes", "03_extract", "04_index", "05_plan", "06_retrieve", "07_answer"]
# Fields that say how a row was obtained (timing, the cache), not what it is.
TIMING = ("latency", "seconds", "cached", "wall", "time")


def comparable(row):
    if isinstance(row, dict):
        return {k: comparable(v) for k, v in row.items() if not any(t in k for t in TIMING)}
    if isinstance(row, list):
        return [comparable(v) for v in row]
    return row


def pipeline(tmp_path, server, name, executor, monkeypatch):
    sets = run_overrides(tmp_path / name, TINY_LOCOMO, **fake_vectors(server.base_url),
                         **{"run.executor": executor, "llm.shard_flush_calls": 3})
    run = engine.Run(load_config(["configs/locomo.yaml"], sets), progress=False)
    monkeypatch.setattr(ray_executor, "dispatch", ray_executor.dispatch_in_process)
    for _ in engine.execute(run, engine.STAGES):
        pass
    return run


@pytest.mark.cluster  # two whole pipelines (~20 s): make test-slow
def test_executor_ray_writes_the_local_engines_rows_manifests_and_metrics(tmp_path, fake_server, monkeypatch):
    monkeypatch.setenv("OPENAI_BASE_URL", fake_server.base_url)
    local = pipeline(tmp_path, fake_server, "local", "local", monkeypatch)
    paid_local = fake_server.request_count
    tasks = []
    real = ray_executor.run_memory
    monkeypatch.setattr(ray_executor, "run_memory", lambda t, *a: tasks.append(t.memory_id) or real(t, *a))
    ray = pipeline(tmp_path, fake_server, "ray", "ray", monkeypatch)
    assert sorted(tasks) == sorted({r["memory_id"] for r in rows(local.path("sessions"))}) and len(tasks) == 2
    # Its own caches (a fresh run): it paid for the same calls, and wrote the same rows in the same order.
    assert fake_server.request_count == 2 * paid_local
    for name in ("episodes", "records", "index", "plans", "retrievals", "answers", "judge"):
        a = rows(local.judge_path() if name == "judge" else local.path(name))
        b = rows(ray.judge_path() if name == "judge" else ray.path(name))
        assert [comparable(r) for r in a] == [comparable(r) for r in b], name
    for stage in MEMORY:
        m_local = json.loads((local.dir / f"{stage}.manifest.json").read_text())
        m_ray = json.loads((ray.dir / f"{stage}.manifest.json").read_text())
        # (the input files' bytes differ in their timing fields only: their rows are compared above)
        assert m_ray["rows"] == m_local["rows"] and m_ray["inputs"].keys() == m_local["inputs"].keys(), stage
        for k in ("new_rows", "resumed_rows", "failed_rows", "dedup"):
            assert m_ray.get(k) == m_local.get(k), (stage, k)
        if m_local.get("llm"):
            assert m_ray["llm"]["calls"] == m_local["llm"]["calls"], stage
        # Where the group's wall went, from the tasks' own clocks (each stage of a group says the same).
        ex = m_ray["executor"]
        assert ex["name"] == "ray" and ex["memories"] == 2, stage
        assert 0 <= ex["first_task_started_after_seconds"] <= ex["last_task_finished_after_seconds"], stage
        assert 0 < ex["longest_task_seconds"] <= ex["last_task_finished_after_seconds"], stage
        assert ex["last_task_finished_after_seconds"] <= m_ray["wall_seconds"] + 0.01, stage
    vectors = sorted((local.dir / "04_index").rglob("*.npz"))
    assert [p.relative_to(local.dir) for p in vectors] == \
        [p.relative_to(ray.dir) for p in sorted((ray.dir / "04_index").rglob("*.npz"))]
    for p in vectors:
        a, b = np.load(p), np.load(ray.dir / p.relative_to(local.dir))
        assert all(np.array_equal(a[k], b[k]) for k in a.files)
    metrics = [json.loads((r.dir / "metrics.json").read_text())["judges"] for r in (local, ray)]
    assert metrics[0] == metrics[1]
    # The ledger and the invocation record count the workers' calls as the local engine's.
    led = [json.loads((r.dir / "ledger.json").read_text())["total"] for r in (local, ray)]
    assert led[0]["calls"] == led[1]["calls"] and led[0]["calls"] > 0
    # Every new entry reached the run's cache (merged by key): a rerun makes no call at all.
    paid = fake_server.request_count
    for _ in engine.execute(engine.Run(ray.cfg, progress=False), engine.STAGES):
        pass
    assert fake_server.request_count == paid


def test_shards_read_through_the_run_cache_and_merge_every_n_calls(tmp_path):
    store = CacheStore(str(tmp_path / "run.sqlite"), str(tmp_path / "emb.sqlite"))
    store.responses.put("old", {"x": 1}, "kept", {"prompt_tokens": 1})
    shard = ShardedResponseCache(str(tmp_path / "shard.sqlite"), "rw", store, flush_every=3)
    assert shard.get("old")[0] == "kept"  # a miss in the shard reads the run's cache
    shard.put("old", {"x": 1}, "replaced?", {})  # merged by key: the run's entry is never replaced
    shard.put("a", {"x": 2}, "A", {})
    assert store.get("a") is None and shard.unmerged == 2  # not yet: fewer than 3 unmerged
    shard.put("b", {"x": 3}, "B", {})
    assert store.get("a")[2] == "A" and store.get("b")[2] == "B" and shard.unmerged == 0
    assert store.get("old")[2] == "kept" and store.merged == 2
    shard.put("c", {"x": 4}, "C", {})
    assert shard.flush() == 1 and store.get("c")[2] == "C"
    ro = ShardedResponseCache(str(tmp_path / "ro.sqlite"), "ro", store, flush_every=1)
    ro.put("d", {}, "D", {})
    assert ro.get("c")[0] == "C" and store.get("d") is None
    emb = ShardedEmbeddingCache(tmp_path / "eshard.sqlite", store, flush_every=2)
    store.embeddings.put_many("m", [("h0", np.ones(3))])
    assert np.array_equal(emb.get_many("m", ["h0", "h1"])["h0"], np.ones(3, dtype=np.float32))
    emb.put_many("m", [("h1", np.zeros(3))])
    assert store.vectors("m", ["h1"], None) == {}
    emb.put_many("m", [("h2", np.full(3, 2.0))])
    assert set(store.vectors("m", ["h1", "h2"], 3)) == {"h1", "h2"}


def test_leases_bound_an_endpoint_and_come_back_from_dead_holders(tmp_path):
    leases = ray_executor.Leases(2, node="n")
    a = leases.try_take(60, "n", os.getpid())
    b = leases.try_take(60, "other-node", 1)
    assert a and b and leases.try_take(60, "n", os.getpid()) is None  # the bound holds
    leases.give_back(a)
    assert leases.try_take(60, "n", os.getpid()) is not None
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    full = ray_executor.Leases(1, node="n")
    assert full.try_take(60, "n", dead.pid)
    assert full.try_take(60, "n", os.getpid()) is not None  # its holder died: taken back
    expired = ray_executor.Leases(1, node="n")
    assert expired.try_take(-1, "far", 1) and expired.try_take(60, "n", os.getpid()) is not None
    assert leases.peak == 2


def test_executor_is_in_the_schema_and_every_stage_target():
    with pytest.raises(Exception, match="run.executor"):
        load_config(["configs/locomo.yaml"], ["run.executor=spark"])
    assert load_config(["configs/locomo.yaml"], []).run.executor == "local"
    out = subprocess.run(["make", "-n", "locomo", "longmemeval", "beam", "locomo-03_extract", "EXECUTOR=ray"],
                         cwd=REPO, capture_output=True, text=True, check=True).stdout
    commands = [line for line in out.splitlines() if "run_all" in line or "LoCoMo.03_extract" in line]
    assert len(commands) == 4 and all("--set run.executor=ray" in c for c in commands), commands


def test_the_memories_manifest_fields_add_up_as_one_stage():
    a = {"stage": "04_index", "rows": 1, "new_rows": 2, "dedup": {"instances": 3, "unique": 2},
         "embedding_model": "m", "embedding": {"encoded": 100, "encode_seconds": 2.0, "encode_cpu_seconds": 4.0,
                                               "texts_per_second": 50.0, "texts_per_cpu_second": 25.0},
         "ingest": {"concurrency": 4, "new": 1}}
    b = {"stage": "04_index", "rows": 1, "new_rows": 1, "dedup": {"instances": 1, "unique": 1},
         "embedding_model": "m", "embedding": {"encoded": 300, "encode_seconds": 2.0, "encode_cpu_seconds": 4.0,
                                               "texts_per_second": 150.0, "texts_per_cpu_second": 75.0},
         "ingest": {"concurrency": 4, "new": 1}}
    merged = ray_executor._merge_extra([a, b])
    assert merged["new_rows"] == 3 and merged["dedup"] == {"instances": 4, "unique": 3}
    assert merged["embedding_model"] == "m" and "rows" not in merged and "stage" not in merged
    assert merged["embedding"]["encoded"] == 400 and merged["embedding"]["texts_per_second"] == 100.0
    assert merged["embedding"]["texts_per_cpu_second"] == 50.0
    assert merged["ingest"] == {"concurrency": 4, "new": 2}


def test_shared_bound_pools_hold_the_bound_across_workers_and_pass_leases_on(monkeypatch):
    """Two workers' pools (threads here) on one endpoint of bound 2: never more than 2 requests
    hold a lease, and a busy worker passes a lease to its next request instead of asking the actor."""
    import sys
    import threading
    import time
    import types

    from common.core.endpoints import EndpointSpec

    leases = ray_executor.Leases(2, node="n")
    lock = threading.Lock()
    asked = []

    class Call:  # what ``actor.method.remote(...)`` returns; the fake ``ray.get`` runs it
        def __init__(self, fn, *args):
            self.fn, self.args = fn, args

    def take(seconds, node, pid):
        while True:
            with lock:
                lease = leases.try_take(seconds, node, pid)
            if lease:
                asked.append(lease)
                return lease
            time.sleep(0.001)

    def give_back(lease):
        with lock:
            leases.give_back(lease)

    actor = types.SimpleNamespace(take=types.SimpleNamespace(remote=lambda *a: Call(take, *a)),
                                  give_back=types.SimpleNamespace(remote=lambda lease: give_back(lease)))
    fake_ray = types.SimpleNamespace(get=lambda call: call.fn(*call.args),
                                     get_runtime_context=lambda: types.SimpleNamespace(get_node_id=lambda: "n"))
    monkeypatch.setitem(sys.modules, "ray", fake_ray)
    url = "http://127.0.0.1:9/v1"
    pools = [ray_executor.SharedBoundPool((EndpointSpec(url),), 2, cooldown=1.0, bounds={url: actor},
                                          lease_seconds=60) for _ in range(2)]
    in_flight, peak = [0], [0]

    def request(pool):
        for _ in range(20):
            got = pool.acquire()
            with lock:
                in_flight[0] += 1
                peak[0] = max(peak[0], in_flight[0])
            time.sleep(0.002)
            with lock:
                in_flight[0] -= 1
            pool.release(got, ok=True)

    threads = [threading.Thread(target=request, args=(p,)) for p in pools for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    time.sleep(3 * ray_executor.SharedBoundPool.IDLE)  # the leases nobody took go back
    assert peak[0] == 2 and leases.peak == 2 and not leases.held  # all given back at the end
    assert len(asked) < 80  # 80 requests: some leases went to the next request without the actor


@pytest.mark.cluster  # three stages twice (~3 s on a loaded machine): make test-slow
def test_shared_sessions_are_partitioned_through_the_run_wide_representative(tmp_path, fake_server, monkeypatch):
    """LongMemEval haystacks share sessions: a memory's task must send the local engine's request
    for a shared session (the prompt names the representative's memory), not one of its own, so
    that the rows match the local engine's and every task after the first gets a cache hit."""
    tiny = REPO / "tests" / "fixtures" / "lme_tiny.json"
    monkeypatch.setenv("OPENAI_BASE_URL", fake_server.base_url)
    monkeypatch.setattr(ray_executor, "dispatch", ray_executor.dispatch_in_process)
    stages = tuple(engine.by_name(s) for s in ("01_preprocess", "02_episodes", "03_extract"))
    runs = {}
    for executor in ("local", "ray"):
        sets = run_overrides(tmp_path / executor, tiny, **fake_vectors(fake_server.base_url),
                             **{"run.executor": executor, "llm.shard_flush_calls": 3})
        runs[executor] = engine.Run(load_config(["configs/longmemeval.yaml"], sets), progress=False)
        # ray: one stage per invocation (as `make bench-scale` runs them): 03's task starts from
        # the run directory, where the lent representatives' 02 rows must reach it too
        for group in ((stages,) if executor == "local" else tuple((s,) for s in stages)):
            for _ in engine.execute(runs[executor], group):
                pass
    local, ray = runs["local"], runs["ray"]
    assert json.loads((local.dir / "02_episodes.manifest.json").read_text())["dedup"]["calls_saved_by_reuse"] > 0
    for name in ("episodes", "records"):
        assert [comparable(r) for r in rows(local.path(name))] == [comparable(r) for r in rows(ray.path(name))], name
    # each task's own rows only, none of the representatives it was lent
    assert len(rows(ray.path("episodes"))) == len(rows(ray.path("sessions")))
