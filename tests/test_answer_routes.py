"""The generic LongMemEval answer routes (answer.routes, common.method.routes).

Expectations come from reference_notes 5.4-5.6 (what the authors' answer step does): date windows
relative to the question date, user-turn overlap, the relative-age chain, the user-turn temporal
ledger with verbatim user-spoken quotes, the counting ledger with its retry, consolidation and
deterministic sums. Every route is picked by the question's wording or the plan, never by a label.
"""
from __future__ import annotations

import json
import re
from datetime import date
from types import SimpleNamespace
from typing import Any, Callable, Optional

import pytest

from common.core import fingerprint
from common.core.config import ConfigError, load_config
from common.core.llm import Completion
from common.core.schema import Plan, Question, RetrievalRow
from common.method import answer as answer_mod
from common.method import routes as r
from common.pipeline import dryrun
from common.pipeline.experiments import load as load_experiments
from tests.conftest import run_overrides
from tests.fake_openai.scripted import kind_for_prompt_id, scripted_content

LME_TINY_QUESTIONS = ("How many weeks ago did I adopt my cat Miso?",
                      "How much did I spend on the bike and the helmet in total?")
ALL_ON = r.Routes(date_window=True, user_overlap=True, relative_age=True, temporal=True, count=True, order=True)
KEYS = ("date_window", "user_overlap", "relative_age", "temporal", "count", "order")


def block(eid: str, day: str, *turns: tuple[str, str]) -> str:
    lines = [f"### Episode {eid} | {eid.split('::')[1]} | session date: {day}"]
    lines += [f"[{eid}:{i}] {who}: {said}" for i, (who, said) in enumerate(turns, 1)]
    return "\n".join(lines)


def retrieval(*blocks: str) -> RetrievalRow:
    ids = [b.split(" ", 3)[2] for b in blocks]
    return RetrievalRow(qid="q", memory_id="m", question="?", mode="adaptive", scope="all_matching",
                        reasoning_type="aggregation", selected=[], episode_ids=ids, dia_ids=[], coverage={},
                        buffer_text="\n\n".join(blocks), buffer_tokens=10)


def plan(target: str = "value") -> Plan:
    return Plan(answer_target={"type": target, "description": ""}, reasoning_type="direct", retrieval_scope="point",
                required_properties=[], hops=[])


class Stub:
    """An LLM client answering each prompt with the fake server's scripted reply, or ``override``'s
    (a reply dict, or None for the scripted one); every request is kept."""

    def __init__(self, override: Optional[Callable[[str, str], Optional[dict[str, Any]]]] = None):
        self.override = override
        self.requests: list[tuple[str, str, str]] = []

    def settings(self, role: str) -> Any:
        return SimpleNamespace(model="m")

    def complete(self, role: str, messages: list[dict[str, str]], json_mode: bool = True,
                 prompt_id: str = "") -> Completion:
        text = "\n".join(m["content"] for m in messages)
        self.requests.append((role, prompt_id, text))
        kind = kind_for_prompt_id(prompt_id)
        reply = self.override(kind, text) if self.override else None
        content = json.dumps(reply) if reply is not None else scripted_content(kind, text)
        return Completion(content, f"k{len(self.requests)}", False, "m", {"prompt_tokens": 1, "completion_tokens": 1},
                          0.01)

    def kinds(self) -> list[str]:
        return [kind_for_prompt_id(p) for _, p, _ in self.requests]


def answer(client: Stub, question: str, ret: RetrievalRow, routes: r.Routes = ALL_ON, target: str = "value",
           asked: str = "2023/08/20 (Sun) 10:00", pool: Optional[list[str]] = None):
    steps = answer_mod.AnswerSteps(prompt_set="code_rules", routes=routes)
    return answer_mod.answer_question(client, Question("q", "m", question, asked), plan(target), ret,  # type: ignore[arg-type]
                                      steps=steps, pool=pool)


