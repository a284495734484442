"""REALTALK's data quirks, counted and listed (``configs/realtalk_errata.yaml``; docs/realtalk.md).

Found in the release itself and left as they are (the official scorer reads the data unchanged, and
so does the harness); each question's quirks go to the gold side (``Gold.details.quirks``), so
09_aggregate counts them in ``metrics.json`` and every run's table says how many it holds:

* ``speaker_alias``: a question names a speaker by another name. Chat 1's first speaker is "Emi"
  in its ``name`` field and in every turn, but 35 of its 70 questions (and its events annotations)
  call her "Kate" (``ALIASES``: the one entry made by hand, read from the release's files).
* ``dangling_evidence``: an ``evidence`` entry that names no turn of its chat: 188 of the 1,742
  entries, in every chat (an id its session skips, such as ``D2:7``; ``"D13:4. D14:4"``).
  ``Gold.evidence`` keeps the ids that name a turn (LoCoMo's cleaning); the evidence diagnostics
  count the others.

Listed for the record but changing nothing: ``dia_id_numbering``, the sessions whose turn ids
carry another session's number (chat 1's ``session_4`` continues ``D3:30``...). Turn ids are
opaque to the harness, so only a reader matching ids to sessions by hand needs to know.

The committed list is regenerated with ``python -m common.benchmarks.realtalk --errata
configs/realtalk_errata.yaml`` (``make data-realtalk`` first, or ``--data <folder>``); a test
checks it against the shared copy of the release.
"""
from __future__ import annotations

import re
from collections import Counter
from typing import Any, Iterable

from common.core.schema import Gold, Session

# memory -> {name a question uses: the speaker it means}. Chat 1: its events annotations name
# agent_a "Kate" ("Kate takes an Italian cooking class ...") where name.speaker_1 and every turn say Emi.
ALIASES: dict[str, dict[str, str]] = {"realtalk-1": {"Kate": "Emi"}}
SPEAKER_ALIAS = "speaker_alias"
DANGLING = "dangling_evidence"
KINDS = (SPEAKER_ALIAS, DANGLING)
_SESSION_OF_ID = re.compile(r"D(\d+):")


def question_quirks(memory: str, question: str, raw_evidence: Iterable[str], dia_ids: set[str]) -> list[str]:
    """``["speaker_alias: Kate = Emi", "dangling_evidence: D2:7", ...]`` for one question."""
    out = [f"{SPEAKER_ALIAS}: {name} = {speaker}" for name, speaker in ALIASES.get(memory, {}).items()
           if re.search(rf"\b{re.escape(name)}\b", question)]
    return out + [f"{DANGLING}: {entry}" for entry in raw_evidence if entry not in dia_ids]


def kind(quirk: str) -> str:
    return quirk.split(":", 1)[0]


def counts(golds: Iterable[Gold]) -> dict[str, Any]:
    """Questions with each kind of quirk, and the evidence entries that name no turn, of ``golds``
    (09_aggregate's ``data_quirks``)."""
    golds = list(golds)
    per_question = Counter(k for g in golds for k in {kind(q) for q in g.details.get("quirks", [])})
    dangling = sum(1 for g in golds for q in g.details.get("quirks", []) if kind(q) == DANGLING)
    return {"questions": len(golds), f"questions_{SPEAKER_ALIAS}": per_question[SPEAKER_ALIAS],
            f"questions_{DANGLING}": per_question[DANGLING],
            "evidence_entries": sum(len(g.raw_evidence) for g in golds), "evidence_entries_naming_no_turn": dangling,
            "aliases": {m: dict(a) for m, a in ALIASES.items() if any(g.memory_id == m for g in golds)}}


def summary(golds: Iterable[Gold]) -> str:
    """One line: what the quirks of these questions are (01's output, the tables' note)."""
    c = counts(golds)
    aliases = "; ".join(f"{m}'s questions say {n} for the speaker {s}" for m, a in c["aliases"].items()
                        for n, s in a.items())
    return (f"REALTALK data quirks (configs/realtalk_errata.yaml, left as released): {c['questions_speaker_alias']} "
            f"of {c['questions']} questions name a speaker by another name" + (f" ({aliases})" if aliases else "")
            + f"; {c['evidence_entries_naming_no_turn']} of {c['evidence_entries']} evidence ids name no turn "
            f"({c['questions_dangling_evidence']} questions)")


def session_numbering(sessions: Iterable[Session]) -> list[dict[str, Any]]:
    """The sessions whose turn ids name another session number (``D3:30`` in ``session_4``)."""
    out = []
    for s in sessions:
        numbers = sorted({int(m.group(1)) for t in s.turns if (m := _SESSION_OF_ID.match(t.dia_id))})
        if numbers and numbers != [s.session_index]:
            out.append({"memory": s.memory_id, "session": s.session_id, "turns": len(s.turns),
                        "id_numbers": numbers, "first_id": s.turns[0].dia_id})
    return out


def listing(golds: list[Gold], sessions: list[Session], source: dict[str, Any]) -> dict[str, Any]:
    """The document of ``configs/realtalk_errata.yaml``: counts, the alias table, every question's
    quirks, the sessions numbered otherwise."""
    numbering = session_numbering(sessions)
    return {"source": source, "counts": {**counts(golds), "sessions": len(sessions),
                                         "sessions_numbered_otherwise": len(numbering)},
            "speaker_aliases": [{"memory": m, "name": n, "speaker": s}
                                for m, a in ALIASES.items() for n, s in a.items()],
            "questions": [{"qid": g.qid, "quirks": list(g.details["quirks"])} for g in golds
                          if g.details.get("quirks")],
            "dia_id_numbering": numbering}
