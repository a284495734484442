"""The authors' generic planning and answering rules as switches (prompts.set: code_rules,
plan.validation: code, plan.audit, answer.rerank, answer.verify) and the configs that turn them on.

Expectations come from reference_notes 3.3-3.6 and 5.5 (what the authors' code does), never from
the harness's own output. The paper configuration must stay as it was: its prompts, fingerprint
and rows are checked unchanged here and in tests/test_systems.py.
"""
from __future__ import annotations

import dataclasses
import fnmatch
import functools
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from common.core import fingerprint, prompts
from common.core.config import load_config
from common.core.schema import AnswerRow, Plan, PlanRow, Question, RetrievalRow, from_dict, to_dict
from common.core.tokens import count_tokens
from common.method import answer as answer_mod
from common.method.extract import extract_messages
from common.method.plan import PlanError, normalize_plan, plan_messages, plan_question
from common.method.render import MemoryView
from common.pipeline import dryrun, ledger
from common.pipeline.experiments import load as load_experiments
from tests.conftest import REPO, TINY_LOCOMO, rows, run_overrides
from tests.fake_openai import FakeOpenAI, FaultPlan
from tests.test_plan import anchor, hop, plan

LOCOMO = REPO.parent / "shared" / "data" / "locomo" / "locomo10.json"
LME_ITEM = REPO.parent / "shared" / "data" / "longmemeval" / "longmemeval_s_single_e47becba.json"
LME_TINY = REPO / "tests" / "fixtures" / "lme_tiny.json"
REALTALK = sorted((REPO.parent / "shared" / "data" / "realtalk").glob("Chat_*.json"))
SWITCHES = {"prompts.set": "code_rules", "plan.validation": "code", "plan.audit": True,
            "answer.rerank": True, "answer.verify": True}

# People, places and events of the two data sets that the authors' prompts and handlers name
# (reference_notes 3.3, 3.4, 8): none may appear in a prompt or rule of this harness.
LOCOMO_EVENTS = ["LGBTQ", "Hong Kong", "adoption agenc", "Becoming Nicole", "stained glass", "transgender",
                 "gastritis", "spinach", "support group", "pride fest"]
LME_HANDLER_NAMES = ["Rachel", "Emily", "Jen", "Wells Fargo", "Stratocaster", "Yamaha", "Instant Pot", "air fryer",
                     "Airbnb", "Metropolitan Museum", "Coursera", "Uber Eats", "goldfinch", "tomato sapling",
                     "neon tetra", "quinoa", "Fender"]


def benchmark_names() -> list[str]:
    names = list(LOCOMO_EVENTS + LME_HANDLER_NAMES)
    if LOCOMO.exists():
        data = json.loads(LOCOMO.read_text(encoding="utf-8"))
        names += sorted({c["conversation"][k] for c in data for k in ("speaker_a", "speaker_b")})
    if LME_ITEM.exists():  # the speakers are "user" and "assistant"; its answer names what it is about
        items = json.loads(LME_ITEM.read_text(encoding="utf-8"))
        names += [str(it["answer"]) for it in (items if isinstance(items, list) else [items])]
    for path in REALTALK:  # its speakers, and the name chat 1's questions use for one of them
        names += sorted(set(json.loads(path.read_text(encoding="utf-8"))["name"].values()) | {"Kate"})
    return names


def hits(paths: list[Path], names: list[str]) -> list[str]:
    """``file: name`` for every hit: a capitalized name as a whole word, case-sensitive; a lower-case
    term as a word prefix in any case ("adoption agenc" finds "Adoption agencies")."""
    out = []
    for p in paths:
        text = p.read_text(encoding="utf-8")
        for n in names:
            pattern = rf"(?<![A-Za-z]){re.escape(n)}" + ("(?![A-Za-z])" if n[:1].isupper() else "")
            if re.search(pattern, text, 0 if n[:1].isupper() else re.I):
                out.append(f"{p.relative_to(p.parents[1]) if len(p.parents) > 1 else p}: {n}")
    return out


def prompt_files() -> list[Path]:
    """Every prompt template, and the data files a prompt set holds (the lexical guard's alias and
    term sets): each is scanned for benchmark names and 4-word sequences, and listed in SOURCES.md."""
    return sorted([*prompts.PROMPT_DIR.rglob("*.txt"), *prompts.PROMPT_DIR.glob("*/*.yaml")])


