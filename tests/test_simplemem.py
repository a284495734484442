"""SimpleMem (method.name=simplemem) on LoCoMo conv-26, 15 questions, through the gateway and the fake
server: its windows of 40 turns extracted into LanceDB entries, its planned search and its own
rendering of the entries as the buffer, every call in the ledger (equal to the fake server's), the
gold poisoned without any request changing, no socket but the fake server's and the gateway's, a
rerun with 0 calls. Importing SimpleMem (LanceDB, pandas) takes 20 s here: make test-slow runs it."""
from __future__ import annotations

import importlib.util
import json
import math
from urllib.parse import urlparse

import pytest

from common.pipeline import ledger
from tests.conftest import REAL_LOCOMO, rows, run_overrides, run_stages, through_the_gateway
from tests.test_systems import _poison_locomo

pytestmark = [pytest.mark.systems,
              pytest.mark.skipif(importlib.util.find_spec("simplemem") is None,
                                 reason="simplemem not installed (make install installs requirements-systems.txt)")]
UP_TO_ANSWER = ["preprocess", "episodes", "extract", "index", "plan", "retrieve", "answer"]


def sets_for(tmp, data, base_url):
    return run_overrides(tmp, data, **{"method.name": "simplemem", "embedding.backend": "openai",
                                       "embedding.model": "fake-embed", "embedding.base_url": base_url,
                                       "data.memories": "[conv-26]", "data.question_limit": 15,
                                       # the same questions clean and poisoned: LIMIT's draw reads gold categories
                                       "data.limit_rule": "first"})


@pytest.fixture(scope="module")
def simplemem_runs(tmp_path_factory):
    from tests.fake_openai import FakeOpenAI

    if not REAL_LOCOMO.exists():
        pytest.skip(f"real LoCoMo file not available at {REAL_LOCOMO}")
    real_locomo = REAL_LOCOMO
    tmp = tmp_path_factory.mktemp("simplemem")
    poisoned = _poison_locomo(real_locomo, tmp / "poisoned.json")
    out = {}
    with FakeOpenAI() as fake, pytest.MonkeyPatch.context() as mp:
        mp.setenv("OPENAI_BASE_URL", fake.base_url)
        attempts, ports = through_the_gateway(mp, fake.base_url)
        for label, data in (("clean", real_locomo), ("poisoned", poisoned)):
            start = len(fake.requests)
            run = run_stages("configs/locomo.yaml", sets_for(tmp / label, data, fake.base_url), UP_TO_ANSWER)
            sent = fake.requests[start:]
            out[label] = {"run": run, "sent": sorted(json.dumps(b, sort_keys=True) for b in sent
                                                     if b.get("input") != ["dimension probe"]),
                          "chat": sum(1 for b in sent if "messages" in b)}
        before = fake.request_count
        run_stages("configs/locomo.yaml", sets_for(tmp / "clean", real_locomo, fake.base_url), ["retrieve", "answer"])
        out["rerun"] = fake.request_count - before
        out.update(attempts=attempts, ports=ports, fake=(urlparse(fake.base_url).hostname,
                                                         urlparse(fake.base_url).port))
    yield out


def test_simplemem_ingests_searches_and_renders_as_its_own_locomo_test(simplemem_runs):
    run = simplemem_runs["clean"]["run"]
    turns = sum(len(s["turns"]) for s in rows(run.path("sessions")))
    marker = json.loads((run.dir / "06_retrieve" / "memory" / "conv-26" / "ingested.json").read_text())
    # one extraction call per window of 40 turns, one entry per turn (the fake's reply)
    assert marker["spent"]["calls"] == math.ceil(turns / 40)
    assert marker["outcome"]["items"] == turns and not marker["outcome"]["errors"]
    got = rows(run.path("retrievals"))
    assert len(got) == 15
    for r in got:
        assert r["mode"] == "simplemem" and r["buffer_text"].startswith("[Context 1]\nContent: ")
        assert len(r["method_info"]["evidence"]) == r["method_info"]["entries"] > 0
    # every LLM call of the run is in the ledger, under the memory role for the system's
    led = ledger.ledger(run.dir)
    # (SimpleMem asks again when a reply does not parse: the same request, answered by the cache)
    assert led["total"]["paid"] == simplemem_runs["clean"]["chat"]
    roles = {(e["stage"], e["role"]) for e in led["stages"] if e["calls"]}
    assert roles == {("06_retrieve_ingest", "memory"), ("06_retrieve", "memory"), ("07_answer", "answer")}


def test_simplemem_requests_do_not_depend_on_gold_and_reach_only_the_gateway(simplemem_runs):
    clean, poisoned = simplemem_runs["clean"]["sent"], simplemem_runs["poisoned"]["sent"]
    assert clean and clean == poisoned and "POISON" not in json.dumps(poisoned)
    allowed = {simplemem_runs["fake"]} | {("127.0.0.1", p) for p in simplemem_runs["ports"]}
    assert simplemem_runs["ports"] and set(simplemem_runs["attempts"]) <= allowed


def test_simplemem_rerun_makes_no_call(simplemem_runs):
    assert simplemem_runs["rerun"] == 0
