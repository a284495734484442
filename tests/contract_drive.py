"""The drive behind tests/test_reply_contract.py: every prompt that expects JSON, sent by the code
that really sends it, answered by the fake server, and read by the code that really reads it.

``drive(tmp)`` runs, against one ``FakeOpenAI``, the harness's own callers (partition, extraction,
planning with its repairs and audit, bridges, the answer step with every LongMemEval route, the
judges, the doctor's probe) and the requests of the outside systems the fake answers (built from
their installed packages' own prompts, or from their response models' schemas). While it runs,
``Reads`` records every key the harness's code looks up in a parsed reply: ``json.JSONDecoder`` is
wrapped so that an object decoded from the reply of the call just made in that thread comes back as
``Seen`` dicts, which note each ``[key]``, ``.get``, ``in``, ``.pop`` and ``.setdefault`` by its path.
Nothing is listed by hand: a reader that starts to read a new field shows up by itself.
"""
from __future__ import annotations

import ast
import importlib.util
import json
import re
import threading
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator, Optional

from common.core import prompts
from common.core.llm import EndpointProbe, LLMClient, ResponseCache, RetryPolicy, RoleSettings
from common.core.schema import Anchor, AnswerRow, Episode, Gold, Hop, Plan, Question, RetrievalRow, Session, Turn
from common.evaluation import beam, judge, locomo_plus, realtalk
from common.method import answer as answer_mod
from common.method.bridge import resolve_bridge
from common.method.episodes import partition_session
from common.method.extract import extract_episode
from common.method.plan import plan_question
from common.method.render import MemoryView
from common.method.routes import Routes
from common.pipeline import doctor
from tests.fake_openai import FakeOpenAI, FaultPlan
from tests.fake_openai.contract import join
from tests.fake_openai.scripted import (
    GATEWAY_PREFIX,
    GRAPHITI_SCHEMAS,
    OUTSIDE_PROMPTS,
    PROMPT_ID_HEADER,
    SCHEMA_KINDS,
    SIMPLEMEM_ANSWER,
    TEXT_KINDS,
    TEXT_KINDS_BY_PROMPT,
)

ROLES = ("partition", "extract", "plan", "plan_audit", "bridge", "answer", "answer_draft", "answer_rerank",
         "answer_verify", "answer_count", "answer_temporal", "answer_order", "judge", "gpt_score", "memory")


# --------------------------------------------------------------------------- what the code reads
class Seen(dict):  # type: ignore[type-arg]
    """A parsed reply object that notes every key the code looks up (as a path, ``items[].id``)."""

    _reads: Optional[set[str]] = None
    _path = ""

    def _note(self, key: Any) -> None:
        if self._reads is not None:
            self._reads.add(join(self._path, str(key)))

    def __getitem__(self, key: Any) -> Any:
        self._note(key)
        return dict.__getitem__(self, key)

    def get(self, key: Any, default: Any = None) -> Any:
        self._note(key)
        return dict.get(self, key, default)

    def __contains__(self, key: Any) -> bool:
        self._note(key)
        return dict.__contains__(self, key)

    def pop(self, key: Any, *default: Any) -> Any:
        self._note(key)
        return dict.pop(self, key, *default)

    def setdefault(self, key: Any, default: Any = None) -> Any:
        self._note(key)
        return dict.setdefault(self, key, default)


def seen(obj: Any, reads: set[str], path: str = "") -> Any:
    """``obj`` with every object in it a ``Seen`` noting into ``reads``."""
    if isinstance(obj, dict):
        out = Seen((k, seen(v, reads, join(path, str(k)))) for k, v in obj.items())
        out._reads, out._path = reads, path
        return out
    if isinstance(obj, list):
        return [seen(v, reads, path + "[]") for v in obj]
    return obj


@dataclass
class Call:
    """One request the harness made, its reply text and the keys its code read from that reply."""

    prompt_id: str
    body: dict[str, Any]
    text: str = ""
    reads: set[str] = field(default_factory=set)
    tool_calls: list[tuple[str, str]] = field(default_factory=list)  # (function name, arguments)