# --------------------------------------------------------------------------- no benchmark names
def test_the_name_scan_finds_a_planted_name(tmp_path):
    (tmp_path / "p").mkdir()
    bad = tmp_path / "p" / "x.txt"
    bad.write_text("Example: When did Caroline go to the LGBTQ parade? Samples are fine.")
    found = hits([bad], benchmark_names() + ["Caroline", "Sam"])
    assert any("Caroline" in h for h in found) and any("LGBTQ" in h for h in found)
    assert not any(h.endswith(": Sam") for h in found)  # a whole word only ("Samples" is not "Sam")


def test_no_prompt_names_a_person_or_event_of_either_data_set():
    if not LOCOMO.exists():
        pytest.skip(f"{LOCOMO} not available: the speaker names come from it")
    files = prompt_files()
    assert any(p.parent.name == "code_rules" for p in files)
    assert len(benchmark_names()) > len(LOCOMO_EVENTS + LME_HANDLER_NAMES) + 10
    assert hits(files, benchmark_names()) == []


# --------------------------------------------------------------------------- no test-shaped content
BEAM = sorted((REPO.parent / "shared" / "data" / "beam" / "100K").glob("*/probing_questions/probing_questions.json"))
# Templates stored byte for byte from an official scorer or system (SOURCES.md): not ours to reword.
OFFICIAL_TEMPLATES = {"judge_lme_default", "judge_lme_temporal", "judge_lme_knowledge_update", "judge_lme_preference",
                      "judge_lme_abstention", "judge_locomo_mem0", "answer_mem0_user", "mem0_locomo_instructions",
                      "answer_beam_user", "judge_beam_rubric", "judge_beam_align_system", "judge_beam_align_user",
                      "answer_realtalk_user", "context_realtalk_header", "judge_realtalk_gpt_score",
                      "answer_zep_system", "answer_zep_user", "answer_mem0_graph_user", "answer_memos_user",
                      "answer_hindsight_system", "answer_hindsight_user"}


def words(text: str) -> list[str]:
    return re.findall(r"[a-z0-9]+", str(text).lower())


def four_grams(texts) -> set[tuple[str, ...]]:
    out: set[tuple[str, ...]] = set()
    for t in texts:
        w = words(t)
        out.update(tuple(w[i:i + 4]) for i in range(len(w) - 3))
    return out


@functools.lru_cache(maxsize=1)
def benchmark_grams() -> frozenset[tuple[str, ...]]:
    """Every 4-word sequence of a question or answer of LoCoMo, the shared LongMemEval item, BEAM
    (question, answer, rubric) and REALTALK (when its files are there), built once per test session."""
    texts: list[str] = []
    for conv in json.loads(LOCOMO.read_text(encoding="utf-8")):
        texts += [str(q[k]) for q in conv["qa"] for k in ("question", "answer", "adversarial_answer") if k in q]
    items = json.loads(LME_ITEM.read_text(encoding="utf-8"))
    texts += [str(it[k]) for it in (items if isinstance(items, list) else [items]) for k in ("question", "answer")]
    for path in BEAM:
        for group in json.loads(path.read_text(encoding="utf-8")).values():
            for it in group:
                for k in ("question", "answer", "rubric"):
                    v = it.get(k)
                    texts += [str(x) for x in v] if isinstance(v, list) else [str(v)] if v is not None else []
    for path in REALTALK:
        texts += [str(q[k]) for q in json.loads(path.read_text(encoding="utf-8"))["qa"] for k in ("question", "answer")]
    return frozenset(four_grams(texts))


def gram_hits(paths: list[Path], grams: frozenset[tuple[str, ...]]) -> list[str]:
    out = []
    for p in paths:
        w = words(p.read_text(encoding="utf-8"))
        out += sorted({f"{p.parent.name}/{p.stem}: {' '.join(w[i:i + 4])}" for i in range(len(w) - 3)
                       if tuple(w[i:i + 4]) in grams})
    return out


def _need_data() -> None:
    if not (LOCOMO.exists() and LME_ITEM.exists() and BEAM):
        pytest.skip("the shared LoCoMo, LongMemEval and BEAM files are needed for the n-gram scan")


def test_the_ngram_scan_finds_a_planted_question(tmp_path):
    _need_data()
    first = json.loads(LOCOMO.read_text(encoding="utf-8"))[0]["qa"][0]["question"]
    (tmp_path / "p").mkdir()
    bad = tmp_path / "p" / "x.txt"
    bad.write_text(f"Worked example: {first.upper()} Then reply.", encoding="utf-8")
    ok = tmp_path / "p" / "y.txt"
    ok.write_text("Reply with one object only.", encoding="utf-8")
    assert gram_hits([bad], benchmark_grams()) and gram_hits([ok], benchmark_grams()) == []


