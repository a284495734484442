"""The authors' versions of the LongMemEval guards, ledgers and answer calls, each a switch.

Expectations come from reference_notes 5.4-5.7 (the authors' LongMemEval retrieval and answer
step), read generically: every rule is chosen by the question's wording or its plan, never by a
benchmark label. Each test builds a tiny hand-made memory on which the switch changes the selected
episodes, the count or the answer, and checks the switch off keeps the harness's own behaviour.
"""
from __future__ import annotations

import json
import re
from datetime import date
from typing import Any, Optional

import pytest

from common.core.config import ScopeBudget, load_config
from common.core.schema import Anchor, Hop, Plan, Question
from common.method import answer as answer_mod
from common.method import retrieve as retrieve_mod
from common.method import routes as r
from common.pipeline.experiments import load as load_experiments
from tests.fake_openai.scripted import scripted_content
from tests.test_answer_routes import Stub, answer, block, retrieval

NEW_KEYS = {"date_window_dates": True, "user_overlap_temporal_max": 96, "user_overlap_below": 32,
            "count_dedup": "duplicate_of", "count_complete_gate": True, "count_cumulative": True,
            "count_reference_event": True, "temporal_answer_call": True, "temporal_completed_upgrade": True,
            "age_chain": True, "order_move_rows": True, "order_bare_last": True, "tenure_duration": True,
            "order_previous_earliest": True}


def ep(n: int, day: str, *turns: tuple[str, str]) -> str:
    return block(f"m::s{n}::episode_001", day, *turns)


# --------------------------------------------------------------------------- 1. retrieval guards
def test_named_dates_are_read_relative_to_the_question_date():
    asked = date(2023, 8, 20)  # a Sunday
    assert r.named_dates("What did I cook yesterday?", asked) == [date(2023, 8, 19)]
    assert r.named_dates("the day before yesterday", asked) == [date(2023, 8, 18)]
    assert r.named_dates("What did I buy a week ago?", asked) == [date(2023, 8, 13)]
    assert r.named_dates("Where did I go last weekend?", asked) == [date(2023, 8, 12), date(2023, 8, 13)]
    assert r.named_dates("Who did I meet last Sunday?", asked) == [date(2023, 8, 13)]  # same weekday: 7 back
    assert r.named_dates("What did I do last Tuesday?", asked) == [date(2023, 8, 15)]
    assert r.named_dates("What did I eat today?", asked) == [asked]
    assert r.named_dates("What did I finish before today?", asked) == []
    assert r.named_dates("What is my name?", asked) == []


def test_date_window_guard_adds_the_episodes_of_the_named_days():
    ret = retrieval(ep(1, "2023/08/01 (Tue) 09:00", ("user", "I like soup.")))
    pool = [ret.buffer_text,
            ep(2, "2023/08/15 (Tue) 19:00", ("user", "Tonight was risotto night.")),
            ep(3, "2023/08/15 (Tue) 08:00", ("user", "Breakfast was porridge.")),
            ep(4, "2023/08/16 (Wed) 19:00", ("user", "Tacos again."))]
    question = "What did I cook last Tuesday?"
    on = Stub()
    row = answer(on, question, ret, routes=r.Routes(date_window=True, date_window_dates=True), pool=pool)
    assert row.steps["date_window_dates"] == {"dates": ["2023-08-15"],
                                              "added": ["m::s2::episode_001", "m::s3::episode_001"]}
    assert "risotto" in on.requests[0][2] and "porridge" in on.requests[0][2] and "Tacos" not in on.requests[0][2]
    off = Stub()
    row = answer(off, question, ret, routes=r.Routes(date_window=True), pool=pool)  # drops only: nothing added
    assert "date_window_dates" not in row.steps and "risotto" not in off.requests[0][2]
    capped = answer(Stub(), question, ret, routes=r.Routes(date_window=True, date_window_dates=True,
                                                           date_window_max=1), pool=pool)
    assert capped.steps["date_window_dates"]["added"] == ["m::s2::episode_001"]


