"""LangMem (method.name=langmem) through the gateway and the fake server: ingestion into an
in-memory LangGraph store, search, every call in the ledger, resume, the dry run, no network but
the endpoint and the gateway, failures counted."""
from __future__ import annotations

import importlib.util
import json
import shutil

import pytest

from common.core.config import load_config
from common.pipeline import dryrun, ledger
from tests.conftest import TINY_LOCOMO, rows, run_overrides, run_stages, through_the_gateway

pytestmark = pytest.mark.skipif(importlib.util.find_spec("langmem") is None,
                                reason="langmem not installed (make install installs requirements-systems.txt)")
ALL = ["preprocess", "episodes", "extract", "index", "plan", "retrieve", "answer", "judge", "aggregate"]


def langmem_sets(tmp_path, **extra):
    # The fake server's embeddings: the harness's embedding model is not the point here.
    return run_overrides(tmp_path, TINY_LOCOMO, **{"method.name": "langmem", "embedding.backend": "openai", **extra})


@pytest.fixture(scope="module")
def langmem_run(tmp_path_factory):
    """One run of 01-09 on the tiny fixture with every socket but the fake server's and the
    gateway's refused, then a rerun of 06 and a re-ingestion from scratch."""
    from tests.fake_openai import FakeOpenAI

    tmp = tmp_path_factory.mktemp("langmem")
    with FakeOpenAI() as fake, pytest.MonkeyPatch.context() as mp:
        mp.setenv("OPENAI_BASE_URL", fake.base_url)
        attempts, ports = through_the_gateway(mp, fake.base_url)
        sets = langmem_sets(tmp)
        run = run_stages("configs/locomo.yaml", sets, ALL)
        kinds, paid = fake.counts_by_kind(), fake.request_count
        run_stages("configs/locomo.yaml", sets, ["retrieve"])
        rerun = fake.request_count - paid
        kept = run.dir / "kept_retrievals.jsonl"
        shutil.copy(run.path("retrievals"), kept)
        shutil.rmtree(run.dir / "06_retrieve")
        before = [b for b in fake.requests if "messages" in b]
        run_stages("configs/locomo.yaml", sets, ["retrieve"])
        chat_again = [b for b in fake.requests[paid:] if "messages" in b]
        out = {"run": run, "sets": sets, "kinds": kinds, "rerun": rerun, "attempts": attempts, "ports": ports,
               "fake": fake, "before": before, "chat_again": chat_again, "kept": kept}
    yield out  # sockets open again, the server stopped: its records stay readable


