"""mem0_graph, MemOS and Hindsight answer under ``systems.protocol: native`` with their authors' own
LoCoMo answer prompts, and under ``common`` with the harness's.

The templates are the references' strings (sha256 pinned, taken from the reference files with only
the slot syntax rewritten, see common/prompts/SOURCES.md). Each system's card names its prompt
(``answer.native``), which 07 renders without starting the child. Through the harness and the fake
server, each system runs in its own process as a standard-library stand-in for its package: the
real ``systems/<name>/adapter.py`` whose store is replaced by a canned one (a fake ``Memory`` for
mem0_graph, a fake search handler for MemOS, a fake engine for Hindsight), so the adapter's own
search code renders the buffer and the prompt's slots; the answer request the fake server records
is compared with the reference's own way of filling its template (Jinja for mem0's
``ANSWER_PROMPT_GRAPH``, ``str.format`` for MemOS's ``ANSWER_PROMPT_MEMOS``, the f-string for
Hindsight's ``LoComoAnswerGenerator``) over what that search returned.
"""
from __future__ import annotations

import hashlib
import json
import shutil

import jinja2
import pytest

from common.core import prompts
from common.core.config import ConfigError
from common.core.schema import Question, RetrievalRow
from common.method.answer import answer_messages
from common.systems import cards
from tests import systems_driver as driver
from tests.conftest import REPO, TINY_LOCOMO, rows, run_overrides, run_stages

SYSTEMS = ("mem0_graph", "memos", "hindsight")
# sha256 of each reference string as stored (slots written {x}): mem0ai/mem0 @ b3ede5b7
# evaluation/prompts.py ANSWER_PROMPT_GRAPH; MemTensor/MemOS @ be68e2f
# evaluation/scripts/locomo/prompts.py ANSWER_PROMPT_MEMOS; vectorize-io/hindsight @ da9a588
# hindsight-dev/benchmarks/locomo/locomo_benchmark.py, LoComoAnswerGenerator's two messages.
PINNED = {"answer_mem0_graph_user": "7b1d915238833462a76aec121e4ad163040049aaa8457b4e47d6c87f763de13a",
          "answer_memos_user": "ccead3a9f4a65ab035337889827a0052c01fa9484930e91bed96fe345624b6f9",
          "answer_hindsight_system": "9409e67c151528bf2895220df6d563723cdcb6da33ee63af5d5d36bf5b18ce3e",
          "answer_hindsight_user": "2c69f4beca0866551876a787a546370252d11490119d7154df041565ee5fdd62",
          # hindsight-api-slim 1.1.0's wrapper: the soft schema message for LoComoAnswerGenerator's
          # QuestionAnswer (its provider_json_schema, indent 2) and JSON_MODE_USER_HINT
          "answer_hindsight_schema": "6bb9a203dc15b5b69a8385d9457b8d0fb20ff39e50a22eb5bac5ee91815946fe",
          "answer_hindsight_json_hint": "356c396c307d2e4707fd505c85309c353f1a62acbce0a63c431e778f4e8d6269"}
UP_TO_07 = ["preprocess", "episodes", "extract", "index", "plan", "retrieve", "answer"]


def test_the_templates_are_the_reference_strings():
    for prompt_id, sha in PINNED.items():
        assert hashlib.sha256(prompts.load(prompt_id).encode("utf-8")).hexdigest() == sha, prompt_id


@pytest.mark.parametrize("name", SYSTEMS)
def test_the_card_names_the_prompt_07_renders_under_native(name):
    from common.systems.registry import native_answer_prompt

    card = cards.load(name)
    assert card is not None and card.answer["native"] == name and card.answer["common"] == "harness"
    assert card.answer_prompt("native") == name and card.answer_prompt("common") is None
    assert native_answer_prompt(name) == name
    # the departure that said the harness's prompt answers under native is gone
    assert "answer-prompt" not in {d.id for d in card.departures_for("native")}


def test_a_card_naming_no_answer_prompt_is_refused_in_one_line():
    card = cards.load("memos")
    assert card is not None
    bad = cards.Card(**{**card.__dict__, "answer": {**card.answer, "native": "no_such_prompt"}})
    with pytest.raises(ConfigError, match=r"card.yaml: field 'answer.native' must be harness, agent or"):
        bad.answer_prompt("native")