def _overlap_pool(n: int) -> list[str]:
    return [ep(100 + i, "2023/07/01", ("user", f"My pottery wheel session number {i}.")) for i in range(n)]


def test_user_overlap_guard_has_the_authors_two_limits_and_their_candidate_condition():
    code = r.Routes(user_overlap=True, user_overlap_temporal_max=96, user_overlap_below=32)
    small = retrieval(ep(1, "2023/07/01", ("user", "I love clay.")))
    temporal = answer(Stub(), "How many weeks ago did I start my pottery wheel sessions?", small,
                      routes=code, pool=_overlap_pool(60))
    assert len(temporal.steps["user_overlap"]["added"]) == 60  # up to 96 for temporal wording
    harness = answer(Stub(), "How many weeks ago did I start my pottery wheel sessions?", small,
                     routes=r.Routes(user_overlap=True), pool=_overlap_pool(60))
    assert len(harness.steps["user_overlap"]["added"]) == 48
    counting = answer(Stub(), "How many pottery wheel sessions did I have?", small, routes=code,
                      pool=_overlap_pool(60))
    assert len(counting.steps["user_overlap"]["added"]) == 48
    big = retrieval(*[ep(i, "2023/07/02", ("user", f"Clay note {i}.")) for i in range(1, 33)])  # 32 candidates
    full = answer(Stub(), "How many pottery wheel sessions did I have?", big, routes=code, pool=_overlap_pool(60))
    assert full.steps["user_overlap"]["added"] == []
    assert answer(Stub(), "How many pottery wheel sessions did I have?", big, routes=r.Routes(user_overlap=True),
                  pool=_overlap_pool(60)).steps["user_overlap"]["added"]  # the harness adds regardless


class Spy(retrieve_mod.Retriever):
    budgets: list[ScopeBudget]

    def fallback(self, question, anchor, budget, structured_found=True):  # type: ignore[no-untyped-def]
        self.budgets.append(budget)
        return []


def test_broad_state_lookup_widens_the_hop_budgets_to_48_from_the_wording():
    from tests.test_code_fidelity import EMB, _memory

    view, index, _, _ = _memory()
    assert retrieve_mod.broad_state_lookup("Which kitchen appliance did I use before the air fryer?")
    assert retrieve_mod.broad_state_lookup("Where did I live before I moved to Porto?")
    assert not retrieve_mod.broad_state_lookup("Which appliance do I use most?")  # no ordering word
    assert not retrieve_mod.broad_state_lookup("What did I eat before the concert?")  # no item/device/move word
    for on, dense, fallback in ((True, 48, 48), (False, 8, 12)):
        spy = Spy(index, view, EMB, load_config(["configs/longmemeval.yaml"],
                                                [f"retrieve.broad_state_lookup={str(on).lower()}"]).retrieve)
        spy.budgets = []
        spy.hop_hits("Which device did I use before the new one?", Anchor(entity="user", property="device"), "point")
        spy.hop_hits("Which device did I use before the new one?", Anchor(entity="user", property="device"),
                     "all_matching")
        assert (spy.budgets[0].dense_k, spy.budgets[0].fallback_k) == (dense, fallback), on
        assert spy.budgets[1].fallback_k is None and spy.budgets[1].dense_k == (48 if on else 20)


# --------------------------------------------------------------------------- 2. answering
def _plan(reasoning: str = "direct", scope: str = "point", target: str = "value", hops: int = 1) -> Plan:
    return Plan(answer_target={"type": target, "description": ""}, reasoning_type=reasoning, retrieval_scope=scope,
                required_properties=[], hops=[Hop(f"h{i}", "", Anchor(entity="user")) for i in range(1, hops + 1)])