def test_no_prompt_shares_a_four_word_sequence_with_a_benchmark_question_or_answer():
    _need_data()
    files = [p for p in prompt_files() if p.stem not in OFFICIAL_TEMPLATES or p.parent != prompts.PROMPT_DIR]
    assert len(files) > 30 and any(p.parent.name == "code_rules" for p in files)
    assert gram_hits(files, benchmark_grams()) == []
    sources = (prompts.PROMPT_DIR / "SOURCES.md").read_text(encoding="utf-8")
    for name in OFFICIAL_TEMPLATES:  # each exemption is a stored official template
        row = next(line for line in sources.splitlines() if f"`{name}`" in line)
        assert re.search(r"[Bb]yte[- ]for[- ]byte|byte for byte", row), name


# --------------------------------------------------------------------------- prompt sets and SOURCES.md
Q_LOCOMO = Question("c::q1", "c", "How often does Oskar go sailing?")
Q_LME = Question("l::q1", "l", "How many times did I visit the dentist?", "2023/05/30 (Tue) 23:40")


def test_paper_set_is_unchanged_and_code_rules_set_is_picked():
    paper = plan_messages(Q_LOCOMO, "activity, sail", "broad")
    assert paper[0]["content"] == prompts.load("plan_system")
    assert "Question date: unknown\nQuestion: How often does Oskar go sailing?" in paper[1]["content"]
    code = plan_messages(Q_LOCOMO, "activity, sail", "broad", "code_rules")
    user = code[1]["content"]
    assert code[0]["content"] == prompts.load("code_rules.plan_system") != paper[0]["content"]
    # The 14 rules, the first-person rule, the bridge rule; no date line, as the authors' planner.
    assert re.findall(r"^(\d+)\. ", user, re.M) == [str(i) for i in range(1, 15)]
    assert "entity user with entity_type person" in user and "$hN.bridge" in user
    assert "Question date" not in user and "activity, sail" in user
    assert prompts.pick("plan_repair_user", "code_rules") == "plan_repair_user"  # not in the set: the paper's


def test_code_rules_extraction_checklist_and_answer_safeguards():
    from common.core.schema import Episode, Session, Turn

    s = Session("m", "s1", 1, "1 May 2023", [Turn("D1:1", "Oskar", "I went sailing."), Turn("D1:2", "Lena", "Nice!")])
    ep = Episode("m::s1::episode_001", "m", "s1", 1, "1 May 2023", ["D1:1", "D1:2"], "sailing", "event")
    msgs = extract_messages(MemoryView("m", [s]), ep, "broad", True, "code_rules")
    assert msgs[0]["content"] == prompts.load("code_rules.extract_system")
    assert re.findall(r"^(\d+)\. ", msgs[1]["content"], re.M) == [str(i) for i in range(1, 14)]
    assert "[D1:1] Oskar: I went sailing." in msgs[1]["content"]
    system = prompts.load("code_rules.answer_system")
    for rule in ("Never give the episode's observation date", "chronological inventory",
                 "calendar months", "literally shows"):
        assert rule in system


def test_sources_lists_every_prompt_file_and_the_planner_blocks():
    sources = (prompts.PROMPT_DIR / "SOURCES.md").read_text(encoding="utf-8")
    ids = [p.stem if p.parent == prompts.PROMPT_DIR else f"{p.parent.name}.{p.stem}" for p in prompt_files()]
    # Listed by id, or by a pattern (`granularity_*`, `*_repair_*`) of the paper table.
    listed = re.findall(r"`([a-z0-9_.*]+)`", sources)
    missing = [i for i in ids if not any(fnmatch.fnmatchcase(i, pattern) for pattern in listed)]
    assert missing == []
    # The planner's date line is documented as the code renders it, and its granularity block.
    assert "`plan_user` `Question date: {question_date}` line" in sources and "the word `unknown`" in sources
    assert "`plan_user` `Property granularity of the index:` block" in sources
    assert "Property granularity of the index:\n{granularity_policy}" in prompts.load("plan_user")


# --------------------------------------------------------------------------- plan.validation: code
def test_code_validation_rejects_compound_properties_of_more_than_two_parts():
    raw = plan([hop("h1", anchor(prop="favorite_hiking_trail"))])
    assert normalize_plan(raw).hops[0].anchor.property == "favorite_hiking_trail"  # schema: accepted as before
    with pytest.raises(PlanError, match="more than two parts"):
        normalize_plan(raw, "code")
    assert normalize_plan(plan([hop("h1", anchor(prop="hiking_trail"))]), "code").hops[0].anchor.property == \
        "hiking_trail"


