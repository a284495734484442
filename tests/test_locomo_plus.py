"""LoCoMo-Plus's adapter (common.benchmarks.locomo_plus, locomo_plus_stitch): the official stitching
reproduced, its defects as switches, what the method sees, LIMIT and MEMORIES, bad input.

Worked values come from the official ``build_conv.py`` / ``unified_input.py`` (xjtuleeyf/Locomo-Plus
@059f4e3d); the tests marked ``official`` run the official functions themselves, read from the
fetched repository (tests/locomo_plus_official.py), on the real files, and compare every item.
"""
from __future__ import annotations

import json
import random
from collections import Counter
from datetime import datetime
from pathlib import Path

import pytest

from common.benchmarks import locomo_plus as lp
from common.benchmarks import locomo_plus_stitch as stitch
from common.benchmarks.base import DataError
from common.benchmarks.registry import adapter
from common.core.config import load_config
from common.method.dedup import representatives
from tests import locomo_plus_official as official
from tests.conftest import REPO, TINY_LOCOMO

TINY_PLUS = REPO / "tests" / "fixtures" / "locomo_plus_tiny.json"


def tiny(**switches: str) -> lp.BenchmarkData:
    return lp.load_locomo_plus(TINY_PLUS, lp.Source(TINY_LOCOMO, **switches))  # type: ignore[arg-type]


def cognitive(data: lp.BenchmarkData) -> list:
    return [g for g in data.gold if g.question_type == lp.COGNITIVE]


# --------------------------------------------------------------------------- the time gap and the placement
@pytest.mark.parametrize("text, days, parsed", [
    ("two weeks later", 14, True), ("about one month later", 30, True), ("a year after", 365, True),
    ("six weeks later", 42, True), ("two months after the challenge ended", 60, True),
    ("around one week after the birth", 7, True), ("3 months later", 90, True), ("an year later", 365, True),
    # The official pattern needs a number word right before the unit: these are 0 days.
    ("several months later", 0, False), ("a couple of months later", 0, False), ("a few weeks later", 0, False),
    ("several years later", 0, False), ("three days later", 0, False)])
def test_the_official_time_gap_parser(text, days, parsed):
    assert stitch.parse_time_gap(text) == stitch.Gap(days, parsed)


@pytest.mark.parametrize("text, days", [("several months later", 90), ("a couple of months later", 60),
                                        ("a few weeks later", 21), ("several years later", 1095),
                                        ("three days later", 3), ("two weeks later", 14)])
def test_time_gaps_extended_reads_the_vague_phrases(text, days):
    assert stitch.parse_time_gap(text, extended=True) == stitch.Gap(days, True)


def test_placement_worked_example():
    """Sessions on 1 Mar, 1 Apr, 1 May (10:00): the trigger on 8 May, the cue gap days before it."""
    times = [datetime(2023, 3, 1, 10), datetime(2023, 4, 1, 10), datetime(2023, 5, 1, 10)]
    two_weeks = stitch.place(times, "two weeks later")  # cue 24 Apr: after session 2
    assert two_weeks.query_time == datetime(2023, 5, 8, 10) and two_weeks.cue_time == datetime(2023, 4, 24, 10)
    assert two_weeks.order == (0, 1, stitch.CUE, 2) and two_weeks.cue_idx == 1
    assert two_weeks.sessions_after_cue == 1 and not two_weeks.cue_before_trigger
    week = stitch.place(times, "one week later")  # cue dated at session 3's time: after it (stable sort)
    assert week.cue_time == times[2] and week.order == (0, 1, 2, stitch.CUE) and week.cue_before_trigger
    vague = stitch.place(times, "several months later")  # 0 days: with the trigger, after everything
    assert vague.cue_time == vague.query_time and vague.cue_before_trigger and not vague.gap.parsed
    year = stitch.place(times, "one year later")
    assert year.order == (stitch.CUE, 0, 1, 2) and year.cue_idx is None


def test_locomo_dates_written_and_read_back():
    when = datetime(2023, 5, 8, 13, 56)
    assert stitch.locomo_date(when) == "1:56 pm on 8 May, 2023"
    assert stitch.session_time(stitch.locomo_date(when)) == when
    assert stitch.locomo_date(datetime(2023, 1, 2, 0, 5)) == "12:05 am on 2 January, 2023"


def test_pairing_round_robin_and_the_random_switch():
    assert stitch.pair(12, 10) == [0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 0, 1]
    rng = random.Random(7)
    expect = [rng.choice(range(10)) for _ in range(401)]  # build_conv.py's random.choice, seeded here
    assert stitch.pair(401, 10, "random", seed=7) == expect != stitch.pair(401, 10)
    with pytest.raises(ValueError, match="pairing"):
        stitch.pair(3, 10, "shuffled")