class Reads:
    """Every harness call made while ``watching()``, with what was read from its reply."""

    def __init__(self) -> None:
        self.calls: list[Call] = []
        self._current = threading.local()

    def replied(self, call: Call) -> None:
        """``call`` was made and answered in this thread: what is decoded next may be its reply."""
        self.calls.append(call)
        self._current.call = call

    @contextmanager
    def watching(self) -> Iterator["Reads"]:
        complete, chat, raw_decode = LLMClient.complete, EndpointProbe.chat, json.JSONDecoder.raw_decode
        reads = self

        def watched_complete(client: LLMClient, role: str, messages: list[dict[str, Any]], *args: Any,
                             **kwargs: Any) -> Any:
            call = Call(str(kwargs.get("prompt_id") or ""), {"messages": messages, **{
                k: kwargs[k] for k in ("response_format", "tools") if kwargs.get(k)}})
            reads.calls.append(call)  # a failed call is listed too (without a reply)
            reads._current.call = None  # what the client decodes itself (its cache) is not a reply
            completion = complete(client, role, messages, *args, **kwargs)
            call.text, reads._current.call = completion.text, call
            return completion

        def watched_chat(probe: EndpointProbe, body: dict[str, Any], *, prompt_id: str, **kwargs: Any) -> Any:
            call = Call(prompt_id, body)
            reads.calls.append(call)
            reads._current.call = None
            out = chat(probe, body, prompt_id=prompt_id, **kwargs)
            call.text, reads._current.call = out[0], call
            return out

        def watched_decode(decoder: json.JSONDecoder, s: str, idx: int = 0) -> tuple[Any, int]:
            obj, end = raw_decode(decoder, s, idx)
            call = getattr(reads._current, "call", None)
            if call is not None and call.text and s[idx:end] in call.text:
                obj = seen(obj, call.reads)
            return obj, end

        LLMClient.complete = watched_complete  # type: ignore[method-assign]
        EndpointProbe.chat = watched_chat  # type: ignore[method-assign]
        json.JSONDecoder.raw_decode = watched_decode  # type: ignore[method-assign]
        try:
            yield self
        finally:
            LLMClient.complete = complete  # type: ignore[method-assign]
            EndpointProbe.chat = chat  # type: ignore[method-assign]
            json.JSONDecoder.raw_decode = raw_decode  # type: ignore[method-assign]


# --------------------------------------------------------------------------- the harness's callers
TURNS = [("Caroline", "I went to the LGBTQ support group yesterday and it was powerful."),
         ("Melanie", "That sounds wonderful! What happened at the meeting?"),
         ("Caroline", "People shared transgender stories, very inspiring experiences."),
         ("Melanie", "I painted a sunrise over the lake last weekend."),
         ("Caroline", "Beautiful! Painting seems relaxing for you."),
         ("Melanie", "It is. Running also helps me unwind.")]
WHEN = "1:56 pm on 8 May, 2023"
# The first body of each kind is answered with broken JSON, so that every repair prompt is sent too
# (and has to name its fields itself: the broken reply shows none). The planner's two: the paper
# set's (harness repair) and the code_rules set's (the authors' repair).
REPAIRED = FaultPlan(pinned={"partition": ["malformed"], "extract": ["malformed"], "plan": ["malformed", "malformed"],
                             "bridge": ["malformed"]})


def client(server: FakeOpenAI, tmp: Path) -> LLMClient:
    settings = {r: RoleSettings(role=r, model="fake-model", base_url=server.base_url, timeout=10.0) for r in ROLES}
    return LLMClient(settings, cache=ResponseCache(str(tmp / "contract.sqlite")),
                     retry=RetryPolicy(max_attempts=1, initial_wait=0.01, max_wait=0.02))


def session() -> Session:
    turns = [Turn(dia_id=f"D1:{i}", speaker=s, text=t) for i, (s, t) in enumerate(TURNS, 1)]
    return Session(memory_id="conv-1", session_id="session_1", session_index=1, date_time=WHEN, turns=turns)


