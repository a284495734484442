"""Memory systems in their own environments (``systems/<name>/``): each adapter, in a virtual
environment built from its pinned requirements, ingests two LoCoMo sessions of conv-26 and answers
a search over the JSON-lines protocol, every LLM and embedding call reaching the fake server and no
other address reached. The environments take minutes to build (reused while their stamp matches),
so these tests are marked ``systems`` (``make test-slow``)."""
from __future__ import annotations

import json

import pytest

from tests import systems_driver as driver

# The systems whose adapters run here (docs/memory-systems.md); the others are in docs/limitations.md.
# MemoryOS's search finds nothing with the fake server's replies: its retrieval keeps a mid-term
# segment only when the question's embedding is within 0.1 of the segment summary's, and the
# fake's hash vectors of unrelated texts are not (docs/memory-systems.md says what it needs).
# MemOS's API server returns only memories whose relevance to the question is 0.45 or more (its
# search requests' default ``relativity``), and the fake's hash vectors of different texts are not:
# tests/test_memos.py searches with a question that is a stored memory's text, which it finds.
RUNNING = {"cognee": True, "hipporag": True, "letta": True, "memos": False, "memoryos": False, "hindsight": True}


def test_protocol_helper_is_standard_library_only():
    """The protocol module every adapter imports must load in a bare interpreter (no harness)."""
    import ast

    tree = ast.parse((driver.SYSTEMS / "_protocol.py").read_text(encoding="utf-8"))
    imported = {alias.name.split(".")[0] for node in ast.walk(tree) if isinstance(node, ast.Import)
                for alias in node.names}
    imported |= {str(node.module).split(".")[0] for node in ast.walk(tree)
                 if isinstance(node, ast.ImportFrom) and node.level == 0}
    import sys
    assert imported <= set(sys.stdlib_module_names) | {"__future__"}, imported


TOY_ADAPTER = """
import logging, sys
sys.path.insert(0, {systems!r})
import _protocol as proto

class Toy(proto.Adapter):
    system = "toy"
    def version(self):
        return "1"
    def ingest(self, memory_id, sessions):
        print("a library printing to stdout")  # must not corrupt the reply
        logging.getLogger("toy").error("one turn lost")  # a logged, swallowed error is reported
        return sum(len(s["turns"]) for s in sessions), []
    def search(self, memory_id, question, question_date, limit):
        raise ValueError("no index for " + memory_id)

proto.serve(Toy())
"""


def test_protocol_replies_reports_logged_errors_and_keeps_stdout_clean(tmp_path):
    """The child's side of the protocol: one reply line per request, library output kept off the
    reply stream, ERROR log records of an ingestion returned, a failure a reply, close exits."""
    import subprocess
    import sys

    script = tmp_path / "adapter.py"
    script.write_text(TOY_ADAPTER.format(systems=str(driver.SYSTEMS)), encoding="utf-8")
    requests = [{"op": "hello"},
                {"op": "ingest", "memory_id": "m", "sessions": [{"session_id": "s", "date": None, "turns": [
                    {"turn_id": "D1:1", "speaker": "A", "text": "hi"}]}]},
                {"op": "search", "memory_id": "m", "question": "q", "question_date": None, "limit": 3},
                {"op": "nonsense"}, {"op": "close"}, {"op": "hello"}]
    done = subprocess.run([sys.executable, str(script)], input="".join(json.dumps(r) + "\n" for r in requests),
                          capture_output=True, text=True, timeout=30)
    replies = [json.loads(line) for line in done.stdout.splitlines()]
    assert replies == [
        {"ok": True, "system": "toy", "version": "1", "answers": False, "settings": {}},
        {"ok": True, "items": 1, "errors": ["toy: one turn lost"]},
        {"ok": False, "error": "ValueError: no index for m"},
        {"ok": False, "error": "unknown op 'nonsense'"},
        {"ok": True},
    ]  # nothing after close
    assert done.returncode == 0 and "a library printing to stdout" in done.stderr