# --------------------------------------------------------------------------- deterministic parts
def test_dates_resolve_against_the_day_the_user_said_them():
    said = date(2023, 4, 12)  # a Wednesday
    assert r.resolve_date("I adopted her today!", said) == (said, "today")
    assert r.resolve_date("We went yesterday", said)[0] == date(2023, 4, 11)
    assert r.resolve_date("the day before yesterday", said)[0] == date(2023, 4, 10)
    assert r.resolve_date("three weeks ago I started", said)[0] == date(2023, 3, 22)
    assert r.resolve_date("about 2 months ago", said)[0] == date(2023, 2, 12)
    assert r.resolve_date("last weekend was busy", said)[0] == date(2023, 4, 8)
    assert r.resolve_date("last Friday", said)[0] == date(2023, 4, 7)
    assert r.resolve_date("last Wednesday", said)[0] == date(2023, 4, 5)  # the same weekday: a week back
    assert r.resolve_date("on 2022/11/03 I flew", said)[0] == date(2022, 11, 3)
    assert r.resolve_date("since March 3rd", said)[0] == date(2023, 3, 3)
    assert r.resolve_date("by December 2", said)[0] == date(2022, 12, 2)  # a later month: the year before
    assert r.resolve_date("I like tea", said) == (None, "")
    assert r.parse_date("2023/05/20 (Sat) 12:00") == date(2023, 5, 20)
    assert r.parse_date("1:56 pm on 8 May, 2023") == date(2023, 5, 8)


def test_question_windows_and_elapsed_units():
    asked = date(2023, 4, 16)  # a Sunday
    assert r.question_window("what did I buy in the past two weeks?", asked) == (date(2023, 4, 2), asked)
    assert r.question_window("over the last month", asked) == (date(2023, 3, 16), asked)
    assert r.question_window("last weekend", asked) == (date(2023, 4, 8), date(2023, 4, 9))
    assert r.question_window("a week ago", asked) == (date(2023, 4, 9), date(2023, 4, 9))
    assert r.question_window("before I moved", asked) is None  # a named event bounds it
    assert r.question_window("what is my name", asked) is None
    assert r.elapsed(date(2023, 4, 2), asked, "day") == 14
    assert r.elapsed(date(2023, 4, 2), asked, "week") == 2
    assert r.elapsed(date(2023, 4, 6), asked, "week") == 1  # 10 days: rounded
    assert r.elapsed(date(2023, 1, 31), date(2023, 3, 30), "month") == 1  # by the calendar
    assert r.elapsed(date(2020, 5, 1), asked, "year") == 2


def test_quotes_must_be_verbatim_and_user_spoken():
    b = r.parse_block(block("m::s1::episode_001", "2023/04/02", ("user", "I finally got a \u201cnew\u201d kayak!"),
                            ("assistant", "You should also get a paddle leash.")))
    assert b is not None and [t.user for t in b.turns] == [True, False]
    assert r.grounded('i finally got a "new" kayak', b, user_only=True) == (True, True)
    assert r.grounded("get a paddle leash", b, user_only=True) == (False, False)  # assistant-spoken
    assert r.grounded("get a paddle leash", b, user_only=False) == (True, False)
    assert r.grounded("I finally bought a kayak", b, user_only=False) == (False, False)  # not verbatim