@pytest.mark.parametrize("a, error", [
    (anchor(condition_property="during", condition_value=""), "filled together"),
    (anchor(condition_property="", condition_value="summer"), "filled together"),
    (anchor(condition_property="nearby", condition_value="lake"), "not an allowed condition"),
])
def test_code_validation_conditions(a, error):
    with pytest.raises(PlanError, match=error):
        normalize_plan(plan([hop("h1", a)]), "code")


def test_code_validation_world_knowledge_and_counterfactual_shape():
    concept = anchor(entity="$h1.bridge", prop="category")
    concept["entity_type"] = "concept"
    with pytest.raises(PlanError, match="world knowledge"):
        normalize_plan(plan([hop("h1", bridge_request="x"), hop("h2", concept, deps=["h1"])]), "code")
    two = plan([hop("h1"), hop("h2")], reasoning_type="counterfactual")
    with pytest.raises(PlanError, match="three hops"):
        normalize_plan(two, "code")
    no_link = plan([hop("h1"), hop("h2"), hop("h3")], reasoning_type="counterfactual")
    with pytest.raises(PlanError, match="causal-link"):
        normalize_plan(no_link, "code")
    linked = plan([hop("h1"), hop("h2"), hop("h3", anchor(prop="motivation"))], reasoning_type="counterfactual")
    assert len(normalize_plan(linked, "code").hops) == 3


def test_code_normalization_aliases_and_required_properties():
    a = {"entity_name": "Oskar", "entity_type": "person", "predicate": "sail", "answer_value": "lake"}
    with pytest.raises(PlanError):
        normalize_plan(plan([hop("h1", a)]))  # schema mode never knew these names
    p = normalize_plan(plan([hop("h1", a)]), "code")
    assert (p.hops[0].anchor.entity, p.hops[0].anchor.property, p.hops[0].anchor.value) == ("Oskar", "sail", "lake")
    # No required_properties: one per hop (the authors synthesize them).
    assert p.required_properties == [{"entity": "Oskar", "entity_type": "person", "broad_property": "sail",
                                      "property_text": "sail", "value": "lake", "role": "answer_property"}]
    rp = {"entity": "Oskar", "entity_type": "sailor", "broad_property": "sail", "role": "answer_property"}
    p = normalize_plan(plan([hop("h1")], required_properties=[rp, dict(rp)]), "code")
    assert len(p.required_properties) == 1 and p.required_properties[0]["entity_type"] == ""


# --------------------------------------------------------------------------- plan.audit
def _plan_client(server, tmp_path):
    from common.core.llm import LLMClient, ResponseCache, RetryPolicy, RoleSettings

    roles = {r: RoleSettings(role=r, model="m", base_url=server.base_url, timeout=2.0) for r in ("plan", "plan_audit")}
    return LLMClient(roles, cache=ResponseCache(str(tmp_path / "c.sqlite")),
                     retry=RetryPolicy(max_attempts=1, initial_wait=0.01, max_wait=0.02))


def test_audit_corrects_a_plan_and_is_recorded_as_its_own_role(tmp_path):
    with FakeOpenAI() as server:
        row = plan_question(_plan_client(server, tmp_path), Q_LOCOMO, {"sail": 2}, granularity="broad",
                            prompt_set="code_rules", validation="code", audit=True)
        assert server.counts_by_kind() == {"plan": 1, "plan_audit": 1}
        audit_user = server.requests_of_kind("plan_audit")[0]["messages"][-1]["content"]
    assert "Candidate plan:\n{" in audit_user and "Question: How often does Oskar go sailing?" in audit_user
    # The scripted planner plans "how often" as a point lookup; the audit's frequency rule fixes it.
    assert row.audit == {"outcome": "corrected"}
    assert (row.plan.retrieval_scope, row.plan.reasoning_type) == ("all_matching", "aggregation")
    assert [(c["prompt_id"], c.get("role")) for c in row.llm_calls] == [
        ("code_rules.plan_user", None), ("code_rules.plan_audit_user", "plan_audit")]
    assert to_dict(row)["audit"] == {"outcome": "corrected"}


@pytest.mark.parametrize("fault, cause", [("400", "http_400"), ("malformed", "invalid_reply")])
def test_a_failed_audit_keeps_the_pre_audit_plan(tmp_path, fault, cause):
    with FakeOpenAI(faults=FaultPlan(script=[fault], kinds={"plan_audit"})) as server:
        row = plan_question(_plan_client(server, tmp_path), Q_LOCOMO, {}, granularity="broad", audit=True)
    assert row.plan.retrieval_scope == "point" and not row.fallback_used  # the planner's own plan
    assert row.audit["outcome"] == "kept_pre_audit" and row.audit["error"].startswith(cause)