def build_memory(llm: LLMClient) -> None:
    """Partition (and its repair), extraction in both prompt sets (and the repair), planning in both
    sets with both repairs and the audit, and a bridge (and its repair)."""
    s = session()
    partition_session(llm, s)  # repaired
    again = [Turn(dia_id=f"D2:{i}", speaker=w, text=t) for i, (w, t) in enumerate(TURNS, 1)]
    partition_session(llm, Session(memory_id="conv-1", session_id="session_2", session_index=2, date_time=WHEN,
                                   turns=again))
    view = MemoryView("conv-1", [s])
    ep = Episode(episode_id="conv-1::session_1::episode_001", memory_id="conv-1", session_id="session_1",
                 session_index=1, date_time=WHEN, dia_ids=[t.dia_id for t in s.turns], theme="support group",
                 theme_type="event")
    for granularity in ("fine", "broad"):  # the first is repaired, the second read as it came
        extract_episode(llm, view, ep, granularity)
    extract_episode(llm, view, ep, "fine", prompt_set="code_rules")
    vocabulary = {"attend": 2, "paint": 1}
    ask = Question("q1", "conv-1", "What did Melanie paint last weekend?")
    plan_question(llm, ask, vocabulary, granularity="fine")  # repaired (the harness's repair)
    plan_question(llm, ask, vocabulary, granularity="fine", prompt_set="code_rules", validation="code",
                  repair="code", fallback="code")  # repaired (the authors' repair)
    plan_question(llm, Question("q3", "conv-1", "Where did Caroline go yesterday?"), vocabulary, granularity="fine")
    plan_question(llm, Question("q2", "conv-1", "How often does Caroline go to the support group?"), vocabulary,
                  granularity="fine", prompt_set="code_rules", validation="code", audit=True)
    hop = Hop("h1", anchor=Anchor(entity="Caroline", property="attend"), bridge_request="the group Caroline attends")
    text = f"### Episode {ep.episode_id} | session_1 | session date: {WHEN}\n{view.episode_text(ep)}"
    for question in ("Who runs the group Caroline attends?", "Where does the group Caroline attends meet?"):
        resolve_bridge(llm, question, hop, hop.anchor, text, [ep.episode_id])  # repaired, then read as it came
    resolve_bridge(llm, "Who runs it?", hop, hop.anchor, text, [ep.episode_id], with_question=False)  # the authors'


def block(n: int, day: str, *said: tuple[str, str]) -> str:
    lines = [f"### Episode m::s{n}::episode_001 | s{n} | session date: {day}"]
    return "\n".join(lines + [f"[m::s{n}:{i}] {who}: {text}" for i, (who, text) in enumerate(said, 1)])


def retrieval(*blocks: str) -> RetrievalRow:
    ids = [b.split(" ", 3)[2] for b in blocks]
    return RetrievalRow(qid="q", memory_id="m", question="?", mode="adaptive", scope="all_matching",
                        reasoning_type="aggregation", selected=[], episode_ids=ids, dia_ids=[], coverage={},
                        buffer_text="\n\n".join(blocks), buffer_tokens=10)


# The move is the first user turn sharing a word with the counting question: the reference event.
HISTORY = (block(3, "2023/05/10 (Wed) 09:00", ("user", "I moved to Denver today."),
                 ("assistant", "Congratulations on the move!")),
           block(1, "2023/05/01 (Mon) 09:00", ("user", "I bought the board game Azul for $30 today."),
                 ("assistant", "Enjoy Azul!")),
           block(2, "2023/05/03 (Wed) 09:00", ("user", "I bought the board game Azul for $30 today."),
                 ("assistant", "You told me already.")),
           block(4, "2023/05/12 (Fri) 09:00", ("user", "I will adopt a cat named Miso soon."),
                 ("assistant", "Miso is a lovely name.")))
# The authors' LongMemEval code configuration's answer step: every route and its authors' parts on.
CODE_STEPS = answer_mod.AnswerSteps(
    prompt_set="code_rules", rerank=True, verify=True, draft="json", draft_prompt="longmemeval",
    routes=Routes(date_window=True, user_overlap=True, relative_age=True, temporal=True, count=True, order=True,
                  count_dedup="duplicate_of", count_complete_gate=True, count_cumulative=True,
                  count_reference_event=True, temporal_answer_call=True, age_chain=True))
ROUTED = ("How much did I spend on board games before I moved?",  # count: reference, scans, merge
          "How many weeks ago did I adopt my cat Miso?",  # relative age: ledger, chain, ledger answer, repair
          "Which board game did I buy first?",  # order audit
          "What is the name of the city I live in?")  # no route: rerank, JSON draft, verify


