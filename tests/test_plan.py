"""Stage 05 (common/method/plan.py): plan normalization, fallback plan, vocabulary, LLM planning."""
from __future__ import annotations

import copy

import pytest

from common.core.llm import LLMClient
from common.core.schema import Question
from common.method.plan import PlanError, fallback_plan, normalize_plan, plan_question, vocabulary_text
from tests import conftest
from tests.fake_openai import FakeOpenAI, FaultPlan


def anchor(entity="Melanie", prop="activity", **kw) -> dict:
    return {"entity": entity, "entity_type": "person", "property": prop, "value": "", **kw}


def hop(hid, a=None, deps=None, **kw) -> dict:
    return {"hop_id": hid, "purpose": "p", "anchor": a if a is not None else anchor(), "depends_on": deps or [], **kw}


def plan(hops, **kw) -> dict:
    base = {"answer_target": {"type": "value", "description": "d"}, "reasoning_type": "direct",
            "retrieval_scope": "point", "required_properties": [], "hops": hops}
    base.update(kw)
    return base


def make_client(server: FakeOpenAI, tmp_path) -> LLMClient:
    return conftest.make_client(server, tmp_path, "plan")


# --------------------------------------------------------------------------- normalize_plan
def test_normalize_plain_plan():
    p = normalize_plan(plan([hop("h1", anchor(prop="Means of Transport", condition_property="through",
                                               condition_value="summer"))]))
    (h,) = p.hops
    assert h.hop_id == "h1" and h.depends_on == []
    assert h.anchor.property == "means_of_transport"
    assert (h.anchor.condition_property, h.anchor.condition_value) == ("during", "summer")
    assert (p.reasoning_type, p.retrieval_scope, p.answer_target["type"]) == ("direct", "point", "value")


def test_normalize_repairs_hop_ids():
    p = normalize_plan(plan([hop("step one"), hop("H2"), hop("h2"), hop("")]))
    assert [h.hop_id for h in p.hops] == ["h1", "h2", "h3", "h4"]


def test_normalize_repaired_hop_ids_stay_unique():
    p = normalize_plan(plan([hop("h2"), hop("bad")]))
    ids = [h.hop_id for h in p.hops]
    assert ids[0] == "h2" and len(set(ids)) == 2


def test_normalize_dependencies():
    p = normalize_plan(plan([hop("h1"), hop("h2", deps=["H1", "h1", ""])]))
    assert p.hops[1].depends_on == ["h1"]  # lower-cased, empties dropped, deduplicated


@pytest.mark.parametrize("hops, bad", [
    ([hop("h1", deps=["h2"]), hop("h2")], "h2"),  # later hop
    ([hop("h1", deps=["h9"])], "h9"),  # unknown hop
    ([hop("h1", deps=["h1"])], "h1"),  # itself
    ([hop("h1", anchor(entity="$h3.bridge"))], "h3"),  # placeholder to an unknown hop
])
def test_normalize_bad_dependency_raises(hops, bad):
    with pytest.raises(PlanError, match=f"depends on {bad}, which is not an earlier hop"):
        normalize_plan(plan(hops))


def test_normalize_bridge_placeholders_add_dependency():
    p = normalize_plan(plan([
        hop("h1", anchor(prop="sister")),
        hop("h2", anchor(entity="Caroline", prop="birthday", value="$h1.bridge")),
        hop("h3", anchor(entity="$h2.bridge", prop="gift", condition_property="for",
                         condition_value="$h1.bridge"), deps=["h2"]),
    ]))
    assert p.hops[1].depends_on == ["h1"]
    assert p.hops[2].depends_on == ["h2", "h1"]


@pytest.mark.parametrize("reasoning, ttype, expected", [
    ("aggregation", "value", "all_matching"),
    ("comparison", "value", "all_matching"),
    ("direct", "count", "all_matching"),
    ("temporal", "list", "all_matching"),
    ("temporal", "time", "point"),
    ("direct", "value", "point"),
])
def test_normalize_scope_inferred_when_missing(reasoning, ttype, expected):
    raw = plan([hop("h1")], reasoning_type=reasoning, answer_target={"type": ttype})
    del raw["retrieval_scope"]
    assert normalize_plan(raw).retrieval_scope == expected
    raw["retrieval_scope"] = "everything"  # invalid counts as missing
    assert normalize_plan(raw).retrieval_scope == expected