def test_the_draft_uses_the_authors_longmemeval_draft_prompt_when_switched():
    ret = retrieval(ep(1, "2023/08/01", ("user", "My kayak is green.")))
    q = Question("q", "m", "What colour is my kayak?", "2023/08/20")
    lme, safe = Stub(), Stub()
    answer_mod.answer_question(lme, q, _plan(), ret, steps=answer_mod.AnswerSteps(  # type: ignore[arg-type]
        prompt_set="code_rules", draft="json", draft_prompt="longmemeval"))
    answer_mod.answer_question(safe, q, _plan(), ret, steps=answer_mod.AnswerSteps(  # type: ignore[arg-type]
        prompt_set="code_rules", draft="json"))
    from common.core import prompts

    assert lme.requests[0][2].startswith(prompts.load("code_rules.answer_draft_system"))
    assert safe.requests[0][2].startswith(prompts.load("code_rules.answer_system"))
    assert lme.requests[0][1] == safe.requests[0][1] == "code_rules.answer_draft_user"


@pytest.mark.parametrize("question, plan, whole", [
    ("When did I repaint the fence?", _plan("temporal"), "temporal point plan"),
    ("Where do I currently keep my kayak?", _plan("multi_hop", hops=2), "latest-state wording"),
    ("What did I use before I switched to the crimson kayak?", _plan("multi_hop", hops=2), "previous-state wording"),
    ("What colour is my kayak?", _plan(), "direct point lookup about the user"),
    ("What colour is Lena's kayak?", _plan(), ""),  # not about the user
    ("Can you recommend a kayak for me?", _plan(), ""),  # a personalised suggestion is reranked
    ("Why did Lena sell the kayak?", _plan("causal", hops=2), ""),
])
def test_rerank_keeps_every_candidate_of_the_point_plans_the_authors_keep_whole(question, plan, whole):
    ret = retrieval(*[ep(i, f"2023/08/{i:02d}", ("user", f"My kayak note {i}.")) for i in range(1, 6)])
    q = Question("q", "m", question, "2023/08/20")
    on = Stub()
    row = answer_mod.answer_question(on, q, plan, ret, steps=answer_mod.AnswerSteps(  # type: ignore[arg-type]
        prompt_set="code_rules", rerank=True, verify=True, keep_whole_point=True))
    assert answer_mod.kept_whole(question, plan) == whole
    if whole:
        assert on.kinds() == ["answer", "answer_verify"] and row.steps["rerank"]["skipped"].startswith(whole)
        assert on.requests[1][2].count("### Episode") == 5  # verify reads every candidate
    else:
        assert on.kinds() == ["answer_rerank", "answer", "answer_verify"]
    off = Stub()
    answer_mod.answer_question(off, q, plan, ret, steps=answer_mod.AnswerSteps(  # type: ignore[arg-type]
        prompt_set="code_rules", rerank=True))
    assert off.kinds()[0] == "answer_rerank"


# --------------------------------------------------------------------------- counting ledger
def yoga() -> Any:
    return retrieval(*[ep(i, f"2023/06/{i * 7:02d} (Wed) 18:00", ("user", f"I went to a yoga class tonight, {n}."))
                       for i, n in ((1, "loved it"), (2, "so sore"), (3, "new teacher"))])


def _yoga_items(kind: str, text: str) -> Optional[dict[str, Any]]:
    if kind == "answer_count":
        eids = re.findall(r"^### Episode (\S+)", text, re.M)
        return {"episodes": [{"episode_id": e, "has_instances": True} for e in eids],
                "items": [{"episode_id": e, "item": "yoga class", "quantity": 1, "unit": "class",
                           "quote": "I went to a yoga class tonight"} for e in eids]}
    if kind == "answer_count_merge":  # three instances, no duplicate
        ids = re.findall(r"^(\w+) \|", text, re.M)
        return {"items": [{"id": i, "in_scope": True, "duplicate_of": ""} for i in ids]}
    return None


