"""LongMemEval_M on the Ray executor (``make test-slow``): an M-shaped file (about 500 sessions
per haystack, haystacks sharing sessions) through ``make longmemeval EXECUTOR=ray``, the same rows
and metrics as the local engine, a rerun with no call; and ``bench-scale`` preset m with the Ray
executor at a small size.

No M file is reachable here, so the file is built from the real LongMemEval item (its 53 sessions
and question) and generated sessions (``bench.scale_data``, the generator of ``make bench-scale``):
item 1 is the real item with its haystack filled up to M size from item 2's haystack, item 2 a
generated question whose haystack is the whole generated pool, so the two share most sessions.
One Ray head for the module (``tests.test_ray_executor.cluster``)."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from bench.scale_data import LME_FILE, LOCOMO_FILE, generate
from tests.conftest import REPO, fake_vectors, needs_files, rows, run_overrides
from tests.fake_openai import FakeOpenAI
from tests.test_ray_executor import LOOPBACK, chat_requests, cluster  # noqa: F401 - the module's head
from tests.test_ray_executor_seam import comparable

pytestmark = pytest.mark.cluster
M_SESSIONS = 500  # LongMemEval_M's sessions per haystack
ARTIFACTS = ("02_episodes", "03_extract", "04_index", "05_plan", "06_retrieve", "07_answer")


def m_shaped_file(path: Path, sessions: int = M_SESSIONS) -> Path:
    """Two questions in the M file's format, ``sessions`` sessions each, most of them shared."""
    for source in (LME_FILE, LOCOMO_FILE):  # the real item, and the generator's sessions
        if not source.exists():
            pytest.skip(f"{source} not found: the M-shaped file is built from it")
    (real,) = json.loads(LME_FILE.read_text(encoding="utf-8"))
    (generated,) = generate(1, sessions, sessions, seed=7)  # pool == haystack: all of the pool
    fill = [i for i, sid in enumerate(generated["haystack_session_ids"]) if not sid.startswith("answer_")]
    fill = fill[: sessions - len(real["haystack_session_ids"])]
    real = {**real, **{k: real[k] + [generated[k][i] for i in fill]
                       for k in ("haystack_session_ids", "haystack_dates", "haystack_sessions")}}
    assert len(real["haystack_sessions"]) == len(generated["haystack_sessions"]) == sessions
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps([real, generated], ensure_ascii=False), encoding="utf-8")
    return path


def make_lme(server: FakeOpenAI, tmp: Path, data: Path, address: str = "") -> Path:
    """``make longmemeval LIMIT=2 LONGMEMEVAL_JSON=<data>`` (``EXECUTOR=ray`` when ``address``)."""
    env = {k: v for k, v in os.environ.items()
           if k not in ("OPENAI_API_KEY", "OPENAI_BASE_URL", "RAY_ADDRESS", "LONGMEMEVAL_JSON")}
    env["OPENAI_BASE_URL"] = server.base_url
    if address:
        env.update({"RAY_ADDRESS": address, **LOOPBACK})
    sets = [s for s in run_overrides(tmp, data, **fake_vectors(server.base_url)) if not s.startswith("data.path=")]
    cmd = ["make", "-s", "longmemeval", f"PY={sys.executable}", f"SET={' '.join(sets)}", "LIMIT=2",
           f"LONGMEMEVAL_JSON={data}"] + (["EXECUTOR=ray"] if address else [])
    done = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=1800)
    assert done.returncode == 0, (done.stdout[-3000:], done.stderr[-3000:])
    return tmp / "results" / "longmemeval" / "t"


@pytest.fixture(scope="module")
def server():
    with FakeOpenAI() as fake:
        yield fake


def test_an_m_shaped_longmemeval_run_on_ray_matches_the_local_engine_and_reruns_free(cluster, server,  # noqa: F811
                                                                                       tmp_path):
    _, address = cluster
    data = m_shaped_file(tmp_path / "data" / "longmemeval_m_cleaned.json")
    local = make_lme(server, tmp_path / "local", data)
    paid_local = chat_requests(server)
    ray_dir = make_lme(server, tmp_path / "ray", data, address)
    paid_ray = chat_requests(server) - paid_local
    before = server.request_count
    make_lme(server, tmp_path / "ray", data, address)
    rerun_calls = server.request_count - before

    sessions = rows(local / "01_sessions.jsonl")
    assert len({s["memory_id"] for s in sessions}) == 2 and len(sessions) == 2 * M_SESSIONS
    dedup = json.loads((local / "02_episodes.manifest.json").read_text())["dedup"]
    assert dedup["calls_saved_by_reuse"] > 0  # the haystacks share sessions
    for name in ARTIFACTS + tuple(p.stem for p in local.glob("08_judge_*.jsonl")):
        assert [comparable(r) for r in rows(local / f"{name}.jsonl")] == \
            [comparable(r) for r in rows(ray_dir / f"{name}.jsonl")], name
    ml, mr = (json.loads((d / "metrics.json").read_text()) for d in (local, ray_dir))
    assert ml["judges"] == mr["judges"]
    executor = json.loads((ray_dir / "02_episodes.manifest.json").read_text())["executor"]
    assert {k: executor[k] for k in ("name", "memories")} == {"name": "ray", "memories": 2}
    assert 0 < executor["first_task_started_after_seconds"] < executor["last_task_finished_after_seconds"]
    # Two tasks working on a shared session at the same moment wait for one request (the claims on
    # the run's cache, docs/scale.md): the cluster pays what one machine pays, at most the requests
    # one endpoint has in flight more; and the rerun is free: every answer is in the run's cache.
    print(f"M-shaped, 2 x {M_SESSIONS} sessions: local {paid_local} chat calls, ray {paid_ray}")
    bound = 4  # llm.concurrency of run_overrides
    assert paid_local > 0 and paid_local <= paid_ray <= paid_local + bound
    assert rerun_calls == 0, "a finished run re-run on the cluster must make zero requests"


@needs_files(LOCOMO_FILE, LME_FILE, why="bench-scale generates its sets from these sessions")
def test_bench_scale_preset_m_runs_on_the_ray_executor(cluster, tmp_path, monkeypatch):  # noqa: F811
    from bench import scale

    _, address = cluster
    for k, v in {"RAY_ADDRESS": address, **LOOPBACK}.items():
        monkeypatch.setenv(k, v)
    # one size (each stage invocation is a Ray job: minutes on 2 cores), haystacks sharing sessions
    code = scale.main(["--preset", "m", "--limit", "2", "--fit-sessions", "5", "--pool", "6", "--latency", "0.01",
                       "--concurrency", "4", "--out", str(tmp_path), "--executor", "ray",
                       "--set", "embedding.backend=openai", "--set", "embedding.model=fake-embed"])
    assert code == 0
    r = json.loads((tmp_path / "scale_m.json").read_text())
    assert r["executor"] == "ray" and [run["sessions"] for run in r["runs"]] == [5]
    assert r["runs"][0]["data"]["reused_share"] > 0
    for run in r["runs"]:
        assert run["rerun_calls"] == 0
        by = {s["stage"]: s for s in run["stages"]}
        assert by["02_episodes"]["calls"] > 0 and by["08_judge"]["calls"] == 2
    manifests = list((tmp_path / "work-scale").rglob("03_extract.manifest.json"))
    assert len(manifests) == 1
    for manifest in manifests:
        assert json.loads(manifest.read_text())["executor"]["name"] == "ray"  # the stages ran as Ray tasks
    assert "04_index" in r["fit"] and "executor ray" in (tmp_path / "scale_m.md").read_text()
