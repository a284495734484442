"""Tests for the local fake OpenAI server, driven through the real ``openai`` SDK."""
from __future__ import annotations

import json
import math

import pytest

from common.core.prompts import PROMPT_DIR
from tests.conftest import REPO
from tests.fake_openai import (
    CHAT_KINDS,
    FAKE_MODEL,
    MALFORMED_CONTENT,
    OUTSIDE_PROMPTS,
    PROMPT_ID_HEADER,
    PROMPT_KINDS,
    FakeOpenAI,
    FaultPlan,
    kind_for_prompt_id,
    parse_turns,
    plan_entity_property,
)

openai = pytest.importorskip("openai")

TURNS = [
    ("D1:1", "Caroline", "I went to the LGBTQ support group yesterday and it was powerful."),
    ("D1:2", "Melanie", "That sounds wonderful! What happened at the meeting?"),
    ("D1:3", "Caroline", "People shared transgender stories, very inspiring experiences."),
    ("D1:4", "Melanie", "I painted a sunrise over the lake last weekend."),
    ("D1:5", "Caroline", "Beautiful! Painting seems relaxing for you."),
    ("D1:6", "Melanie", "It is. Running also helps me unwind."),
    ("D1:7", "Caroline", "ok"),
    ("D2:1", "Melanie", "My kids loved the museum trip with dinosaurs."),
    ("D2:2", "Caroline", "Counseling certification applications are due soon."),
]


def render_turns(turns=TURNS) -> str:
    lines = []
    for dia_id, speaker, text in turns:
        lines.append(f"[{dia_id}] {speaker}: {text}")
        if dia_id == "D1:4":
            lines.append("    [image] a photo of a sunrise: orange sky")  # not a turn
    return "\n".join(lines)


def msgs(system: str, user: str) -> list[dict]:
    return [{"role": "system", "content": system}, {"role": "user", "content": user}]


def shape(prompt_id: str) -> str:
    """The JSON example of a template in common/prompts/ (each line's object from its first ``{"``): what
    a request of that kind asks for, since the fake's reply may carry only the fields its request names."""
    text = (PROMPT_DIR / f"{prompt_id}.txt").read_text(encoding="utf-8")
    return "\n\n" + "\n".join(line[line.index('{"'):] for line in text.splitlines() if '{"' in line)


LABEL = '\nReply as JSON with the key "label".'  # the judge prompts name their one field in prose
PROMPTS = {
    "partition": msgs("You partition a complete dialogue session into episodes. Reply with JSON.",
                      "Session 1\n" + render_turns() + shape("partition_user")),
    "partition_repair": msgs("You repair an invalid episode partition. Reply with JSON.",
                             "Previous output: {bad\nTurns:\n" + render_turns() + shape("partition_repair_user")),
    "extract": msgs("You are the information-extraction stage. Reply with JSON.",
                    render_turns() + shape("extract_user")),
    "extract_repair": msgs("You repair invalid extraction JSON.", "You are the information-extraction stage.\n"
                           + render_turns() + shape("extract_repair_user")),
    "plan": msgs("You are the query-decomposition stage.",
                 "Question: What did Caroline research?" + shape("plan_user")),
    "plan_repair": msgs("You repair an invalid retrieval plan.", "query-decomposition stage\nQuestion: How many "
                        "children does Melanie have?" + shape("plan_repair_user")),
    "answer": msgs("Answer only from the supplied memory.", render_turns() + "\nQuestion: What did Caroline do?"),
    "judge_locomo": msgs("Label the answer CORRECT or WRONG.", "Question: x\nGold: y\nAnswer: z" + LABEL),
}
# The X-Prompt-Id each prompt above is sent with: the kind comes from the header, never the text.
PROMPT_IDS = {
    "partition": "partition_user",
    "partition_repair": "partition_repair_user",
    "extract": "extract_user",
    "extract_repair": "extract_repair_user",
    "plan": "plan_user",
    "plan_repair": "plan_repair_user",
    "answer": "answer_user",
    "judge_locomo": "judge_locomo_mem0",
}


@pytest.fixture()
def server():
    with FakeOpenAI() as srv:
        yield srv