def test_dedup_and_sums_are_deterministic():
    items = [{"id": f"c{i}", "item": name, "quantity": q, "unit": u}
             for i, (name, q, u) in enumerate([("wool scarf", 30.0, "$"), ("scarf wool", 30.0, "$"),
                                               ("rain boots", 45.5, "dollars"), ("umbrella", 12.0, "$"),
                                               ("tent", 80.0, "$")])]
    merge = {"c3": {"in_scope": False}, "c4": {"duplicate_of": "c0"}, "c0": {"duplicate_of": "c4"}}
    # c1 repeats c0 (same name and quantity); c3 is out of scope; c4 points back at c0; c0's pointer
    # at a LATER candidate is ignored.
    kept = r.dedup(items, merge)
    assert [i["id"] for i in kept] == ["c0", "c2"]
    assert r.count_total("How much did I pay for the gear?", kept) == ("sum", "$75.5")
    assert r.count_total("How many pieces of gear did I buy?", kept) == ("count", "2")
    hours = [{"id": "a", "item": "pottery", "quantity": 3.0, "unit": "hours"},
             {"id": "b", "item": "yoga", "quantity": 1.5, "unit": "hour"}]
    assert r.count_total("How many hours did I spend on classes?", hours) == ("sum", "4.5 hours")


def test_routes_follow_the_wording_or_the_plan_and_their_switches():
    on = ALL_ON
    assert r.route_of("How many weeks ago did I repaint the fence?", plan(), on) == "relative_age"
    assert r.route_of("How many days passed between the repaint and the party?", plan(), on) == "temporal"
    assert r.route_of("How long did it take from signing up until the first lesson, since I joined?",
                      plan(), on) == "temporal"
    assert r.route_of("How many board games do I own?", plan(), on) == "count"
    assert r.route_of("Which board games do I own?", plan("count"), on) == "count"  # the plan's target
    assert r.route_of("How much older is my cousin than me?", plan(), on) == ""  # a comparison
    assert r.route_of("What colour is my kayak?", plan(), on) == ""
    assert r.route_of("How much do I weigh now?", plan(), on) == ""  # the latest state, not a total
    assert r.route_of("How many recipes did you suggest? The first one you suggested?", plan(), on) == ""
    assert r.route_of("Which kayak did I paddle first, the green or the crimson one?", plan(), on) == "order"
    assert [r.operator_of(q) for q in ("In what order did I visit the three lakes?", "What did I use before I "
                                       "switched to the crimson kayak?", "What was the first lake I visited?",
                                       "Where do I currently store my kayak?", "What did you say in our previous "
                                       "chat?")] == ["sequence", "previous", "first", "latest", ""]
    assert r.route_of("How many board games do I own?", None, on) == ""  # no plan: a plain system
    off = r.Routes(date_window=True)
    assert all(r.route_of(q, plan("count"), off) == "" for q in LME_TINY_QUESTIONS)


# --------------------------------------------------------------------------- guards
def test_the_date_window_guard_drops_evidence_dated_after_the_question():
    ret = retrieval(block("m::s1::episode_001", "2023/08/01 (Tue) 09:00", ("user", "My kayak is green.")),
                    block("m::s2::episode_001", "2023/09/01 (Fri) 09:00", ("user", "I painted my kayak crimson.")))
    client = Stub()
    row = answer(client, "What colour is my kayak?", ret)
    assert client.kinds() == ["answer"] and row.steps["date_window"] == {"dropped": ["m::s2::episode_001"]}
    assert "green" in client.requests[0][2] and "crimson" not in client.requests[0][2]
    off = Stub()
    answer(off, "What colour is my kayak?", ret, routes=r.Routes())
    assert "crimson" in off.requests[0][2]


def test_the_user_overlap_guard_adds_episodes_whose_user_turns_match():
    ret = retrieval(block("m::s1::episode_001", "2023/08/01", ("user", "I bought a canoe paddle for $40.")))
    pool = [ret.buffer_text,
            block("m::s2::episode_001", "2023/08/02", ("user", "Bought another canoe paddle, $35.")),
            block("m::s3::episode_001", "2023/08/03", ("user", "Tell me a joke."),
                  ("assistant", "A canoe paddle walks into a bar.")),  # assistant turns do not count
            block("m::s4::episode_001", "2023/08/04", ("user", "What rhymes with orange?"))]
    client = Stub()
    row = answer(client, "How much did I spend on canoe paddles?", ret, pool=pool)
    assert row.steps["user_overlap"] == {"added": ["m::s2::episode_001"]}
    assert row.answer == "$75" and row.steps["count"]["episodes"] == 2
    point = Stub()
    row = answer(point, "What colour is my canoe paddle?", ret, pool=pool)  # neither counting nor temporal
    assert "user_overlap" not in row.steps


