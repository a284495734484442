"""Field matching of the structured route (stage 06): a record field against the hop's anchor.

The lexical tests and scores that ``common.method.retrieve.Retriever.structured`` applies per
record field (the authors' gates and field scores, reference_notes 3.5).
"""
from __future__ import annotations

from typing import Any

from common.core.text import norm, tokens

# Anchor values that are placeholders, not details: English nouns a planner writes when the
# question names a kind of thing but not which one ("what book", "her kids", "a family event").
# Such a value passes any record with a non-empty value (the authors' code, reference_notes 3.5).
PLACEHOLDER_VALUES = frozenset({
    "book", "art", "family", "kids", "kid", "child", "children", "event", "activity", "person",
    "object", "thing", "location", "team", "group", "time", "favorite"})


def value_compatible(query: str, value: str, cosine: float, threshold: float, placeholders: bool = True) -> bool:
    """A placeholder query value passes any non-empty value (``placeholders``); else lexical
    compatibility (equal, substring, shared word, shared 4+ letter stem), then cosine."""
    q, v = norm(query), norm(value)
    if not q or not v:
        return False
    if placeholders and q in PLACEHOLDER_VALUES:
        return True
    if q == v or q in v or v in q:
        return True
    qt, vt = set(tokens(q)), set(tokens(v))
    if qt & vt:
        return True
    if any(len(a) >= 4 and len(b) >= 4 and (a.startswith(b) or b.startswith(a)) for a in qt for b in vt):
        return True
    return cosine >= threshold


def jaccard(a: str, b: str) -> float:
    sa, sb = set(tokens(a)), set(tokens(b))
    return len(sa & sb) / len(sa | sb) if sa and sb else 0.0


def soft(name: str, query: str, value: str, cosine: Any) -> float:
    """The authors' score of a non-exact field: max(0, cosine, Jaccard); an empty record field 0."""
    if not value:
        return 0.0
    return max(0.0, float(cosine), jaccard(query.replace("_", " "), value.replace("_", " ")))