_CLIENTS: list = []


@pytest.fixture(autouse=True)
def _close_clients():
    yield
    while _CLIENTS:
        _CLIENTS.pop().close()


def make_client(srv: FakeOpenAI, timeout: float = 5.0, max_retries: int = 0):
    client = openai.OpenAI(base_url=srv.base_url, api_key="test", max_retries=max_retries, timeout=timeout)
    _CLIENTS.append(client)
    return client


def chat(client, messages, prompt_id=None, **kw):
    """One chat request; ``prompt_id`` is sent as the X-Prompt-Id header (none when None)."""
    headers = {PROMPT_ID_HEADER: prompt_id} if prompt_id else None
    return client.chat.completions.create(model="gpt-test", messages=messages, extra_headers=headers, **kw)


def ask(client, kind, **kw):
    """The prompt of ``kind`` with its prompt id."""
    return chat(client, PROMPTS[kind], PROMPT_IDS[kind], **kw)


# --------------------------------------------------------------------------- basics
def test_base_url_and_models(server):
    assert server.base_url.startswith("http://127.0.0.1:") and server.base_url.endswith("/v1")
    models = make_client(server).models.list()
    assert [m.id for m in models.data] == [FAKE_MODEL]
    assert server.request_count == 0


def test_kind_lookup_by_prompt_id():
    for kind, prompt_id in PROMPT_IDS.items():
        assert kind_for_prompt_id(prompt_id) == kind
    assert kind_for_prompt_id("hello") == "unknown"
    assert kind_for_prompt_id(None) == kind_for_prompt_id("") == "unknown"
    # Only the id a call is sent with counts: system templates and message text are not ids.
    assert kind_for_prompt_id("plan_repair_system") == "unknown"
    assert kind_for_prompt_id("You repair an invalid retrieval plan") == "unknown"


def test_prompt_id_table_matches_the_prompt_files():
    """Every id in the table is a template in common/prompts/ (a prompt set's files by their dotted
    id), and every template the harness sends as a call's id (user templates and judge templates)
    is in the table."""
    files = {p.stem for p in PROMPT_DIR.glob("*.txt")}
    files |= {f"{p.parent.name}.{p.stem}" for p in PROMPT_DIR.glob("*/*.txt")}
    assert set(PROMPT_KINDS) - OUTSIDE_PROMPTS <= files
    sent = {f for f in files if f.endswith("_user") or f.startswith("judge_")}
    assert sent == set(PROMPT_KINDS) - OUTSIDE_PROMPTS
    assert set(PROMPT_KINDS.values()) == CHAT_KINDS
    assert {"partition", "partition_repair", "extract", "extract_repair", "plan", "plan_repair", "bridge",
            "bridge_repair", "answer", "judge_locomo", "judge_lme", "mem0_extraction", "doctor",
            "plan_audit", "answer_rerank", "answer_verify", "answer_draft", "amem_analyze", "amem_evolve",
            "amem_keywords", "judge_beam", "judge_beam_align", "judge_realtalk_gpt_score", "judge_locomo_plus",
            "answer_count", "answer_count_merge", "answer_temporal", "answer_order",
            "answer_count_reference", "answer_temporal_answer", "answer_temporal_repair",
            "answer_age_chain", "answer_hindsight"} == CHAT_KINDS
    # The outside prompts are mem0's own extraction prompt and A-MEM's three (two per note, its
    # keyword step per search), under the ids common.systems.mem0 and common.systems.amem send.
    assert OUTSIDE_PROMPTS == {"mem0_extraction", "amem_analyze", "amem_evolve", "amem_keywords"}
    assert 'prompt_id="mem0_extraction"' in (REPO / "common" / "systems" / "mem0.py").read_text()
    amem = (REPO / "common" / "systems" / "amem.py").read_text()
    assert '"amem_analyze"' in amem and '"amem_evolve"' in amem and 'prompt_id="amem_keywords"' in amem


def test_parse_turns_skips_image_lines():
    turns = parse_turns(render_turns())
    assert [t[0] for t in turns] == [t[0] for t in TURNS]
    assert turns[0] == TURNS[0]
    assert parse_turns("[weird id 7] Bob: hi\n  [x] Not: a turn") == [("weird id 7", "Bob", "hi")]


