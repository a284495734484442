"""The LongMemEval-scale generator (bench/scale_data.py) on the real sessions of ../shared/data."""
from __future__ import annotations

import datetime as dt
import json
import re

import pytest

from bench import scale_data as sd
from common.benchmarks.longmemeval import load_longmemeval
from tests.conftest import needs_files

OFFICIAL = {"question_id", "question_type", "question", "question_date", "answer", "answer_session_ids",
            "haystack_dates", "haystack_session_ids", "haystack_sessions"}
# Every test here generates from the real sessions; without them (a clone with no ../shared) they skip.
pytestmark = needs_files(sd.LOCOMO_FILE, sd.LME_FILE, why="the scale generator's source sessions")


@pytest.fixture(scope="module")
def sources():
    return sd.load_sources()


def _date(s: str) -> dt.datetime:
    return dt.datetime.strptime(s, "%Y/%m/%d (%a) %H:%M")


def test_sources_are_every_real_session(sources):
    locomo = json.loads(sd.LOCOMO_FILE.read_text())
    n_locomo = sum(1 for c in locomo for k in c["conversation"] if re.fullmatch(r"session_\d+", k))
    assert len(sources) == n_locomo + 53  # LoCoMo's 272 sessions and the LongMemEval item's 53
    assert sum(len(s.questions) for s in sources) > 1000


def test_same_arguments_same_bytes_and_prefix_of_a_larger_set(sources, tmp_path):
    a = sd.generate(12, 8, 200, seed=42, sources=sources)
    b = sd.generate(12, 8, 200, seed=42, sources=sources)
    sd.write(a, tmp_path / "a.json")
    sd.write(b, tmp_path / "b.json")
    assert (tmp_path / "a.json").read_bytes() == (tmp_path / "b.json").read_bytes()
    assert sd.generate(5, 8, 200, seed=42, sources=sources) == a[:5]  # LIMIT=N runs a prefix
    assert sd.generate(12, 8, 200, seed=7, sources=sources) != a


def test_official_fields_and_one_evidence_turn_per_question(sources, tmp_path):
    items = sd.generate(20, 10, 300, seed=42, sources=sources)
    assert len({it["question_id"] for it in items}) == 20
    for it in items:
        assert set(it) == OFFICIAL
        ids, dates, sessions = it["haystack_session_ids"], it["haystack_dates"], it["haystack_sessions"]
        assert len(ids) == len(dates) == len(sessions) == 10 and len(set(ids)) == 10
        assert [_date(d) for d in dates] == sorted(_date(d) for d in dates)
        assert _date(it["question_date"]) > _date(dates[-1])
        (answer_sid,) = it["answer_session_ids"]
        assert answer_sid.startswith("answer_") and answer_sid in ids
        answer = sessions[ids.index(answer_sid)]
        assert any(t["has_answer"] for t in answer) and all("has_answer" in t for t in answer)
        others = [s for sid, s in zip(ids, sessions) if sid != answer_sid]
        assert all("has_answer" not in t for s in others for t in s)
        assert all(set(t) <= {"role", "content", "has_answer"} and t["role"] in ("user", "assistant")
                   for s in sessions for t in s)
    # The harness's own adapter reads it; the flagged turns become the gold evidence.
    data = load_longmemeval(sd.write(items, tmp_path / "x.json"))
    assert len(data.questions) == 20 and all(g.has_answer for g in data.gold)


def test_turns_intact_names_replaced(sources):
    pool = sd.build_pool(sources, 400, seed=42)
    named = [p for p in pool if p.source.names]
    assert len(named) > 200
    for p in named:  # the two speakers' full names never survive in their session or questions
        text = " ".join([t["content"] for t in p.turns] + [q["question"] + " " + q["answer"] for q in p.questions])
        assert not [n for n in p.source.names if re.search(rf"\b{re.escape(n)}\b", text)], p.source.key
        # turns intact: same count, same roles, same text once names are masked
        assert [t["role"] for t in p.turns] == [t["role"] for t in p.source.turns]
        def mask(s: str) -> str:
            return re.sub(r"\b[A-Z][a-z]+\b", "N", s)
        assert [mask(t["content"]) for t in p.turns] == [mask(t["content"]) for t in p.source.turns]
    # every haystack session of a generated set is a pool session's turns
    items = sd.generate(10, 20, 400, seed=42, sources=sources)
    contents = {json.dumps([t["content"] for t in p.turns]) for p in pool}
    assert all(json.dumps([t["content"] for t in s]) in contents for it in items for s in it["haystack_sessions"])


def test_pool_size_drives_reuse(sources):
    small = sd.stats(sd.generate(30, 10, 60, seed=42, sources=sources))
    large = sd.stats(sd.generate(30, 10, 1000, seed=42, sources=sources))
    assert small["reused_share"] > large["reused_share"]
    assert small["distinct_sessions"] <= 60 + 30  # the pool plus one answer copy per question
    # Pool sessions have one id and date everywhere, so the pipeline's session dedup sees one session.
    items = sd.generate(30, 10, 60, seed=42, sources=sources)
    dates: dict[str, set[str]] = {}
    for it in items:
        for sid, d in zip(it["haystack_session_ids"], it["haystack_dates"]):
            dates.setdefault(sid, set()).add(d)
    assert all(len(v) == 1 for v in dates.values())


def test_pool_larger_than_the_sources_makes_distinct_variants(sources):
    pool = sd.build_pool(sources, len(sources) + 40, seed=42)
    keys = {json.dumps([p.date.isoformat(), p.turns]) for p in pool}
    assert len(keys) == len(pool) and len({p.pool_id for p in pool}) == len(pool)


def test_bad_sizes_are_one_line_errors(sources, tmp_path, capsys):
    with pytest.raises(ValueError, match="cannot exceed the pool size"):
        sd.generate(2, 50, 10, sources=sources)
    assert sd.main(["--questions", "2", "--sessions", "50", "--pool", "10", "--out", str(tmp_path / "x.json")]) == 2
    assert "cannot exceed" in capsys.readouterr().err
