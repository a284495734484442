"""String normalization shared by extraction, indexing, planning and retrieval."""
from __future__ import annotations

import re

_WS = re.compile(r"\s+")
_NON_PROP = re.compile(r"[^a-z0-9_]")
_UNDERSCORES = re.compile(r"_+")
_TOKEN = re.compile(r"[a-z0-9]+")

ENTITY_TYPES = ("person", "organization", "place", "object", "event", "activity", "concept", "other")
THEME_TYPES = ("entity", "event", "topic")
MODALITIES = ("observed", "planned", "desired", "hypothetical", "negated", "uncertain")
PROJECTION_KINDS = ("direct", "inverse", "state_projection", "event_access")
CONDITION_PROPERTIES = (
    "after", "before", "during", "because_of", "while", "when", "for", "at", "with",
    "since", "until", "if", "without", "about",
)
# Common synonyms the models use for the allowed condition relations (authors' alias map).
CONDITION_ALIASES = {
    "through": "during", "in": "during", "around": "during", "by": "before", "of": "about",
    "like": "with", "to": "for", "valid_time": "when",
}
# Words that carry no content in questions and records; used by lexical matching.
STOPWORDS = frozenset(
    """a an the and or but if of to in on at by for with from about as into over after before
    is are was were be been being am do does did doing have has had having i me my mine we us
    our you your he him his she her it its they them their what when where which who whom whose
    why how that this these those there here than then so not no yes can could would should will
    shall may might must just also very too any some all each every both either neither one ones
    s t ever still yet again much many more most other such own same only""".split()
)


def norm(text: object) -> str:
    """Trim, lower-case, collapse whitespace."""
    return _WS.sub(" ", str(text or "")).strip().lower()


def normprop(text: object) -> str:
    """Property label form: lower snake_case of [a-z0-9_] only."""
    s = norm(text).replace("-", "_").replace(" ", "_")
    s = _NON_PROP.sub("", s)
    return _UNDERSCORES.sub("_", s).strip("_")


def normalize_condition(text: object) -> str:
    p = normprop(text)
    p = CONDITION_ALIASES.get(p, p)
    return p if p in CONDITION_PROPERTIES else ""


def tokens(text: object) -> list[str]:
    return _TOKEN.findall(norm(text))


def content_tokens(text: object) -> list[str]:
    """Lower-cased alphanumeric tokens minus stopwords, order kept, duplicates dropped."""
    seen: dict[str, None] = {}
    for tok in tokens(text):
        if tok not in STOPWORDS and len(tok) > 1:
            seen.setdefault(tok, None)
    return list(seen)
