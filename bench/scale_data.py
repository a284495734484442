"""A LongMemEval-format haystack set of any size, built from the real sessions in ../shared/data.

    python -m bench.scale_data --preset s --out results/bench-scale/data/scale_s.json
    python -m bench.scale_data --questions 20 --sessions 10 --pool 300 --seed 42 --out x.json

Only one real LongMemEval item is available offline, so scale is measured on a generated set.
What is real and what is generated:

* Turns are the real ones (LoCoMo's 272 sessions and the 53 sessions of the LongMemEval item),
  kept intact, so token counts and the shape of a session are those of real dialogue. A LoCoMo
  session's first speaker becomes ``user`` and the other ``assistant``; an image turn keeps its
  caption in the text (LongMemEval has no image field).
* Re-identified: every pool session gets a new id (``gen_<hash>``; ``answer_<hash>`` in the
  haystack whose question it answers, as in the official files), and the two LoCoMo speakers'
  names are replaced, in turns and questions, by a pair drawn for that copy. A pool larger
  than the 325 sources holds several copies ("variants") of a source, each with its own names,
  id and date, so every pool session is distinct content.
* Re-dated: each pool session has one date (fixed across every haystack that draws it, so
  the pipeline's session dedup sees one session); a haystack is sorted by date and its
  ``question_date`` falls after its last session.
* Questions: LoCoMo's own questions whose evidence lies in one session (categories 1-4, names
  replaced) and the LongMemEval item's question; the evidence turns carry ``has_answer: true``
  and the answer session's other turns ``false``, as in the official S file. The type is the
  generator's label (category 2 -> temporal-reasoning, else single-session-user/-assistant by
  the evidence turn's role), good for the per-type table, not a claim about difficulty.

Each question's haystack is its answer session plus S-1 others drawn from the pool of P
sessions; P/(Q x S) sets how often a session is shared between haystacks, which is what the
pipeline's session dedup saves. Everything is drawn from ``random.Random(seed)``: the same
arguments give the same bytes.
"""
from __future__ import annotations

import argparse
import datetime as dt
import hashlib
import json
import random
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from common.core.config import REPO_ROOT

SHARED_DATA = REPO_ROOT.parent / "shared" / "data"
LOCOMO_FILE = SHARED_DATA / "locomo" / "locomo10.json"
LME_FILE = SHARED_DATA / "longmemeval" / "longmemeval_s_single_e47becba.json"

# name -> (questions, sessions per haystack, pool of distinct sessions). LongMemEval_S has about
# 50 sessions per haystack and _M about 500; the pools make a few reuses per session, as the
# official files share filler sessions between haystacks.
PRESETS: dict[str, tuple[int, int, int]] = {"s": (500, 50, 2000), "m": (500, 500, 6000)}
# First names for re-identification (a pair per LoCoMo session copy).
NAMES = ("Avery", "Blake", "Camila", "Dario", "Elena", "Farid", "Greta", "Hiro", "Ines", "Jonas", "Kira", "Luca",
         "Maya", "Nadia", "Omar", "Priya", "Quinn", "Rosa", "Sami", "Tessa", "Umar", "Vera", "Wren", "Ximena",
         "Yusuf", "Zoe", "Anton", "Bianca", "Cyrus", "Daphne", "Emil", "Freya", "Gideon", "Hana", "Ivo", "Jana")
DATE_START = dt.datetime(2022, 1, 3, 8, 0)
DATE_SPAN_DAYS = 900
_LOCOMO_DATE = "%I:%M %p on %d %B, %Y"


@dataclass
class Source:
    """One real session: its turns and, for LoCoMo, the two speaker names to replace."""

    key: str  # where it came from, e.g. "locomo:conv-26:session_3"
    turns: list[dict[str, Any]]  # {"role", "content", "dia_id"?, "has_answer"?}
    names: tuple[str, ...] = ()
    questions: list[dict[str, Any]] = field(default_factory=list)  # {question, answer, type, evidence}


