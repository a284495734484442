"""A-MEM (method.name=amem) through the fake server: ingestion into a real Chroma store, search,
resume, no network, bounded concurrent ingestion, make locomo on conv-26, the systems table."""
from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import time
from urllib.parse import urlparse

import pytest

from common.core.config import load_config
from common.pipeline import dryrun, ledger
from common.systems.base import Found, MemorySystem, Spent
from tests.conftest import REPO, TINY_LOCOMO, block_sockets_except, fake_vectors, rows, run_overrides, run_stages

pytestmark = pytest.mark.skipif(importlib.util.find_spec("agentic_memory") is None,
                                reason="a-mem not installed (make install installs requirements-systems.txt)")
UP_TO_06 = ["preprocess", "episodes", "extract", "index", "plan", "retrieve"]
LME_TINY = REPO / "tests" / "fixtures" / "lme_tiny.json"


def amem_sets(tmp_path, data=TINY_LOCOMO, **extra):
    return run_overrides(tmp_path, data, **{"method.name": "amem", **extra})


def test_ingest_and_search_the_fixture_through_the_fake_server(tmp_path, fake_server, monkeypatch):
    monkeypatch.setenv("OPENAI_BASE_URL", fake_server.base_url)
    fake_server.kind_latency = {"amem_analyze": 0.05, "amem_evolve": 0.05}  # memories overlap in time
    run = run_stages("configs/locomo.yaml", amem_sets(tmp_path), UP_TO_06)
    sessions = rows(run.path("sessions"))
    turns = {(s["memory_id"], t["dia_id"]): s["date_time"] for s in sessions for t in s["turns"]}
    memories = {s["memory_id"] for s in sessions}
    # A-MEM's protocol: every turn is a note and is analysed; every note but a memory's first
    # also gets the evolution call over its nearest neighbours; every question, its keyword call.
    expected = {"amem_analyze": len(turns), "amem_evolve": len(turns) - len(memories)}
    questions = len(rows(run.path("retrievals")))
    assert fake_server.counts_by_kind() == {**expected, "amem_keywords": questions}
    # The two memories were ingested at the same time (systems.ingest_concurrency defaults to 4).
    assert fake_server.peak_in_flight["amem_analyze"] + fake_server.peak_in_flight["amem_evolve"] >= 2
    est = dryrun.estimate(load_config(["configs/locomo.yaml"], amem_sets(tmp_path)))
    ingest_row = next(s for s in est["stages"] if s["stage"] == "06_retrieve")
    assert ingest_row["role"] == "memory" and ingest_row["calls"] == sum(expected.values())
    assert ingest_row["already_done"] == sum(expected.values())
    for r in rows(run.path("retrievals")):
        items = r["method_info"]["evidence"]
        mid = r["memory_id"]
        notes = sum(m == mid for m, _ in turns)  # the top 10 (or every note) and the notes they link to
        assert r["mode"] == "amem" and sum(e["score"] is not None for e in items) == min(10, notes)
        assert len({e["dia_ids"][0] for e in items}) == len(items) <= notes
        assert all(e["timestamp"] == turns[mid, e["dia_ids"][0]] for e in items)
        assert all(e["text"].startswith("Speaker ") for e in items) and r["buffer_text"].startswith("- ")
    # The fake evolution reply links each note to its nearest neighbour: linked notes reach the buffer.
    assert any(e["score"] is None for r in rows(run.path("retrievals")) for e in r["method_info"]["evidence"])
    for mid in memories:
        state = run.dir / "06_retrieve" / "memory" / mid
        assert (state / "chroma" / "chroma.sqlite3").exists()
        marker = json.loads((state / "ingested.json").read_text())
        assert marker["spent"]["calls"] > 0 and marker["spent"]["prompt_tokens"] > 0
    manifest = json.loads((run.dir / "06_retrieve.manifest.json").read_text())
    assert manifest["ingest"]["spent_this_time"]["calls"] == sum(expected.values())
    entry = next(e for e in ledger.ledger(run.dir)["stages"] if e["stage"] == "06_retrieve_ingest")
    assert entry["role"] == "memory" and entry["calls"] == sum(expected.values())


