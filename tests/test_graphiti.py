"""Graphiti (method.name=graphiti) through the fake server: sessions ingested as dated episodes into
an embedded Kuzu graph, Zep's two searches and context, resume, failures counted, no other socket."""
from __future__ import annotations

import importlib.util
import json
from types import SimpleNamespace
from urllib.parse import urlparse

import pytest

from common.core.config import load_config
from common.core.schema import Session, from_dict
from common.pipeline import dryrun, ledger
from common.systems.graphiti import session_date
from tests.conftest import TINY_LOCOMO, rows, run_overrides, run_stages, through_the_gateway
from tests.fake_openai import FakeOpenAI

pytestmark = pytest.mark.skipif(importlib.util.find_spec("graphiti_core") is None,
                                reason="graphiti-core not installed (requirements-systems.txt)")
UP_TO_06 = ["preprocess", "episodes", "extract", "index", "plan", "retrieve"]


def graphiti_sets(tmp_path, **extra):
    # The fake server's embeddings (through the gateway): the harness's embedding model is not the point.
    return run_overrides(tmp_path, TINY_LOCOMO, **{"method.name": "graphiti", "embedding.backend": "openai", **extra})


@pytest.fixture(scope="module")
def module_server():
    with FakeOpenAI() as server:
        yield server


@pytest.fixture(scope="module")
def ingested(tmp_path_factory, module_server):
    """One run of 01-07 on the tiny fixture, then a rerun; the fake server's counts of each."""
    fake_server = module_server
    tmp = tmp_path_factory.mktemp("graphiti")
    mp = pytest.MonkeyPatch()
    mp.setenv("OPENAI_BASE_URL", fake_server.base_url)
    attempts, ports = through_the_gateway(mp, fake_server.base_url)
    try:
        start = len(fake_server.requests)
        run = run_stages("configs/locomo.yaml", graphiti_sets(tmp, **{"data.question_limit": 1}), UP_TO_06 + ["answer"])
        first = fake_server.requests[start:]
        first_ids = [h.get("x-prompt-id") for h in fake_server.request_headers[start:]]
        counts = fake_server.counts_by_kind()
        start = len(fake_server.requests)
        run_stages("configs/locomo.yaml", graphiti_sets(tmp, **{"data.question_limit": 1}), UP_TO_06 + ["answer"])
        again = fake_server.requests[start:]
    finally:
        mp.undo()
    return SimpleNamespace(run=run, tmp=tmp, first=first, first_ids=first_ids, again=again, counts=counts,
                           attempts=list(attempts), ports=ports)


def test_sessions_become_dated_episodes_and_questions_get_zeps_context(ingested):
    run = ingested.run
    sessions = rows(run.path("sessions"))
    # Every session's turns went to Graphiti's entity extraction as "speaker: text" lines.
    extraction = [json.dumps(b) for b in ingested.first
                  if (b.get("response_format") or {}).get("json_schema", {}).get("name") == "ExtractedEntities"]
    assert len(extraction) == len(sessions)
    for s in sessions:
        line = f"{s['turns'][0]['speaker']}: {s['turns'][0]['text']}"
        assert any(json.dumps(line)[1:-1] in b for b in extraction)
    assert ingested.counts.get("graphiti_rerank", 0) > 0  # the edges' cross-encoder asked for logprobs
    for mid in {s["memory_id"] for s in sessions}:
        assert (run.dir / "06_retrieve" / "memory" / mid / "graph.kuzu").exists()
    for r in rows(run.path("retrievals")):
        text = r["buffer_text"]
        assert r["mode"] == "graphiti" and "<FACTS>" in text and "<ENTITIES>" in text
        facts = [e for e in r["method_info"]["evidence"] if e["source"] == "facts"]
        assert 0 < len(facts) <= 20 and r["method_info"]["entities"] <= 20
        # A fact's validity date is the date of the session it came from (the fake extraction
        # dates each fact at the episode's reference time; Kuzu keeps it without the UTC offset).
        assert all(f"{e['text']} (event_time: {e['timestamp']}" in text for e in facts)
        dates = {str(session_date(from_dict(Session, s)).replace(tzinfo=None))
                 for s in sessions if s["memory_id"] == r["memory_id"]}
        assert {e["timestamp"] for e in facts} <= dates
    assert len(rows(run.path("answers"))) == len(rows(run.path("questions")))