def test_a_fallback_plan_is_not_audited_and_paper_rows_have_no_audit_field(tmp_path):
    with FakeOpenAI(faults=FaultPlan(script=["400"], kinds={"plan"})) as server:
        row = plan_question(_plan_client(server, tmp_path), Q_LOCOMO, {}, granularity="broad", audit=True)
        assert server.counts_by_kind() == {"plan": 1}
    assert row.fallback_used and row.audit == {}
    assert "audit" not in to_dict(PlanRow("q", "m", "?", row.plan))


# --------------------------------------------------------------------------- answer.rerank / answer.verify
IDS = [f"m::s{i}::episode_001" for i in range(1, 6)]


def test_rerank_selection_follows_the_authors_order_cap_and_padding():
    reply = {"evidence_slots": [{"slot_id": "s1", "episode_ids": [IDS[3]]}, "junk"],
             "selected_episode_ids": [IDS[1], "not-a-candidate", IDS[3], IDS[0]]}
    # Slots first, then the listed ids, only candidates, at most the limit; returned in buffer order.
    assert answer_mod.rerank_selection(reply, IDS, 2, "point") == ([IDS[1], IDS[3]], 0)
    # A point plan is padded from the ranked order up to 2, an all_matching plan up to the limit.
    assert answer_mod.rerank_selection({}, IDS, 4, "point") == (IDS[:2], 2)
    assert answer_mod.rerank_selection({"selected_episode_ids": [IDS[4]]}, IDS, 3, "all_matching") == \
        ([IDS[0], IDS[1], IDS[4]], 2)


def _retrieval(n: int = 5) -> RetrievalRow:
    blocks = [f"### Episode {e} | s{i} | session date: 2023\n[D{i}:1] Oskar: fact number {i}\n\nmore {i}"
              for i, e in enumerate(IDS[:n], 1)]
    return RetrievalRow(qid="q", memory_id="m", question="?", mode="adaptive", scope="point", reasoning_type="direct",
                        selected=[], episode_ids=IDS[:n], dia_ids=[], coverage={}, buffer_text="\n\n".join(blocks),
                        buffer_tokens=10)


def test_split_buffer_keeps_blank_lines_inside_an_episode():
    ret = _retrieval()
    blocks = answer_mod.split_buffer(ret.buffer_text, ret.episode_ids)
    assert [e for e, _ in blocks] == IDS and blocks[2][1].endswith("fact number 3\n\nmore 3")
    assert "\n\n".join(b for _, b in blocks) == ret.buffer_text
    assert answer_mod.split_buffer("a full-context buffer", IDS[:1]) is None


def _answer_client(server, tmp_path):
    from common.core.llm import LLMClient, ResponseCache, RetryPolicy, RoleSettings

    roles = {r: RoleSettings(role=r, model="m", base_url=server.base_url, timeout=2.0)
             for r in ("answer", "answer_rerank", "answer_verify")}
    return LLMClient(roles, cache=ResponseCache(str(tmp_path / "c.sqlite")),
                     retry=RetryPolicy(max_attempts=1, initial_wait=0.01, max_wait=0.02))


def _plan(scope: str = "point") -> Plan:
    return Plan(answer_target={"type": "value", "description": ""}, reasoning_type="direct", retrieval_scope=scope,
                required_properties=[], hops=[])


def test_rerank_then_answer_then_verify(tmp_path):
    steps = answer_mod.AnswerSteps(prompt_set="code_rules", rerank=True, rerank_max=20, verify=True)
    with FakeOpenAI() as server:
        row = answer_mod.answer_question(_answer_client(server, tmp_path), Q_LME, _plan(), _retrieval(), steps=steps)
        kinds = server.request_kinds
        answer_user = server.requests_of_kind("answer")[0]["messages"][-1]["content"]
        verify_user = server.requests_of_kind("answer_verify")[0]["messages"][-1]["content"]
        rerank_user = server.requests_of_kind("answer_rerank")[0]["messages"][-1]["content"]
    assert kinds == ["answer_rerank", "answer", "answer_verify"]
    assert "Select up to 5 episodes" in rerank_user and rerank_user.startswith("Question date: 2023/05/30")
    # The scripted rerank keeps the 1st, 3rd and 5th candidates: the answer reads only those.
    kept = "\n\n".join(b for e, b in answer_mod.split_buffer(_retrieval().buffer_text, IDS) if e in IDS[::2])
    assert row.steps["rerank"] == {"candidates": 5, "limit": 5, "selected": [IDS[0], IDS[2], IDS[4]], "padded": 0,
                                   "tokens": count_tokens(kept)}
    assert "fact number 3" in answer_user and "fact number 2" not in answer_user
    assert "fact number 3" in verify_user and "fact number 2" not in verify_user
    # The verified answer wins; the draft is kept beside it.
    assert row.draft == "fact number 1" and row.answer == "fact number 1 (checked)"
    assert row.steps["verify"] == {"verdict": "rewritten", "changed": True}
    assert [c["role"] for c in row.llm_calls] == ["answer_rerank", "answer", "answer_verify"]
    assert row.latency == pytest.approx(sum(c["latency"] for c in row.llm_calls), abs=1e-3)
    assert row.prompt_id == "code_rules.answer_user"