def test_response_schema(server):
    resp = ask(make_client(server), "judge_locomo", response_format={"type": "json_object"})
    assert resp.object == "chat.completion"
    assert resp.id and resp.created > 0
    assert resp.model == "gpt-test"
    choice = resp.choices[0]
    assert choice.finish_reason == "stop" and choice.message.role == "assistant"
    u = resp.usage
    assert u.prompt_tokens > 0 and u.completion_tokens > 0
    assert u.total_tokens == u.prompt_tokens + u.completion_tokens
    assert server.requests[-1]["response_format"] == {"type": "json_object"}


# --------------------------------------------------------------------------- per kind
@pytest.mark.parametrize("kind", ["partition", "partition_repair"])
def test_partition(server, kind):
    data = json.loads(ask(make_client(server), kind).choices[0].message.content)
    segs = data["segments"]
    ids = [t[0] for t in TURNS]
    pos = {d: i for i, d in enumerate(ids)}
    covered = []
    for n, seg in enumerate(segs, start=1):
        assert set(seg) == {"start_dia_id", "end_dia_id", "theme", "theme_type",
                            "theme_description", "boundary_reason"}
        assert seg["theme"] == f"theme {n}" and seg["theme_type"] == "topic"
        assert seg["boundary_reason"] == ("session_start" if n == 1 else "semantic shift")
        a, b = pos[seg["start_dia_id"]], pos[seg["end_dia_id"]]
        assert 0 <= b - a < 4
        covered.extend(ids[a:b + 1])
    assert covered == ids  # every turn exactly once, in order
    assert len(segs) == 3


@pytest.mark.parametrize("kind", ["extract", "extract_repair"])
def test_extract(server, kind):
    data = json.loads(ask(make_client(server), kind).choices[0].message.content)
    recs = data["records"]
    assert [r["evidence_dia_ids"] for r in recs] == [[t[0]] for t in TURNS]
    keys = {"entity", "entity_type", "property", "value", "condition_property", "condition_value",
            "property_kind", "modality", "valid_time", "source", "evidence_dia_ids",
            "projection_kind", "confidence"}
    for rec, (_, speaker, text) in zip(recs, TURNS):
        assert set(rec) == keys
        assert rec["entity"] == rec["source"] == speaker
        assert rec["entity_type"] == "person" and rec["property_kind"] == "relation"
        assert rec["modality"] == "observed" and rec["projection_kind"] == "direct"
        assert rec["confidence"] == 0.9
        prop = rec["property"]
        assert prop == "say" or (prop.islower() and len(prop) > 4 and prop in text.lower())
        assert isinstance(rec["value"], str)
    by_id = {r["evidence_dia_ids"][0]: r for r in recs}
    assert by_id["D1:7"]["property"] == "say"
    assert by_id["D1:3"]["property"] == "transgender"
    assert by_id["D1:3"]["value"] == "stories inspiring experiences"


@pytest.mark.parametrize("kind", ["plan", "plan_repair"])
def test_plan(server, kind):
    data = json.loads(ask(make_client(server), kind).choices[0].message.content)
    assert set(data) == {"answer_target", "reasoning_type", "retrieval_scope", "required_properties", "hops"}
    assert data["answer_target"]["type"] == "value"
    rp = data["required_properties"][0]
    hop = data["hops"][0]
    assert hop["hop_id"] == "h1" and hop["depends_on"] == [] and hop["bridge_request"] == ""
    assert set(hop["anchor"]) == {"entity", "entity_type", "property", "value",
                                  "condition_property", "condition_value"}
    assert rp["role"] == "answer_property"
    if kind == "plan":
        assert rp["entity"] == hop["anchor"]["entity"] == "Caroline"
        assert rp["broad_property"] == hop["anchor"]["property"] == "research"
        assert (data["reasoning_type"], data["retrieval_scope"]) == ("direct", "point")
    else:
        assert rp["entity"] == "Melanie" and rp["broad_property"] == "children"
        assert (data["reasoning_type"], data["retrieval_scope"]) == ("aggregation", "all_matching")