def test_a_failed_call_fails_the_memory_instead_of_an_empty_note(tmp_path, fake_server, monkeypatch):
    """A-MEM catches errors of its LLM calls and stores empty values; the adapter does not."""
    from tests.fake_openai import FaultPlan

    monkeypatch.setenv("OPENAI_BASE_URL", fake_server.base_url)
    fake_server.faults = FaultPlan(pinned={"amem_evolve": ["500"]})  # the first evolution call, for good
    sets = amem_sets(tmp_path, **{"llm.max_attempts": 2, "systems.ingest_concurrency": 1})
    with pytest.raises(RuntimeError, match="A-MEM ingestion of tiny-1 .* failed: amem_evolve"):
        run_stages("configs/locomo.yaml", sets, UP_TO_06)
    assert not (tmp_path / "results" / "locomo" / "t" / "06_retrieve" / "memory" / "tiny-1" / "ingested.json").exists()


def test_amem_makes_no_network_call_but_the_configured_endpoint(tmp_path, fake_server, monkeypatch):
    monkeypatch.setenv("OPENAI_BASE_URL", fake_server.base_url)
    allowed = (urlparse(fake_server.base_url).hostname, urlparse(fake_server.base_url).port)
    attempts = block_sockets_except(monkeypatch, fake_server.base_url)
    run = run_stages("configs/locomo.yaml", amem_sets(tmp_path), UP_TO_06 + ["answer"])
    assert len(rows(run.path("answers"))) == 11
    assert attempts and set(attempts) == {allowed}, f"connections besides the endpoint: {set(attempts)}"


class SlowIngest(MemorySystem):
    """Ingestion that takes a while and writes when it ran (its start and end) into its state."""

    def ingest(self, view, state_dir):
        started = time.monotonic()
        if view.memory_id == os.environ.get("SLOW_INGEST_FAILS"):  # a test switch, not a setting
            raise RuntimeError(f"ingestion of {view.memory_id} failed")
        time.sleep(0.3)
        (state_dir / "span.json").write_text(json.dumps([started, time.monotonic()]))
        return Spent()

    def search(self, question, view):
        return Found([])


def most_at_once(spans):
    events = sorted([(a, 1) for a, _ in spans] + [(b, -1) for _, b in spans])
    running = peak = 0
    for _, step in events:
        running += step
        peak = max(peak, running)
    return peak


@pytest.mark.parametrize("bound", [1, 3])
def test_ingestion_runs_memories_concurrently_up_to_the_bound(tmp_path, fake_server, monkeypatch, bound):
    monkeypatch.setenv("OPENAI_BASE_URL", fake_server.base_url)
    sets = run_overrides(tmp_path, LME_TINY, **{"method.name": "tests.test_amem:SlowIngest",
                                                "systems.ingest_concurrency": bound})
    run = run_stages("configs/longmemeval.yaml", sets, ["preprocess", "retrieve"])
    ingest = json.loads((run.dir / "06_retrieve.manifest.json").read_text())["ingest"]
    assert ingest["memories"] == ingest["new"] >= 5 and ingest["concurrency"] == bound
    spans = [json.loads(p.read_text()) for p in (run.dir / "06_retrieve" / "memory").glob("*/span.json")]
    assert len(spans) == ingest["memories"] and most_at_once(spans) == bound