# --------------------------------------------------------------------------- counting ledger
def ten_episodes() -> RetrievalRow:
    return retrieval(*[block(f"m::s{i}::episode_001", f"2023/08/{i:02d} (Tue) 09:00",
                             ("user", f"I picked up board game number {i} for ${10 + i}." if i % 3 == 0
                              else "Any tips for a rainy afternoon?"),
                             ("assistant", "Try a board game for $99."))
                       for i in range(1, 11)])


def test_count_ledger_scans_in_batches_retries_the_unaccounted_and_sums():
    seen: dict[str, int] = {}

    def forget_first(kind: str, text: str) -> Optional[dict[str, Any]]:
        if kind == "answer_count" and not seen.get("scan"):  # the first scan leaves out its first episode
            seen["scan"] = 1
            reply = json.loads(scripted_content(kind, text))
            return {"episodes": reply["episodes"][1:], "items": reply["items"]}
        return None

    client = Stub(forget_first)
    row = answer(client, "How much did I spend on board games?", ten_episodes(),
                 routes=r.Routes(count=True, count_batch=4))
    # 3 scans (4+4+2 episodes), 1 retry (the forgotten episode), 1 consolidation; no answer call.
    assert client.kinds() == ["answer_count"] * 4 + ["answer_count_merge"]
    retry = client.requests[3][2]
    assert retry.count("### Episode") == 1 and "m::s1::episode_001" in retry
    trace = row.steps["count"]
    assert trace["unaccounted"] == [] and trace["complete"] and trace["calls"] == 5
    assert row.answer == f"${13 + 16 + 19}"  # the assistant's $99 never counts
    assert [c["role"] for c in row.llm_calls] == ["answer_count"] * 5


def test_count_ledger_consolidation_decides_scope_and_duplicates_and_a_failure_falls_back():
    def merge(kind: str, text: str) -> Optional[dict[str, Any]]:
        if kind == "answer_count_merge":
            ids = re.findall(r"^(\w+) \| episode ", text, re.M)
            return {"items": [{"id": ids[1], "duplicate_of": ids[0]}, {"id": ids[2], "in_scope": False}]}
        return None

    client = Stub(merge)
    row = answer(client, "How many board games did I pick up?", ten_episodes())
    assert row.answer == "1" and row.steps["count"]["mode"] == "count"

    def broken(kind: str, text: str) -> Optional[dict[str, Any]]:
        return {"items": "not a list"} if kind == "answer_count" else None

    fallback = Stub(broken)
    row = answer(fallback, "How many board games did I pick up?", ten_episodes())
    assert fallback.kinds()[-1] == "answer" and row.steps["count"]["outcome"] == "fallback: no grounded item"
    assert row.answer == scripted_content("answer", fallback.requests[-1][2])


# --------------------------------------------------------------------------- temporal ledger
def pets() -> RetrievalRow:
    return retrieval(block("m::s1::episode_001", "2023/03/28 (Tue) 12:00", ("user", "What is the capital of Peru?")),
                     block("m::s2::episode_001", "2023/04/02 (Sun) 17:10",
                           ("user", "I adopted a parrot named Kiwi today!"),
                           ("assistant", "I adopted nothing, I am an assistant.")))


def test_relative_age_chain_answers_from_the_resolved_date_and_the_question_date():
    client = Stub()
    row = answer(client, "How many weeks ago did I adopt my parrot Kiwi?", pets(), asked="2023/04/16 (Sun) 20:00")
    assert client.kinds() == ["answer_temporal"] and row.answer == "2 weeks ago"
    fact = row.steps["temporal"]["facts"][0]
    assert (fact["date"], fact["basis"], fact["status"]) == ("2023-04-02", "today", "completed")
    assert "USER TURN" in client.requests[0][2] and "I am an assistant" not in client.requests[0][2]
    days = Stub()
    assert answer(days, "How many days ago did I adopt Kiwi?", pets(), asked="2023/04/16").answer == "14 days ago"