def test_plan_entity_fallback():
    assert plan_entity_property("What are the hobbies of the user?") == ("user", "hobbies")
    assert plan_entity_property("When did Jon's bakery open?")[0] == "Jon"


def test_answer(server):
    client = make_client(server)
    assert ask(client, "answer").choices[0].message.content == "I went to the LGBTQ support"
    empty = msgs("Answer only from the supplied memory.", "No memory.\nQuestion: what?")
    assert chat(client, empty, "answer_user").choices[0].message.content == "Unknown"


def test_judge_deterministic_and_mixed(server):
    client = make_client(server)
    labels = []
    for i in range(40):
        m = msgs("Reply CORRECT or WRONG as JSON.", f"Question: q{i}\nAnswer: a{i}" + LABEL)
        first = json.loads(chat(client, m, "judge_locomo_mem0").choices[0].message.content)
        again = json.loads(chat(client, m, "judge_locomo_mem0").choices[0].message.content)
        assert first == again and set(first) == {"label"}
        labels.append(first["label"])
    assert set(labels) == {"CORRECT", "WRONG"}
    assert 8 <= labels.count("CORRECT") <= 32


def test_unknown_kind_is_bad_request(server):
    with pytest.raises(openai.BadRequestError) as exc:
        chat(make_client(server), [{"role": "user", "content": "Tell me a joke"}])
    assert exc.value.status_code == 400
    assert server.counts_by_kind() == {"unknown": 1}


def test_kind_comes_from_the_header_not_the_text(server):
    """The messages of a partition prompt sent with a plan id get a plan; the kind is logged too."""
    client = make_client(server)
    # Each text also shows the fields of the kind it is sent as (a reply carries only those).
    partition_text = [*PROMPTS["partition"][:1], {"role": "user", "content": PROMPTS["partition"][1]["content"]
                                                   + shape("plan_user")}]
    data = json.loads(chat(client, partition_text, "plan_user").choices[0].message.content)
    assert "hops" in data and "segments" not in data
    # A repair id selects the repair kind whatever the system message says.
    data = json.loads(chat(client, PROMPTS["extract"] + [{"role": "user", "content": shape("partition_repair_user")}],
                           "partition_repair_user").choices[0].message.content)
    assert "segments" in data
    assert server.request_kinds == ["plan", "partition_repair"]
    assert [h[PROMPT_ID_HEADER.lower()] for h in server.request_headers] == ["plan_user", "partition_repair_user"]
    for kind in ("judge_lme", "bridge"):
        pid = next(p for p, k in PROMPT_KINDS.items() if k == kind)
        chat(client, [{"role": "user", "content": "Question: q\n### Episode e1 | t\n[D1:1] A: Bob came"
                       + shape("bridge_user")}], pid)
    assert server.request_kinds[-2:] == ["judge_lme", "bridge"]


def test_missing_or_unknown_prompt_id_is_a_clear_error(server):
    """Marker text alone no longer identifies a prompt: the 400 names the header to send."""
    client = make_client(server)
    with pytest.raises(openai.BadRequestError) as missing:
        chat(client, PROMPTS["plan"])  # the old marker strings are all there, but no header
    with pytest.raises(openai.BadRequestError) as unknown:
        chat(client, PROMPTS["plan"], "plan_system")
    for exc in (missing, unknown):
        assert exc.value.status_code == 400
        err = exc.value.body
        assert err["code"] == "unknown_prompt_kind" and err["type"] == "invalid_request_error"
        assert PROMPT_ID_HEADER in err["message"] and err["param"] == PROMPT_ID_HEADER
    assert "no X-Prompt-Id header" in missing.value.body["message"]
    assert "'plan_system' is not a known prompt id" in unknown.value.body["message"]
    assert server.counts_by_kind() == {"unknown": 2}
    assert server.faults_injected == [] and server.replies == {}


