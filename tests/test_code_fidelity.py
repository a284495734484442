"""The code configurations as the authors ran each benchmark (reference_notes 3.3, 3.5, 3.6, 3.9,
5.5): rerank that keeps every candidate a count, list or interval needs, the JSON draft and the
verify step of their LongMemEval answering, the granularity each benchmark ran with, the exact
entity gate, the code's field scores, blocked hops on empty bridges and the extraction
projections. Every rule is a switch; expectations are worked out by hand from the notes.
"""
from __future__ import annotations

import pytest

from common.core import fingerprint, prompts
from common.core.config import RetrieveConfig, load_config
from common.core.schema import Anchor, Bridge, Episode, Hop, Plan, Question, Record, RetrievalRow, Session, Turn
from common.method import answer as answer_mod
from common.method.extract import extract_messages
from common.method.index import build_index
from common.method.plan import audit_messages, plan_messages
from common.method.projections import add_projections
from common.method.render import MemoryView
from common.method.retrieve import Retriever
from common.pipeline.experiments import load as load_experiments
from tests.fake_openai import FakeOpenAI
from tests.test_retrieve import FakeEmbedder

EMB = FakeEmbedder()


# --------------------------------------------------------------------------- answer: rerank keeps counts whole
def _buffer(n: int) -> RetrievalRow:
    ids = [f"m::s{i}::episode_001" for i in range(1, n + 1)]
    blocks = [f"### Episode {e} | s{i} | session date: 2023\n[D{i}:1] Oskar: item number {i} noted"
              for i, e in enumerate(ids, 1)]
    return RetrievalRow(qid="q", memory_id="m", question="?", mode="adaptive", scope="point", reasoning_type="direct",
                        selected=[], episode_ids=ids, dia_ids=[], coverage={}, buffer_text="\n\n".join(blocks),
                        buffer_tokens=10)


def _plan(target: str = "value", scope: str = "point") -> Plan:
    return Plan(answer_target={"type": target, "description": ""}, reasoning_type="direct", retrieval_scope=scope,
                required_properties=[], hops=[])


def _client(server, tmp_path, cfg_path: str = "configs/longmemeval_code.yaml"):
    import dataclasses

    from common.core.llm import LLMClient, ResponseCache, RetryPolicy

    cfg = load_config([cfg_path])
    roles = {r: dataclasses.replace(cfg.role(r), base_url=server.base_url, timeout=2.0)
             for r in ("answer", "answer_rerank", "answer_verify", "answer_draft")}
    return LLMClient(roles, cache=ResponseCache(str(tmp_path / "c.sqlite")),
                     retry=RetryPolicy(max_attempts=1, initial_wait=0.01, max_wait=0.02))


Q_COUNT = Question("l::q1", "l", "How many items did Oskar note down?", "2023/05/30 (Tue) 23:40")


@pytest.mark.parametrize("target, scope", [("count", "point"), ("list", "point"), ("time", "point"),
                                           ("value", "all_matching")])
def test_a_plan_that_needs_every_candidate_keeps_all_50(tmp_path, target, scope):
    steps = answer_mod.AnswerSteps(prompt_set="code_rules", rerank=True, rerank_max=20)
    with FakeOpenAI() as server:
        row = answer_mod.answer_question(_client(server, tmp_path), Q_COUNT, _plan(target, scope), _buffer(50),
                                         steps=steps)
        kinds = server.request_kinds
        answer_user = server.requests_of_kind("answer")[0]["messages"][-1]["content"]
    assert kinds == ["answer"]  # no rerank call: nothing is selected away
    assert all(f"item number {i} noted" in answer_user for i in range(1, 51))
    assert row.steps["rerank"]["candidates"] == 50 and "every candidate kept" in row.steps["rerank"]["skipped"]


def test_a_point_plan_of_50_is_still_reranked_and_the_switch_reranks_counts(tmp_path):
    with FakeOpenAI() as server:
        client = _client(server, tmp_path)
        point = answer_mod.answer_question(client, Q_COUNT, _plan(), _buffer(50),
                                           steps=answer_mod.AnswerSteps(rerank=True, rerank_max=20))
        off = answer_mod.answer_question(client, Q_COUNT, _plan("count"), _buffer(50),
                                         steps=answer_mod.AnswerSteps(rerank=True, rerank_max=20,
                                                                      rerank_keep_all=False))
        assert server.request_kinds == ["answer_rerank", "answer"] * 2
    assert point.steps["rerank"]["limit"] == 20 and len(point.steps["rerank"]["selected"]) < 50
    assert off.steps["rerank"]["limit"] == 20 and len(off.steps["rerank"]["selected"]) < 50