def _row(buffer: str, slots: dict | None = None) -> RetrievalRow:
    info = {"evidence": [], **({"answer_slots": slots} if slots is not None else {})}
    return RetrievalRow(qid="q1", memory_id="m", question="When did {context} happen?", mode="x", scope="",
                        reasoning_type="", selected=[], episode_ids=[], dia_ids=[], coverage={},
                        buffer_text=buffer, buffer_tokens=1, seconds=0.0, method_info=info)


def test_slots_are_filled_in_one_pass_and_a_missing_slot_is_refused():
    """A value holding another slot's name is sent as it is (str.format and Jinja fill once)."""
    q = Question("q1", "m", "When did {context} happen?")
    (message,) = answer_messages(q, None, _row("Memories of {question}"), style="memos")
    assert message["role"] == "system"
    assert message["content"] == prompts.load("answer_memos_user").format(context="Memories of {question}",
                                                                         question="When did {context} happen?")
    from common.method.answer import SlotsMissing

    with pytest.raises(SlotsMissing, match=r"answer_mem0_graph_user.*speaker_1_graph_memories"):
        answer_messages(q, None, _row("x"), style="mem0_graph")


def test_graphiti_still_sends_zeps_system_message_then_its_user_message():
    q = Question("q1", "m", "Where?")
    assert answer_messages(q, None, _row("FACTS {question}"), style="zep") == [
        {"role": "system", "content": prompts.load("answer_zep_system")},
        {"role": "user", "content": prompts.load("answer_zep_user").format(context="FACTS {question}",
                                                                          question="Where?")}]


# ----------------------------------------------------------------------------- the adapters' own slots
def test_mem0_graph_renders_answer_prompt_graphs_slots_as_search_py(monkeypatch):
    with driver.adapter_imported("mem0_graph", monkeypatch) as module:
        slots = module.graph_answer_slots(
            {"Tomas": (["d1: Tomas likes tea"], []),
             "Nadia": (["d2: Nadia runs"], [{"source": "nadia", "relationship": "runs_in", "target": "park"}])},
            ["Nadia", "Tomas"])
    assert slots == {"speaker_1_user_id": "Nadia", "speaker_1_memories": '[\n    "d2: Nadia runs"\n]',
                     "speaker_1_graph_memories": json.dumps([{"source": "nadia", "relationship": "runs_in",
                                                              "target": "park"}], indent=4),
                     "speaker_2_user_id": "Tomas", "speaker_2_memories": '[\n    "d1: Tomas likes tea"\n]',
                     "speaker_2_graph_memories": "[]"}


def test_hindsight_renders_the_benchmarks_date_block_only_for_a_question_with_a_date(monkeypatch):
    with driver.adapter_imported("hindsight", monkeypatch) as module:
        assert module.question_date_str(None) == module.question_date_str("") == ""
        assert module.question_date_str("1:56 pm on 8 May, 2023") == (
            "\n# CURRENT DATE:\nThe question is being asked on: 2023-05-08 13:56:00 UTC\n")