# --------------------------------------------------------------------------- embeddings
def test_embeddings_deterministic_unit_norm(server):
    client = make_client(server)
    r1 = client.embeddings.create(model="emb-test", input=["alpha beta", "gamma"])
    r2 = client.embeddings.create(model="emb-test", input=["alpha beta", "gamma"], encoding_format="float")
    r3 = client.embeddings.create(model="emb-test", input="alpha beta")
    v1 = [d.embedding for d in r1.data]
    v2 = [d.embedding for d in r2.data]
    assert len(v1) == 2 and all(len(v) == 32 for v in v1 + v2)
    for a, b in zip(v1, v2):  # base64 (the SDK default) and float agree
        assert all(abs(x - y) < 1e-6 for x, y in zip(a, b))
    assert all(abs(x - y) < 1e-6 for x, y in zip(v1[0], r3.data[0].embedding))
    for v in v1 + v2:
        assert math.isclose(math.sqrt(sum(x * x for x in v)), 1.0, rel_tol=1e-5)
    assert v1[0] != v1[1]
    assert r2.model == "emb-test" and r2.usage.prompt_tokens == 3 and r2.usage.total_tokens == 3
    assert server.requests[1]["encoding_format"] == "float"


# --------------------------------------------------------------------------- faults
@pytest.mark.parametrize("fault, exc_type", [
    ("429", "RateLimitError"),
    ("500", "InternalServerError"),
    ("503", "InternalServerError"),
    ("400", "BadRequestError"),
])
def test_scripted_http_faults(fault, exc_type):
    with FakeOpenAI(faults=FaultPlan(script=[fault])) as srv:
        client = make_client(srv)
        with pytest.raises(getattr(openai, exc_type)) as exc:
            ask(client, "judge_locomo")
        assert exc.value.status_code == int(fault)
        if fault == "429":
            assert exc.value.response.headers.get("retry-after") == "0"
        # The script is used up: the next request is answered normally.
        json.loads(ask(client, "judge_locomo").choices[0].message.content)
        assert srv.faults_injected == [(0, "judge_locomo", fault)]
        assert srv.request_count == 2


def test_retrying_client_recovers_from_429():
    with FakeOpenAI(faults=FaultPlan(script=["429", "500"])) as srv:
        client = make_client(srv, max_retries=2)
        json.loads(ask(client, "judge_locomo").choices[0].message.content)
        assert srv.request_count == 3
        assert [f[2] for f in srv.faults_injected] == ["429", "500"]


def test_timeout_fault():
    with FakeOpenAI(faults=FaultPlan(script=["timeout"], timeout_seconds=2.0)) as srv:
        with pytest.raises(openai.APITimeoutError):
            ask(make_client(srv, timeout=0.5), "plan")
        assert srv.faults_injected == [(0, "plan", "timeout")]