def test_count_merges_only_through_a_high_confidence_duplicate_of():
    question = "How many yoga classes did I attend?"
    harness = answer(Stub(_yoga_items), question, yoga(), routes=r.Routes(count=True))
    assert harness.answer == "1"  # name + quantity stems merged the three classes
    code = answer(Stub(_yoga_items), question, yoga(), routes=r.Routes(count=True, count_dedup="duplicate_of"))
    assert code.answer == "3" and len(code.steps["count"]["kept"]) == 3
    items = [{"id": f"c{i}", "item": "yoga class", "quantity": 1.0, "unit": ""} for i in range(3)]
    low = {"c1": {"duplicate_of": "c0", "dedup_confidence": "medium"}, "c2": {"duplicate_of": "c0",
                                                                             "dedup_confidence": "high"}}
    assert [i["id"] for i in r.dedup(items, low, "duplicate_of")] == ["c0", "c1"]


def test_count_completeness_gate_sends_an_incomplete_ledger_to_the_answer_call():
    def lose_one(kind: str, text: str) -> Optional[dict[str, Any]]:
        reply = _yoga_items(kind, text)
        if kind == "answer_count" and reply is not None:  # the scan and its retry never account for s3
            reply["episodes"] = [e for e in reply["episodes"] if e["episode_id"] != "m::s3::episode_001"]
            reply["items"] = [i for i in reply["items"] if i["episode_id"] != "m::s3::episode_001"]
        return reply

    routes = r.Routes(count=True, count_dedup="duplicate_of")
    ungated = answer(Stub(lose_one), "How many yoga classes did I attend?", yoga(), routes=routes)
    assert ungated.answer == "2" and not ungated.steps["count"]["complete"]
    client = Stub(lose_one)
    gated = answer(client, "How many yoga classes did I attend?", yoga(),
                   routes=r.Routes(count=True, count_dedup="duplicate_of", count_complete_gate=True))
    assert gated.steps["count"]["outcome"] == "fallback: evidence incomplete (completeness gate)"
    assert client.kinds()[-1] == "answer" and "Items found by a checked scan" in client.requests[-1][2]


def test_a_users_cumulative_total_overrides_the_items_found():
    ret = retrieval(ep(1, "2023/06/01", ("user", "I tried a new tea blend today, $12.")),
                    ep(2, "2023/06/09", ("user", "Another tea blend arrived, $9.")),
                    ep(3, "2023/06/20", ("user", "I've sampled 7 different tea blends so far this year!")))
    question = "How many tea blends have I tried?"
    assert answer(Stub(), question, ret, routes=r.Routes(count=True)).answer == "3"  # three turns with a number
    row = answer(Stub(), question, ret, routes=r.Routes(count=True, count_cumulative=True))
    assert row.answer == "7" and row.steps["count"]["cumulative"]["episode_id"] == "m::s3::episode_001"
    other = r.parse_block(ep(4, "2023/06/21", ("user", "I tried a different tea blend, the one you named.")))
    assert other is not None and r.cumulative_total([other], question) is None  # "a different" is no total


def test_the_reference_event_call_bounds_a_before_after_count():
    ret = retrieval(ep(1, "2023/04/02", ("user", "Saw a jazz concert downtown, tickets were $40.")),
                    ep(2, "2023/05/01", ("user", "I moved to Denver today!")),
                    ep(3, "2023/06/11", ("user", "Went to a rock concert, $55.")))

    def ref(kind: str, text: str) -> Optional[dict[str, Any]]:
        if kind == "answer_count_reference":
            return {"event": "moved to Denver", "episode_id": "m::s2::episode_001", "quote": "I moved to Denver today"}
        return None

    question = "How many concerts did I go to after I moved to Denver?"
    assert answer(Stub(ref), question, ret, routes=r.Routes(count=True)).answer == "2"
    client = Stub(ref)
    row = answer(client, question, ret, routes=r.Routes(count=True, count_reference_event=True))
    assert row.answer == "1" and client.kinds()[0] == "answer_count_reference"
    assert row.steps["count"]["reference"]["date"] == "2023-05-01"
    assert [c["role"] for c in row.llm_calls][0] == "answer_count"


# --------------------------------------------------------------------------- temporal ledger
def parrots() -> Any:
    return retrieval(ep(1, "2023/04/02 (Sun) 17:10", ("user", "I adopted a parrot named Kiwi today!")),
                     ep(2, "2023/04/09 (Sun) 17:10", ("user", "I adopted a parrot named Mango, so fun.")))


