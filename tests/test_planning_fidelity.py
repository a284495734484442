"""The planner's and the lexical guard's remaining departures from the authors' code, each a switch
(reference_notes 3.4 control flow, 3.5 steps 5.1.2 and 9): their repair request and last-resort
plan (plan.repair, plan.fallback), their hop-blocking rule (retrieve.block_rule) and the generic
alias and term sets of their lexical guard (retrieve.lexical_aliases). Expectations are worked out
by hand from the notes.
"""
from __future__ import annotations

import json

import pytest

from common.core import fingerprint, prompts
from common.core.config import ConfigError, RetrieveConfig, load_config
from common.core.schema import Anchor, Bridge, Episode, Hop, Plan, Question, Turn
from common.method import lexical
from common.method.index import build_index
from common.method.plan import code_fallback_plan, fallback_plan, normalize_plan, plan_question, repair_messages
from common.method.retrieve import Retriever
from common.pipeline.experiments import load as load_experiments
from tests.fake_openai.scripted import kind_for_prompt_id
from tests.test_code_fidelity import EMB, _bridge_plan, _memory, _rec, _view

Q_COUNT = Question("m::q1", "m", "How many times has Oskar gone sailing?")


# --------------------------------------------------------------------------- plan.fallback: code
def test_code_fallback_plan_keyword_rules_point_scope_and_the_failed_reply_override():
    plan = code_fallback_plan(Q_COUNT.question)
    (h,) = plan.hops
    # "how many" -> activity; always one direct point hop, entity person, empty value.
    assert (h.anchor.entity, h.anchor.entity_type, h.anchor.property, h.anchor.value) == \
        ("Oskar", "person", "activity", "")
    assert (plan.reasoning_type, plan.retrieval_scope, plan.answer_target["type"]) == ("direct", "point", "value")
    assert plan.required_properties[0]["broad_property"] == "activity"
    # The harness's fallback makes a different plan of the same question: all_matching, "sailing".
    harness = fallback_plan(Q_COUNT.question)
    assert (harness.retrieval_scope, harness.hops[0].anchor.property) == ("all_matching", "sailing")
    # The rules in their order, substring tests ("born" before "when"; "like" fires on "likely").
    prop = lambda q, raw=None: code_fallback_plan(q, raw).hops[0].anchor.property  # noqa: E731
    assert prop("When was Lena born?") == "birthday"
    assert prop("When did Lena finish the marathon?") == "time"
    assert prop("Where does Lena keep her kayak?") == "location"
    assert prop("Is Lena likely to buy a canoe?") == "preference"
    assert prop("Did Lena relocate last spring?") == "move"
    assert prop("Did Lena enjoy the regatta?") == "activity"
    # A required property of the failed reply with at most two words overrides the rules; a longer
    # one is skipped for the next; a three-part one that fails validation gives way to the rules.
    raw = {"required_properties": [{"broad_property": "sail boat trip"}, {"property": "Boat Repair"}]}
    assert prop(Q_COUNT.question, raw) == "boat_repair"
    assert prop(Q_COUNT.question, {"required_properties": [{"property_text": "a-b c"}]}) == "activity"
    # Entity: the first capitalized word of two letters or more that is not a question initial
    # ("I" never; a leading "In" is taken, as theirs takes it); else user.
    ent = lambda q: code_fallback_plan(q).hops[0].anchor.entity  # noqa: E731
    assert ent("What did I cook yesterday?") == "user"
    assert ent("In which town did Lena grow up?") == "In"
    assert normalize_plan({"hops": [{"anchor": {"entity": "x", "property": "y"}}]}).retrieval_scope == "point"