# --------------------------------------------------------------------------- answer: JSON draft, verify
def test_json_draft_is_its_own_role_with_its_own_budget(tmp_path):
    steps = answer_mod.AnswerSteps(prompt_set="code_rules", draft="json")
    with FakeOpenAI() as server:
        row = answer_mod.answer_question(_client(server, tmp_path), Q_COUNT, _plan(), _buffer(3), steps=steps)
        body = server.requests_of_kind("answer_draft")[0]
        assert server.request_kinds == ["answer_draft"]
    assert body["max_tokens"] == 1200 and body["response_format"] == {"type": "json_object"}
    assert '"evidence_episode_ids"' in body["messages"][-1]["content"]
    assert row.prompt_id == "code_rules.answer_draft_user" and row.answer == "item number 1 noted"
    assert [c["role"] for c in row.llm_calls] == ["answer_draft"] and row.error == ""


def test_an_invalid_json_draft_is_a_failed_row():
    class Reply:
        text, cache_key, usage, latency, cached = "not json", "k", {}, 0.1, False

        def record(self, pid):
            return {"prompt_id": pid}

    class Client:
        def settings(self, role):
            return load_config(["configs/longmemeval_code.yaml"]).role(role)

        def complete(self, role, messages, **kw):
            return Reply()

    row = answer_mod.answer_question(Client(), Q_COUNT, _plan(), _buffer(2),  # type: ignore[arg-type]
                                     steps=answer_mod.AnswerSteps(draft="json"))
    assert row.answer is None and row.error.startswith("invalid_reply")


@pytest.mark.parametrize("question, personal", [
    ("Can you recommend a weekend hike that suits me?", True),
    ("Any tips for keeping my balcony herbs alive?", True),
    ("What should I cook for the office potluck?", True),
    ("How many items did Oskar note down?", False),
])
def test_verify_keeps_a_personalised_answer_from_the_wording(tmp_path, question, personal):
    q = Question("l::q2", "l", question, "2023/05/30 (Tue) 23:40")
    with FakeOpenAI() as server:
        client = _client(server, tmp_path)
        answer_mod.answer_question(client, q, _plan(), _buffer(2), steps=answer_mod.AnswerSteps(verify=True))
        answer_mod.answer_question(client, q, _plan(), _buffer(2),
                                   steps=answer_mod.AnswerSteps(verify=True, verify_personal=False))
        systems = [r["messages"][0]["content"] for r in server.requests_of_kind("answer_verify")]
    assert (answer_mod.PERSONAL_FORM in systems[0]) == personal
    assert (answer_mod.SHORT_FORM in systems[0]) == (not personal)
    assert answer_mod.SHORT_FORM in systems[-1] and "{form_rule}" not in systems[0]


# --------------------------------------------------------------------------- granularity per benchmark
def test_code_configs_granularity_follows_what_each_benchmark_ran():
    assert load_config(["configs/locomo_code.yaml"]).extract.granularity == "fine"  # the orchestrator
    assert load_config(["configs/locomo.yaml"]).extract.granularity == "broad"  # the paper
    assert load_config(["configs/longmemeval_code.yaml"]).extract.granularity == "none"


@pytest.mark.parametrize("prompt_set", ["paper", "code_rules"])
def test_granularity_none_leaves_the_block_out_of_extraction_and_planning(prompt_set):
    s = Session("m", "s1", 1, "1 May 2023", [Turn("D1:1", "Oskar", "I went sailing."), Turn("D1:2", "Lena", "Nice!")])
    ep = Episode("m::s1::episode_001", "m", "s1", 1, "1 May 2023", ["D1:1", "D1:2"], "sailing", "event")
    q = Question("m::q1", "m", "Where did Oskar sail?")
    blocks = [prompts.load(f"granularity_{g}") for g in ("fine", "broad", "broad_plus", "very_broad")]
    users = [extract_messages(MemoryView("m", [s]), ep, "none", True, prompt_set)[1]["content"],
             plan_messages(q, "sail", "none", prompt_set)[1]["content"]]
    if prompt_set == "code_rules":
        users.append(audit_messages(q, "sail", "none", _plan())[1]["content"])
    for user in users:
        assert "granularity" not in user.lower() and not any(b in user for b in blocks) and "\0" not in user
        assert "sail" in user
    with_block = plan_messages(q, "sail", "fine", prompt_set)[1]["content"]
    assert prompts.load("granularity_fine") in with_block