def test_fake_server_answers_a_registered_systems_prompt_only_json():
    """MemOS asks for its JSON in the prompt alone: the fake server answers requests carrying its
    gateway prompt id with the reader's JSON built from the prompt, any other id with plain text."""
    from tests.fake_openai.scripted import generic_reply

    # The shape MemOS's reader prompt asks for (its own JSON example): the reply may carry only these fields.
    prompt = ('Extract memories. Return JSON:\n{"memory list": [{"key": "...", "memory_type": "...", "value": "...", '
              '"tags": ["..."]}], "summary": "..."}\n\nuser:Caroline: I went to a support group\n'
              'assistant:Melanie: Wow, cool')
    content, calls = generic_reply({"messages": []}, prompt, "gateway.memos")
    reply = json.loads(content)
    assert calls == [] and [m["value"] for m in reply["memory list"]] == [
        "Caroline: I went to a support group", "Melanie: Wow, cool"]
    assert generic_reply({"messages": []}, prompt, "gateway.other")[0].startswith("Noted: ")


# MemOS, HippoRAG and Cognee build for 10 to 16 minutes, Hindsight (186 pins) for about 5:
# `make test-systems-all` only.
HEAVY = {"memos", "hipporag", "cognee", "hindsight"}


@pytest.mark.systems
@pytest.mark.parametrize("name", [pytest.param(n, marks=[pytest.mark.systems_heavy] if n in HEAVY else [])
                                  for n in sorted(RUNNING)])
def test_system_ingests_and_searches_through_the_endpoint_only(name):
    run = driver.drive(name)
    finds = RUNNING[name]
    hello, ingest, search, close = (run.replies[k] for k in ("hello", "ingest", "search", "close"))
    assert hello["ok"] and hello["system"] == name and hello["version"], hello
    assert ingest["ok"] and ingest["items"] > 0, (ingest, run.stderr[-3000:])
    assert search["ok"] and bool(search["evidence"]) is finds, (search, run.stderr[-3000:])
    assert all(isinstance(e["text"], str) and e["text"] for e in search["evidence"])
    assert isinstance(search["context"], str) and search["context"].strip()
    assert close == {"ok": True} and run.returncode == 0
    # Every request the child made went through the relay to the fake server, none elsewhere.
    assert run.forwarded > 0 and run.forwarded == run.fake_requests
    assert run.attempts == [], json.dumps(run.attempts)[:2000]


# --------------------------------------------------------------------------- through the harness
# `make locomo SET="method.name=<system>" MEMORIES=conv-26 LIMIT=15` against the fake server, the
# system in its own environment and process behind the harness's gateway. Each system's environment
# is built once (or reused while its stamp matches) and shared by its module fixture. Letta and
# MemoryOS build in about 4 minutes each and run in `make test-slow`; MemOS, HippoRAG and Cognee
# take 10 to 16 minutes to build and run in `make test-systems-all` only (marker `systems_heavy`).
# One xdist group per system: its tests share one worker, so its module fixture runs once.
HARNESS_SYSTEMS = [pytest.param(n, marks=[pytest.mark.systems, pytest.mark.xdist_group(f"system-{n}"),
                                          *([pytest.mark.systems_heavy] if n in HEAVY else [])])
                   for n in ("letta", "memoryos", "memos", "hipporag", "cognee", "hindsight")]
BEFORE_RETRIEVE = ["preprocess", "episodes", "extract", "index", "plan"]


def _sets(tmp, data, base_url, name):
    from tests.conftest import run_overrides

    return run_overrides(tmp, data, **{"method.name": name, "embedding.backend": "openai",
                                       "embedding.model": "fake-embed", "embedding.base_url": base_url,
                                       "data.memories": "[conv-26]", "data.question_limit": 15,
                                       # the same questions clean and poisoned: LIMIT's draw reads gold categories
                                       "data.limit_rule": "first"})