def test_a_rerun_makes_no_call_and_the_dry_run_counts_the_ingestion(ingested):
    assert ingested.first and ingested.again == []
    cfg = load_config(["configs/locomo.yaml"], graphiti_sets(ingested.tmp, **{"data.question_limit": 1}))
    est = dryrun.estimate(cfg)
    row = next(s for s in est["stages"] if s["stage"] == "06_retrieve")
    memory = ingested.run.dir / "06_retrieve" / "memory"
    made = [json.loads(p.read_text())["spent"] for p in memory.glob("*/ingested.json")]
    assert len(made) == 2 and all(m["calls"] > 0 and m["prompt_tokens"] > 0 for m in made)
    done = sum(m["calls"] for m in made)
    # The estimate assumes one resolution call per fact (none is made when no earlier fact is
    # similar): an upper bound here, of the right order.
    assert row["role"] == "memory" and done <= row["calls"] <= 3 * done
    assert row["already_done"] == done and row["to_make"] == row["calls"] - done
    # The search's reranker calls: at most twice the edge limit per question, all made already.
    search = [s for s in est["stages"] if s["stage"] == "06_retrieve"][1]
    questions = len(rows(ingested.run.path("questions")))
    reranked = sum(1 for b in ingested.first if b.get("logprobs"))
    assert search["calls"] == 40 * questions >= reranked and search["already_done"] == search["calls"]


def test_every_graphiti_call_goes_through_the_gateway_into_the_ledger(ingested):
    # Graphiti's requests reach the fake server only through the gateway (its prompt id), the
    # reranker's logprobs too; the ledger's memory-role calls, ingestion and search, are all of them.
    graphiti = [b for b, p in zip(ingested.first, ingested.first_ids) if p == "gateway.graphiti"]
    assert all(p == "gateway.graphiti" for b, p in zip(ingested.first, ingested.first_ids)
               if b.get("logprobs") or (b.get("response_format") or {}).get("type") == "json_schema")
    assert any(b.get("logprobs") and b.get("top_logprobs") == 2 and b.get("logit_bias") for b in graphiti)
    entries = [e for e in ledger.ledger(ingested.run.dir)["stages"] if e["role"] == "memory"]
    assert {e["stage"] for e in entries} == {"06_retrieve_ingest", "06_retrieve"}
    search = next(e for e in entries if e["stage"] == "06_retrieve")
    assert search["calls"] == sum(1 for b in graphiti if b.get("logprobs")) > 0
    assert sum(e["calls"] for e in entries) == len(graphiti)


def test_graphiti_opens_no_socket_but_the_endpoint_and_the_gateway(ingested, module_server):
    allowed = (urlparse(module_server.base_url).hostname, urlparse(module_server.base_url).port)
    assert ingested.ports, "no gateway was started"
    assert ingested.attempts and set(ingested.attempts) <= {allowed} | {("127.0.0.1", p) for p in ingested.ports}


def test_a_failed_call_fails_the_memory(tmp_path, fake_server, monkeypatch):
    from tests.fake_openai import FaultPlan

    monkeypatch.setenv("OPENAI_BASE_URL", fake_server.base_url)
    fake_server.faults = FaultPlan(pinned={"schema:ExtractedEdges": ["500"]})
    sets = graphiti_sets(tmp_path, **{"systems.ingest_concurrency": 1, "llm.max_attempts": 2})
    with pytest.raises(RuntimeError, match="graphiti ingestion of tiny-1 .* failed"):
        run_stages("configs/locomo.yaml", sets, UP_TO_06)
    assert not (tmp_path / "results" / "locomo" / "t" / "06_retrieve" / "memory" / "tiny-1" / "ingested.json").exists()


def test_without_a_gateway_the_error_says_so(tmp_path):
    from common.systems.base import Context
    from common.systems.graphiti import Graphiti

    cfg = load_config(["configs/locomo.yaml"], graphiti_sets(tmp_path))
    system = Graphiti(Context(cfg, tmp_path, tmp_path / "memory", lambda: None))
    with pytest.raises(RuntimeError, match="graphiti: no gateway"):
        system._endpoint()
    system.ctx.gateway = gateway = SimpleNamespace(base_url="http://127.0.0.1:1/v1", api_key="k")
    assert system._endpoint() is gateway


def test_unknown_reranker_or_limit_is_refused(tmp_path):
    from common.systems.base import Context
    from common.systems.graphiti import Graphiti

    for bad, field in (({"edge_reranker": "bm25"}, "edge_reranker"), ({"node_limit": 0}, "node_limit")):
        cfg = load_config(["configs/locomo.yaml"], graphiti_sets(tmp_path) + [f"method.options={json.dumps(bad)}"])
        with pytest.raises(ValueError, match=f"method.options.{field}"):
            Graphiti(Context(cfg, tmp_path, tmp_path / "memory", lambda: None))