def test_temporal_ledger_checks_quotes_plans_and_gates_the_evidence():
    def invented(kind: str, text: str) -> Optional[dict[str, Any]]:
        if kind == "answer_temporal":
            return {"facts": [{"event": "adopted parrot", "status": "completed", "episode_id": "m::s2::episode_001",
                               "quote": "I adopted a parrot last month"},  # not what the user said
                              {"event": "adopt parrot", "status": "completed", "episode_id": "m::s2::episode_001",
                               "quote": "I am an assistant"}]}  # assistant-spoken
        return None

    client = Stub(invented)
    row = answer(client, "How many weeks ago did I adopt my parrot Kiwi?", pets(), asked="2023/04/16")
    # No grounded user statement and no failed call: the evidence gate answers insufficiency.
    assert row.answer == r.INSUFFICIENT and row.steps["temporal"]["facts"] == []
    assert client.kinds() == ["answer_temporal"]


def test_elapsed_time_from_two_completed_user_events_and_plans_do_not_count():
    ret = retrieval(block("m::s1::episode_001", "2023/05/01 (Mon) 09:00", ("user", "I started pottery class today.")),
                    block("m::s2::episode_001", "2023/05/20 (Sat) 09:00", ("user", "I finished my first pottery vase "
                                                                          "yesterday.")),
                    block("m::s3::episode_001", "2023/05/25 (Thu) 09:00", ("user", "I am going to glaze pottery "
                                                                          "next week.")))
    client = Stub()
    row = answer(client, "How many days passed between starting pottery class and finishing the vase?", ret,
                 asked="2023/06/01 (Thu) 10:00")
    facts = {f["date"]: f["status"] for f in row.steps["temporal"]["facts"]}
    assert facts == {"2023-05-01": "completed", "2023-05-19": "completed", "": "planned"}  # a plan: no date
    assert row.answer == "18 days" and client.kinds() == ["answer_temporal"]


# --------------------------------------------------------------------------- operator audits
def lakes() -> RetrievalRow:
    return retrieval(block("m::s1::episode_001", "2023/06/03 (Sat) 09:00", ("user", "Today I paddled on Lake Ardent.")),
                     block("m::s2::episode_001", "2023/06/10 (Sat) 09:00", ("user", "We reached Lake Brume at noon."),
                           ("assistant", "Lake Cindra is lovely too.")),
                     block("m::s3::episode_001", "2023/06/24 (Sat) 09:00", ("user", "I went to Lake Cindra last "
                                                                          "weekend.")))