def _bodies(requests):
    """The distinct chat requests, byte for byte, and the distinct texts embedded (with the request's
    other fields): how an embedding batch is cut depends on which texts the cache already held (the
    poisoned run's killed ingestion embedded some of them) and, for Cognee, on task scheduling."""
    out = set()
    for b in requests:
        if "input" in b:
            texts = b["input"] if isinstance(b["input"], list) else [b["input"]]
            out |= {json.dumps({**b, "input": t}, sort_keys=True) for t in texts if t != "dimension probe"}
        else:
            out.add(json.dumps(b, sort_keys=True))
    return sorted(out)


@pytest.fixture(scope="module", params=HARNESS_SYSTEMS)
def harness_run(request, tmp_path_factory):
    """One system through 01-07 with clean gold, a rerun of 06-07, then the same with poisoned
    gold where the first ingestion's child is SIGKILLed mid-ingest (after its first request) and the
    next run redoes it; every child socket but the gateway's refused by its sitecustomize."""
    import os
    import shutil
    import signal
    import threading
    import time
    from urllib.parse import urlparse

    from common.systems import envs, process
    from tests.conftest import REAL_LOCOMO, REPO, run_stages, through_the_gateway
    from tests.fake_openai import FakeOpenAI
    from tests.test_systems import _poison_locomo

    name = request.param
    if not REAL_LOCOMO.exists():
        pytest.skip(f"real LoCoMo file not available at {REAL_LOCOMO}")
    envs.build(name)  # minutes on first use: outside the measured runs
    tmp = tmp_path_factory.mktemp(f"harness-{name}")
    guard = tmp / "guard"
    guard.mkdir()
    shutil.copy(REPO / "tests" / "fixtures" / "systems" / "socket_guard.py", guard / "sitecustomize.py")
    poisoned = _poison_locomo(REAL_LOCOMO, tmp / "poisoned.json")
    out: dict = {"name": name, "guard_log": tmp / "guard.log"}
    kill = {"armed": False, "killed": []}
    request_ = process.Child.request

    def killing(self, message, timeout, check):
        if kill["armed"] and message.get("op") == "ingest":
            first = fake.request_count

            def shoot():  # mid-ingest: once the child's first call has reached the fake server
                while self.proc.poll() is None and fake.request_count == first:
                    time.sleep(0.005)
                if self.proc.poll() is None:
                    os.killpg(self.proc.pid, signal.SIGKILL)
                    kill["killed"].append(self.proc.pid)
            threading.Thread(target=shoot, daemon=True).start()
        return request_(self, message, timeout, check)

    with FakeOpenAI() as fake, pytest.MonkeyPatch.context() as mp:
        mp.setenv("OPENAI_BASE_URL", fake.base_url)
        mp.setattr(process, "CHILD_ENV", {"PYTHONPATH": str(guard), "SOCKET_GUARD_LOG": str(out["guard_log"])})
        mp.setattr(process.Child, "request", killing)
        attempts, ports = through_the_gateway(mp, fake.base_url)
        started = time.perf_counter()
        run = run_stages("configs/locomo.yaml", _sets(tmp / "clean", REAL_LOCOMO, fake.base_url, name),
                         BEFORE_RETRIEVE + ["retrieve", "answer"])
        out["seconds"] = time.perf_counter() - started
        sent = list(fake.requests)
        out.update(run=run, sent=_bodies(sent), chat=sum(1 for b in sent if "messages" in b),
                   embeddings=sum(1 for b in sent if "input" in b and b.get("input") != ["dimension probe"]))
        before = fake.request_count
        run_stages("configs/locomo.yaml", _sets(tmp / "clean", REAL_LOCOMO, fake.base_url, name),
                   ["retrieve", "answer"])
        out["rerun"] = fake.request_count - before
        # judged and aggregated (gold only here), then the systems table built from the run
        before = len(fake.requests)
        run_stages("configs/locomo.yaml", _sets(tmp / "clean", REAL_LOCOMO, fake.base_url, name),
                   ["judge", "aggregate"])
        out["judged"] = sum(1 for b in fake.requests[before:] if "messages" in b)

        first = len(fake.requests)
        sets = _sets(tmp / "poisoned", poisoned, fake.base_url, name)
        run_stages("configs/locomo.yaml", sets, BEFORE_RETRIEVE)
        kill["armed"] = True
        try:
            run_stages("configs/locomo.yaml", sets, ["retrieve"])
            out["killed_run"] = "no failure"
        except Exception as exc:  # the killed child fails its memory, and the stage with it
            out["killed_run"] = str(exc)
        kill["armed"] = False
        memory = tmp / "poisoned" / "results" / "locomo" / "t" / "06_retrieve" / "memory" / "conv-26"
        out["failed"] = json.loads((memory / "failed.json").read_text()) if (memory / "failed.json").exists() else {}
        out["killed"] = list(kill["killed"])
        out["redone"] = run_stages("configs/locomo.yaml", sets, ["retrieve", "answer"])
        out["poisoned_sent"] = _bodies(fake.requests[first:])
        url = urlparse(fake.base_url)
        out.update(attempts=attempts, ports=ports, fake=(url.hostname, url.port))
    yield out