def test_completed_wording_upgrades_a_mentioned_fact():
    def mentioned(kind: str, text: str) -> Optional[dict[str, Any]]:
        if kind == "answer_temporal":
            reply = json.loads(scripted_content(kind, text))
            return {"facts": [dict(f, status="mentioned") for f in reply["facts"]][:1]}
        return None

    question = "How many weeks ago did I adopt my parrot Kiwi?"
    plain = Stub(mentioned)
    assert answer(plain, question, parrots(), routes=r.Routes(relative_age=True), asked="2023/04/16").answer \
        != "2 weeks ago"
    up = answer(Stub(mentioned), question, parrots(), routes=r.Routes(relative_age=True,
                                                                      temporal_completed_upgrade=True),
                asked="2023/04/16")
    assert up.answer == "2 weeks ago" and up.steps["temporal"]["facts"][0]["status"] == "completed"


def test_the_ledger_answer_call_is_gated_on_user_quotes_and_repaired_once():
    question = "How many weeks ago did I adopt a parrot?"  # two adoptions: no unique date
    calls: list[str] = []

    def uncited(kind: str, text: str) -> Optional[dict[str, Any]]:
        calls.append(kind)
        if kind == "answer_temporal_answer":
            return {"answer": "3 weeks ago", "evidence": [{"episode_id": "m::s1::episode_001",
                                                           "quote": "I bought a parrot"}]}  # not verbatim
        if kind == "answer_temporal_repair":
            return {"answer": "2 weeks ago", "evidence": [{"episode_id": "m::s1::episode_001",
                                                           "quote": "I adopted a parrot named Kiwi today"}]}
        return None

    harness = Stub(uncited)
    assert answer(harness, question, parrots(), routes=r.Routes(relative_age=True), asked="2023/04/23").answer \
        != "2 weeks ago" and harness.kinds()[-1] == "answer"
    client = Stub(uncited)
    row = answer(client, question, parrots(), routes=r.Routes(relative_age=True, temporal_answer_call=True),
                 asked="2023/04/23")
    assert client.kinds() == ["answer_temporal", "answer_temporal_answer", "answer_temporal_repair"]
    assert row.answer == "2 weeks ago" and row.steps["temporal"]["ledger_answer"]["grounded_quotes"] == 0
    assert [c["role"] for c in row.llm_calls] == ["answer_temporal"] * 3

    def never(kind: str, text: str) -> Optional[dict[str, Any]]:
        if kind in ("answer_temporal_answer", "answer_temporal_repair"):
            return {"answer": "3 weeks ago", "evidence": []}
        return None

    assert answer(Stub(never), question, parrots(), routes=r.Routes(relative_age=True, temporal_answer_call=True),
                  asked="2023/04/23").answer == r.INSUFFICIENT


def test_two_quotes_are_needed_for_since_when_questions():
    blocks = [b for b in (r.parse_block(t) for t in parrots().buffer_text.split("\n\n")) if b]
    by_id = {b.episode_id: b for b in blocks}
    quotes = [{"episode_id": "m::s1::episode_001", "quote": "I adopted a parrot named Kiwi today"}]
    assert r.evidence_gate("x", quotes, by_id) == 1
    assert r.TWO_QUOTES_RE.search("How many days had passed since I adopted Kiwi when I adopted Mango?")