def answer_questions(llm: LLMClient) -> list[AnswerRow]:
    plan = Plan(answer_target={"type": "value", "description": ""}, reasoning_type="direct", retrieval_scope="point",
                required_properties=[], hops=[])
    return [answer_mod.answer_question(llm, Question(f"a{n}", "m", q, "2023/06/01 (Thu) 10:00"), plan,
                                       retrieval(*HISTORY), steps=CODE_STEPS)
            for n, q in enumerate(ROUTED)]


def judge_answers(llm: LLMClient) -> None:
    row = AnswerRow(qid="j", memory_id="m", question="What did Melanie paint?", answer="a sunrise", model="m",
                    prompt_id="answer_user")
    gold = Gold(qid="j", memory_id="m", answer="A sunrise over a lake", category=1,
                rubric=["Names the sunrise", "Mentions the lake"], question_type="information_extraction")
    for prompt_id in ("judge_locomo_mem0", "judge_locomo_paper"):
        judge.judge_answer(llm, prompt_id, prompt_id, row, gold)
    beam.judge_beam(llm, "beam", row, gold, beam.Options())
    realtalk.judge_realtalk(llm, "realtalk", "judge_locomo_mem0", row, gold)  # with its GPT score
    # LoCoMo-Plus: one official prompt per category, and the default one for a category it has none for
    for category in (*locomo_plus.PROMPT_IDS, "no such category"):
        plus_gold = Gold(qid="j", memory_id="m", answer="A sunrise over a lake", category=0, question_type=category,
                         details={"judge_evidence": "Melanie: I painted a sunrise over the lake."})
        locomo_plus.judge_locomo_plus(llm, "locomo_plus", row, plus_gold, locomo_plus.Options())


def probe_endpoint(server: FakeOpenAI) -> None:
    settings = RoleSettings(role="judge", model="fake-model", base_url=server.base_url, timeout=10.0)
    doctor.probe(doctor.Target(server.base_url, "fake-model", "test", settings, roles=["judge"], json_roles=["judge"],
                               seed_roles=["judge"]), {})


# --------------------------------------------------------------------------- outside systems' prompts
def package_file(package: str, relative: str) -> Path:
    """A file of an installed package, found without importing the package."""
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        raise LookupError(f"package {package} is not installed")
    return Path(list(spec.submodule_search_locations)[0]) / relative


def package_string(path: Path, marker: str) -> ast.expr:
    """The string literal (or f-string) of a module's source holding ``marker``, as written there."""
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and marker in node.value:
            return node
        if isinstance(node, ast.JoinedStr) and any(isinstance(v, ast.Constant) and marker in str(v.value)
                                                   for v in node.values):
            return node
    raise LookupError(f"no string holding {marker!r} in {path}")


def rendered(node: ast.expr, slots: dict[str, str]) -> str:
    """A literal as the running code renders it: an f-string's fields filled from ``slots`` by name."""
    if isinstance(node, ast.Constant):
        return str(node.value)
    assert isinstance(node, ast.JoinedStr)
    return "".join(str(v.value) if isinstance(v, ast.Constant) else slots[ast.unparse(v.value)]  # type: ignore[attr-defined]
                   for v in node.values)


def mem0_messages() -> list[dict[str, str]]:
    from mem0.configs.prompts import ADDITIVE_EXTRACTION_PROMPT, generate_additive_extraction_prompt
    from mem0.memory.utils import parse_messages

    said = [{"role": "user" if who == "Caroline" else "assistant", "content": f"{who}: {text}"} for who, text in TURNS]
    user = generate_additive_extraction_prompt(new_messages=parse_messages(said), current_date="2023-05-08",
                                               custom_instructions=prompts.load("mem0_locomo_instructions"))
    return [{"role": "system", "content": ADDITIVE_EXTRACTION_PROMPT}, {"role": "user", "content": user}]