def test_system_runs_through_the_harness_every_call_in_the_ledger(harness_run):
    from common.pipeline import ledger
    from tests.conftest import rows

    run, name = harness_run["run"], harness_run["name"]
    marker = json.loads((run.dir / "06_retrieve" / "memory" / "conv-26" / "ingested.json").read_text())
    assert marker["outcome"]["items"] > 0, marker
    got = rows(run.path("retrievals"))
    assert len(got) == 15 and all(r["mode"] == name and not r["error"] for r in got), [r["error"] for r in got]
    if RUNNING[name]:  # the systems whose search finds something with the fake server's vectors
        assert all(r["buffer_tokens"] > 0 and r["method_info"]["evidence"] for r in got)
    led = ledger.ledger(run.dir)
    # every chat call the fake saw is in the ledger (the judge's too, made after the rerun)
    assert led["total"]["paid"] == harness_run["chat"] + harness_run["judged"] and harness_run["chat"] > 0
    roles = {(e["stage"], e["role"]) for e in led["stages"] if e["calls"] and not e["stage"].startswith("08_judge")}
    assert ("07_answer", "answer") in roles and roles <= {("06_retrieve_ingest", "memory"),
                                                          ("06_retrieve", "memory"), ("07_answer", "answer")}
    print(f"\n{name}: {harness_run['seconds']:.0f} s, {led['total']['paid']} chat calls, "
          f"{harness_run['embeddings']} embedding requests, {marker['outcome']['items']} items")


# Systems whose recall differs between two ingestions of the same conversation, so that the clean and
# the poisoned runs' requests cannot be byte-identical (no gold leaks into them: checked all the same).
RECALL_NOT_REPRODUCIBLE = {
    "hindsight": "Hindsight's recall returns other facts, in another order, after another ingestion of the "
                 "same sessions (its facts get random ids; docs/memory-systems.md, Hindsight)",
}


def test_system_requests_do_not_depend_on_gold_and_reach_only_the_gateway(harness_run):
    clean, poisoned = harness_run["sent"], harness_run["poisoned_sent"]
    assert clean and poisoned and "POISON" not in json.dumps(poisoned)
    allowed = {harness_run["fake"]} | {("127.0.0.1", p) for p in harness_run["ports"]}
    assert harness_run["ports"] and set(harness_run["attempts"]) <= allowed
    guard = harness_run["guard_log"]
    assert not guard.exists() or not guard.read_text().strip(), guard.read_text()[:2000]
    if harness_run["name"] in RECALL_NOT_REPRODUCIBLE:
        pytest.xfail(RECALL_NOT_REPRODUCIBLE[harness_run["name"]])
    assert clean == poisoned