def _locomo_sources(path: Path) -> list[Source]:
    out: list[Source] = []
    for conv in json.loads(path.read_text(encoding="utf-8")):
        c = conv["conversation"]
        names = (c["speaker_a"], c["speaker_b"])
        by_session: dict[str, Source] = {}
        n = 1
        while f"session_{n}" in c:
            turns = []
            for t in c[f"session_{n}"]:
                text = t["text"] + (f" [shares a photo: {t['blip_caption']}]" if t.get("blip_caption") else "")
                turns.append({"role": "user" if t["speaker"] == names[0] else "assistant", "content": text,
                              "dia_id": t["dia_id"]})
            by_session[f"D{n}"] = Source(f"locomo:{conv['sample_id']}:session_{n}", turns, names)
            n += 1
        for qa in conv["qa"]:
            if qa.get("category") not in (1, 2, 3, 4) or "answer" not in qa:
                continue
            sessions = {str(e).split(":")[0] for e in qa.get("evidence") or []}
            if len(sessions) != 1 or next(iter(sessions)) not in by_session:
                continue  # only single-session evidence: the evidence session is the answer session
            src = by_session[next(iter(sessions))]
            ids = {t["dia_id"] for t in src.turns}
            evidence = [str(e) for e in qa["evidence"] if str(e) in ids]
            if evidence:
                src.questions.append({"question": qa["question"], "answer": str(qa["answer"]),
                                      "category": qa["category"], "evidence": evidence})
        out.extend(by_session.values())
    return out


def _lme_sources(path: Path) -> list[Source]:
    out = []
    for item in json.loads(path.read_text(encoding="utf-8")):
        for sid, session in zip(item["haystack_session_ids"], item["haystack_sessions"]):
            turns = [{"role": t["role"], "content": t["content"], "dia_id": str(j),
                      **({"has_answer": t["has_answer"]} if "has_answer" in t else {})}
                     for j, t in enumerate(session)]
            src = Source(f"longmemeval:{item['question_id']}:{sid}", turns)
            if sid in item["answer_session_ids"]:
                flagged = [t["dia_id"] for t in turns if t.get("has_answer")]
                if flagged:
                    src.questions.append({"question": item["question"], "answer": str(item["answer"]),
                                          "type": item["question_type"], "evidence": flagged})
            out.append(src)
    return out


def load_sources(locomo: Path = LOCOMO_FILE, longmemeval: Path = LME_FILE) -> list[Source]:
    """Every real session of the two files, in file order."""
    for p in (locomo, longmemeval):
        if not p.is_file():
            raise FileNotFoundError(f"{p}: source data of the scale generator not found")
    return _locomo_sources(locomo) + _lme_sources(longmemeval)


def _h(*parts: Any) -> str:
    return hashlib.sha256("|".join(map(str, parts)).encode("utf-8")).hexdigest()


def _rename(text: str, mapping: dict[str, str]) -> str:
    for old, new in mapping.items():
        text = re.sub(rf"\b{re.escape(old)}\b", new, text)
    return text


def _lme_date(t: dt.datetime) -> str:
    return t.strftime("%Y/%m/%d (%a) %H:%M")


@dataclass
class PoolSession:
    pool_id: str
    date: dt.datetime
    turns: list[dict[str, Any]]  # role, content, dia_id (dia_id dropped on output)
    questions: list[dict[str, Any]]
    source: Source


def build_pool(sources: list[Source], size: int, seed: int) -> list[PoolSession]:
    """``size`` distinct sessions: every source once (in a seeded order), then further variants."""
    if size < 1:
        raise ValueError("pool size must be >= 1")
    rng = random.Random(f"{seed}:pool")
    order = list(range(len(sources)))
    rng.shuffle(order)
    pool = []
    for n in range(size):
        variant, src = divmod(n, len(sources))
        s = sources[order[src]]
        vr = random.Random(f"{seed}:{s.key}:{variant}")
        mapping = dict(zip(s.names, vr.sample(NAMES, len(s.names)))) if s.names else {}
        turns = [{**t, "content": _rename(t["content"], mapping)} for t in s.turns]
        questions = [{**q, "question": _rename(q["question"], mapping), "answer": _rename(q["answer"], mapping)}
                     for q in s.questions]
        date = DATE_START + dt.timedelta(minutes=vr.randrange(DATE_SPAN_DAYS * 24 * 60))
        pool.append(PoolSession(f"gen_{_h(seed, s.key, variant)[:12]}", date, turns, questions, s))
    return pool


def _question_type(q: dict[str, Any], turns: list[dict[str, Any]]) -> str:
    if "type" in q:
        return str(q["type"])
    if q.get("category") == 2:
        return "temporal-reasoning"
    roles = {t["role"] for t in turns if t["dia_id"] in q["evidence"]}
    return "single-session-user" if "user" in roles else "single-session-assistant"