def test_langmem_ingests_searches_and_answers_through_the_gateway(langmem_run):
    run, kinds = langmem_run["run"], langmem_run["kinds"]
    sessions = rows(run.path("sessions"))
    # One store-manager call per session (the fake's tool call is valid: no repair call), every one
    # through the gateway (prompt id gateway.langmem, the fake's generic kind), then the answers.
    judged = len(rows(run.dir / "08_judge_gpt-4o-mini.jsonl"))  # LoCoMo category 5 is not judged
    assert kinds == {"generic": len(sessions), "answer": 11, "judge_locomo": judged, "embeddings": kinds["embeddings"]}
    fake = langmem_run["fake"]
    prompt_ids = [h.get("x-prompt-id") for h, b in zip(fake.request_headers, fake.requests) if "tools" in b]
    assert prompt_ids == ["gateway.langmem"] * len(sessions)
    assert kinds["embeddings"] > len(sessions)  # the store's index embedded through the gateway
    dates = {(s["memory_id"], s["date_time"]) for s in sessions}
    for r in rows(run.path("retrievals")):
        assert r["mode"] == "langmem" and r["method_info"]["evidence"] and r["buffer_text"].startswith("- ")
        for e in r["method_info"]["evidence"]:
            assert (r["memory_id"], e["timestamp"]) in dates and e["dia_ids"] and not e["text"].startswith("content=")
    for mid in {s["memory_id"] for s in sessions}:
        saved = json.loads((run.dir / "06_retrieve" / "memory" / mid / "store.json").read_text())
        assert saved and all(it["value"]["kind"] == "Memory" for it in saved)
        # LangMem logs an ERROR from its extraction (the fake's tool call names a schema it does not
        # know) and goes on: counted per memory with the items it stored, never a silent success.
        marker = json.loads((run.dir / "06_retrieve" / "memory" / mid / "ingested.json").read_text())
        assert marker["outcome"]["items"] == len(saved)
        assert marker["outcome"]["errors"] == {"logged_error": 1}
        assert marker["outcome"]["error_samples"][0].startswith("logged_error: extraction: ")
    metrics = json.loads(run.path("metrics").read_text())
    assert metrics["memory_system"]["ingest_errors"] == {"logged_error": 2}
    assert len(rows(run.path("answers"))) == 11
    entry = next(e for e in ledger.ledger(run.dir)["stages"] if e["stage"] == "06_retrieve_ingest")
    assert entry["role"] == "memory" and entry["calls"] == len(sessions)
    # The systems table: the run's row with its calls, tokens and dollars per question, measured here.
    from common.report.tables import command

    results = run.dir.parent.parent
    assert command.main(["--results", str(results), "--out", str(results / "tables"), "--only", "systems"]) == 0
    table_lines = (results / "tables" / "systems.md").read_text().splitlines()
    header = [c.strip() for c in next(x for x in table_lines if x.startswith("| Ref |")).split("|")]
    line = next(x for x in table_lines if " | langmem | " in x)
    cells = [c.strip() for c in line.split("|")]
    per_question = (len(sessions) + 11 + judged) / 11  # the extraction calls, the answers, the judgments
    assert cells[-5:-1] == [f"{per_question:.1f}", cells[-4], cells[-3], "measured here"]
    assert "(" in cells[header.index("Overall")]
    est = dryrun.estimate(load_config(["configs/locomo.yaml"], langmem_run["sets"]))
    row = next(s for s in est["stages"] if s["stage"] == "06_retrieve")
    assert row["role"] == "memory" and row["calls"] == len(sessions) and row["already_done"] == len(sessions)


def test_a_rerun_pays_nothing_and_a_re_ingestion_sends_the_same_requests(langmem_run):
    assert langmem_run["rerun"] == 0
    # Ingested again from scratch: the same chat requests (deterministic memory ids), all from the cache.
    chat_before = [json.dumps(b, sort_keys=True) for b in langmem_run["before"]]
    assert not langmem_run["chat_again"] or all(json.dumps(b, sort_keys=True) in chat_before
                                                for b in langmem_run["chat_again"])
    run = langmem_run["run"]
    assert rows(run.path("retrievals")) == rows(langmem_run["kept"])


def test_langmem_reaches_no_address_but_the_endpoint_and_the_gateway(langmem_run):
    fake_port = int(langmem_run["fake"].base_url.rsplit(":", 1)[1].split("/")[0])
    assert langmem_run["ports"], "no gateway was started"
    seen = {a for a in langmem_run["attempts"]}
    assert seen and seen <= {("127.0.0.1", fake_port)} | {("127.0.0.1", p) for p in langmem_run["ports"]}, seen


def test_a_failed_call_fails_the_memory_and_is_counted(tmp_path, fake_server, monkeypatch):
    from tests.fake_openai import FaultPlan

    monkeypatch.setenv("OPENAI_BASE_URL", fake_server.base_url)
    fake_server.faults = FaultPlan(pinned={"generic": ["500"]})  # the first extraction, on every retry
    sets = langmem_sets(tmp_path, **{"llm.max_attempts": 2, "systems.ingest_concurrency": 1})
    with pytest.raises(RuntimeError, match="LangMem ingestion of tiny-1 session_1 failed: .*http_500"):
        run_stages("configs/locomo.yaml", sets, ["preprocess", "retrieve"])
    assert not (tmp_path / "results" / "locomo" / "t" / "06_retrieve" / "memory" / "tiny-1" / "ingested.json").exists()
    assert fake_server.faults_injected and len(fake_server.requests) >= 2