# --------------------------------------------------------------------------- retrieval
def _view(sessions: list[tuple[int, list[Turn]]]) -> MemoryView:
    return MemoryView("m", [Session("m", f"session_{i}", n, "2023", turns, ["Oskar", "Lena"])
                            for n, (i, turns) in enumerate(sessions, 1)])


def _rec(ep: str, n: int, entity: str, prop: str, value: str = "", dia: str = "", **kw) -> Record:
    return Record(f"{ep}::index_{n:03d}", ep, "m", entity, kw.pop("entity_type", "person"), prop, value,
                  evidence_dia_ids=[dia], **kw)


def _memory():
    view = _view([(2, [Turn("D2:1", "Oskar", "I sail on Sundays."), Turn("D2:2", "Lena", "Fun.")]),
                  (10, [Turn("D10:1", "Oskar", "I sail on Mondays."), Turn("D10:2", "Lena", "Cool.")])])
    e2, e10 = "m::session_2::episode_001", "m::session_10::episode_001"
    episodes = [Episode(e2, "m", "session_2", 1, "2023", ["D2:1", "D2:2"], "sailing", "topic"),
                Episode(e10, "m", "session_10", 2, "2023", ["D10:1", "D10:2"], "sailing", "topic")]
    records = [_rec(e2, 1, "Oskar", "sail", "sundays", "D2:1", condition_property="until", condition_value="noon"),
               _rec(e10, 1, "Oskar", "sail", "sundays", "D10:1", condition_property="until",
                    condition_value="noon"),
               _rec(e2, 2, "Oskars", "fish", "trout", "D2:1"),
               _rec(e10, 2, "Oskar", "fish", "trout", "D10:1")]
    return view, build_index(view, episodes, records, EMB), e2, e10


def _ret(**cfg) -> tuple[Retriever, str, str]:
    view, index, e2, e10 = _memory()
    return Retriever(index, view, EMB, RetrieveConfig(**cfg)), e2, e10


def test_exact_entity_gate_has_no_fuzzy_match_and_no_possessor_path():
    fuzzy, e2, e10 = _ret()
    exact, _, _ = _ret(entity_match="exact")
    fish = Anchor(entity="Oskar", entity_type="person", property="fish")
    ep = lambda r, hits: [r.index.episodes[h.pos].episode_id for h in hits]  # noqa: E731
    assert set(ep(fuzzy, fuzzy.structured(fish))) == {e2, e10}  # "Oskars" passes ratio 90
    assert ep(exact, exact.structured(fish)) == [e10]
    boat = Anchor(entity="Oskar's boat", property="sail")
    assert fuzzy.structured(boat) and not exact.structured(boat)
    assert load_config(["configs/locomo_code.yaml"]).retrieve.entity_match == "exact"
    assert load_config(["configs/longmemeval_code.yaml"]).retrieve.entity_match == "exact"


def test_code_field_scores_use_cosine_or_jaccard_and_break_ties_by_episode_id():
    anchor = Anchor(entity="Oskar", entity_type="person", property="sail", value="sundays",
                    condition_property="before", condition_value="noon")
    harness, e2, e10 = _ret(entity_match="exact")
    code, _, _ = _ret(entity_match="exact", field_scores="code")
    h, c = harness.structured(anchor), code.structured(anchor)
    w = RetrieveConfig().weights
    # condition_property "before" vs "until": harness 0; code max(cos, Jaccard) = cosine of the
    # bag-of-words texts "condition_property: before|until" = 2/3.
    known = sum(w.values())
    assert h[0].score == pytest.approx((known - w["condition_property"]) / known, abs=1e-5)
    assert c[0].score == pytest.approx((known - w["condition_property"] / 3) / known, abs=1e-5)
    # Equal scores: by position (session_2 first) vs by episode id ("session_10" < "session_2").
    ep = lambda r, hits: [r.index.episodes[x.pos].episode_id for x in hits]  # noqa: E731
    assert ep(harness, h) == [e2, e10] and ep(code, c) == [e10, e2]


def _bridge_plan() -> Plan:
    h1 = Hop("h1", anchor=Anchor(entity="Oskar", property="sail"), bridge_request="the sailing day")
    h2 = Hop("h2", anchor=Anchor(entity="Oskar", property="fish", value="$h1.bridge"), depends_on=["h1"])
    return Plan({"type": "value", "description": ""}, "multi_hop", "point", [], [h1, h2])