def test_plan_question_uses_the_code_fallback_and_the_code_repair_request():
    client = _Scripted("not json", "still not json")
    row = plan_question(client, Q_COUNT, {"sail": 3, "fish": 1}, granularity="fine",  # type: ignore[arg-type]
                        repair="code", fallback="code")
    assert row.fallback_used and row.repaired and row.plan == code_fallback_plan(Q_COUNT.question)
    assert [c["prompt_id"] for c in row.llm_calls] == ["plan_user", "code_rules.plan_code_repair_user"]
    system, user = client.messages[1][0]["content"], client.messages[1][1]["content"]
    assert system == prompts.load("code_rules.plan_code_repair_system")
    # Their repair request: question, error, failed plan, the reminder list, the vocabulary and
    # the granularity block (the harness's carries none of the last three).
    assert "Question: How many times has Oskar gone sailing?" in user and "Reminders:" in user
    assert "fish, sail" in user and prompts.load("granularity_fine") in user and "still" not in user
    assert "The plan that failed:\nnot json" in user
    assert "condition_property is one of after, before, during" in user
    harness = repair_messages(Q_COUNT, "bad", "{}", "fish, sail", "fine")[1]["content"]
    assert "fish, sail" not in harness and "Reminders:" not in harness
    # granularity none (their LongMemEval planner): the block and its heading are left out.
    none = repair_messages(Q_COUNT, "bad", "{}", "fish, sail", "none", "code")[1]["content"]
    assert "granularity" not in none.lower() and "fish, sail" in none
    # The fake server knows the code repair prompt as a repair call.
    assert kind_for_prompt_id("code_rules.plan_code_repair_user") == "plan_repair"


class _Reply:
    def __init__(self, text: str):
        self.text = text

    def record(self, prompt_id: str) -> dict:
        return {"prompt_id": prompt_id}


class _Scripted:
    """A client whose planner replies are given (the fake server plans every question validly)."""

    def __init__(self, *texts: str):
        self.texts, self.sent, self.messages = list(texts), [], []

    def complete(self, role, messages, json_mode=False, prompt_id=""):
        self.sent.append(prompt_id)
        self.messages.append(messages)
        return _Reply(self.texts.pop(0))


def test_code_fallback_reads_the_last_reply_that_parsed():
    """A repair reply that parses but fails validation: its short required property is the override."""
    bad = {"answer_target": {"type": "count"}, "required_properties": [{"broad_property": "regatta"}],
           "hops": [{"hop_id": "h1", "anchor": {"entity": "Oskar", "property": "sail_boat_race_day"}}]}
    client = _Scripted(json.dumps(bad), json.dumps(bad))
    row = plan_question(client, Q_COUNT, {}, granularity="fine", validation="code",  # type: ignore[arg-type]
                        repair="code", fallback="code")
    assert client.sent == ["plan_user", "code_rules.plan_code_repair_user"]
    assert row.fallback_used and "more than two parts" in row.error
    assert row.plan.hops[0].anchor.property == "regatta" and row.plan.retrieval_scope == "point"
    # The harness's fallback ignores the reply: its property comes from the question's words.
    row = plan_question(_Scripted(json.dumps(bad), json.dumps(bad)), Q_COUNT, {}, granularity="fine",  # type: ignore[arg-type]
                        validation="code")
    assert row.plan == fallback_plan(Q_COUNT.question)


# --------------------------------------------------------------------------- retrieve.block_rule: code
def _resolve_empty(hop, anchor, context, ids):
    return Bridge(hop.hop_id, hop.bridge_request, "", [], ids), []


_MEMORY: list = []


def _run(plan: Plan, **cfg):
    if not _MEMORY:  # one index for every retriever of these tests
        _MEMORY.extend(_memory()[:2])
    view, index = _MEMORY
    r = Retriever(index, view, EMB, RetrieveConfig(block_empty_bridge=True, **cfg))
    searched: list[Anchor] = []
    inner = r.hop_hits
    r.hop_hits = lambda question, anchor, scope: searched.append(anchor) or inner(question, anchor, scope)  # type: ignore[method-assign]
    row = r.retrieve(Question("q1", "m", "What does Oskar fish on his sailing day?"), plan, _resolve_empty)
    return row, searched


