"""The cluster recipe of docs/scale.md, word for word, with Ray's token authentication
(``make test-slow``): ``make ray-head`` (the cluster's token made once), ``make ray-node
HEAD=...`` on a second node (here on 127.0.0.1 too), then the driver, ``make longmemeval
EXECUTOR=ray`` with RAY_ADDRESS. On that two-worker cluster, two LongMemEval questions whose
haystacks are the same sessions pay the local engine's chat calls (one request per cache key in
flight across the cluster), give its rows, and a rerun pays nothing; each stage's line is printed
once; and a driver without the token stops in one line naming the fix.

The token lives in a file of the test's own (RAY_AUTH_TOKEN_PATH, which Ray reads before
``~/.ray/auth_token``), so the machine's ``~/.ray`` is never written."""
from __future__ import annotations

import contextlib
import json
import os
import re
import secrets
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from bench.scale_data import LME_FILE
from tests.conftest import REPO, fake_vectors, rows, run_overrides
from tests.fake_openai import FakeOpenAI
from tests.test_ray_executor_seam import comparable

pytestmark = pytest.mark.cluster
SESSIONS = 24  # of the real item's 53: enough for the two tasks to race, short enough for a test
VENV = str(Path(sys.executable).parent.parent)
ARTIFACTS = ("02_episodes", "03_extract", "04_index", "05_plan", "06_retrieve", "07_answer")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _base_env(token: Path) -> dict[str, str]:
    # (RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0, which the one-node tests set, refuses a second node)
    env = {k: v for k, v in os.environ.items()
           if k not in ("RAY_ADDRESS", "RAY_AUTH_MODE", "RAY_AUTH_TOKEN", "OPENAI_API_KEY", "OPENAI_BASE_URL",
                        "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER")}
    return {**env, "RAY_AUTH_TOKEN_PATH": str(token)}


def _stop(proc: subprocess.Popen) -> None:
    """End a `ray start --block` and the Ray processes of its process group (never `ray stop`,
    which would end every cluster on the machine)."""
    with contextlib.suppress(ProcessLookupError, subprocess.TimeoutExpired):
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=60)
    time.sleep(2)  # what SIGTERM left of the group (a GCS server may outlive it) is killed
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)


def _alive_nodes(address: str, env: dict[str, str]) -> int:
    probe = ("import logging, ray; ray.init(address=%r, logging_level=logging.ERROR); "
             "print('NODES', sum(1 for n in ray.nodes() if n['Alive']))" % address)
    done = subprocess.run([sys.executable, "-c", probe], env={**env, "RAY_AUTH_MODE": "token"},
                          capture_output=True, text=True, timeout=120)
    found = re.search(r"NODES (\d+)", done.stdout)
    return int(found.group(1)) if found else 0


@pytest.fixture(scope="module")
def recipe(tmp_path_factory):
    """``make ray-head`` and ``make ray-node`` as docs/scale.md gives them (each node one CPU)."""
    if not LME_FILE.exists():
        pytest.skip(f"real LongMemEval item not available at {LME_FILE}")
    tmp = tmp_path_factory.mktemp("recipe")
    token = tmp / "auth_token"
    token.write_text(secrets.token_hex(32), encoding="utf-8")  # the head's token, "copied" to every node
    env = _base_env(token)
    port = _free_port()
    common = "--block --num-cpus=1 --node-ip-address=127.0.0.1 --disable-usage-stats"
    head = subprocess.Popen(["make", "-s", "ray-head", f"VENV={VENV}", f"RAY_PORT={port}",
                             f"RAY_ARGS={common} --include-dashboard=false"], cwd=REPO, env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    procs = [head]
    try:
        address = f"127.0.0.1:{port}"
        deadline = time.time() + 90
        while time.time() < deadline:
            with socket.socket() as s:
                if s.connect_ex(("127.0.0.1", port)) == 0:
                    break
            time.sleep(0.5)
        node = subprocess.Popen(["make", "-s", "ray-node", f"VENV={VENV}", f"HEAD={address}",
                                 f"RAY_ARGS={common} --dashboard-agent-listen-port={_free_port()}"],
                                cwd=REPO, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                start_new_session=True)
        procs.append(node)
        nodes = 0
        while time.time() < deadline + 60 and nodes < 2:
            nodes = _alive_nodes(address, env)
        assert nodes == 2, "the second node did not join the head as the recipe starts it"
        yield address, env, tmp
    finally:
        for proc in reversed(procs):
            _stop(proc)


def twin_haystack_file(path: Path) -> Path:
    """Two questions in LongMemEval's format whose haystacks are the same sessions."""
    (real,) = json.loads(LME_FILE.read_text(encoding="utf-8"))
    ids = real["haystack_session_ids"]
    keep = [i for i, sid in enumerate(ids) if sid in set(real.get("answer_session_ids", []))]
    keep = sorted(keep + [i for i in range(len(ids)) if i not in keep][: SESSIONS - len(keep)])
    one = {**real, **{k: [real[k][i] for i in keep] for k in ("haystack_session_ids", "haystack_dates",
                                                              "haystack_sessions")}}
    twin = {**one, "question_id": f"{real['question_id']}_twin",
            "question": "What did I tell you about my plans in these chats?"}
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps([one, twin], ensure_ascii=False), encoding="utf-8")
    return path


