"""Runs that start and stop as a user expects: Ctrl-C says where it stopped and how to go on, a dead
endpoint or an unusable method stops the run before it writes anything, LIMIT=0 runs nothing."""
from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.conftest import REPO, TINY_LOCOMO, rows, run_overrides, run_stages
from tests.fake_openai import FakeOpenAI


def _run_all(monkeypatch, sets: list[str], *extra: str) -> None:
    from common.pipeline import run_all

    monkeypatch.setattr(sys, "argv", ["run_all", "locomo", *extra] + [a for s in sets for a in ("--set", s)])
    run_all.main()


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# ----------------------------------------------------------------------------- Ctrl-C
def _interrupt_extract_after_its_first_row(sets: list[str], base_url: str, out: Path
                                           ) -> tuple[subprocess.Popen, str]:
    """Run 03_extract as its own process, SIGINT it once its first row is on disk; (process, stderr).
    The process is killed if it outlives the test's wait."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "LoCoMo.03_extract", *[a for s in sets for a in ("--set", s)]], cwd=REPO,
        env={**os.environ, "OPENAI_BASE_URL": base_url}, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        text=True, preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    try:
        deadline = time.monotonic() + 60
        while (not out.exists() or not out.read_text().strip()) and proc.poll() is None \
                and time.monotonic() < deadline:
            time.sleep(0.02)
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    return proc, err

def test_ctrl_c_in_a_real_run_prints_one_resume_line_and_exits_130(tmp_path, monkeypatch):
    """SIGINT to a stage process in the middle of its rows: no traceback, one line naming the stage
    and the rows written, exit 130; the rows on disk are those the line counts."""
    sets = run_overrides(tmp_path, TINY_LOCOMO, **{"llm.concurrency": 1})
    with FakeOpenAI() as server:
        monkeypatch.setenv("OPENAI_BASE_URL", server.base_url)
        run = run_stages("configs/locomo.yaml", sets, ["preprocess", "episodes"])
        episodes = sum(len(r["episodes"]) for r in rows(run.path("episodes")))
        assert episodes >= 4
        server.latency = 0.3  # slow enough to be stopped in the middle
        out = run.path("records")
        proc, err = _interrupt_extract_after_its_first_row(sets, server.base_url, out)
    assert proc.returncode == 130, err
    assert "Traceback" not in err
    written = len(rows(out))
    assert 0 < written < episodes
    assert err.strip().splitlines() == [
        f"interrupted in 03_extract after {written} of {episodes} rows; run the same command to resume"]


def test_replies_paid_before_ctrl_c_stay_paid_in_the_ledger_after_the_resume(tmp_path, monkeypatch):
    """The calls in flight at a Ctrl-C are answered and cached after the last row is written; the
    resume reads them from the cache. The ledger must count each reply this run paid for as paid
    once: its paid calls equal the requests the endpoint served."""
    from common.pipeline import ledger

    sets = run_overrides(tmp_path, TINY_LOCOMO, **{"llm.concurrency": 4})
    with FakeOpenAI() as server:
        monkeypatch.setenv("OPENAI_BASE_URL", server.base_url)
        run = run_stages("configs/locomo.yaml", sets, ["preprocess", "episodes"])
        episodes = sum(len(r["episodes"]) for r in rows(run.path("episodes")))
        server.latency = 0.5  # four requests in flight at once, slow enough to be stopped among them
        out = run.path("records")
        proc, err = _interrupt_extract_after_its_first_row(sets, server.base_url, out)
        assert proc.returncode == 130, err
        written = len(rows(out))
        served_at_stop = server.counts_by_kind().get("extract", 0)
        assert written < served_at_stop, "the test needs calls answered after the last row was written"
        server.latency = 0.0
        run_stages("configs/locomo.yaml", sets, ["extract"])  # the resume
        served = server.counts_by_kind().get("extract", 0)
    assert len(rows(out)) == episodes
    entry = next(e for e in ledger.ledger(run.dir)["stages"] if e["stage"] == "03_extract" and e["role"] == "extract")
    assert entry["paid"] == served, (entry, served, written, served_at_stop)
    assert entry["paid"] + entry["cached"] == entry["calls"]


def test_a_ctrl_c_while_a_row_is_written_waits_for_the_calls_in_flight_before_it_reports(tmp_path, monkeypatch):
    """A Ctrl-C often lands while the main thread writes a row (the moment the row appears on disk),
    outside the map's own wait. The calls still in flight must be answered and kept before the
    stage reports the stop, or the replies that arrive afterwards are paid and counted nowhere."""
    from common.core.config import load_config
    from common.core.io import StageWriter
    from common.pipeline import engine, ledger
    from common.pipeline.graph import by_name

    sets = run_overrides(tmp_path, TINY_LOCOMO, **{"llm.concurrency": 4})
    with FakeOpenAI(kind_latency={"extract": 1.0}) as server:
        monkeypatch.setenv("OPENAI_BASE_URL", server.base_url)
        run_stages("configs/locomo.yaml", sets, ["preprocess", "episodes"])
        first = [True]

        def sleep(seconds, wait=server._stopping.wait):
            # The first extract reply once four requests are in (the endpoint's bound), the rest after 1 s.
            if seconds and first[0]:
                first[0] = False
                deadline = time.monotonic() + 10
                while server.counts_by_kind().get("extract", 0) < 4 and time.monotonic() < deadline:
                    wait(0.01)
                return
            wait(seconds)

        monkeypatch.setattr(server, "_sleep", sleep)

        def write_then_stop(self, row, real=StageWriter.write):
            real(self, row)
            raise KeyboardInterrupt  # Ctrl-C while the first row is written, three calls in flight

        monkeypatch.setattr(StageWriter, "write", write_then_stop)
        run = engine.Run(load_config(["configs/locomo.yaml"], sets), progress=False)
        node = by_name("extract")
        try:
            node.resolve()(run)
        except KeyboardInterrupt:  # as the run's driver handles it: the stage's frames still alive
            assert engine.interrupted(run, node, {}) == 130
        served = server.counts_by_kind().get("extract", 0)
    assert len(rows(run.path("records"))) == 1 and served >= 4
    unwritten = rows(run.dir / ledger.UNWRITTEN)
    assert len(unwritten) == served - 1  # every reply in flight at the stop, kept for the ledger


# ----------------------------------------------------------------------------- a dead endpoint
def test_a_dead_endpoint_stops_the_run_at_once_in_one_line_and_leaves_no_run_directory(tmp_path, monkeypatch):
    from common.pipeline import preflight

    dead = f"http://127.0.0.1:{_closed_port()}/v1"
    monkeypatch.setenv("OPENAI_BASE_URL", dead)
    monkeypatch.delenv("OPENAI_BASE_URLS", raising=False)
    monkeypatch.setattr(preflight, "_answered", set())
    sets = run_overrides(tmp_path, TINY_LOCOMO, **{"llm.initial_wait": 1.0, "llm.max_wait": 2.0})
    started = time.monotonic()
    with pytest.raises(SystemExit) as stop:
        _run_all(monkeypatch, sets)
    assert time.monotonic() - started < 10  # not the retries of every row
    message = str(stop.value.code)
    assert message.startswith(f"error: models.partition: {dead} does not answer (cannot connect")
    assert "\n" not in message and "make doctor" in message
    assert not (tmp_path / "results" / "locomo" / "t").exists()


def test_a_live_endpoint_is_probed_once_per_process(tmp_path):
    from common.pipeline import preflight

    with FakeOpenAI() as server:
        assert preflight.why_dead(server.base_url, "") is None
        server.stop()
        assert preflight.why_dead(server.base_url, "") is None  # remembered: not asked again
    assert preflight.why_dead(f"http://127.0.0.1:{_closed_port()}/v1", "", timeout=2).startswith("cannot connect")


# ----------------------------------------------------------------------------- an unusable method
def test_an_unusable_method_writes_nothing_so_the_corrected_command_runs(tmp_path, monkeypatch):
    from common.core.config import ConfigError

    sets = run_overrides(tmp_path, TINY_LOCOMO, **{"method.name": "no_such_pkg.mod:Memory"})
    run_dir = tmp_path / "results" / "locomo" / "t"
    with pytest.raises(SystemExit) as stop:  # make locomo: one process, every stage
        _run_all(monkeypatch, sets)
    assert str(stop.value.code).startswith("error: method.name: cannot import 'no_such_pkg.mod:Memory'")
    assert not run_dir.exists()
    with pytest.raises(ConfigError, match="method.name"):  # the stage itself, run in-process
        run_stages("configs/locomo.yaml", sets, ["preprocess"])
    assert not run_dir.exists()


def test_a_changed_method_name_is_named_as_the_config_key(tmp_path):
    from common.core import fingerprint
    from common.core.config import load_config

    def comps(name: str) -> dict:
        return fingerprint.run_components(load_config(["configs/locomo.yaml"], [f"method.name={name}"]), "sha")

    fingerprint.check_and_store(tmp_path, comps("ensimem"), key="run", force=False)
    with pytest.raises(fingerprint.FingerprintMismatch) as err:
        fingerprint.check_and_store(tmp_path, comps("full_context"), key="run", force=False)
    assert "changed: method.name" in str(err.value) and "method.method" not in str(err.value)
    assert "FORCE=1" in str(err.value)
    stored = json.loads((tmp_path / fingerprint.FILE).read_text())["run"]["id"]
    assert fingerprint.check_and_store(tmp_path, comps("full_context"), key="run", force=True) != stored


def test_make_passes_force():
    out = subprocess.run(["make", "-n", "locomo", "FORCE=1", "PY=python"], cwd=REPO, capture_output=True,
                         text=True, check=True).stdout
    assert "common.pipeline.run_all locomo" in out and " --force" in out
    out = subprocess.run(["make", "-n", "locomo", "PY=python"], cwd=REPO, capture_output=True, text=True,
                         check=True).stdout
    assert "--force" not in out
    out = subprocess.run(["make", "-n", "demo", "FORCE=1", "VENV=.venv"], cwd=REPO, capture_output=True, text=True,
                         check=True).stdout
    assert "-m common.demo" in out and "--force" in out


# ----------------------------------------------------------------------------- LIMIT=0
def test_limit_zero_runs_nothing_and_says_so(tmp_path, monkeypatch, capsys):
    sets = run_overrides(tmp_path, TINY_LOCOMO)
    with FakeOpenAI() as server:
        monkeypatch.setenv("OPENAI_BASE_URL", server.base_url)
        _run_all(monkeypatch, sets, "--limit", "0")
        assert server.request_count == 0
    out = capsys.readouterr().out
    assert out.startswith("nothing to run: LIMIT=0 (data.question_limit: 0) selects no question")
    assert not (tmp_path / "results").exists()


def test_the_demo_with_limit_zero_runs_nothing_either(tmp_path, capsys):
    from common.demo.app import main

    assert main(["--limit", "0", "--endpoint", "http://127.0.0.1:9/v1", "--set",
                 f"run.results_dir={tmp_path / 'demo'}"]) == 0
    assert capsys.readouterr().out.startswith("nothing to run: LIMIT=0")
    assert not (tmp_path / "demo").exists()


def test_the_dead_endpoint_line_carries_no_password(monkeypatch):
    from common.core.llm import RoleSettings
    from common.pipeline import preflight

    port = _closed_port()
    monkeypatch.delenv("OPENAI_BASE_URLS", raising=False)
    settings = RoleSettings(role="answer", model="m", base_url=f"http://user:s3cret@127.0.0.1:{port}/v1", timeout=2.0)
    with pytest.raises(preflight.EndpointUnreachable) as err:
        preflight.check_reachable(["answer"], lambda role: settings)
    assert f"models.answer: http://127.0.0.1:{port}/v1 does not answer" in str(err.value)
    assert "s3cret" not in str(err.value)