# --------------------------------------------------------------------------- the stitched memories
def test_tiny_fixture_memories_questions_and_gold():
    data = tiny()
    assert len(data.memory_ids) == 2 + 5 and len(data.questions) == 11 + 5
    assert Counter(g.question_type for g in data.gold) == Counter(
        {"single-hop": 4, "multi-hop": 2, "temporal": 2, "adversarial": 2, "common-sense": 1, "Cognitive": 5})
    first = cognitive(data)[0]  # item 0 -> tiny-1 (round-robin), "two weeks later"
    assert first.details["conversation"] == "tiny-1" and first.details["gap_days"] == 14
    assert first.evidence == ["D2:1", "D2:2"] and first.details["cue_session"] == "session_2"
    assert first.answer == "" and first.category == lp.COGNITIVE_ID
    assert first.details["judge_evidence"] == ("Nadia：Since I started cycling to work, my knee has been aching "
                                               "every evening.\nTomas：Maybe give it a rest for a while.")
    question = next(q for q in data.questions if q.qid == first.qid)
    assert question.question == 'Nadia said, "Should I sign up for the charity bike ride next month?"'
    sessions = [s for s in data.sessions if s.memory_id == first.memory_id]
    assert [s.session_id for s in sessions] == ["session_1", "session_2", "session_3"]
    # The plain conversation's session 2 comes after the cue: renumbered, its turns D3:<t>.
    assert [t.dia_id for t in sessions[2].turns][:2] == ["D3:1", "D3:2"]
    flags = [(g.details["gap_parsed"], g.details["cue_before_trigger"]) for g in cognitive(data)]
    assert flags == [(True, False), (False, True), (True, True), (True, False), (True, False)]


def test_ids_and_questions_name_no_category_answer_or_evidence():
    data = tiny()
    words = set(lp.CATEGORIES) | set(lp.RELATION_TYPES) | {"cue", "plus", "trigger", "item", "tiny"}
    for q in data.questions:
        assert set(vars(q)) == {"qid", "memory_id", "question", "question_date"}
        assert not any(w.lower() in q.qid.lower() for w in words), q.qid
        assert q.qid == f"{q.memory_id}:q{q.qid.rsplit(':q', 1)[1]}" and q.memory_id.startswith("lp-")
    assert {s.session_id for s in data.sessions} <= {f"session_{k}" for k in range(1, 40)}
    shapes = {len(q.qid.rsplit(":", 1)[1]) for q in data.questions}
    assert shapes == {5}  # q0001 for every category: the id's form says nothing either


def test_context_switch_dates_and_images():
    """Official: a stitched memory carries no date and no image (its dialogue has none); dated:
    the LoCoMo sessions as they are, the cue and the question dated."""
    plain, dated = tiny(), tiny(context="dated")
    item = cognitive(plain)[0].memory_id
    assert all(s.date_time == "" for s in plain.sessions if s.memory_id == item)
    assert all(not t.img_url and not t.blip_caption for s in plain.sessions if s.memory_id == item for t in s.turns)
    assert next(q for q in plain.questions if q.memory_id == item).question_date == ""
    dated_sessions = [s for s in dated.sessions if s.memory_id == item]
    assert [s.date_time for s in dated_sessions] == ["10:00 am on 3 March, 2023", "4:30 pm on 13 April, 2023",
                                                     "4:30 pm on 20 April, 2023"]
    assert next(q for q in dated.questions if q.memory_id == item).question_date == "4:30 pm on 27 April, 2023"
    # The base conversations keep their dates in both.
    base = lp.memory_id_of("tiny-1")
    assert all(s.date_time for s in plain.sessions if s.memory_id == base)


def test_identical_sessions_are_shared_across_memories():
    """Dated: a session before the cue is the plain conversation's own (same id, date, turns), so it is
    partitioned and extracted once; official: each stitched copy loses its date, shared among items."""
    data = tiny(context="dated")
    rep = representatives(data.sessions)
    unique = {id(s) for s in rep.values()}
    assert len(unique) < len(data.sessions)
    item = cognitive(data)[0].memory_id
    first = next(s for s in data.sessions if s.memory_id == item and s.session_id == "session_1")
    assert rep[first.key].memory_id == lp.memory_id_of("tiny-1")


def test_each_defect_switch_changes_the_memories():
    base = tiny()
    assert [g.details["conversation"] for g in cognitive(base)] == ["tiny-1", "tiny-2", "tiny-1", "tiny-2", "tiny-1"]
    shuffled = tiny(pairing="random", seed=3)
    rng = random.Random(3)
    assert [g.details["conversation"] for g in cognitive(shuffled)] == [
        ["tiny-1", "tiny-2"][rng.choice(range(2))] for _ in range(5)]
    extended = cognitive(tiny(time_gaps="extended"))[1]  # "several months later": 90 days, not 0
    assert extended.details["gap_days"] == 90 and extended.details["gap_parsed"]
    assert not extended.details["cue_before_trigger"] and cognitive(base)[1].details["cue_before_trigger"]