def amem_messages(prompt_id: str) -> list[dict[str, str]]:
    source = package_file("agentic_memory", "memory_system.py")
    note = f"Speaker {TURNS[0][0]} says : {TURNS[0][1]}"
    if prompt_id == "amem_analyze":
        text = rendered(package_string(source, "Format the response as a JSON object"), {}) + note
    else:
        neighbours = (f"memory_id:n1\ttalk start time:202305081356\tmemory content: Speaker {TURNS[1][0]} says : "
                      f"{TURNS[1][1]}")
        text = rendered(package_string(source, "should_evolve"), {}).format(
            content=note, context="A support group.", keywords=["support", "group"],
            nearest_neighbors_memories=neighbours, neighbor_number=1)
    return [{"role": "system", "content": "You must respond with a JSON object."}, {"role": "user", "content": text}]


def amem_keywords_messages() -> list[dict[str, str]]:
    from common.systems.amem import JSON_SYSTEM, KEYWORDS_PROMPT

    return [{"role": "system", "content": JSON_SYSTEM},
            {"role": "user", "content": KEYWORDS_PROMPT.format(question="When did Caroline go to the support group?")}]


def simplemem_messages() -> list[dict[str, str]]:
    source = package_file("simplemem", "core/memory_builder.py")
    window = "\n".join(f"[2023-05-08T13:56:00] {who}: {text}" for who, text in TURNS[:3])
    return [{"role": "user", "content": rendered(package_string(source, TEXT_KINDS[0][0]),
                                                 {"context": "", "dialogue_text": window})}]


def simplemem_answer_messages() -> list[dict[str, str]]:
    """SimpleMem's answer generator (systems.protocol: native): its system message and its prompt."""
    source = package_file("simplemem", "core/answer_generator.py")
    context = "[Context 1]\nContent: Caroline went to the LGBTQ support group on 7 May 2023.\nPersons: Caroline"
    system = rendered(package_string(source, "You are a professional Q&A assistant"), {})
    user = rendered(package_string(source, SIMPLEMEM_ANSWER), {"query": "When did Caroline go to the support group?",
                                                               "context_str": context})
    return [{"role": "system", "content": system}, {"role": "user", "content": user}]


def graphiti_schemas() -> dict[str, dict[str, Any]]:
    """The JSON schema of each Graphiti response model the fake answers by name."""
    from graphiti_core.prompts import dedupe_edges, dedupe_nodes, extract_edges, extract_nodes

    modules = (extract_nodes, extract_edges, dedupe_nodes, dedupe_edges)
    return {name: next(getattr(m, name) for m in modules if hasattr(m, name)).model_json_schema()
            for name in GRAPHITI_SCHEMAS}


# Graphiti's sections as its prompts write them, so that each reply has rows to fill.
GRAPHITI_TEXT = ("<CURRENT MESSAGE>\nCaroline: I went to the support group.\nMelanie: That sounds wonderful.\n"
                 "</CURRENT MESSAGE>\n<CURRENT_MESSAGE>\nCaroline: I went to the support group.\n</CURRENT_MESSAGE>\n"
                 "<REFERENCE_TIME>\n2023-05-08T13:56:00Z\n</REFERENCE_TIME>\n<MESSAGES>\n"
                 "Caroline: I went to the support group.\n</MESSAGES>\n"
                 "<ENTITIES>\n[{\"name\": \"Caroline\"}]\n</ENTITIES>")