# ----------------------------------------------------------------------------- through the harness
# The real adapter of systems/<name>/, its store replaced by a canned one built from the sessions it
# ingested (the search code is the adapter's own). Values carry braces and slot names on purpose.
STAND_IN = r'''
import importlib.util, json, sys, types
from pathlib import Path

spec = importlib.util.spec_from_file_location("real_adapter", {real!r})
real = importlib.util.module_from_spec(spec)
spec.loader.exec_module(real)
proto = real.proto
NAME = {name!r}
# The packages' modules the adapters' search imports first: stand-ins with the names it takes.
STUBS = {{"memos": ("memos", "memos.api", "memos.api.product_models"),
         "hindsight": ("hindsight_api", "hindsight_api.engine", "hindsight_api.engine.memory_engine",
                       "hindsight_api.models")}}
for module in STUBS.get(NAME, ()):
    sys.modules[module] = types.ModuleType(module)


def store(memory_id):
    path = Path(proto.SYSTEM_DIR) / "stand_in" / memory_id
    path.mkdir(parents=True, exist_ok=True)
    return path


def save(memory_id, sessions):
    turns = [dict(t, date=s.get("date")) for s in sessions for t in s["turns"]]
    (store(memory_id) / "turns.json").write_text(json.dumps(turns))
    return turns


def turns(memory_id):
    return json.loads((store(memory_id) / "turns.json").read_text())


class FakeMemory:  # mem0's Memory.search: memories with metadata, relations
    def __init__(self, memory_id):
        self.memory_id = memory_id

    def search(self, question, user_id, limit):
        mine = [t for t in turns(self.memory_id) if t["speaker"] == user_id][:limit]
        return {{"results": [{{"memory": user_id + " said {{question}}: " + t["text"], "score": 0.5,
                              "metadata": {{"timestamp": t["date"], "turn_ids": [t["turn_id"]]}}}} for t in mine],
                "relations": [{{"source": user_id.lower(), "relationship": "talks_to", "destination": "{{context}}"}}]}}


class Mem0Graph(real.Mem0GraphAdapter if NAME == "mem0_graph" else object):
    def version(self):
        return "1.0.11"

    def _open(self, memory_id):
        return FakeMemory(memory_id)

    def ingest(self, memory_id, sessions):
        self._root(memory_id).mkdir(parents=True, exist_ok=True)
        (self._root(memory_id) / "speakers.json").write_text(json.dumps(real.speakers(sessions)))
        return len(save(memory_id, sessions)), []

    def close(self):
        pass


class Handler:  # MemOS's SearchHandler: each cube's memories, its preference string
    def __init__(self, adapter):
        self.adapter = adapter

    def handle_search_memories(self, request):
        memory_id, index = self.adapter.cubes[request.user_id]
        who = real.ordered_speakers([], self.adapter.speakers)[index]
        found = [{{"memory": "[" + t["date"] + "] " + t["text"] + " {{question}}", "metadata": {{"relativity": 0.5}}}}
                 for t in turns(memory_id) if t["speaker"] == who][:request.top_k]
        return types.SimpleNamespace(data={{"text_mem": [{{"memories": found}}], "pref_string": "likes {{context}}"}})


class Request:
    def __init__(self, **fields):
        self.__dict__.update(fields)


class MemOS(real.MemOSAdapter if NAME == "memos" else object):
    def __init__(self):
        super().__init__()
        self.cubes = {{}}

    def version(self):
        return "2.0.33"

    def _start(self):
        self.search_handler = Handler(self)

    def search(self, memory_id, question, question_date, limit):
        self.cubes = {{real.cube_id(memory_id, i): (memory_id, i) for i in range(2)}}
        return super().search(memory_id, question, question_date, limit)

    def ingest(self, memory_id, sessions):
        return len(save(memory_id, sessions)), []

    def close(self):
        pass


class Recall:
    def __init__(self, dumped):
        self.dumped = dumped

    def model_dump(self, mode=None):
        return self.dumped


class Engine:  # Hindsight's MemoryEngine.recall_async: facts, entities, chunks
    async def recall_async(self, bank_id, query, **settings):
        memory_id = bank_id[len("locomo_"):]
        found = turns(memory_id)
        chunk = json.dumps([{{"speaker": t["speaker"], "dia_id": t["turn_id"], "text": t["text"]}} for t in found])
        return Recall({{"results": [{{"text": t["speaker"] + ": " + t["text"] + " {{question}}", "chunk_id": "c1",
                                    "scores": {{"final": 0.5}}, "mentioned_at": t["date"]}} for t in found[:4]],
                       "entities": {{"{{context}}": {{"summary": "a name"}}}},
                       "chunks": {{"c1": {{"chunk_text": chunk}}}}}})


class Hindsight(real.HindsightAdapter if NAME == "hindsight" else object):
    def version(self):
        return "1.1.0"

    def _engine(self):
        return Engine()

    def ingest(self, memory_id, sessions):
        return len(save(real.bank_id(memory_id)[len("locomo_"):], sessions)), []

    def close(self):
        self.loop.close()


if NAME == "memos":
    sys.modules["memos.api.product_models"].APISearchRequest = Request
if NAME == "hindsight":
    sys.modules["hindsight_api.engine.memory_engine"].Budget = types.SimpleNamespace(HIGH="high")
    sys.modules["hindsight_api.models"].RequestContext = dict
proto.serve({{"mem0_graph": Mem0Graph, "memos": MemOS, "hindsight": Hindsight}}[NAME]())
'''