def test_select_by_conversation_and_limit_across_categories():
    data = tiny()
    conv = lp.select(data, ["tiny-2"])
    assert {g.details["conversation"] for g in conv.gold} == {"tiny-2"} and len(conv.memory_ids) == 3
    assert len(lp.select(data, [lp.memory_id_of("tiny-2")]).questions) == 5
    limited = lp.select(data, None, 6)
    assert Counter(g.question_type for g in limited.gold) == Counter(dict.fromkeys(lp.CATEGORIES, 1))
    assert set(limited.memory_ids) == {q.memory_id for q in limited.questions}  # no memory without a question
    assert lp.select(data, None, 6).questions == limited.questions  # seeded
    assert lp.select(data, None, 0).questions == []
    with pytest.raises(ValueError, match="unknown LoCoMo-Plus memory or conversation"):
        lp.select(data, ["conv-99"])


@pytest.mark.parametrize("item, message", [
    ([{"cue_dialogue": "A: hi", "trigger_query": "A: yo", "relation_type": "goal"}], "item[0]: time_gap: missing"),
    ([{"cue_dialogue": "hello", "trigger_query": "A: yo", "time_gap": "one week later", "relation_type": "goal"}],
     "item[0]: cue_dialogue: no line starting 'A:' or 'B:'"),
    ([{"cue_dialogue": "A: hi", "trigger_query": 5, "time_gap": "x", "relation_type": "goal"}],
     "item[0]: trigger_query: expected str"),
    ({"items": []}, "expected a non-empty JSON list of items")])
def test_bad_input_is_one_line_naming_the_file_and_field(tmp_path, item, message):
    path = tmp_path / "locomo_plus.json"
    path.write_text(json.dumps(item))
    with pytest.raises(DataError) as err:
        lp.load_locomo_plus(path, lp.Source(TINY_LOCOMO))
    assert str(err.value).startswith(str(path)) and message in str(err.value) and "\n" not in str(err.value)


def test_an_unparsable_locomo_date_names_the_conversation_and_field(tmp_path):
    data = json.loads(TINY_LOCOMO.read_text())
    data[1]["conversation"]["session_2_date_time"] = "sometime in July"
    bad = tmp_path / "locomo10.json"
    bad.write_text(json.dumps(data))
    with pytest.raises(DataError, match=r"tiny-2: conversation.session_2_date_time: 'sometime in July'"):
        lp.load_locomo_plus(TINY_PLUS, lp.Source(bad))


def test_data_path_finds_the_locomo_file_and_says_how_to_get_it(tmp_path, monkeypatch):
    monkeypatch.delenv("LOCOMO_JSON", raising=False)
    plus = tmp_path / "locomo_plus.json"
    plus.write_text(TINY_PLUS.read_text())
    cfg = load_config(["configs/locomo_plus.yaml"], [f"data.path={plus}"])
    with pytest.raises(DataError, match="make data-locomo-plus"):
        adapter("locomo_plus").load(adapter("locomo_plus").data_path(cfg))  # no locomo10.json beside it
    monkeypatch.setenv("LOCOMO_JSON", str(TINY_LOCOMO))
    ad = adapter("locomo_plus")
    assert len(ad.load(ad.data_path(cfg)).questions) == 16
    (tmp_path / "locomo10.json").write_text(TINY_LOCOMO.read_text())
    monkeypatch.delenv("LOCOMO_JSON")
    cfg = load_config(["configs/locomo_plus.yaml"], [f"data.path={plus}", "data.stitch.context=dated"])
    assert ad.source(ad.data_path(cfg)) == lp.Source(tmp_path / "locomo10.json", context="dated")


# --------------------------------------------------------------------------- against the official code
@pytest.fixture(scope="module")
def real(tmp_path_factory) -> tuple[Path, Path]:
    return official.data(tmp_path_factory.mktemp("locomo_plus_data"))


@pytest.fixture(scope="module")
def loaded(real) -> dict[str, lp.BenchmarkData]:
    """The released files loaded once per context (each load builds 11,572 sessions)."""
    plus, locomo = real
    return {c: lp.load_locomo_plus(plus, lp.Source(locomo, context=c)) for c in stitch.CONTEXTS}


def distinct_sessions(data: lp.BenchmarkData) -> int:
    """Sessions the de-duplication serves once: the fields of ``dedup.session_content_key`` (id, date,
    every turn field) compared directly, which is quicker than its hash on 11,572 sessions."""
    return len({(s.session_id, s.date_time, tuple((t.dia_id, t.speaker, t.text, t.role, tuple(t.img_url),
                                                    t.blip_caption, t.query) for t in s.turns))
                for s in data.sessions})