@pytest.mark.parametrize("kind", ["answer_rerank", "answer_verify"])
def test_a_failed_step_keeps_what_was_there(tmp_path, kind):
    steps = answer_mod.AnswerSteps(rerank=True, verify=True)
    with FakeOpenAI(faults=FaultPlan(script=["500"], kinds={kind})) as server:
        row = answer_mod.answer_question(_answer_client(server, tmp_path), Q_LME, _plan(), _retrieval(), steps=steps)
        answer_user = server.requests_of_kind("answer")[0]["messages"][-1]["content"]
    step = row.steps[kind.split("_")[1]]
    assert step["error"].startswith("http_500") and row.error == ""
    if kind == "answer_rerank":  # the whole buffer is answered from
        assert all(f"fact number {i}" in answer_user for i in range(1, 6))
        assert row.answer.endswith("(checked)")
    else:  # the draft stands
        assert row.answer == row.draft == "fact number 1"


def test_paper_answer_rows_are_unchanged(tmp_path):
    with FakeOpenAI() as server:
        row = answer_mod.answer_question(_answer_client(server, tmp_path), Q_LME, _plan(), _retrieval())
        assert server.request_kinds == ["answer"]
    d = to_dict(row)
    assert not {"llm_calls", "draft", "steps"} & set(d) and d["prompt_id"] == "answer_user"
    assert to_dict(AnswerRow("q", "m", "?", "a", "m", "answer_user")).keys() == d.keys()


# --------------------------------------------------------------------------- config, fingerprint, ledger, dry run
def test_new_roles_inherit_from_the_role_they_assist():
    cfg = load_config(["configs/locomo.yaml"], ["models.plan.model=planner-x", "models.answer.base_url=http://a/v1",
                                                  "models.answer_verify.max_tokens=99"])
    assert cfg.role("plan_audit").model == "planner-x" and cfg.role("plan_audit").max_tokens == 4096
    assert cfg.role("answer_rerank").base_url == "http://a/v1" and cfg.role("answer_rerank").max_tokens == 1400
    assert cfg.role("answer_verify").max_tokens == 99 and cfg.role("answer_verify").model == cfg.role("answer").model


def test_switches_at_their_default_leave_the_fingerprint_alone_and_count_when_on():
    base = load_config(["configs/locomo.yaml"])
    comps = fingerprint.run_components(base, "s")
    assert "prompts" not in comps["method"] and "audit" not in comps["method"]["plan"]
    assert not {"rerank", "verify"} & set(comps["method"]["answer"])
    assert not {"plan_audit", "answer_rerank", "answer_verify"} & set(comps["roles"])
    assert not any(k.startswith("code_rules.") for k in comps["prompts"])
    fp = fingerprint.short(comps)
    for key, value in SWITCHES.items():
        on = fingerprint.run_components(load_config(["configs/locomo.yaml"], [f"{key}={value}"]), "s")
        assert fingerprint.short(on) != fp, key
        # The code_rules files count for the switches that read them (validation reads none).
        assert any(k.startswith("code_rules.") for k in on["prompts"]) == (key != "plan.validation"), key


@pytest.mark.parametrize("config, paper", [("configs/locomo_code.yaml", "configs/locomo.yaml"),
                                           ("configs/longmemeval_code.yaml", "configs/longmemeval.yaml")])