def make_lme(server: FakeOpenAI, tmp: Path, data: Path, env: dict[str, str], address: str = "",
             check: bool = True) -> subprocess.CompletedProcess:
    """The recipe's driver: ``RAY_ADDRESS=... make longmemeval EXECUTOR=ray`` (local without address)."""
    env = {**env, "OPENAI_BASE_URL": server.base_url, **({"RAY_ADDRESS": address} if address else {})}
    sets = [s for s in run_overrides(tmp, data, **fake_vectors(server.base_url)) if not s.startswith("data.path=")]
    cmd = ["make", "-s", "longmemeval", f"PY={sys.executable}", f"SET={' '.join(sets)}", "LIMIT=2",
           f"LONGMEMEVAL_JSON={data}"] + (["EXECUTOR=ray"] if address else [])
    done = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=600)
    if check:
        assert done.returncode == 0, (done.stdout[-3000:], done.stderr[-3000:])
    return done


def chat_requests(server: FakeOpenAI) -> int:
    return sum(n for kind, n in server.counts_by_kind().items() if kind != "embeddings")


@pytest.fixture(scope="module")
def runs(recipe):
    address, env, tmp = recipe
    data = twin_haystack_file(tmp / "data" / "longmemeval_twins.json")
    with FakeOpenAI(latency=0.3) as server:  # a reply takes a while: the two tasks work at the same time
        make_lme(server, tmp / "local", data, env)
        paid_local = chat_requests(server)
        ray = make_lme(server, tmp / "ray", data, env, address)
        paid_ray = chat_requests(server) - paid_local
        before = server.request_count
        make_lme(server, tmp / "ray", data, env, address)
        rerun = server.request_count - before
    return tmp, paid_local, paid_ray, rerun, ray


def test_a_driver_without_the_clusters_token_stops_in_one_line_naming_the_fix(recipe, tmp_path):
    address, env, _ = recipe
    data = tmp_path / "data.json"
    twin_haystack_file(data)
    with FakeOpenAI() as server:
        started = time.monotonic()
        done = make_lme(server, tmp_path, data, {**env, "RAY_AUTH_TOKEN_PATH": str(tmp_path / "no-token")},
                        address, check=False)
    assert done.returncode != 0 and time.monotonic() - started < 90
    assert "Traceback" not in done.stderr + done.stdout
    errors = [line for line in (done.stdout + done.stderr).splitlines() if "cluster" in line.lower()]
    assert len(errors) == 1, done.stderr[-2000:]
    assert f"cannot join the Ray cluster at {address}: it requires token authentication; set RAY_AUTH_MODE=token" \
        in errors[0]


def test_twin_haystacks_pay_on_the_cluster_what_they_pay_locally_and_rerun_free(runs):
    tmp, paid_local, paid_ray, rerun, _ = runs
    local, ray = (tmp / d / "results" / "longmemeval" / "t" for d in ("local", "ray"))
    sessions = rows(local / "01_sessions.jsonl")
    assert len({s["memory_id"] for s in sessions}) == 2 and len(sessions) == 2 * SESSIONS
    dedup = json.loads((local / "02_episodes.manifest.json").read_text())["dedup"]
    assert dedup["calls_saved_by_reuse"] == SESSIONS  # every session of the twin is shared
    for name in ARTIFACTS + tuple(p.stem for p in local.glob("08_judge_*.jsonl")):
        assert [comparable(r) for r in rows(local / f"{name}.jsonl")] == \
            [comparable(r) for r in rows(ray / f"{name}.jsonl")], name
    executor = json.loads((ray / "03_extract.manifest.json").read_text())["executor"]
    assert {k: executor[k] for k in ("name", "memories")} == {"name": "ray", "memories": 2}
    assert 0 < executor["first_task_started_after_seconds"] < executor["last_task_finished_after_seconds"]
    print(f"twin haystacks, 2 x {SESSIONS} sessions: local {paid_local} chat calls, ray {paid_ray}")
    bound = 4  # llm.concurrency of run_overrides: the requests one endpoint has in flight at most
    assert paid_local > 0 and paid_local <= paid_ray <= paid_local + bound
    assert rerun == 0, "a finished run re-run on the cluster must make zero requests"


def test_each_stage_line_is_printed_once_by_the_driver(runs):
    out = runs[4].stdout
    for stage in ARTIFACTS:
        lines = [line for line in out.splitlines() if re.match(rf"^{stage}: \d+ rows", line)]
        assert len(lines) == 1, (stage, lines)
    assert "(memory:" not in out and "repeated" not in out  # no worker's own line forwarded by Ray