@pytest.fixture(scope="module")
def stand_ins(tmp_path_factory):
    """systems/<name>/ for each system: the stand-in adapter, the real card, the standard library only."""
    root = tmp_path_factory.mktemp("native_answer")
    for name in SYSTEMS:
        folder = root / "systems" / name
        folder.mkdir(parents=True)
        (folder / "adapter.py").write_text(STAND_IN.format(real=str(REPO / "systems" / name / "adapter.py"),
                                                           name=name), encoding="utf-8")
        shutil.copy(REPO / "systems" / name / "card.yaml", folder / "card.yaml")
        (folder / "requirements.txt").write_text("# The standard library only: made without pip.\n")
    return root


def _answers(fake, start: int) -> list[tuple[dict, str]]:
    return [(body, headers.get("x-prompt-id", "")) for body, kind, headers in
            zip(fake.requests[start:], fake.request_kinds[start:], fake.request_headers[start:])
            if kind in ("answer", "answer_hindsight")]


def _expected(name: str, question: str, row: dict) -> list[dict[str, str]]:
    """The messages the reference sends, filled its own way with what the search returned."""
    slots = row["method_info"].get("answer_slots") or {}
    context = row["buffer_text"]
    if name == "mem0_graph":
        # search.py: Template(ANSWER_PROMPT_GRAPH).render(...), the template in its Jinja syntax
        reference = prompts.load("answer_mem0_graph_user")
        for slot in ("speaker_1_user_id", "speaker_2_user_id", "speaker_1_memories", "speaker_2_memories",
                     "speaker_1_graph_memories", "speaker_2_graph_memories", "question"):
            reference = reference.replace("{" + slot + "}", "{{" + slot + "}}")
        return [{"role": "system", "content": jinja2.Template(reference).render(question=question, **slots)}]
    if name == "memos":  # locomo_responses.py: ANSWER_PROMPT_MEMOS.format(context=..., question=...)
        return [{"role": "system", "content": prompts.load("answer_memos_user").format(context=context,
                                                                                      question=question)}]
    # locomo_benchmark.py: the system message, then the f-string over the date block, context, question;
    # Hindsight's wrapper (response_format=QuestionAnswer, the soft json_object path) appends the schema
    # to the system message and puts its hint before a user message that does not say "json"
    user = prompts.load("answer_hindsight_user").format(question_date_str=slots["question_date_str"],
                                                        context=context, question=question)
    if "json" not in user:
        user = prompts.load("answer_hindsight_json_hint") + "\n\n" + user
    system = prompts.load("answer_hindsight_system") + prompts.load("answer_hindsight_schema")
    return [{"role": "system", "content": system}, {"role": "user", "content": user}]


