"""A memory's failure stays that memory's on the Ray executor (in this process, no cluster): a task
that raises is that memory's counted failure with its cause, the other memories' rows are written,
and the next run redoes the failed one."""
from __future__ import annotations

import json

import pytest

from common.core.config import load_config
from common.core.io import read_jsonl
from common.pipeline import engine, ray_executor, stages
from tests.conftest import TINY_LOCOMO, fake_vectors, rows, run_overrides
from tests.test_ray_executor_seam import comparable

MEMORY = ("episodes", "records", "index", "plans", "retrievals", "answers")


def _run(tmp_path, server, name, executor, **extra):
    sets = run_overrides(tmp_path / name, TINY_LOCOMO, **fake_vectors(server.base_url),
                         **{"run.executor": executor, **extra})
    return engine.Run(load_config(["configs/locomo.yaml"], sets), progress=False)


def _execute(run):
    for _ in engine.execute(run, engine.STAGES):
        pass


@pytest.mark.cluster  # three small pipelines in this process (~15 s): make test-slow
def test_a_raising_memory_task_fails_that_memory_only_and_the_next_run_redoes_it(tmp_path, fake_server,
                                                                                  monkeypatch, capsys):
    monkeypatch.setenv("OPENAI_BASE_URL", fake_server.base_url)
    monkeypatch.setattr(ray_executor, "dispatch", ray_executor.dispatch_in_process)
    local = _run(tmp_path, fake_server, "local", "local")
    _execute(local)
    memories = sorted({r["memory_id"] for r in rows(local.path("sessions"))})
    assert len(memories) == 2
    broken = memories[1]
    real = stages.extract

    def crashing(run):  # the system crashed on one memory's data
        if any(s["memory_id"] == broken for s in read_jsonl(run.path("sessions"))):
            raise RuntimeError(f"segfault-like crash on {broken}")
        return real(run)

    monkeypatch.setattr(stages, "extract", crashing)
    ray = _run(tmp_path, fake_server, "ray", "ray")
    with pytest.raises(engine.StageFailed) as stop:
        _execute(ray)
    message = str(stop.value)
    assert f"memory {broken}" in message and "memory_failed: 03_extract: RuntimeError: segfault-like crash" in message
    assert "1 of 2 memories failed" in message
    said = capsys.readouterr().out
    assert f"03_extract: memory {broken} failed (memory_failed: 03_extract: RuntimeError" in said
    # the other memory's rows of every stage are written; the failed one's rows end before its failure
    for name in MEMORY:
        got = {r["memory_id"] for r in rows(ray.path(name))}
        assert memories[0] in got, name
    assert broken in {r["memory_id"] for r in rows(ray.path("episodes"))}  # 02 ran before the crash
    assert broken not in {r["memory_id"] for r in rows(ray.path("records"))}
    # at the answer stage the failure is counted, per question, with its cause
    failed_answers = [r for r in rows(ray.path("answers")) if r["memory_id"] == broken]
    questions = [q for q in rows(ray.path("questions")) if q["memory_id"] == broken]
    assert len(failed_answers) == len(questions) > 0
    assert all(r["answer"] is None and r["error"].startswith("memory_failed: 03_extract: RuntimeError")
               for r in failed_answers)
    for stage in ("03_extract", "07_answer"):
        manifest = json.loads((ray.dir / f"{stage}.manifest.json").read_text())
        assert manifest["failed_memories"][broken].startswith("memory_failed: 03_extract: RuntimeError"), stage
    answers_manifest = json.loads((ray.dir / "07_answer.manifest.json").read_text())
    assert answers_manifest["failed_rows"] == len(questions)
    # the next run redoes the failed memory (and only pays for it): the local engine's rows in the end
    monkeypatch.setattr(stages, "extract", real)
    before = fake_server.request_count
    _execute(_run(tmp_path, fake_server, "ray", "ray"))
    assert fake_server.request_count > before
    for name in MEMORY:
        assert [comparable(r) for r in rows(local.path(name))] == [comparable(r) for r in rows(ray.path(name))], name
    assert "failed_memories" not in json.loads((ray.dir / "07_answer.manifest.json").read_text())


def test_a_task_that_cannot_run_at_all_is_its_memorys_failure(tmp_path, fake_server, monkeypatch):
    """Ray's own error for a task (its retries spent, its worker gone) is that memory's failure too."""
    monkeypatch.setenv("OPENAI_BASE_URL", fake_server.base_url)
    run = _run(tmp_path, fake_server, "ray", "ray")
    monkeypatch.setattr(ray_executor, "run_memory",
                        lambda task, *a: (_ for _ in ()).throw(OSError(f"worker of {task.memory_id} died")))
    tasks = [ray_executor.MemoryTask(run.cfg, m, ("02_episodes",), {}, False) for m in ("a", "b")]
    results = ray_executor.dispatch_in_process(run, tasks)
    assert {m: r.failed for m, r in results.items()} == {
        "a": ("02_episodes", "OSError: worker of a died"), "b": ("02_episodes", "OSError: worker of b died")}
    assert not results["a"].stages


def test_ctrl_c_while_the_tasks_run_keeps_the_replies_the_workers_paid_for_the_ledger(tmp_path, fake_server,
                                                                                       monkeypatch):
    """A reply a worker paid for and merged before a Ctrl-C has no row yet (the driver writes the
    group's rows when every task is done): it is kept, as the local engine keeps its own, so the
    ledger counts it paid when the resume reads it from the cache."""
    from common.core.cache_claims import ClaimingResponseCache

    monkeypatch.setenv("OPENAI_BASE_URL", fake_server.base_url)
    run = _run(tmp_path, fake_server, "ray", "ray")
    run.dir.mkdir(parents=True)

    def paid_then_interrupted(task, store, bounds):
        cache = ClaimingResponseCache(str(tmp_path / "shard.sqlite"), "rw", store, 50)
        assert cache.get("k1") is None  # claimed: this worker sends it
        cache.put("k1", {"model": "m"}, "reply", {"prompt_tokens": 5, "completion_tokens": 2}, 0.1)
        raise KeyboardInterrupt

    monkeypatch.setattr(ray_executor, "run_memory", paid_then_interrupted)
    with pytest.raises(KeyboardInterrupt):
        ray_executor.dispatch_in_process(run, [ray_executor.MemoryTask(run.cfg, "a", ("02_episodes",), {}, False)])
    kept = rows(run.dir / "paid_unwritten.jsonl")
    assert [(r["cache_key"], r["stage"], r["model"], r["usage"]) for r in kept] == \
        [("k1", "02_episodes", "m", {"prompt_tokens": 5, "completion_tokens": 2})]