def outside_requests() -> Iterator[tuple[str, dict[str, Any]]]:
    """(prompt id, request body) of every outside system's request kind the fake answers."""
    builders: dict[str, Callable[[], list[dict[str, str]]]] = {
        "mem0_extraction": mem0_messages, "amem_analyze": lambda: amem_messages("amem_analyze"),
        "amem_evolve": lambda: amem_messages("amem_evolve"), "amem_keywords": amem_keywords_messages}
    for prompt_id in sorted(OUTSIDE_PROMPTS):
        yield prompt_id, {"messages": builders[prompt_id](), "response_format": {"type": "json_object"}}
    simplemem = {"[Current Window Dialogues]": simplemem_messages, SIMPLEMEM_ANSWER: simplemem_answer_messages}
    for marker, _ in TEXT_KINDS:  # SimpleMem's plain-text JSON requests, through the gateway
        assert marker in simplemem, f"no request built for the text kind {marker!r}"
        yield GATEWAY_PREFIX + "simplemem", {"messages": simplemem[marker]()}
    schemas = graphiti_schemas()
    for name in sorted(SCHEMA_KINDS):
        fmt = {"type": "json_schema", "json_schema": {"name": name, "schema": schemas[name]}}
        yield GATEWAY_PREFIX + "graphiti", {"messages": [{"role": "user", "content": GRAPHITI_TEXT}],
                                            "response_format": fmt}
    # The generic replies: a schema no builder knows (synthesized) and a tool call, each over every
    # Graphiti model's schema (nested objects, $defs, arrays, nullable fields).
    for name, schema in sorted(schemas.items()):
        fmt = {"type": "json_schema", "json_schema": {"name": f"Unregistered{name}", "schema": schema}}
        yield GATEWAY_PREFIX + "generic", {"messages": [{"role": "user", "content": GRAPHITI_TEXT}],
                                           "response_format": fmt}
        tool = {"type": "function", "function": {"name": name, "parameters": schema}}
        yield GATEWAY_PREFIX + "generic", {"messages": [{"role": "user", "content": GRAPHITI_TEXT}], "tools": [tool],
                                           "tool_choice": {"type": "function", "function": {"name": name}}}


def memos_messages() -> Optional[list[dict[str, str]]]:
    """MemOS's memory-reader prompt, from its own environment when it was built here (else None: the
    package installs only there)."""
    repo = Path(__file__).resolve().parent.parent
    found = sorted(repo.glob(".systems/memos/venv/lib/python*/site-packages/memos/templates/mem_reader_prompts.py"))
    if not found:
        return None
    text = rendered(package_string(found[0], "memory list"), {})
    conversation = "\n".join(f"user:{who}: {said}" for who, said in TURNS[:3])
    return [{"role": "user", "content": text.replace("${conversation}", conversation).replace("{conversation}",
                                                                                             conversation)}]


def send_outside(server: FakeOpenAI) -> list[Call]:
    """Each outside request sent as its system's client sends it (the prompt id in X-Prompt-Id)."""
    import openai

    sdk = openai.OpenAI(base_url=server.base_url, api_key="test", max_retries=0, timeout=10.0)
    calls = []
    requests = list(outside_requests())
    memos = memos_messages()
    if memos is not None:
        requests.append((GATEWAY_PREFIX + "memos", {"messages": memos}))
    try:
        for prompt_id, body in requests:
            resp = sdk.chat.completions.create(model="fake-model", **body,
                                               extra_headers={PROMPT_ID_HEADER: prompt_id})
            message = resp.choices[0].message
            calls.append(Call(prompt_id, body, message.content or "", tool_calls=[
                (t.function.name, t.function.arguments) for t in message.tool_calls or []]))
    finally:
        sdk.close()
    return calls


@dataclass
class Drive:
    """What one drive sent and read: the harness's calls (with their reads), the outside systems'
    requests, the server's log (bodies, replies, contract violations) and the answer rows."""

    harness: list[Call]
    outside: list[Call]
    server: FakeOpenAI
    answers: list[AnswerRow]


# Readers that take fields out of a reply with a regular expression before any JSON decoding, which the
# decoder hook cannot see: LoCoMo-Plus's official parser (llm_as_judge._parse_judge_response) matches
# "label" and "reason" first. Their reads are the keys the code's own pattern names, where it matched.
REGEX_READERS = {"judge_locomo_plus_": locomo_plus._LABEL_REASON}


def regex_reads(calls: list[Call]) -> None:
    for c in calls:
        for prefix, pattern in REGEX_READERS.items():
            if c.prompt_id.startswith(prefix) and pattern.search(c.text or ""):
                c.reads.update(re.findall(r'"(\w+)"', pattern.pattern))


def drive(tmp: Path) -> Drive:
    with FakeOpenAI(faults=REPAIRED) as server:
        llm = client(server, tmp)
        with Reads().watching() as reads:
            build_memory(llm)
            answers = answer_questions(llm)
            judge_answers(llm)
            probe_endpoint(server)
        regex_reads(reads.calls)
        outside = send_outside(server)
    return Drive(reads.calls, outside, server, answers)


TEXT_ONLY = frozenset(TEXT_KINDS_BY_PROMPT)  # gateway ids answered from their prompt alone (MemOS)