def test_order_audit_picks_first_latest_previous_and_sequence_from_dated_grounded_rows():
    def rows(kind: str, text: str) -> Optional[dict[str, Any]]:
        if kind != "answer_order":
            return None
        return {"rows": [{"value": "Lake Cindra", "episode_id": "m::s3::episode_001",
                          "quote": "Lake Cindra last weekend"},
                         {"value": "Lake Brume", "episode_id": "m::s2::episode_001", "quote": "reached Lake Brume"},
                         {"value": "Lake Ardent", "episode_id": "m::s1::episode_001",
                          "quote": "paddled on Lake Ardent"},
                         {"value": "Lake Cindra", "episode_id": "m::s2::episode_001",  # assistant-spoken: dropped
                          "quote": "Lake Cindra is lovely"},
                         {"value": "Lake Dunmore", "episode_id": "m::s1::episode_001", "quote": "Lake Dunmore"}]}

    asked = "2023/07/01 (Sat) 10:00"
    got = {q: answer(Stub(rows), q, lakes(), asked=asked).answer for q in (
        "Which lake did I paddle on first?", "Which lake did I visit most recently?",
        "Which lake did I go to before I switched to Lake Cindra?", "In what order did I visit the lakes?")}
    assert list(got.values()) == ["Lake Ardent", "Lake Cindra", "Lake Brume",
                                  "Lake Ardent, then Lake Brume, then Lake Cindra"]
    client = Stub(rows)
    row = answer(client, "Which lake did I paddle on first?", lakes(), asked=asked)
    assert client.kinds() == ["answer_order"] and [c["role"] for c in row.llm_calls] == ["answer_order"]
    # "last weekend" said on 2023-06-24 dates the visit to 2023-06-17, not the session date.
    assert [x["date"] for x in row.steps["order"]["rows"]] == ["2023-06-03", "2023-06-10", "2023-06-17"]
    when = answer(Stub(rows), "When did I first paddle on a lake?", lakes(), asked=asked).answer
    assert when == "Lake Ardent, on June 3, 2023"
    assert r.pick_ordered("first", [{"value": "a", "date": "1"}, {"value": "b", "date": "1"}]) is None  # a tie
    undecided = Stub(lambda kind, text: {"rows": []} if kind == "answer_order" else None)
    row = answer(undecided, "Which lake did I paddle on first?", lakes(), asked=asked)
    assert undecided.kinds() == ["answer_order", "answer"] and row.steps["order"]["outcome"].startswith("fallback")


# --------------------------------------------------------------------------- config, fingerprint, dry run
def test_routes_are_switches_off_in_the_paper_configs_on_in_the_code_config():
    for paper in ("configs/longmemeval.yaml", "configs/locomo.yaml", "configs/locomo_code.yaml"):
        assert not any(vars(load_config([paper]).answer.routes)[k] for k in KEYS), paper
    code = load_config(["configs/longmemeval_code.yaml"]).answer.routes
    assert all(vars(code)[k] for k in KEYS)
    with pytest.raises(ConfigError, match="answer.routes.count_batch"):
        load_config(["configs/longmemeval.yaml"], ["answer.routes.count_batch=0"])
    base = fingerprint.run_components(load_config(["configs/longmemeval.yaml"]), "s")
    assert "routes" not in base["method"]["answer"] and not {"answer_count", "answer_temporal"} & set(base["roles"])
    for key in KEYS:
        on = fingerprint.run_components(load_config(["configs/longmemeval.yaml"], [f"answer.routes.{key}=true"]), "s")
        assert fingerprint.short(on) != fingerprint.short(base), key
    on = fingerprint.run_components(load_config(["configs/longmemeval.yaml"], ["answer.routes.count=true"]), "s")
    assert "answer_count" in on["roles"] and not {"answer_temporal", "answer_order"} & set(on["roles"])
    exp = load_experiments()
    rows = {tuple(v.set.items()): v.name for v in exp.variants}
    for key in KEYS:
        assert ((f"answer.routes.{key}", True),) in rows, key
    assert exp.panels["answer_routes"][0] == "base"


def test_dry_run_counts_the_ledger_calls_of_the_questions_worded_for_them(tmp_path):
    from tests.test_code_rules import LME_TINY

    sets = run_overrides(tmp_path, LME_TINY)
    plain = dryrun.estimate(load_config(["configs/longmemeval.yaml"], sets))
    assert not {"answer_count", "answer_temporal"} & {s["role"] for s in plain["stages"]}
    est = {s["role"]: s for s in dryrun.estimate(load_config(["configs/longmemeval_code.yaml"], sets))["stages"]}
    # lme_tiny: one "how many weeks ago" question (one call), one "how much ... in total" (scan + merge).
    assert est["answer_temporal"]["calls"] == 1 and est["answer_count"]["calls"] == 2
    assert est["answer_count"]["stage"] == "07_answer" and est["answer_count"]["prompt_tokens"] > 0