def test_code_block_rule_searches_with_an_emptied_value_and_blocks_an_emptied_entity():
    # $h1.bridge in the value: the harness's rule blocks h2; the authors' searches with value "".
    row, searched = _run(_bridge_plan())
    assert row.contributions["blocked_missing_bridge"] == ["h2"] and [a.property for a in searched] == ["sail"]
    row, searched = _run(_bridge_plan(), block_rule="code")
    assert "blocked_missing_bridge" not in row.contributions
    assert [(a.property, a.value) for a in searched] == [("sail", ""), ("fish", "")]
    # $h1.bridge as the entity: empty after substitution, blocked under both rules.
    h1 = Hop("h1", anchor=Anchor(entity="Oskar", property="sail"), bridge_request="the friend")
    h2 = Hop("h2", anchor=Anchor(entity="$h1.bridge", property="fish"), depends_on=["h1"])
    entity_plan = Plan({"type": "value", "description": ""}, "multi_hop", "point", [], [h1, h2])
    for rule in ("empty_bridge", "code"):
        row, searched = _run(entity_plan, block_rule=rule)
        assert row.contributions["blocked_missing_bridge"] == ["h2"] and len(searched) == 1, rule
    # A condition value that starts with "$" and is no placeholder: only the authors' rule blocks.
    h3 = Hop("h3", anchor=Anchor(entity="Oskar", property="buy", condition_property="for", condition_value="$40"))
    dollar = Plan({"type": "value", "description": ""}, "direct", "point", [], [h3])
    assert "blocked_missing_bridge" not in _run(dollar)[0].contributions
    assert _run(dollar, block_rule="code")[0].contributions["blocked_missing_bridge"] == ["h3"]
    with pytest.raises(ConfigError):
        load_config(["configs/locomo.yaml"], ["retrieve.block_rule=loose"])


# --------------------------------------------------------------------------- retrieve.lexical_aliases
def _doc(lines: dict[str, str]) -> lexical.EpisodeText:
    text = "\n".join(f"{k}: {v}" for k, v in lines.items())
    return lexical.EpisodeText(frozenset(lines), lexical.squash(text),
                               {k: lexical.squash(f"{k}: {v}") for k, v in lines.items()})


def test_alias_and_term_sets_find_what_the_question_words_miss():
    tables = lexical.load_term_tables()
    docs = [_doc({"oskar": "the trip to the fjords was lovely", "lena": "nice"}),
            _doc({"oskar": "i lost my keys", "lena": "oh no"}),
            _doc({"oskar": "we went to the campaign office, then camped", "lena": "ok"})]
    q = "Where did Oskar visit?"
    # Without the tables "visit" occurs nowhere; with them its alias "trip" finds episode 0.
    assert lexical.question_terms(q) == ["visit", "oskar visit"]
    # Aliases right after their word ("been" is a stop word); the n-grams stay over the question's words.
    assert lexical.question_terms(q, tables) == ["visit", "visited", "trip", "traveled", "oskar visit"]
    assert lexical.lexical_guard(docs, lexical.hop_terms(q, "", "visit"), "Oskar") == []
    plain = lexical.lexical_guard(docs, lexical.hop_terms(q, "", "visit", tables), "Oskar", forms=tables.word_forms)
    assert [p for p, _ in plain] == [0]
    # lose -> lost: the inflection the question word alone misses ("lose" is no prefix of "lost").
    lose = "When did Oskar lose his keys?"
    assert lexical.lexical_guard(docs, ["lose"], "Oskar") == []
    terms = lexical.hop_terms("When did Oskar losing keys?", "", "other", tables)
    assert "lost" in terms and 1 in [p for p, _ in lexical.lexical_guard(docs, terms, "Oskar")]
    assert lexical.question_terms(lose, tables)[:1] == ["lose"]
    # The property's term set comes first, in place of the value's words: camp -> camp, camping, campfire.
    camp = lexical.hop_terms("Where has Oskar been?", "lakeside", "camp", tables)
    assert camp[:3] == ["camp", "camping", "campfire"] and "lakeside" not in camp
    assert lexical.hop_terms("Where has Oskar been?", "lakeside", "camp")[-1] == "lakeside"
    # "camp" counts its own forms only in the guard: "campaign" is not a camping trip.
    assert lexical.occurrences(docs[2].text, "camp") == 2
    assert lexical.occurrences(docs[2].text, "camp", tables.word_forms["camp"]) == 1
    # travel, attend and buy add every word of the value, as theirs.
    assert lexical.hop_terms("?", "to Oslo", "travel", tables)[-2:] == ["to", "oslo"]