@pytest.mark.parametrize("name", SYSTEMS)
def test_native_sends_the_authors_prompt_over_the_search_and_common_the_harnesss(name, stand_ins, tmp_path,
                                                                                fake_server, monkeypatch):
    monkeypatch.setenv("HARNESS_SYSTEMS_ROOT", str(stand_ins / "systems"))
    monkeypatch.setenv("HARNESS_SYSTEMS_ENVS", str(stand_ins / "envs"))
    monkeypatch.setenv("OPENAI_BASE_URL", fake_server.base_url)
    sent, runs = {}, {}
    for protocol in ("common", "native"):
        sets = run_overrides(tmp_path, TINY_LOCOMO, **{
            "method.name": name, "systems.protocol": protocol, "run.name": protocol, "data.memories": "[tiny-1]",
            "embedding.backend": "openai", "embedding.model": "fake-embed", "embedding.base_url": fake_server.base_url})
        start = len(fake_server.requests)
        runs[protocol] = run_stages("configs/locomo.yaml", sets, UP_TO_07)
        sent[protocol] = _answers(fake_server, start)
    retrieved = {p: {r["question"]: r for r in rows(runs[p].path("retrievals"))} for p in runs}
    assert retrieved["common"] and retrieved["native"].keys() == retrieved["common"].keys()
    assert all(not r["error"] for p in runs for r in retrieved[p].values())
    # common: the harness's prompt over the buffer; the search rendered no slots of the system's prompt
    assert sent["common"] and {pid for _, pid in sent["common"]} == {"answer_baseline_user"}
    assert not any("answer_slots" in r["method_info"] for r in retrieved["common"].values())
    # native: the authors' prompt, every question, filled with what that question's search returned
    assert len(sent["native"]) == len(retrieved["native"]) and {pid for _, pid in sent["native"]} == {
        f"answer_{name}_user"}
    for body, _ in sent["native"]:
        question = next(q for q in retrieved["native"]
                        if any(f"Question: {q}\n" in m["content"] for m in body["messages"]))
        assert body["messages"] == _expected(name, question, retrieved["native"][question])
    answered = rows(runs["native"].path("answers"))
    assert {a["prompt_id"] for a in answered} == {f"answer_{name}_user"} and all(a["answer"] for a in answered)
    # Hindsight: a JSON object asked for, as its wrapper does, and the reply's answer field kept
    assert all((body.get("response_format") == {"type": "json_object"}) is (name == "hindsight")
               for body, _ in sent["native"])
    if name == "hindsight":
        assert not any(a["answer"].startswith("{") for a in answered)
    # what the search returned, as the reference renders it: speaker_a (Nadia) first, dated memories
    row = next(iter(retrieved["native"].values()))
    if name == "mem0_graph":
        slots = row["method_info"]["answer_slots"]
        assert (slots["speaker_1_user_id"], slots["speaker_2_user_id"]) == ("Nadia", "Tomas")
        memories = json.loads(slots["speaker_1_memories"])
        assert memories and all(m.split(": ", 1)[1].startswith("Nadia said {question}") for m in memories)
        assert json.loads(slots["speaker_2_graph_memories"]) == [
            {"source": "tomas", "relationship": "talks_to", "target": "{context}"}]
    elif name == "memos":
        assert row["buffer_text"].startswith("Memories for user Nadia:\n\n    [")
        assert "answer_slots" not in row["method_info"]
    else:
        assert row["method_info"]["answer_slots"] == {"question_date_str": ""}  # LoCoMo: no question date
        assert json.loads(row["buffer_text"])["results"]


def test_a_parity_cut_drops_the_slots_and_the_row_fails_counted_without_a_call():
    """The slots describe the uncut search: a cut row loses them, and the system's prompt is then
    refused for that row (a counted failure, no answer call), not sent over more than the budget."""
    import types

    from common.method.answer import answer_question
    from common.systems.base import cap_buffer

    slots = {"speaker_1_user_id": "A", "speaker_1_memories": json.dumps(["x " * 400]),
             "speaker_1_graph_memories": "[]", "speaker_2_user_id": "B", "speaker_2_memories": "[]",
             "speaker_2_graph_memories": "[]"}
    row = _row("Memories for user A:\n\n" + "x " * 400, slots)
    row.buffer_tokens = 401
    cut = cap_buffer(row, 50)
    assert "answer_slots" not in cut.method_info and cut.method_info["parity"]["answer_slots_dropped"]

    class NoCalls:
        def settings(self, role):
            return types.SimpleNamespace(model="m")

        def complete(self, *args, **kwargs):
            raise AssertionError("no answer call for a row whose prompt cannot be filled")

    answered = answer_question(NoCalls(), Question("q1", "m", "Where?"), None, cut, style="mem0_graph")  # type: ignore[arg-type]
    assert answered.answer is None and answered.error.startswith("prompt_slots_missing: ")
    kept = cap_buffer(_row("short", {"question_date_str": ""}), 50)  # under the budget: left as it was
    assert kept.method_info["answer_slots"] == {"question_date_str": ""}