def test_system_rerun_makes_no_call(harness_run):
    assert harness_run["rerun"] == 0


def test_a_killed_system_child_is_a_counted_failure_redone_next_run(harness_run):
    from tests.conftest import rows

    assert harness_run["killed"], "the child finished its ingestion before it could be killed"
    assert "child_crash" in harness_run["killed_run"] and harness_run["failed"]["cause"] == "child_crash"
    redone = harness_run["redone"]
    memory = redone.dir / "06_retrieve" / "memory" / "conv-26"
    assert (memory / "ingested.json").exists() and not (memory / "failed.json").exists()
    assert len(rows(redone.path("retrievals"))) == 15


def test_the_systems_table_shows_the_systems_row_with_items_and_buffer_tokens(harness_run):
    from common.report.tables import command

    run, name = harness_run["run"], harness_run["name"]
    block = json.loads(run.path("metrics").read_text())["memory_system"]
    results = run.dir.parent.parent
    assert command.main(["--results", str(results), "--out", str(results / "tables"), "--only", "systems"]) == 0
    table = (results / "tables" / "systems.md").read_text()
    head = next(x for x in table.splitlines() if x.startswith("| Ref"))
    line = next(x for x in table.splitlines() if f" | {name} | " in x)
    cells = dict(zip([c.strip() for c in head.split("|")], [c.strip() for c in line.split("|")]))
    items = block["evidence_items"]
    assert cells["Items / q (mean / p95)"] == f"{items['mean']:.1f} / {items['p95']:.1f}"
    mean, p95 = (float(x.replace(",", "")) for x in cells["Buffer tokens / q (mean / p95)"].split(" / "))
    assert mean == round(block["buffer_tokens"]["mean"]) > 0 and p95 == round(block["buffer_tokens"]["p95"])
    if RUNNING[name]:
        assert block["evidence_items"]["mean"] > 0 and "empty_buffer" not in cells["Outcomes"]
    else:  # MemoryOS: buffers without evidence (most questions with the fake's replies), counted and shown
        empty = block["outcomes"]["empty_buffer"]
        assert empty > 0 and f"empty_buffer {empty} of 15" in cells["Outcomes"]


# What each system built and the fallbacks it took, as 06 counted them from the child's replies
# (MemoryOS, HippoRAG and Cognee report them; tests/test_own_env_fidelity.py checks the replies).
BUILT = {"memoryos": {"pages", "segments", "user_knowledge", "assistant_knowledge"},
         "hipporag": {"passages", "triples", "passages_without_triples", "facts", "entities"},
         "cognee": {"graph_nodes", "graph_edges", "chunks"},
         # MemOS: its memories, those whose source messages carry their session's date, its preferences
         "memos": {"memories", "dated", "preferences"},
         "hindsight": {"facts", "documents"}}


def test_what_the_system_built_and_its_fallbacks_reach_metrics(harness_run):
    name, run = harness_run["name"], harness_run["run"]
    if name not in BUILT:
        pytest.skip(f"{name} reports no built counts of its own here")
    block = json.loads(run.path("metrics").read_text())["memory_system"]
    assert set(block["built"]) == BUILT[name] and block["built_memories"] == 1, block
    if name == "hipporag":
        # the fake's OpenIE replies give no triple: every one of the 15 searches is dense retrieval, counted
        assert block["built"]["triples"] == 0 and block["built"]["passages"] == 19
        assert block["search_fallbacks"] == {"dpr_no_facts": 15}
    else:
        assert block["search_fallbacks"] == {}
    if name == "cognee":
        assert block["built"]["graph_nodes"] > 0 and block["built"]["chunks"] > 0
    if name == "memos":  # every memory keeps its session's date (chat_time)
        assert block["built"]["dated"] == block["built"]["memories"] > 0
    if name == "hindsight":  # one retain item per session of conv-26
        assert block["built"]["documents"] == 19 and block["built"]["facts"] > 0
