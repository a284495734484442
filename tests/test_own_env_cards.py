"""MemoryOS, HippoRAG and Cognee without their environments (fast, in ``make test``): the harness
sends a conversation's speakers to a child at ingest and search; each adapter's hello settings,
under each protocol, agree with its protocol card; MemoryOS's user is speaker_a and its rendering
names the speakers; HippoRAG names why it fell back to dense retrieval; Cognee's native search is
HYBRID_COMPLETION (cognee's own LoCoMo evaluation). The adapters are loaded in a bare child
interpreter (their module sets the child's environment switches, which must not leak into this
process); only their standard-library parts run. The same seams through each system's own
environment: tests/test_own_env_fidelity.py."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from common.core.config import load_config
from common.core.schema import Question, Session, Turn
from common.method.render import MemoryView
from common.systems import cards
from common.systems.base import Context

ROOT = Path(__file__).resolve().parent.parent
OWN = ["memoryos", "hipporag", "cognee"]

PROGRAM = r'''
import importlib.util, json, sys
def load(name):
    spec = importlib.util.spec_from_file_location(name + "_adapter", f"systems/{name}/adapter.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
job = json.loads(sys.stdin.read())
out = {}
for name in job["names"]:
    module = load(name)
    adapter = next(v for v in vars(module).values() if isinstance(v, type) and getattr(v, "system", "") == name)()
    for protocol in ("common", "native"):
        adapter.protocol = protocol
        out[f"{name}/{protocol}"] = {"settings": adapter.settings(), "answers": bool(adapter.answers)}
memoryos, hipporag = load("memoryos"), load("hipporag")
out["pages"] = memoryos.pages_of(job["sessions"], job["user"])
out["names_in"] = memoryos.names_in("The user likes the Assistant; a username stays.", "Jon", "Gina")
out["page_text"] = memoryos.page_text({"user_input": "hi", "agent_response": "hey"}, "Jon", "Gina")
out["fallbacks"] = [hipporag.fallback_kind(facts, log) for facts, log in job["reranks"]]

import logging
class Retriever:  # retrieve_context's three searches; one raises, as a failed embedding call would
    def _retrieve_mid_term_context(self, *a):
        return ["page"]
    def _retrieve_user_knowledge(self, *a):
        raise ConnectionError("gateway refused")
    def _retrieve_assistant_knowledge(self, *a):
        return []
errors = []
class Catch(logging.Handler):
    def emit(self, record):
        errors.append(record.getMessage())
logging.getLogger().addHandler(Catch(level=logging.ERROR))
retriever = Retriever()
memoryos.count_swallowed_errors(retriever)
try:
    retriever._retrieve_user_knowledge("q")
except ConnectionError:
    out["raised"] = True
out["kept"] = retriever._retrieve_mid_term_context("q")
out["logged"] = errors
print(json.dumps(out, default=str))
'''

# conv-30's order: speaker_b (Gina) opens the conversation; the authors' user is speaker_a (Jon).
SESSIONS = [{"session_id": "session_1", "date": "4:04 pm on 20 January, 2023", "turns": [
    {"turn_id": "D1:1", "speaker": "Gina", "text": "Hey Jon!"},
    {"turn_id": "D1:2", "speaker": "Jon", "text": "Lost my job."},
    {"turn_id": "D1:3", "speaker": "Gina", "text": "Sorry, Jon."},
    {"turn_id": "D1:4", "speaker": "Jon", "text": "A dance studio, then."}]}]
RERANKS = [([], {"facts_before_rerank": [], "facts_after_rerank": []}),
           ([], {"facts_before_rerank": [["jon", "lost", "job"]], "facts_after_rerank": []}),
           ([], {"facts_before_rerank": [], "facts_after_rerank": [], "error": "bad fact"}),
           ([["jon", "lost", "job"]], {"facts_before_rerank": [["jon", "lost", "job"]]})]


@pytest.fixture(scope="module")
def adapters() -> dict:
    job = {"names": OWN, "sessions": SESSIONS, "user": "Jon", "reranks": RERANKS}
    done = subprocess.run([sys.executable, "-c", PROGRAM], input=json.dumps(job), capture_output=True, text=True,
                          cwd=ROOT, timeout=60, env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(ROOT)})
    assert done.returncode == 0, done.stderr[-3000:]
    result: dict = json.loads(done.stdout)
    return result


@pytest.mark.parametrize("name", OWN)
@pytest.mark.parametrize("protocol", cards.PROTOCOLS)
def test_the_card_agrees_with_the_settings_the_adapter_says_hello_with(adapters, name, protocol):
    card = cards.load(name)
    assert card is not None, f"systems/{name}/card.yaml is missing"
    said = adapters[f"{name}/{protocol}"]
    own = said["settings"]
    # what the harness compares at a run (common.systems.process.ProcessSystem.search_settings)
    resolved = own if any(k in own for k in cards.K_NAMES) else {"limit": 10, **own}
    check = cards.check(card, protocol, resolved)
    assert not check.mismatches, f"{card.source} under {protocol}: {check.mismatches}"
    assert check.checked, "the card declares no setting the adapter reports"
    assert card.answers_itself(protocol) is said["answers"], "the card's answer and the hello's 'answers' differ"


def test_memoryos_user_is_speaker_a_even_when_speaker_b_opens(adapters):
    assert [(p["user_input"], p["agent_response"]) for p in adapters["pages"]] == [
        ("", "Hey Jon!"), ("Lost my job.", "Sorry, Jon."), ("A dance studio, then.", "")]
    assert adapters["names_in"] == "The Jon likes the Gina; a username stays."
    assert adapters["page_text"] == "Jon: hi\nGina: hey"


def test_memoryos_retrieval_errors_it_would_print_and_drop_are_logged_as_errors(adapters):
    """retrieve_context prints, then drops, an exception of any of its three searches: the adapter
    logs it at ERROR first (the protocol returns it in the search's errors), and it still raises."""
    assert adapters["raised"] and adapters["kept"] == ["page"]
    assert adapters["logged"] == ["_retrieve_user_knowledge failed: ConnectionError: gateway refused"]


def test_hipporag_names_why_it_fell_back_to_dense_retrieval(adapters):
    assert adapters["fallbacks"] == ["dpr_no_facts", "dpr_filtered", "dpr_rerank_error", None]


def test_cognee_native_is_its_locomo_evaluations_hybrid_retrieval_and_common_its_chunks(adapters):
    assert adapters["cognee/common"]["settings"]["search_type"] == "CHUNKS"
    assert adapters["cognee/native"]["settings"]["search_type"] == "HYBRID_COMPLETION"
    assert adapters["cognee/native"]["answers"] and not adapters["cognee/common"]["answers"]


def _view() -> MemoryView:
    turns = [Turn(dia_id=t["turn_id"], speaker=t["speaker"], text=t["text"]) for t in SESSIONS[0]["turns"]]
    return MemoryView("conv-30", [Session("conv-30", "session_1", 1, SESSIONS[0]["date"], turns,
                                          speakers=["Jon", "Gina"])])


def test_the_harness_sends_the_conversations_speakers_at_ingest_and_search(tmp_path, monkeypatch):
    """speaker_a and speaker_b as the source names them (not the order they first speak in)."""
    import contextlib

    from common.systems import process

    sent: list[dict] = []

    class FakeChild:
        def __init__(self, log: Path) -> None:
            self.proc = type("P", (), {"poll": staticmethod(lambda: None)})()
            log.parent.mkdir(parents=True, exist_ok=True)
            log.write_text("")

        def request(self, message, timeout, check):
            sent.append(message)
            if message["op"] == "ingest":
                return {"ok": True, "items": 4, "errors": []}
            return {"ok": True, "evidence": [], "context": ""}

        def new_log_lines(self):
            return []

        def close(self):
            pass

    class Gateway:
        def session(self, spent):
            from common.systems.gateway import Session as GatewaySession

            return contextlib.nullcontext(GatewaySession("http://127.0.0.1:9/v1", "token", spent))

        def rebind(self, key, spent):
            pass

    cfg = load_config(["configs/locomo.yaml"], [])
    ctx = Context(cfg, tmp_path, tmp_path / "state", lambda: None, None, None, gateway=Gateway())
    system = process.process_class("memoryos")(ctx)
    monkeypatch.setattr(system, "_start", lambda store, url, token, log, label: FakeChild(log))
    system.ingest(_view(), tmp_path / "state" / "conv-30")
    system.search(Question("q1", "conv-30", "What did Jon lose?"), _view())
    assert [m["op"] for m in sent] == ["ingest", "search"]
    assert all(m["speakers"] == {"speaker_a": "Jon", "speaker_b": "Gina"} for m in sent)


def test_without_named_speakers_the_first_two_seen_are_sent():
    from common.systems.process import speakers_payload

    view = _view()
    view.sessions[0].speakers = []
    assert speakers_payload(view) == {"speaker_a": "Gina", "speaker_b": "Jon"}
    assert speakers_payload(MemoryView("m", [])) == {"speaker_a": "", "speaker_b": ""}


TOY = """
import sys
sys.path.insert(0, {systems!r})
import _protocol as proto

class Toy(proto.Adapter):
    system = "toy"
    def ingest(self, memory_id, sessions):
        return len(self.speakers), [self.speakers.get("speaker_a", "none")]
    def search(self, memory_id, question, question_date, limit):
        return [], self.speakers.get("speaker_b", "none")

proto.serve(Toy())
"""


def test_the_childs_protocol_hands_the_speakers_to_the_adapter(tmp_path):
    script = tmp_path / "adapter.py"
    script.write_text(TOY.format(systems=str(ROOT / "systems")), encoding="utf-8")
    speakers = {"speaker_a": "Jon", "speaker_b": "Gina"}
    requests = [{"op": "ingest", "memory_id": "m", "sessions": [], "speakers": speakers},
                {"op": "search", "memory_id": "m", "question": "q", "limit": 3, "speakers": speakers},
                {"op": "search", "memory_id": "m", "question": "q", "limit": 3}, {"op": "close"}]
    done = subprocess.run([sys.executable, str(script)], input="".join(json.dumps(r) + "\n" for r in requests),
                          capture_output=True, text=True, timeout=30)
    replies = [json.loads(line) for line in done.stdout.splitlines()]
    assert replies[0] == {"ok": True, "items": 2, "errors": ["Jon"]}
    assert replies[1]["context"] == "Gina" and replies[2]["context"] == "none"  # none sent: none kept