def test_a_hop_whose_bridge_resolved_to_nothing_is_blocked():
    def resolve(hop, anchor, context, ids):
        return Bridge(hop.hop_id, hop.bridge_request, "", [], ids), []

    q = Question("q1", "m", "What does Oskar fish on his sailing day?")
    searched: dict[str, list[Anchor]] = {"open": [], "blocked": []}
    rows = {}
    for name, r in (("open", _ret()[0]), ("blocked", _ret(block_empty_bridge=True)[0])):
        inner = r.hop_hits
        r.hop_hits = lambda question, anchor, scope, inner=inner, name=name: (  # type: ignore[method-assign]
            searched[name].append(anchor) or inner(question, anchor, scope))
        rows[name] = r.retrieve(q, _bridge_plan(), resolve)
    # Without the switch the hop searches with the emptied value (every episode of Oskar's "fish").
    assert [a.property for a in searched["open"]] == ["sail", "fish"] and searched["open"][1].value == ""
    assert "blocked_missing_bridge" not in rows["open"].contributions
    assert [a.property for a in searched["blocked"]] == ["sail"]
    assert rows["blocked"].contributions["blocked_missing_bridge"] == ["h2"] and rows["blocked"].coverage["h2"] is False


# --------------------------------------------------------------------------- extraction projections
def test_speaker_event_and_object_creator_projections():
    turns = [Turn("D1:1", "Oskar", "Last weekend we went to the harbor festival with friends."),
             Turn("D1:2", "Lena", "I watched the regatta from the pier. The harbor festival was loud."),
             Turn("D1:3", "Lena", "Here is my painting of it.")]
    view = _view([(1, turns)])
    ep = Episode("m::session_1::episode_001", "m", "session_1", 1, "2023", ["D1:1", "D1:2", "D1:3"], "festival",
                 "event")
    e = ep.episode_id
    recs = [_rec(e, 1, "harbor festival", "time", "last weekend", "D1:1", entity_type="event"),
            _rec(e, 2, "regatta", "location", "the pier", "D1:2", entity_type="event"),
            _rec(e, 3, "painting", "depicts", "the harbor", "D1:3", entity_type="object", source="Lena")]
    out = add_projections(recs, view, ep, True, True)
    new = [(r.entity, r.property, r.value, tuple(r.evidence_dia_ids), r.projection_kind) for r in out[3:]]
    assert new == [("Lena", "paint", "made painting", ("D1:3",), "speaker_object_projection"),
                   ("Oskar", "attend", "harbor festival", ("D1:1",), "speaker_event_projection"),
                   ("Lena", "see", "regatta", ("D1:2",), "speaker_event_projection")]
    assert [r.record_id for r in out[3:]] == [f"{e}::index_{i:03d}" for i in (4, 5, 6)]
    assert add_projections(recs, view, ep, False, False) == recs
    assert len(add_projections(out, view, ep, True, True)) == len(out)  # de-duplicated


# --------------------------------------------------------------------------- switches: config, fingerprint, rows
NEW_SWITCHES = {"answer.rerank_keep_all": False, "answer.draft": "json", "answer.verify_personal": False,
                "extract.granularity": "none", "retrieve.entity_match": "exact", "retrieve.field_scores": "code",
                "retrieve.block_empty_bridge": True, "extract.speaker_event_projection": True,
                "extract.object_creator_projection": True}


def test_new_switches_leave_the_paper_fingerprint_alone_count_when_set_and_have_ablation_rows():
    base = fingerprint.run_components(load_config(["configs/locomo.yaml"]), "s")
    assert "answer_draft" not in base["roles"] and not any(k.startswith("code_rules.") for k in base["prompts"])
    for section in ("answer", "extract", "retrieve"):
        assert not set(fingerprint.LATER_DEFAULTS[section]) & set(base["method"][section])
    exp = load_experiments()
    by_set = {tuple(sorted(v.set.items())): v.name for v in exp.variants}
    for key, value in NEW_SWITCHES.items():
        on = fingerprint.run_components(load_config(["configs/locomo.yaml"], [f"{key}={value}"]), "s")
        assert fingerprint.short(on) != fingerprint.short(base), key
        assert any((key, value) in k for k in by_set), key
    on = fingerprint.run_components(load_config(["configs/locomo.yaml"], ["answer.draft=json"]), "s")
    assert on["roles"]["answer_draft"]["max_tokens"] == 1200