def test_the_relative_age_chain_adds_an_offset_to_a_cited_anchor_age():
    ret = retrieval(ep(1, "2023/05/01", ("user", "I started pottery three weeks before the recital.")),
                    ep(2, "2023/05/20", ("user", "The recital was 2 weeks ago and it went great.")))

    def chain(kind: str, text: str) -> Optional[dict[str, Any]]:
        if kind == "answer_temporal":
            return {"facts": [{"event": "started pottery", "status": "mentioned", "episode_id": "m::s1::episode_001",
                               "quote": "I started pottery three weeks before the recital"}]}
        if kind == "answer_age_chain":
            return {"target_age": None,
                    "anchor_age": {"value": 5, "unit": "weeks", "episode_id": "m::s2::episode_001",
                                   "quote": "The recital was 2 weeks ago"},
                    "offset": {"value": 3, "unit": "week", "direction": "before", "episode_id": "m::s1::episode_001",
                               "quote": "three weeks before the recital"}}
        return None

    question = "How many weeks ago did I start pottery?"
    harness = Stub(chain)
    assert answer(harness, question, ret, routes=r.Routes(relative_age=True), asked="2023/06/10").answer \
        != "8 weeks ago"
    client = Stub(chain)
    row = answer(client, question, ret, routes=r.Routes(relative_age=True, age_chain=True), asked="2023/06/10")
    assert row.answer == "8 weeks ago" and client.kinds() == ["answer_temporal", "answer_age_chain"]

    def uncited(kind: str, text: str) -> Optional[dict[str, Any]]:
        reply = chain(kind, text)
        if kind == "answer_age_chain" and reply:
            reply["offset"]["quote"] = "three weeks before my birthday"  # not what the user said
        return reply

    assert answer(Stub(uncited), question, ret, routes=r.Routes(relative_age=True, age_chain=True),
                  asked="2023/06/10").answer != "8 weeks ago"


def test_current_role_tenure_is_a_duration():
    ret = retrieval(ep(1, "2021/03/03 (Wed) 09:00", ("user", "I got promoted to senior analyst today in my role!")),
                    ep(2, "2022/01/10", ("user", "Lunch was good.")))
    question = "How long have I been working in my current role?"
    routes = r.Routes(temporal=True, tenure_duration=True)
    assert r.route_of(question, _plan(), r.Routes(temporal=True)) == ""
    assert r.route_of(question, _plan(), routes) == "tenure"
    client = Stub()
    row = answer(client, question, ret, routes=routes, asked="2023/08/20")
    assert row.answer == "2 years and 5 months" and client.kinds() == ["answer_temporal"]
    assert r.duration_text(date(2023, 1, 5), date(2023, 4, 1)) == "2 months"


# --------------------------------------------------------------------------- operator audits
def test_move_rows_answer_a_previous_move_question():
    ret = retrieval(ep(1, "2022/09/01", ("user", "I moved to Lisbon for the new job.")),
                    ep(2, "2023/07/02", ("user", "Big news: I just relocated to Porto last week.")))
    question = "Where did I live before I moved to Porto?"
    empty = Stub(lambda kind, text: {"rows": []} if kind == "answer_order" else None)
    row = answer(empty, question, ret, routes=r.Routes(order=True), asked="2023/08/20")
    assert row.steps["order"]["outcome"].startswith("fallback") and empty.kinds()[-1] == "answer"
    moved = Stub(lambda kind, text: {"rows": []} if kind == "answer_order" else None)
    row = answer(moved, question, ret, routes=r.Routes(order=True, order_move_rows=True), asked="2023/08/20")
    assert row.answer == "Lisbon" and moved.kinds() == ["answer_order"]
    assert [x["date"] for x in row.steps["order"]["rows"]] == ["2022-09-01", "2023-06-25"]
    latest = answer(Stub(lambda k, t: {"rows": []} if k == "answer_order" else None),
                    "Where did I move to most recently?", ret, routes=r.Routes(order=True, order_move_rows=True),
                    asked="2023/08/20")
    assert latest.answer == "Porto"


def test_previous_wording_can_pick_the_earliest_state_as_the_authors_do():
    ret = retrieval(ep(1, "2021/02/01", ("user", "I moved to Lyon for school.")),
                    ep(2, "2022/09/01", ("user", "I moved to Lisbon for the new job.")),
                    ep(3, "2023/07/02", ("user", "Big news: I just relocated to Porto last week.")))
    question = "Where did I live before I moved to Porto?"

    def empty(kind: str, text: str) -> Optional[dict[str, Any]]:
        return {"rows": []} if kind == "answer_order" else None

    harness = answer(Stub(empty), question, ret, routes=r.Routes(order=True, order_move_rows=True), asked="2023/08/20")
    assert harness.answer == "Lisbon"  # the state just before the latest
    code = answer(Stub(empty), question, ret, routes=r.Routes(order=True, order_move_rows=True,
                                                             order_previous_earliest=True), asked="2023/08/20")
    assert code.answer == "Lyon"