def generate(questions: int, sessions: int, pool_size: int, seed: int = 42,
             sources: list[Source] | None = None) -> list[dict[str, Any]]:
    """The items of a LongMemEval-format file (see the module doc)."""
    if questions < 1 or sessions < 1:
        raise ValueError("questions and sessions must be >= 1")
    if sessions > pool_size:
        raise ValueError(f"sessions per haystack ({sessions}) cannot exceed the pool size ({pool_size})")
    pool = build_pool(sources if sources is not None else load_sources(), pool_size, seed)
    answerable = [(i, qi) for i, p in enumerate(pool) for qi in range(len(p.questions))]
    if not answerable:
        raise ValueError("no pool session carries a question; use a larger pool")
    # One shuffle, whatever Q, and one generator per question: the first N items of a set of
    # Q > N questions are exactly the set of N questions (LIMIT=N runs a prefix of the preset).
    random.Random(f"{seed}:questions").shuffle(answerable)
    items = []
    for n in range(questions):
        ai, qi = answerable[n % len(answerable)]  # more questions than sources: ask again, new haystack
        answer = pool[ai]
        q = answer.questions[qi]
        rng = random.Random(f"{seed}:haystack:{n}")
        others = rng.sample([i for i in range(len(pool)) if i != ai], sessions - 1)
        haystack = sorted([ai, *others], key=lambda i: (pool[i].date, pool[i].pool_id))
        qid = f"gen_{_h(seed, n, answer.pool_id, qi)[:8]}"
        answer_sid = "answer_" + _h(qid, answer.pool_id)[:8]
        ids, dates, bodies = [], [], []
        for i in haystack:
            p = pool[i]
            if i == ai:
                ids.append(answer_sid)
                bodies.append([{"role": t["role"], "content": t["content"], "has_answer": t["dia_id"] in q["evidence"]}
                               for t in p.turns])
            else:
                ids.append(p.pool_id)
                bodies.append([{"role": t["role"], "content": t["content"]} for t in p.turns])
            dates.append(_lme_date(p.date))
        last = max(pool[i].date for i in haystack)
        asked = last + dt.timedelta(days=rng.randint(1, 30), minutes=rng.randrange(24 * 60))
        items.append({"question_id": qid, "question_type": _question_type(q, answer.turns),
                      "question": q["question"], "question_date": _lme_date(asked), "answer": q["answer"],
                      "answer_session_ids": [answer_sid], "haystack_dates": dates,
                      "haystack_session_ids": ids, "haystack_sessions": bodies})
    return items


def stats(items: list[dict[str, Any]]) -> dict[str, Any]:
    """Sizes of a generated set: haystack slots, distinct sessions, the share reused, turns."""
    slots = [(sid, d) for it in items for sid, d in zip(it["haystack_session_ids"], it["haystack_dates"])]
    distinct = len(set(slots))
    turns = sum(len(s) for it in items for s in it["haystack_sessions"])
    return {"questions": len(items), "haystack_slots": len(slots), "distinct_sessions": distinct,
            "reused_share": round(1 - distinct / len(slots), 4) if slots else 0.0, "turns": turns}


def write(items: list[dict[str, Any]], out: Path) -> Path:
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_suffix(out.suffix + ".part")
    tmp.write_text(json.dumps(items, ensure_ascii=False), encoding="utf-8")
    tmp.replace(out)
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.scale_data", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--preset", choices=sorted(PRESETS), default="s")
    p.add_argument("--questions", type=int, help="Q (default: the preset's)")
    p.add_argument("--sessions", type=int, help="S, sessions per haystack (default: the preset's)")
    p.add_argument("--pool", type=int, help="P, distinct sessions to draw from (default: the preset's)")
    p.add_argument("--seed", type=int, default=42)
    p.add_argument("--out", required=True)
    a = p.parse_args(argv)
    q, s, pool = PRESETS[a.preset]
    try:
        items = generate(a.questions or q, a.sessions or s, a.pool or pool, a.seed)
    except (ValueError, FileNotFoundError) as exc:
        print(f"scale_data error: {exc}", file=sys.stderr)
        return 2
    write(items, Path(a.out))
    print(json.dumps({"out": a.out, **stats(items)}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