def test_a_failed_memory_is_counted_the_others_are_ingested_and_a_rerun_redoes_only_it(
        tmp_path, fake_server, monkeypatch):
    """A system's exception in one memory's ingestion fails that memory's questions (counted, the
    stage goes on under run.max_error_rate: 1 of 7 here), every other memory is ingested beside it,
    and the next run ingests only the failed one (common/systems/failures.py)."""
    monkeypatch.setenv("OPENAI_BASE_URL", fake_server.base_url)
    base = {"method.name": "tests.test_amem:SlowIngest", "systems.ingest_concurrency": 2}
    run = run_stages("configs/longmemeval.yaml", run_overrides(tmp_path, LME_TINY, **base), ["preprocess"])
    order = list(dict.fromkeys(q["memory_id"] for q in rows(run.path("questions"))))
    monkeypatch.setenv("SLOW_INGEST_FAILS", order[1])
    run_stages("configs/longmemeval.yaml", run_overrides(tmp_path, LME_TINY, **base), ["retrieve"])
    monkeypatch.delenv("SLOW_INGEST_FAILS")
    memory = run.dir / "06_retrieve" / "memory"
    assert [(memory / m / "ingested.json").exists() for m in order] == [m != order[1] for m in order]
    assert json.loads((memory / order[1] / "failed.json").read_text())["cause"] == "system_error"
    failed = [r for r in rows(run.path("retrievals")) if r["error"]]
    assert [r["memory_id"] for r in failed] == [order[1]]
    assert failed[0]["error"] == (f"system_error: ingestion of {order[1]} failed: "
                                  f"RuntimeError: ingestion of {order[1]} failed")
    run_stages("configs/longmemeval.yaml", run_overrides(tmp_path, LME_TINY, **base), ["retrieve"])
    ingest = json.loads((run.dir / "06_retrieve.manifest.json").read_text())["ingest"]
    assert (ingest["resumed"], ingest["new"]) == (len(order) - 1, 1)
    assert not any(r["error"] for r in rows(run.path("retrievals")))


def test_ingest_concurrency_must_be_positive():
    from common.core.config import ConfigError

    with pytest.raises(ConfigError, match="systems.ingest_concurrency: must be >= 1"):
        load_config(["configs/locomo.yaml"], ["systems.ingest_concurrency=0"])


def _make_locomo(tmp_path, fake_server, sets, limit):
    env = {k: v for k, v in os.environ.items() if k not in ("OPENAI_API_KEY", "OPENAI_BASE_URL")}
    env["OPENAI_BASE_URL"] = fake_server.base_url
    cmd = ["make", "-s", "locomo", f"PY={sys.executable}", f"SET={' '.join(sets)}", f"LIMIT={limit}",
           "MEMORIES=conv-26"]
    done = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=1800)
    assert done.returncode == 0, done.stderr[-2000:]
    return done


@pytest.mark.slow
def test_make_locomo_with_amem_on_conv26_end_to_end_and_a_rerun_pays_nothing(tmp_path, fake_server, real_locomo,
                                                                               monkeypatch):
    """The real conv-26 (419 turns, every one a note), its first 15 questions, 01-09 by make.

    A-MEM embeds each note and each neighbour query alone (about 840 single-text encodes, half
    of this test's time with the CPU model), so the vectors come from the fake server's
    /v1/embeddings here; the fixture test above runs A-MEM on the CPU model."""
    sets = amem_sets(tmp_path, real_locomo, **fake_vectors(fake_server.base_url))
    done = _make_locomo(tmp_path, fake_server, sets, 15)
    run_dir = tmp_path / "results" / "locomo" / "t"
    assert len(rows(run_dir / "07_answer.jsonl")) == 15
    metrics = json.loads((run_dir / "metrics.json").read_text())
    assert metrics["judges"]["gpt-4o-mini"]["overall"]["n"] >= 12
    assert "02_episodes: skipped" in done.stdout and "ingested conv-26" in done.stdout
    kinds = fake_server.counts_by_kind()
    turns = sum(len(s["turns"]) for s in rows(run_dir / "01_sessions.jsonl"))
    assert kinds["amem_analyze"] == turns and kinds["amem_evolve"] == turns - 1
    paid = fake_server.request_count
    again = _make_locomo(tmp_path, fake_server, sets, 15)
    assert fake_server.request_count == paid, "a rerun made calls"
    assert "ingested conv-26" not in again.stdout
    # The systems table lists the run beside the others under the same results directory.
    from common.report.tables import command

    results = tmp_path / "results"
    monkeypatch.setenv("OPENAI_BASE_URL", fake_server.base_url)
    run_stages("configs/locomo.yaml", run_overrides(tmp_path, TINY_LOCOMO, **{"method.name": "no_memory",
                                                                              "run.name": "closed"}))
    assert command.main(["--results", str(results), "--out", str(results / "tables"), "--only", "systems"]) == 0
    table = (results / "tables" / "systems.md").read_text()
    assert any(" | t | amem | " in line for line in table.splitlines())
    assert any(" | closed | no_memory | " in line for line in table.splitlines())