def test_a_bare_last_asks_for_the_latest():
    on = r.Routes(order=True, order_bare_last=True)
    assert r.route_of("Where was my last trip?", _plan(), r.Routes(order=True)) == ""
    assert r.route_of("Where was my last trip?", _plan(), on) == "order"
    assert r.operator_of("When was the last time I went hiking?", bare_last=True) == "latest"
    assert r.operator_of("When was the last time I went hiking?") == ""
    for q in ("What did I buy last week?", "What did I read in the last three months?", "Who called last Friday?",
              "What did I eat last night?", "Did I finish it at last?"):
        assert r.operator_of(q, bare_last=True) == "", q


# --------------------------------------------------------------------------- configs
def test_the_code_config_turns_on_every_authors_version_and_the_paper_configs_none():
    code = load_config(["configs/longmemeval_code.yaml"])
    assert {k: getattr(code.answer.routes, k) for k in NEW_KEYS} == NEW_KEYS
    assert code.answer.draft_prompt == "longmemeval" and code.answer.keep_whole_point
    assert code.retrieve.broad_state_lookup
    for paper in ("configs/longmemeval.yaml", "configs/locomo.yaml", "configs/locomo_code.yaml"):
        cfg = load_config([paper])
        assert not cfg.retrieve.broad_state_lookup and cfg.answer.draft_prompt == "answer_system", paper
        assert not cfg.answer.keep_whole_point and cfg.answer.routes.count_dedup == "name_quantity", paper
        assert not any(getattr(cfg.answer.routes, k) for k in NEW_KEYS if isinstance(NEW_KEYS[k], bool)), paper
    rows = {v.name: v.set for v in load_experiments().variants}
    for name in load_experiments().panels["lme_code_versions"][1:]:
        assert rows[name], name
    switched = {k.rsplit(".", 1)[1] for s in rows.values() for k in s}
    assert set(NEW_KEYS) | {"broad_state_lookup", "draft_prompt", "keep_whole_point"} <= switched


def test_the_docs_name_every_new_key():
    from pathlib import Path

    docs = Path(__file__).resolve().parents[1] / "docs"
    design, published = (docs / "design-decisions.md").read_text(), (docs / "published-numbers.md").read_text()
    for key in [*NEW_KEYS, "broad_state_lookup", "draft_prompt", "keep_whole_point"]:
        assert key in design and key in published, key
    assert "the one generic rule" not in design  # keep_top_dense is not the only generic LongMemEval rule
    sources = (Path(__file__).resolve().parents[1] / "common" / "prompts" / "SOURCES.md").read_text()
    assert "`code_rules.answer_draft_system` | the authors' code, LongMemEval FINAL draft system prompt" in sources


def test_dry_run_counts_the_reference_event_call_of_a_before_after_count(tmp_path):
    from common.pipeline import dryrun
    from tests.conftest import run_overrides
    from tests.test_code_rules import LME_TINY

    items = json.loads(LME_TINY.read_text())
    for it in items:
        if it["question_id"] == "multi_0001":
            it["question"] = "How much did I spend on bikes after I moved to the city?"
    data = tmp_path / "lme.json"
    data.write_text(json.dumps(items))
    sets = run_overrides(tmp_path, data)

    def count_calls(*extra: str) -> int:
        est = dryrun.estimate(load_config(["configs/longmemeval.yaml"], sets + ["answer.routes.count=true", *extra]))
        return next(s["calls"] for s in est["stages"] if s["role"] == "answer_count")

    assert count_calls() == 2 and count_calls("answer.routes.count_reference_event=true") == 3