def test_the_released_files_counts_and_flags(real, loaded):
    plus, locomo = real
    data = loaded["official"]
    assert len(data.memory_ids) == 411 and len(data.questions) == 2387
    assert Counter(g.question_type for g in data.gold) == Counter({"single-hop": 841, "adversarial": 446,
                                                                   "Cognitive": 401, "temporal": 321,
                                                                   "multi-hop": 282, "common-sense": 96})
    items = [g.details for g in cognitive(data)]
    assert Counter(d["relation_type"] for d in items) == Counter({"causal": 101, "state": 100, "goal": 100,
                                                                  "value": 100})
    assert sum(not d["gap_parsed"] for d in items) == 15  # "several months later" and the like: 0 days
    assert sum(d["cue_before_trigger"] for d in items) == 33  # 15 of those + 18 gaps of a week or less
    assert sum(d["cue_idx_official"] is None for d in items) == 28
    assert distinct_sessions(data) == 1212 and len(data.sessions) == 11572
    assert distinct_sessions(loaded["dated"]) == 940
    assert lp.pair_sha256(lp.sha256_file(plus), lp.sha256_file(locomo)) == lp.official_sha256()


@pytest.mark.parametrize("context", ["official", "dated"])
def test_every_item_stitched_as_build_context_does(real, loaded, tmp_path, monkeypatch, context):
    """The official ``build_context`` on each item's round-robin conversation (unified_input's pairing):
    the same dialogue, in the same order, with the same speakers, cue position, cue and trigger times."""
    plus_path, locomo_path = real
    off = official.code(tmp_path, monkeypatch)
    plus, locomo = json.loads(plus_path.read_text()), json.loads(locomo_path.read_text())
    data = loaded[context]
    by_memory: dict[str, list] = {}
    for s in data.sessions:
        by_memory.setdefault(s.memory_id, []).append(s)
    questions = {q.memory_id: q for q in data.questions}
    for g in cognitive(data):
        i = g.details["item"]
        ctx = off.build_conv.build_context(plus[i], locomo[i % len(locomo)])
        ours = [(t.speaker, t.text.strip()) for s in by_memory[g.memory_id] for t in s.turns]
        theirs = [(t["speaker"], (t.get("text") or "").strip()) for t in ctx["dialogue"]]
        assert ours == theirs[:-len(ctx["query_turns"])], i
        assert questions[g.memory_id].question == "\n".join(
            f'{t["speaker"]} said, "{t["text"].strip()}"' for t in ctx["query_turns"])
        assert g.details["cue_idx_official"] == ctx["cue_session_idx"]
        assert (g.details["cue_time"], g.details["query_time"]) == (ctx["cue_time"], ctx["query_time"])
        assert g.details["gap_days"] == off.build_conv.parse_time_gap(plus[i]["time_gap"])


def test_official_context_renders_as_the_official_input_prompt(real, loaded, tmp_path, monkeypatch):
    """``unified_input._process_locomo_plus``'s input prompt is our stitched memory plus the question,
    as ``<speaker> said, "<text>"`` lines; its evidence is ``judge_evidence``."""
    plus_path, locomo_path = real
    off = official.code(tmp_path, monkeypatch)
    samples = off.unified._process_locomo_plus(str(plus_path), str(locomo_path))
    data = loaded["official"]
    lines: dict[str, list[str]] = {}
    for s in data.sessions:
        lines.setdefault(s.memory_id, []).extend(f'{t.speaker} said, "{t.text.strip()}"' for t in s.turns)
    questions = {q.memory_id: q.question for q in data.questions}
    for g in cognitive(data):
        sample = samples[g.details["item"]]
        assert sample["input_prompt"] == "\n".join(lines[g.memory_id] + [questions[g.memory_id]])
        assert sample["evidence"] == g.details["judge_evidence"] and sample["time_gap"] == g.details["time_gap"]


def test_locomo_questions_carry_the_official_evidence_text_and_answer(real, loaded, tmp_path, monkeypatch):
    _, locomo_path = real
    off = official.code(tmp_path, monkeypatch)
    samples = off.unified._process_locomo(str(locomo_path))
    data = loaded["official"]
    plain = [g for g in data.gold if g.question_type != lp.COGNITIVE]
    assert len(samples) == len(plain) == 1986
    for sample, g in zip(samples, plain):
        assert sample["category"] == g.question_type
        assert sample["evidence"] == g.details["judge_evidence"], g.qid
        gold = off.utils.build_output_record(sample, "p", "m")["ground_truth"]
        assert str(gold) == g.answer or (gold == "" and not g.answer.strip())
    assert sum("[Parse error]" in g.details["judge_evidence"] for g in plain) > 0  # the release's odd ids, kept
