"""mem0 (method.name=mem0) through the fake server: ingestion, search, resume, no network, make locomo."""
from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from urllib.parse import urlparse

import pytest

from common.core.config import load_config
from common.pipeline import dryrun, ledger
from tests.conftest import REPO, TINY_LOCOMO, block_sockets_except, rows, run_overrides, run_stages

# Checked without importing mem0 (an early import would read MEM0_TELEMETRY before we set it).
pytestmark = pytest.mark.skipif(importlib.util.find_spec("mem0") is None,
                                reason="mem0ai not installed (make install installs requirements-systems.txt)")
UP_TO_06 = ["preprocess", "episodes", "extract", "index", "plan", "retrieve"]
SPEAKERS = {"tiny-1": {"Nadia", "Tomas"}, "tiny-2": {"Lena", "Omar"}}


def mem0_sets(tmp_path, **extra):
    return run_overrides(tmp_path, TINY_LOCOMO, **{"method.name": "mem0", **extra})


def evidence(run):
    return {r["qid"]: [(e["text"], e["source"], e["timestamp"], e["score"]) for e in r["method_info"]["evidence"]]
            for r in rows(run.path("retrievals"))}


def test_ingest_and_search_the_fixture_through_the_fake_server(tmp_path, fake_server, monkeypatch):
    monkeypatch.setenv("OPENAI_BASE_URL", fake_server.base_url)
    run = run_stages("configs/locomo.yaml", mem0_sets(tmp_path), UP_TO_06)
    sessions = rows(run.path("sessions"))
    # mem0's protocol: every session added for each of the two speakers, 2 messages per add call.
    expected = sum(2 * -(-len(s["turns"]) // 2) for s in sessions)
    assert fake_server.counts_by_kind() == {"mem0_extraction": expected}
    est = dryrun.estimate(load_config(["configs/locomo.yaml"], mem0_sets(tmp_path)))
    ingest_row = next(s for s in est["stages"] if s["stage"] == "06_retrieve")
    assert ingest_row["role"] == "memory" and ingest_row["calls"] == expected
    assert ingest_row["already_done"] == expected  # both memories have their markers
    dates = {s["date_time"] for s in sessions}
    turn_ids = {t["dia_id"] for s in sessions for t in s["turns"]}
    for r in rows(run.path("retrievals")):
        items = r["method_info"]["evidence"]
        assert items and {e["source"] for e in items} <= SPEAKERS[r["memory_id"]]
        assert all(sum(e["source"] == who for e in items) <= 10 for who in SPEAKERS[r["memory_id"]])
        assert {e["timestamp"] for e in items} <= dates and set(r["dia_ids"]) <= turn_ids
        assert r["buffer_text"].startswith("Memories of ") and r["mode"] == "mem0"
    # Each memory's state lives in the run directory: Qdrant's embedded store, mem0's history, the marker.
    for mid in SPEAKERS:
        state = run.dir / "06_retrieve" / "memory" / mid
        assert (state / "qdrant").is_dir() and (state / "history.db").exists()
        marker = json.loads((state / "ingested.json").read_text())
        assert marker["spent"]["calls"] > 0 and marker["spent"]["prompt_tokens"] > 0
    manifest = json.loads((run.dir / "06_retrieve.manifest.json").read_text())
    assert manifest["ingest"]["spent_this_time"]["calls"] == expected
    assert manifest["llm"]["calls"] == expected
    # The ledger prices ingestion from the markers' call records.
    entry = next(e for e in ledger.ledger(run.dir)["stages"] if e["stage"] == "06_retrieve_ingest")
    assert entry["role"] == "memory" and entry["calls"] == expected and entry["prompt_tokens"] > 0


def test_a_killed_ingestion_resumes_at_the_unfinished_memory_and_pays_nothing_twice(tmp_path, fake_server,
                                                                                       monkeypatch):
    monkeypatch.setenv("OPENAI_BASE_URL", fake_server.base_url)
    clean = run_stages("configs/locomo.yaml", mem0_sets(tmp_path / "clean"), UP_TO_06)
    total = fake_server.request_count
    from common.systems import mem0 as mem0_system

    real, seen = mem0_system._HarnessLLM.generate_response, []

    def killed(self, *args, **kwargs):
        seen.append(1)
        if len(seen) == total - 3:  # inside the second memory
            raise KeyboardInterrupt
        return real(self, *args, **kwargs)

    # One memory after the other (systems.ingest_concurrency=1), so that the kill falls inside the second.
    sets = mem0_sets(tmp_path / "killed", **{"llm.cache_path": str(tmp_path / "killed.sqlite"),
                                             "systems.ingest_concurrency": 1})
    monkeypatch.setattr(mem0_system._HarnessLLM, "generate_response", killed)
    with pytest.raises(KeyboardInterrupt):
        run_stages("configs/locomo.yaml", sets, UP_TO_06)
    monkeypatch.setattr(mem0_system._HarnessLLM, "generate_response", real)
    run_dir = tmp_path / "killed" / "results" / "locomo" / "t"
    assert (run_dir / "06_retrieve" / "memory" / "tiny-1" / "ingested.json").exists()
    assert not (run_dir / "06_retrieve" / "memory" / "tiny-2" / "ingested.json").exists()
    before = fake_server.request_count
    run = run_stages("configs/locomo.yaml", sets, ["retrieve"])
    ingest = json.loads((run.dir / "06_retrieve.manifest.json").read_text())["ingest"]
    assert (ingest["resumed"], ingest["new"]) == (1, 1)
    # Only the call that was interrupted and the ones after it reach the server again.
    assert fake_server.request_count - before == 4
    assert evidence(run) == evidence(clean)


def test_mem0_makes_no_network_call_but_the_configured_endpoint(tmp_path, fake_server, monkeypatch):
    monkeypatch.setenv("OPENAI_BASE_URL", fake_server.base_url)
    allowed = (urlparse(fake_server.base_url).hostname, urlparse(fake_server.base_url).port)
    attempts = block_sockets_except(monkeypatch, fake_server.base_url)
    run = run_stages("configs/locomo.yaml", mem0_sets(tmp_path), UP_TO_06 + ["answer"])
    assert len(rows(run.path("answers"))) == 11
    assert attempts and set(attempts) == {allowed}, f"connections besides the endpoint: {set(attempts)}"


def test_mem0_answer_prompt_is_selectable_and_part_of_the_fingerprint(tmp_path, fake_server, monkeypatch):
    monkeypatch.setenv("OPENAI_BASE_URL", fake_server.base_url)
    common = run_stages("configs/locomo.yaml", mem0_sets(tmp_path / "h"), UP_TO_06 + ["answer"])
    own = run_stages("configs/locomo.yaml", mem0_sets(tmp_path / "m", **{"answer.prompt": "mem0"}),
                     UP_TO_06 + ["answer"])
    assert {a["prompt_id"] for a in rows(common.path("answers"))} == {"answer_baseline_user"}
    assert {a["prompt_id"] for a in rows(own.path("answers"))} == {"answer_mem0_user"}
    sent = [r["messages"] for r in fake_server.requests if "messages" in r
            and "Memories for user" in r["messages"][0]["content"]]
    assert len(sent) == 11 and all(len(m) == 1 and m[0]["role"] == "system" for m in sent)
    first = sent[0][0]["content"]
    assert "Memories for user Nadia:" in first or "Memories for user Lena:" in first
    assert '[\n    "' in first  # each speaker's memories as mem0 renders them: json.dumps(indent=4)
    fp = [json.loads((r.dir / "fingerprint.json").read_text())["run"]["id"] for r in (common, own)]
    assert fp[0] != fp[1]


@pytest.mark.slow
def test_make_locomo_with_mem0_end_to_end(tmp_path, fake_server):
    sets = " ".join(mem0_sets(tmp_path))
    env = {k: v for k, v in __import__("os").environ.items() if k not in ("OPENAI_API_KEY", "OPENAI_BASE_URL")}
    env["OPENAI_BASE_URL"] = fake_server.base_url
    cmd = ["make", "-s", "locomo", f"PY={sys.executable}", f"SET={sets}", "LIMIT=3"]
    done = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stderr[-2000:]
    run_dir = tmp_path / "results" / "locomo" / "t"
    assert len(rows(run_dir / "07_answer.jsonl")) == 6
    metrics = json.loads((run_dir / "metrics.json").read_text())
    assert metrics["judges"]["gpt-4o-mini"]["overall"]["n"] >= 5
    assert "02_episodes: skipped" in done.stdout and "ingested tiny-2" in done.stdout
    assert fake_server.counts_by_kind()["mem0_extraction"] > 0


def test_mem0_on_longmemeval_end_to_end(tmp_path, fake_server, monkeypatch):
    """One memory per question (its haystack); the same code, speakers are the user and the assistant."""
    monkeypatch.setenv("OPENAI_BASE_URL", fake_server.base_url)
    sets = run_overrides(tmp_path, REPO / "tests" / "fixtures" / "lme_tiny.json", **{"method.name": "mem0"})
    run = run_stages("configs/longmemeval.yaml", sets)
    rets = rows(run.path("retrievals"))
    assert rets and all({e["source"] for e in r["method_info"]["evidence"]} <= {"user", "assistant"} for r in rets)
    ingest = json.loads((run.dir / "06_retrieve.manifest.json").read_text())["ingest"]
    assert ingest["memories"] == len({r["memory_id"] for r in rets})
    metrics = json.loads((run.dir / "metrics.json").read_text())
    assert metrics["judges"]["gpt-4o-mini"]["overall"]["n"] == len(rets)