def test_locomo_code_runs_no_rerank_and_no_verify():
    code = load_config(["configs/locomo_code.yaml"]).answer
    assert (code.rerank, code.verify, code.draft) == (False, False, "plain")
    lme = load_config(["configs/longmemeval_code.yaml"]).answer
    assert (lme.rerank, lme.verify, lme.draft, lme.rerank_keep_all, lme.verify_personal) == (True, True, "json", True,
                                                                                             True)


# --------------------------------------------------------------------------- official session ids: gold side only
def test_official_session_ids_reach_only_the_gold_side(tmp_path):
    import json

    from common.benchmarks.longmemeval import retrieval_gold
    from common.benchmarks.subset import load_selected
    from common.core import sources
    from common.core.schema import Gold, from_dict
    from common.pipeline.engine import load_sessions
    from tests.conftest import REPO, rows, run_overrides, run_stages

    fixture = REPO / "tests" / "fixtures" / "lme_tiny.json"
    official = {sid for it in json.loads(fixture.read_text()) for sid in it["haystack_session_ids"]}
    run = run_stages("configs/longmemeval.yaml", run_overrides(tmp_path, fixture), ["preprocess"])
    text = run.path("sessions").read_text(encoding="utf-8")
    # What stages 02-07 and outside systems read: opaque ids only.
    assert not [sid for sid in official if f'"{sid}' in text]
    method_view = load_sessions(run)
    assert method_view and all(s.source_id == "" for s in method_view)
    side = rows(run.path("session_sources"))
    assert {r["source_id"].split("#")[0] for r in side} == official
    # The metrics put them back: the official retrieval gold is the one of the source file.
    restored = sources.restore(method_view, run.path("session_sources"))
    _, data, _ = load_selected(run.cfg)
    assert [s.source_id for s in restored] == [s.source_id for s in data.sessions]
    for g in rows(run.path("gold")):
        gold = from_dict(Gold, g)
        assert retrieval_gold(restored, gold) == retrieval_gold(data.sessions, gold)


# --------------------------------------------------------------------------- Table 3: what the answer model read
def test_table3_context_tokens_count_the_reranked_episodes_only(tmp_path):
    import json

    from common.pipeline import ledger

    rets = [{"qid": "a", "buffer_tokens": 900, "seconds": 0.1}, {"qid": "b", "buffer_tokens": 700, "seconds": 0.1}]
    answers = [{"qid": "a", "answer": "x", "latency": 0.2,
                "steps": {"rerank": {"candidates": 9, "limit": 9, "selected": ["e1"], "padded": 0, "tokens": 120}}},
               {"qid": "b", "answer": "y", "latency": 0.2,  # kept whole (a count plan): the whole buffer
                "steps": {"rerank": {"skipped": "answer target count: every candidate kept", "candidates": 4}}}]
    for name, data in (("06_retrieve.jsonl", rets), ("07_answer.jsonl", answers)):
        (tmp_path / name).write_text("".join(json.dumps(r) + "\n" for r in data))
    per_q = {q["qid"]: q["context_tokens"] for q in ledger.efficiency(tmp_path)["per_question"]}
    assert per_q == {"a": 120, "b": 700}


def test_dry_run_counts_the_json_draft_under_its_own_role(tmp_path):
    from common.pipeline import dryrun
    from tests.conftest import TINY_LOCOMO, run_overrides

    sets = run_overrides(tmp_path, TINY_LOCOMO)
    plain = {s["role"] for s in dryrun.estimate(load_config(["configs/locomo.yaml"], sets))["stages"]}
    est = dryrun.estimate(load_config(["configs/locomo.yaml"], sets + ["answer.draft=json"]))
    roles = {s["role"]: s for s in est["stages"]}
    assert "answer" in plain and "answer_draft" not in plain
    assert roles["answer_draft"]["calls"] == est["questions"] and "answer" not in roles


def test_the_oracle_finds_answer_sessions_through_the_gold_side_ids():
    from common.core.schema import Gold
    from common.method import baselines

    view = _view([(1, [Turn("D1:1", "user", "hello", role="user")]), (2, [Turn("D2:1", "user", "bye", role="user")])])
    gold = Gold("q1", "m", "a", 0, answer_session_ids=["answer_77aa"])
    row = baselines.oracle(Question("q1", "m", "?"), view, gold, False, {("m", "session_2"): "answer_77aa"})
    assert row.dia_ids == ["D2:1"] and row.method_info["evidence_source"] == "answer_sessions"