def test_code_configs_switch_everything_on_over_the_paper_config(config, paper):
    code, base = load_config([config]), load_config([paper])
    # LoCoMo: the authors' LoCoMo answer step has no rerank and no verify (reference_notes 3.6).
    lme = code.benchmark == "longmemeval"
    assert (code.prompts.set, code.plan.validation, code.plan.audit, code.answer.rerank, code.answer.verify) == \
        ("code_rules", "code", True, lme, lme)
    assert code.run.name == "code_rules" and code.benchmark == base.benchmark
    # Retrieval differs only by the authors' entity gate, field scores, blocked hops (and their
    # blocking rule), the generic sets, stop words and phrase-bonus text of their lexical guard, their
    # bridge request without the question (and, in their LongMemEval retrieval only, the broad state
    # lookup).
    assert (code.retrieve.lexical_stopwords, code.retrieve.lexical_phrase_text, code.retrieve.bridge_question) == \
        ("code", "speaker", False)
    assert dataclasses.replace(code.retrieve, entity_match="fuzzy", field_scores="harness",
                               block_empty_bridge=False, block_rule="empty_bridge",
                               lexical_aliases=False, broad_state_lookup=False, lexical_stopwords="harness",
                               lexical_phrase_text="counted", bridge_question=True) == base.retrieve
    assert code.retrieve.broad_state_lookup == lme
    assert code.judge == base.judge and code.models == base.models


def test_every_switch_is_one_ablation_variant():
    exp = load_experiments()
    by_set = {tuple(sorted(v.set.items())): v.name for v in exp.variants}
    for key, value in SWITCHES.items():
        assert ((key, value),) in by_set, key
        load_config(["configs/locomo.yaml"], exp.variant(by_set[((key, value),)]).overrides())
    assert exp.panels["code_rules"][0] == "base"


def test_ledger_gives_each_call_role_its_own_row(tmp_path):
    def call(role=None, cached=False):
        c = {"model": "m", "usage": {"prompt_tokens": 10, "completion_tokens": 1}, "latency": 1.0, "cached": cached}
        return {**c, "role": role} if role else c

    three = [call("answer_rerank"), call(), call("answer_verify")]
    _rows = [{"qid": "a", "answer": "x", "error": "", "llm_calls": three},
             {"qid": "b", "answer": "y", "error": "", "llm_calls": [call()],
              "steps": {"rerank": {"error": "http_500: boom"}, "verify": {"error": "invalid_reply: no answer"}}},
             {"qid": "c", "answer": None, "error": "timeout: t", "cache_key": "k", "usage": {}, "latency": 2.0}]
    (tmp_path / "07_answer.jsonl").write_text("".join(json.dumps(r) + "\n" for r in _rows))
    led = ledger.ledger(tmp_path, prices={"models": {}})
    by = {e["role"]: e for e in led["stages"] if e["stage"] == "07_answer"}
    assert set(by) == {"answer", "answer_rerank", "answer_verify"}
    assert (by["answer"]["calls"], by["answer"]["rows"], by["answer"]["failed_rows"]) == (3, 3, {"timeout": 1})
    assert (by["answer_rerank"]["calls"], by["answer_rerank"]["rows"], by["answer_rerank"]["failed_rows"]) == \
        (1, 2, {"http_500": 1})
    assert by["answer_verify"]["failed_rows"] == {"invalid_reply": 1}
    assert led["total"]["calls"] == 5


def test_dry_run_lists_the_extra_calls_only_when_switched_on(tmp_path):
    sets = run_overrides(tmp_path, TINY_LOCOMO)
    plain = {(s["stage"], s["role"]) for s in dryrun.estimate(load_config(["configs/locomo.yaml"], sets))["stages"]}
    both = ["answer.rerank=true", "answer.verify=true"]  # off in locomo_code (the authors' LoCoMo answer step)
    est = dryrun.estimate(load_config(["configs/locomo_code.yaml"], sets + both))
    roles = {s["role"]: s for s in est["stages"]}
    assert not {"plan_audit", "answer_rerank", "answer_verify"} & {r for _, r in plain}
    assert {"plan_audit", "answer_rerank", "answer_verify"} <= set(roles)
    assert all(roles[r]["calls"] == est["questions"] == 11 for r in ("plan_audit", "answer_rerank", "answer_verify"))
    assert roles["answer_rerank"]["stage"] == "07_answer" and roles["plan_audit"]["stage"] == "05_plan"
    assert all(roles[r]["prompt_tokens"] > 0 for r in ("plan_audit", "answer_rerank", "answer_verify"))


# --------------------------------------------------------------------------- done when: make, resume, ledger roles
def _env(server) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("OPENAI_API_KEY", "OPENAI_BASE_URL")}
    env["OPENAI_BASE_URL"] = server.base_url
    return env