def test_content_faults():
    with FakeOpenAI(faults=FaultPlan(script=["malformed", "truncated", "empty", "ok"])) as srv:
        client = make_client(srv)
        contents = [ask(client, "extract").choices[0].message.content for _ in range(4)]
        assert contents[0] == MALFORMED_CONTENT
        assert contents[2] == ""
        good = contents[3]
        json.loads(good)
        assert contents[1] == good[: len(good) // 2]
        for bad in contents[:3]:
            with pytest.raises(json.JSONDecodeError):
                json.loads(bad)
        assert [f[2] for f in srv.faults_injected] == ["malformed", "truncated", "empty"]


def test_fault_kinds_filter():
    plan = FaultPlan(script=["500"], kinds={"extract"})
    with FakeOpenAI(faults=plan) as srv:
        client = make_client(srv)
        ask(client, "plan")  # not eligible, answered normally
        client.embeddings.create(model="e", input="x")  # never faulted
        with pytest.raises(openai.InternalServerError):
            ask(client, "extract")
        assert srv.faults_injected == [(2, "extract", "500")]
        assert srv.counts_by_kind() == {"plan": 1, "embeddings": 1, "extract": 1}


def _rate_run(seed: int) -> list[tuple[int, str, str]]:
    plan = FaultPlan(rate=0.5, seed=seed, types=["429", "500", "malformed", "truncated", "empty"])
    with FakeOpenAI(faults=plan) as srv:
        client = make_client(srv)
        for _ in range(30):
            try:
                ask(client, "judge_locomo")
            except openai.APIStatusError:
                pass
        assert srv.request_count == 30
        return list(srv.faults_injected)


def test_rate_faults_reproducible():
    a, b, c = _rate_run(7), _rate_run(7), _rate_run(8)
    assert a == b
    assert 5 <= len(a) <= 25
    assert a != c
    assert {f[2] for f in a} <= {"429", "500", "malformed", "truncated", "empty"}


def test_fault_plan_validation():
    with pytest.raises(ValueError):
        FaultPlan(script=["explode"])
    with pytest.raises(ValueError):
        FaultPlan(rate=1.5)


# --------------------------------------------------------------------------- accounting
def test_request_count_and_kinds(server):
    client = make_client(server)
    for kind in PROMPTS:
        ask(client, kind)
    client.embeddings.create(model="e", input=["a", "b"])
    client.models.list()  # not counted
    with pytest.raises(openai.BadRequestError):
        chat(client, [{"role": "user", "content": "??"}])
    assert server.request_count == len(PROMPTS) + 2 == len(server.requests)
    expected = {k: 1 for k in PROMPTS}
    expected.update({"embeddings": 1, "unknown": 1})
    assert server.counts_by_kind() == expected
    assert server.requests[0]["messages"] == PROMPTS["partition"]


def test_latency_and_concurrency():
    import concurrent.futures
    import time

    with FakeOpenAI(latency=0.2) as srv:
        client = make_client(srv)
        t0 = time.perf_counter()
        with concurrent.futures.ThreadPoolExecutor(8) as pool:
            outs = list(pool.map(lambda _: ask(client, "answer").choices[0].message.content, range(8)))
        elapsed = time.perf_counter() - t0
        assert elapsed >= 0.2 and elapsed < 1.5  # served concurrently
        assert len(set(outs)) == 1 and srv.request_count == 8
        served = srv.latencies_of_kind("answer")  # arrival to reply, as the server measured it
        assert len(served) == 8 and all(0.2 <= s < 1.5 for s in served)
        assert srv.peak_in_flight["answer"] >= 2


def test_stop_is_idempotent_and_restartable():
    srv = FakeOpenAI().start()
    srv.stop()
    srv.stop()
    with srv:
        assert make_client(srv).models.list().data[0].id == FAKE_MODEL


# --------------------------------------------------------------------------- capabilities (make doctor)
def test_capabilities_refuse_what_an_endpoint_lacks():
    from tests.fake_openai import Capabilities

    caps = Capabilities(models=("gpt-a",), json_mode=False, json_schema=False, seed=False, deterministic=False,
                        rate_limit_headers={"x-ratelimit-limit-requests": "60"})
    with FakeOpenAI(capabilities=caps) as srv:
        client = make_client(srv)
        assert [m.id for m in client.models.list().data] == ["gpt-a"]

        def send(**kw):
            return client.chat.completions.with_raw_response.create(
                **{"model": "gpt-a", "messages": PROMPTS["answer"], "extra_headers": {PROMPT_ID_HEADER: "answer_user"},
                   **kw})

        with pytest.raises(openai.NotFoundError, match="model_not_found|does not exist"):
            send(model="gpt-b")
        for kw, param in (({"response_format": {"type": "json_object"}}, "response_format"),
                          ({"response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": {}}}},
                           "response_format"), ({"seed": 1}, "seed")):
            with pytest.raises(openai.BadRequestError) as err:
                send(**kw)
            assert err.value.param == param
        a, b = send(), send()
        assert a.headers["x-ratelimit-limit-requests"] == "60"
        assert a.parse().choices[0].message.content != b.parse().choices[0].message.content
    # The defaults accept all of it, give the same reply each time and send no rate-limit headers.
    with FakeOpenAI() as srv:
        client = make_client(srv)
        raw = [client.chat.completions.with_raw_response.create(
            model="any", messages=PROMPTS["answer"], seed=1, response_format={"type": "json_object"},
            extra_headers={PROMPT_ID_HEADER: "answer_user"}) for _ in range(2)]
        assert len({r.parse().choices[0].message.content for r in raw}) == 1
        assert not [k for k in raw[0].headers if k.lower().startswith("x-ratelimit")]