def test_normalize_explicit_scope_kept():
    raw = plan([hop("h1")], reasoning_type="aggregation", retrieval_scope="Point")
    assert normalize_plan(raw).retrieval_scope == "point"


def test_normalize_unknown_reasoning_and_target():
    p = normalize_plan(plan([hop("h1")], reasoning_type="vibes", answer_target={"type": "color"}))
    assert p.reasoning_type == "direct" and p.answer_target["type"] == "value"
    p = normalize_plan(plan([hop("h1")], reasoning_type="Multi_Hop", answer_target="oops"))
    assert p.reasoning_type == "multi_hop" and p.answer_target == {"type": "value", "description": ""}


@pytest.mark.parametrize("a", [anchor(entity=""), anchor(prop=""), anchor(prop="???"), {}, "Melanie", None])
def test_normalize_anchor_without_entity_or_property_raises(a):
    h = hop("h1")
    h["anchor"] = a
    with pytest.raises(PlanError, match=r"hops\[1\]\.anchor"):
        normalize_plan(plan([h]))


def test_normalize_anchor_aliases_and_entity_type():
    p = normalize_plan(plan([hop("h1", {"subject": "Melanie", "broad_property": "Pet Name",
                                        "entity_type": "Animal"})]))
    a = p.hops[0].anchor
    assert (a.entity, a.property, a.entity_type) == ("Melanie", "pet_name", "other")


@pytest.mark.parametrize("hops", [None, [], "h1", [["h1"]]])
def test_normalize_bad_hops_raise(hops):
    with pytest.raises(PlanError):
        normalize_plan(plan(hops))


def test_normalize_required_properties():
    p = normalize_plan(plan([hop("h1")], required_properties=[
        {"entity": "Melanie", "broad_property": "Pet Name", "role": "weird"},
        {"entity": "x"},  # no property: skipped
        "junk",
        {"property": "time", "role": "Time"},
    ]))
    assert [(r["broad_property"], r["role"]) for r in p.required_properties] == [
        ("pet_name", "answer_property"), ("time", "time")]


def test_normalize_does_not_mutate_input():
    raw = plan([hop("x"), hop("h2", anchor(value="$h1.bridge"))])
    before = copy.deepcopy(raw)
    normalize_plan(raw)
    assert raw == before


# --------------------------------------------------------------------------- fallback_plan
def test_fallback_plan_aggregate_with_name():
    p = fallback_plan("How many times has Melanie gone camping?")
    (h,) = p.hops
    assert h.hop_id == "h1" and h.anchor.entity == "Melanie" and h.anchor.property == "camping"
    assert p.retrieval_scope == "all_matching" and p.reasoning_type == "aggregation"


def test_fallback_plan_possessive_point():
    p = fallback_plan("When did Caroline's sister visit?")
    assert p.hops[0].anchor.entity == "Caroline"
    assert p.retrieval_scope == "point" and p.reasoning_type == "direct"


@pytest.mark.parametrize("q", ["what is the name of the dog?", "What did I buy at the market?"])
def test_fallback_plan_without_name_uses_user(q):
    a = fallback_plan(q).hops[0].anchor
    assert a.entity == "user" and a.entity_type == "person"
    assert a.property  # never empty


def test_fallback_plan_empty_question():
    a = fallback_plan("").hops[0].anchor
    assert (a.entity, a.property) == ("user", "fact")


# --------------------------------------------------------------------------- vocabulary_text
def test_vocabulary_text_top_n_ties_alphabetical():
    vocab = {"zeta": 3, "alpha": 3, "beta": 5, "gamma": 1, "delta": 3}
    # The 3 most frequent (ties alphabetical) are kept; shown alphabetically, as the authors'
    # code injects the vocabulary (issue 11; order was by frequency before).
    assert vocabulary_text(vocab, 3) == ("alpha, beta, delta", 3)
    assert vocabulary_text(vocab, 100) == ("alpha, beta, delta, gamma, zeta", 5)


def test_vocabulary_text_empty():
    text, shown = vocabulary_text({}, 10)
    assert shown == 0 and "no properties" in text


# --------------------------------------------------------------------------- plan_question
QUESTION = Question(qid="conv-26::q1", memory_id="conv-26", question="How many times has Melanie gone camping?")
VOCAB = {"activity": 9, "camping": 4, "pet_name": 4, "zzz_rare": 1}