@pytest.mark.slow
@pytest.mark.parametrize("target, var, config, data, benchmark", [
    ("locomo", "CONFIG", "configs/locomo_code.yaml", TINY_LOCOMO, "locomo"),
    ("longmemeval", "LME_CONFIG", "configs/longmemeval_code.yaml", LME_TINY, "longmemeval"),
])
def test_make_code_config_end_to_end_resumes_free_with_the_new_roles_in_the_ledger(
        tmp_path, fake_server, shared_embeddings, target, var, config, data, benchmark):
    cmd = ["make", "-s", target, f"PY={sys.executable}", f"{var}={config}",
           f"SET={' '.join(run_overrides(tmp_path, data, **{'embedding.cache_path': shared_embeddings}))}"]
    first = subprocess.run(cmd, cwd=REPO, env=_env(fake_server), capture_output=True, text=True, timeout=600)
    assert first.returncode == 0, first.stderr[-2000:]
    run_dir = tmp_path / "results" / benchmark / "t"
    n = len(rows(run_dir / "01_questions.jsonl"))
    counts = fake_server.counts_by_kind()
    assert counts["plan_audit"] == counts["plan"] == n
    led = json.loads((run_dir / "ledger.json").read_text())
    roles = {(e["stage"], e["role"]): e for e in led["stages"]}
    assert roles[("05_plan", "plan_audit")]["paid"] == n
    assert "| 05_plan | plan_audit |" in (run_dir / "ledger.md").read_text()
    answers = rows(run_dir / "07_answer.jsonl")
    plans = {p["qid"]: p["plan"] for p in rows(run_dir / "05_plan.jsonl")}
    if benchmark == "locomo":  # the authors' LoCoMo answer step: one plain call, no rerank, no verify
        assert counts["answer"] == n and not counts.get("answer_rerank") and not counts.get("answer_verify")
        assert all(a["prompt_id"] == "code_rules.answer_user" and not a.get("steps") for a in answers)
    else:  # their LongMemEval answering: rerank (not for plans needing every candidate), JSON draft, verify
        # answer.routes: a ledger that computes the answer replaces the draft, rerank and verify calls
        # of its question (lme_tiny: "how many weeks ago", "how much ... in total").
        routed = {a["qid"]: a["answer"] for a in answers if "rerank" not in a["steps"]}
        assert routed == {"temp_0001": "2 weeks ago", "multi_0001": "$350"}
        rest = [a for a in answers if a["qid"] not in routed]
        m = len(rest)
        # Not reranked: plans needing every candidate, and (answer.keep_whole_point) the point plans
        # the authors keep whole.
        whole = sum(bool(answer_mod.needs_every_candidate(from_dict(Plan, plans[a["qid"]]))
                         or answer_mod.kept_whole(a["question"], from_dict(Plan, plans[a["qid"]]))) for a in rest)
        assert counts["answer_draft"] == counts["answer_verify"] == m and not counts.get("answer")
        assert counts.get("answer_rerank", 0) == m - whole
        for stage, role in (("07_answer", "answer_draft"), ("07_answer", "answer_verify")):
            assert roles[(stage, role)]["paid"] == m, role
        # The scan and consolidation calls, and the temporal ledger's, each a ledger row.
        assert roles[("07_answer", "answer_count")]["paid"] == counts["answer_count"] + counts["answer_count_merge"] > 0
        assert roles[("07_answer", "answer_temporal")]["paid"] == counts["answer_temporal"] > 0
        assert all(a["prompt_id"] == "code_rules.answer_draft_user" and "verify" in a["steps"] for a in rest)
        # answer.draft_prompt: longmemeval with answer.draft_rules: every draft's system message is the
        # LongMemEval one carrying the authors' answer rules.
        drafts = fake_server.requests_of_kind("answer_draft")
        assert drafts and all(d["messages"][0]["content"] == prompts.load("code_rules.answer_draft_rules_system")
                              for d in drafts)
    # No request carries an official LongMemEval session id (answer_<id> marks an evidence session).
    official = {sid for it in json.loads(LME_TINY.read_text()) for sid in it["haystack_session_ids"]}
    sent = [json.dumps(b) for b in fake_server.requests]
    assert official and not [sid for sid in official if any(re.search(rf"\b{re.escape(sid)}\b", t) for t in sent)]
    assert all(r["audit"]["outcome"] in ("unchanged", "corrected") for r in rows(run_dir / "05_plan.jsonl"))
    paid = fake_server.request_count
    second = subprocess.run(cmd, cwd=REPO, env=_env(fake_server), capture_output=True, text=True, timeout=600)
    assert second.returncode == 0, second.stderr[-2000:]
    assert fake_server.request_count == paid, "a finished run re-run must make zero LLM requests"
