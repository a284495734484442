"""The Ray executor on a real local Ray cluster (``make test-slow``): the done-when run of LoCoMo
conv-26 and conv-30 against the fake server, the same artifacts and metrics as the local engine,
a rerun with no call, a SIGKILLed worker survived, and the endpoint bound held with 4 workers.

One cluster for the module (a head started with ``ray start --head --block`` on 127.0.0.1, its
process group ended in a finally); ``make`` joins it through RAY_ADDRESS."""
from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import psutil
import pytest

from tests.conftest import REAL_LOCOMO, REPO, fake_vectors, rows, run_overrides
from tests.fake_openai import FakeOpenAI
from tests.test_ray_executor_seam import comparable

pytestmark = pytest.mark.cluster
ARTIFACTS = ("02_episodes", "03_extract", "04_index", "05_plan", "06_retrieve", "07_answer", "08_judge_gpt-4o-mini")


# A private cluster on the loopback interface: Ray would otherwise name (and bind) the machine's
# address, and a token left in ~/.ray by another cluster would lock the drivers out.
LOOPBACK = {"RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0", "RAY_AUTH_MODE": "disabled"}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def cluster():
    if not REAL_LOCOMO.exists():
        pytest.skip(f"real LoCoMo file not available at {REAL_LOCOMO}")
    port = _free_port()
    ray_bin = str(Path(sys.executable).with_name("ray"))
    head = subprocess.Popen([ray_bin, "start", "--head", "--block", f"--port={port}", "--num-cpus=4",
                             "--node-ip-address=127.0.0.1", "--include-dashboard=false", "--disable-usage-stats"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True,
                            env={**os.environ, **LOOPBACK})
    try:
        address = f"127.0.0.1:{port}"
        deadline = time.time() + 120
        while time.time() < deadline:  # the head is up once its GCS port answers
            with socket.socket() as s:
                if s.connect_ex(("127.0.0.1", port)) == 0:
                    break
            time.sleep(0.5)
        time.sleep(3)
        yield head, address
    finally:
        try:
            os.killpg(head.pid, signal.SIGTERM)
            head.wait(timeout=60)
        except (ProcessLookupError, subprocess.TimeoutExpired):
            os.killpg(head.pid, signal.SIGKILL)


def make_run(server: FakeOpenAI, tmp: Path, *, address: str = "", memories: str = "conv-26,conv-30",
             limit: int = 20, background: bool = False, **sets: object):
    env = {k: v for k, v in os.environ.items() if k not in ("OPENAI_API_KEY", "OPENAI_BASE_URL", "RAY_ADDRESS")}
    env["OPENAI_BASE_URL"] = server.base_url
    if address:
        env.update({"RAY_ADDRESS": address, **LOOPBACK})
    overrides = " ".join(run_overrides(tmp, REAL_LOCOMO, **fake_vectors(server.base_url), **sets))
    cmd = ["make", "-s", "locomo", f"PY={sys.executable}", f"SET={overrides}", f"MEMORIES={memories}",
           f"LIMIT={limit}"] + (["EXECUTOR=ray"] if address else [])
    if background:  # its output to a file: a full pipe would stop the run
        return subprocess.Popen(cmd, cwd=REPO, env=env, stdout=(tmp / "make.log").open("w"),
                                stderr=subprocess.STDOUT, text=True)
    done = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, (done.stdout[-3000:], done.stderr[-3000:])
    return tmp / "results" / "locomo" / "t"


def same_run(a: Path, b: Path) -> None:
    for name in ARTIFACTS:
        assert [comparable(r) for r in rows(a / f"{name}.jsonl")] == \
            [comparable(r) for r in rows(b / f"{name}.jsonl")], name
    ma, mb = (json.loads((d / "metrics.json").read_text()) for d in (a, b))
    assert ma["judges"] == mb["judges"]


def chat_paid_twice(server: FakeOpenAI, since: int) -> int:
    bodies = Counter(json.dumps(r, sort_keys=True) for r, k in
                     zip(server.requests[since:], server.request_kinds[since:]) if k != "embeddings")
    return sum(n - 1 for n in bodies.values())


@pytest.fixture(scope="module")
def server():
    """One fake server for the module: its URL is part of every cache key, so runs that are to give
    the same rows (each with its own cache) must call the same one."""
    with FakeOpenAI() as fake:
        yield fake


def chat_requests(server: FakeOpenAI) -> int:
    """Chat requests so far (how many embedding requests carry a stage's texts depends on batching)."""
    return sum(n for kind, n in server.counts_by_kind().items() if kind != "embeddings")


@pytest.fixture(scope="module")
def undisturbed(cluster, server, tmp_path_factory):
    """The done-when run, local and on the cluster, each with its own caches."""
    _, address = cluster
    tmp = tmp_path_factory.mktemp("ray")
    local = make_run(server, tmp / "local")
    paid_local = chat_requests(server)
    ray_dir = make_run(server, tmp / "ray", address=address)
    paid = chat_requests(server) - paid_local
    before = server.request_count
    again = make_run(server, tmp / "ray", address=address)
    rerun_calls = server.request_count - before  # embeddings included: none at all
    return local, ray_dir, again, rerun_calls, paid_local, paid


def test_ray_run_gives_the_local_runs_artifacts_and_metrics_and_reruns_free(undisturbed):
    local, ray_dir, again, rerun_calls, paid_local, paid_ray = undisturbed
    same_run(local, ray_dir)
    assert paid_ray == paid_local > 0  # the same calls, each paid once
    assert rerun_calls == 0, "a finished run re-run on the cluster must make zero requests"
    executor = json.loads((ray_dir / "03_extract.manifest.json").read_text())["executor"]
    assert {k: executor[k] for k in ("name", "memories")} == {"name": "ray", "memories": 2}
    # the group's wall split by the tasks' own clocks: before the first task ran, the longest, the last
    assert 0 < executor["first_task_started_after_seconds"] < executor["last_task_finished_after_seconds"]
    assert 0 < executor["longest_task_seconds"] <= executor["last_task_finished_after_seconds"]


def test_a_sigkilled_worker_is_retried_and_the_run_completes_the_same(cluster, server, undisturbed, tmp_path):
    head, address = cluster
    flush, bound = 5, 4
    since = server.request_count
    server.latency = 0.05
    try:
        proc = make_run(server, tmp_path, address=address, background=True,
                        **{"llm.shard_flush_calls": flush, "llm.concurrency": bound})
        killed = None
        try:
            deadline = time.time() + 300
            while killed is None and time.time() < deadline and proc.poll() is None:
                if server.request_count - since >= 40:  # well into stage 02/03 of both memories
                    for p in psutil.Process(head.pid).children(recursive=True):
                        try:
                            title = " ".join(p.cmdline())
                        except psutil.Error:
                            continue
                        if "ray::" in title and "memory" in title:
                            killed = title
                            p.send_signal(signal.SIGKILL)
                            break
                time.sleep(0.05)
            proc.wait(timeout=900)
        finally:
            if proc.poll() is None:
                proc.kill()
        assert killed, "no memory task was found to kill"
        assert proc.returncode == 0, (tmp_path / "make.log").read_text()[-3000:]
        twice = chat_paid_twice(server, since)
    finally:
        server.latency = 0.0
    print(f"killed {killed}: {twice} chat calls paid twice (bound: {bound} in flight + {flush} unmerged)")
    same_run(undisturbed[1], tmp_path / "results" / "locomo" / "t")
    assert twice <= bound + flush


def test_four_workers_never_exceed_the_endpoint_bound(cluster, tmp_path):
    _, address = cluster
    with FakeOpenAI(latency=0.05) as fresh:  # its own peak counter
        make_run(fresh, tmp_path, address=address, memories="conv-26,conv-30,conv-41,conv-42", limit=3,
                 **{"llm.concurrency": 2})
        peak = fresh.peak_in_flight_total
    print(f"4 workers, bound 2: at most {peak} requests in flight")
    assert peak == 2  # reached, never passed (each worker alone would send 2: 8 at once)


def test_a_sweep_runs_its_runs_as_tasks_and_ends_with_one_table(cluster, server, tmp_path, monkeypatch, capsys):
    from common.report import sweep
    from tests.conftest import TINY_LOCOMO

    _, address = cluster
    for k, v in {"RAY_ADDRESS": address, "OPENAI_BASE_URL": server.base_url, **LOOPBACK}.items():
        monkeypatch.setenv(k, v)
    sets = [s for s in run_overrides(tmp_path, TINY_LOCOMO, **fake_vectors(server.base_url))
            if not s.startswith(("run.name=", "run.results_dir="))]
    args = ["--systems", "ensimem,full_context", "--benches", "locomo", "--executor", "ray",
            "--results", str(tmp_path / "sweep")]
    for s in sets:
        args += ["--set", s]
    import ray
    try:
        assert sweep.main(args) == 0
    finally:
        ray.shutdown()
    table = (tmp_path / "sweep" / "sweep.md").read_text()
    for name in ("ensimem", "full_context"):
        manifest = json.loads((tmp_path / "sweep" / "locomo" / name / "07_answer.manifest.json").read_text())
        assert manifest["executor"]["name"] == "ray"  # each run's memory stages ran on the cluster too
        assert f"| {name} |" in table
    out = capsys.readouterr().out
    assert "sweep: 2 of 2 runs finished" in out and "executor ray" in out