def test_plan_question_ok(tmp_path):
    with FakeOpenAI() as server:
        row = plan_question(make_client(server, tmp_path), QUESTION, VOCAB, granularity="broad", vocabulary_max=3)
        assert server.counts_by_kind() == {"plan": 1}
        user = server.requests_of_kind("plan")[0]["messages"][-1]["content"]
    assert "activity, camping, pet_name" in user and "zzz_rare" not in user
    assert "Question: How many times has Melanie gone camping?" in user
    assert (row.vocabulary_size, row.vocabulary_total) == (3, 4)
    assert not row.repaired and not row.fallback_used and row.error == ""
    (h,) = row.plan.hops
    assert (h.anchor.entity, h.anchor.property) == ("Melanie", "camping")
    assert row.plan.reasoning_type == "aggregation" and row.plan.retrieval_scope == "all_matching"
    assert h.purpose != "fallback: question terms"
    assert row.qid == "conv-26::q1" and len(row.llm_calls) == 1


def test_plan_question_repair(tmp_path):
    plan_ = FaultPlan(script=["malformed"], kinds={"plan"})
    with FakeOpenAI(faults=plan_) as server:
        row = plan_question(make_client(server, tmp_path), QUESTION, VOCAB, granularity="fine", vocabulary_max=10)
        assert server.counts_by_kind() == {"plan": 1, "plan_repair": 1}
    assert row.repaired and not row.fallback_used and row.error == ""
    assert row.plan.hops[0].anchor.entity == "Melanie"
    assert row.plan.hops[0].purpose != "fallback: question terms"
    assert [c["prompt_id"] for c in row.llm_calls] == ["plan_user", "plan_repair_user"]


def test_plan_question_fallback(tmp_path):
    plan_ = FaultPlan(script=["malformed", "malformed"], kinds={"plan", "plan_repair"})
    with FakeOpenAI(faults=plan_) as server:
        row = plan_question(make_client(server, tmp_path), QUESTION, VOCAB, granularity="broad", vocabulary_max=10)
        assert server.request_count == 2
    assert row.repaired and row.fallback_used and row.error.startswith("invalid_reply: ValueError:")
    assert row.plan == fallback_plan(QUESTION.question)


def test_plan_question_http_error_fallback(tmp_path):
    plan_ = FaultPlan(script=["400"], kinds={"plan"})
    with FakeOpenAI(faults=plan_) as server:
        row = plan_question(make_client(server, tmp_path), QUESTION, {}, granularity="broad", vocabulary_max=10)
    assert row.fallback_used and not row.repaired and "http_400" in row.error
    assert row.plan == fallback_plan(QUESTION.question)
    assert (row.vocabulary_size, row.vocabulary_total) == (0, 0)


def test_plan_question_truncated_twice_falls_back(tmp_path):
    plan_ = FaultPlan(script=["truncated", "truncated"], kinds={"plan", "plan_repair"})
    with FakeOpenAI(faults=plan_) as server:
        row = plan_question(make_client(server, tmp_path), QUESTION, VOCAB, granularity="broad", vocabulary_max=10)
    assert row.fallback_used and row.error
    assert row.plan == fallback_plan(QUESTION.question)


def test_the_vocabulary_text_is_made_once_per_distinct_vocabulary_not_once_per_question(monkeypatch):
    """Every question of a memory shares its vocabulary; counting its tokens per question was a tenth
    of stage 05. The memo is keyed by the vocabulary's content, so a changed vocabulary is made anew."""
    from common.method import plan as plan_mod

    counted: list[str] = []
    real = plan_mod.count_tokens
    monkeypatch.setattr(plan_mod, "count_tokens", lambda text: counted.append(text) or real(text))
    vocab = {f"prop_{i:03d}_memo_probe": 300 - i for i in range(300)}
    first = plan_mod.vocabulary_text(vocab, None, 200)
    n = len(counted)
    assert n > 1 and 0 < first[1] < 300  # cut to fit 200 tokens, by a search over prefixes
    assert plan_mod.vocabulary_text(dict(reversed(list(vocab.items()))), None, 200) == first  # same content
    assert len(counted) == n  # ... no token counted again
    vocab["prop_999_memo_probe"] = 1000  # the most frequent property now: a different text
    second = plan_mod.vocabulary_text(vocab, None, 200)
    assert "prop_999_memo_probe" in second[0] and "prop_999_memo_probe" not in first[0] and len(counted) > n