def test_the_retriever_reads_the_tables_only_with_the_switch():
    view = _view([(1, [Turn("D1:1", "Oskar", "The trip to the fjords was lovely."), Turn("D1:2", "Lena", "Nice.")]),
                  (2, [Turn("D2:1", "Oskar", "I repaired the fence."), Turn("D2:2", "Lena", "Good.")])])
    eps = [Episode("m::session_1::episode_001", "m", "session_1", 1, "2023", ["D1:1", "D1:2"], "a", "topic"),
           Episode("m::session_2::episode_001", "m", "session_2", 2, "2023", ["D2:1", "D2:2"], "b", "topic")]
    index = build_index(view, eps, [_rec(eps[1].episode_id, 1, "Oskar", "repair", "fence", "D2:1")], EMB)
    anchor = Anchor(entity="Oskar", entity_type="person", property="visit")
    budget = RetrieveConfig().point
    routes = {}
    for on in (False, True):
        r = Retriever(index, view, EMB, RetrieveConfig(lexical_aliases=on))
        routes[on] = {r.index.episodes[h.pos].episode_id: h.route
                      for h in r.guard_fallback("Where did Oskar visit?", anchor, budget)}
    assert routes[False].get(eps[0].episode_id) != "lexical"
    assert routes[True][eps[0].episode_id] == "lexical"


def test_the_alias_file_names_no_benchmark_content():
    from tests.test_code_rules import benchmark_names, hits, prompt_files

    path = lexical.ALIASES_FILE
    # The name, 4-word-sequence and SOURCES.md scans of test_code_rules read it with the prompts.
    assert path in prompt_files() and hits([path], benchmark_names()) == []
    # Their entries naming one conversation's content stay out (SOURCES.md lists them).
    tables = lexical.load_term_tables()
    for refused in ("clipboard", "studio", "accepted", "exposure", "sentiment", "progress"):
        assert refused not in tables.aliases
    assert not any("stained glass" in r.terms for r in tables.rules)


def test_a_malformed_alias_file_is_a_one_line_error_naming_the_field(tmp_path):
    bad = tmp_path / "aliases.yaml"
    bad.write_text("property_terms:\n  - {name: x, terms: [1, '']}\n", encoding="utf-8")
    with pytest.raises(ValueError, match=r"property_terms\[0\]\.terms"):
        lexical.load_term_tables(bad)


# --------------------------------------------------------------------------- switches
SWITCHES = {"plan.repair": "code", "plan.fallback": "code", "retrieve.block_rule": "code",
            "retrieve.lexical_aliases": True}


@pytest.mark.parametrize("config", ["configs/locomo_code.yaml", "configs/longmemeval_code.yaml"])
def test_code_configs_turn_the_authors_versions_on(config):
    cfg = load_config([config])
    assert (cfg.plan.repair, cfg.plan.fallback) == ("code", "code")
    assert (cfg.retrieve.block_empty_bridge, cfg.retrieve.block_rule, cfg.retrieve.lexical_aliases) == \
        (True, "code", True)
    base = load_config(["configs/locomo.yaml"])
    assert (base.plan.repair, base.plan.fallback, base.retrieve.block_rule, base.retrieve.lexical_aliases) == \
        ("harness", "harness", "empty_bridge", False)


def test_each_switch_changes_the_fingerprint_only_when_set_and_has_an_ablation_row():
    base = fingerprint.run_components(load_config(["configs/locomo.yaml"]), "s")
    assert not {"repair", "fallback"} & set(base["method"]["plan"])
    assert not {"block_rule", "lexical_aliases"} & set(base["method"]["retrieve"])
    exp = load_experiments()
    sets = [v.set for v in exp.variants]
    for key, value in SWITCHES.items():
        on = fingerprint.run_components(load_config(["configs/locomo.yaml"], [f"{key}={value}"]), "s")
        assert fingerprint.short(on) != fingerprint.short(base), key
        assert any(s.get(key) == value for s in sets), key
    repair = fingerprint.run_components(load_config(["configs/locomo.yaml"], ["plan.repair=code"]), "s")
    assert "code_rules.plan_code_repair_user" in repair["prompts"]
    aliases = fingerprint.run_components(load_config(["configs/locomo.yaml"], ["retrieve.lexical_aliases=true"]), "s")
    assert "code_rules.lexical_aliases.yaml" in aliases["prompts"]
    assert "code_rules.lexical_aliases.yaml" not in base["prompts"]
    assert set(exp.panels["planning_fidelity"]) >= {"plan_repair_code", "plan_fallback_code", "block_rule_code",
                                                    "lexical_aliases"}
