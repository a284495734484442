"""Stage 06: the lexical recall guard and the question-term ranking of episodes (reference_notes §3.5).

The authors' code does not run BM25 with the hop's entity among the query terms (which makes a
hop about a speaker match nearly every episode of that speaker's conversation). Its lexical
guard is generic at heart, around hand-written term and alias tables keyed to LoCoMo content;
this module is the generic part only (no term table, no alias table, no benchmark knowledge):

* terms: the question's content words (3+ letters, not stop words) and the 2-, 3- and 4-grams
  over that filtered word list (so an n-gram may bridge a removed stop word, as in the code),
  minus the question's subject (the first capitalized word that is not a question word or stop
  word), plus the hop value's words of 4+ letters (the code's generic term branch);
* weight of a term: ``1 + ln((N + 1) / (df + 1))``, df over the memory's episodes;
* occurrences: a multi-word term counts whole-phrase matches; a single word counts matches of
  the word followed by any letters (prefix/inflection matching);
* grounding: an episode must involve the hop's entity (a speaker of the episode, or named in its
  text; for "X's Y" also X) unless the entity occurs nowhere in the memory ("unresolved": then
  raw occurrence counts over the whole episode, no weights); a ``with`` condition's value must
  appear too;
* hits are counted on the entity's own lines first and on the whole episode when those give
  nothing; every phrase occurrence in the counted text adds a bonus of 3.

``rank_episodes_for_answer`` orders any list of episodes by the same question terms (phrases
weighted 4, weights over that list), stable, dropping nothing: the authors use it to re-rank the
merged lexical and dense candidates of a hop, the bridge context and the answer buffer.

``retrieve.lexical_aliases: true`` adds the generic part of their tables (``TermTables``, read from
``common/prompts/code_rules/lexical_aliases.yaml``): each question word's aliases right after it
(lost -> lose, losing; visit -> trip, traveled), the term set chosen by the hop's property or value
(camp -> camp, camping, campfire; travel -> trip, flight, ...), and ``camp`` counted only as its own
forms in the guard. Entries naming benchmark content are not in the file.
"""
from __future__ import annotations

import functools
import math
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional, Sequence

from common.core.text import STOPWORDS, norm
from common.core.yamlio import load_yaml

ALIASES_FILE = Path(__file__).resolve().parents[1] / "prompts" / "code_rules" / "lexical_aliases.yaml"

_WORD = re.compile(r"[a-z0-9]+")
_CAPITALIZED = re.compile(r"[A-Za-z][\w'’-]*")
# Question and auxiliary words that start a question with a capital letter but are never its subject.
_QUESTION_WORDS = frozenset(
    "what when where who whom whose why how which did does do is are was were would could can should "
    "has have had will shall may might must".split())
PHRASE_BONUS = 3.0  # guard: added per phrase occurrence in the counted text
# retrieve.lexical_stopwords: code: the authors' query stop words (QUERY_STOPWORDS of their _common.py),
# which keep after/before/one/still/... as terms and drop common/please/really/tell/both.
CODE_STOPWORDS = frozenset(
    """a an the and or but if then than to of for from in on at by with about as into is are was were be been being
    do does did have has had can could would should will may might what when where why who which how much many more
    most any all my your his her their our its this that these those i me we you they them both common really just
    please tell""".split())
ANSWER_PHRASE_WEIGHT = 4.0  # rank_episodes_for_answer: phrase occurrences weigh 4x
MIN_WORD = 3
MIN_VALUE_WORD = 4


def question_subject(question: str) -> str:
    """The first capitalized word that is not a question word or stop word, lower-cased ('' if none).

    The code takes the first capitalized non-question word; skipping stop words as well keeps a
    leading "In what year did Melanie ..." from making "in" the subject.
    """
    for w in _CAPITALIZED.findall(question):
        base = re.split(r"['’]", w)[0]
        low = base.lower()
        if base[:1].isupper() and low not in _QUESTION_WORDS and low not in STOPWORDS and low != "i":
            return low
    return ""


def content_words(text: str, min_len: int = MIN_WORD, stop: frozenset[str] = STOPWORDS) -> list[str]:
    return [t for t in _WORD.findall(norm(text)) if len(t) >= min_len and t not in stop]


@dataclass(frozen=True)
class TermRule:
    """One property-keyed term set of the guard (see ``lexical_aliases.yaml``)."""

    name: str
    terms: tuple[str, ...]
    properties: frozenset[str] = frozenset()
    value_contains: tuple[str, ...] = ()
    value_is: frozenset[str] = frozenset()
    value_properties: frozenset[str] = frozenset()  # empty: the value tests hold for any property
    value_words: bool = False

    def matches(self, prop: str, value: str) -> bool:
        if prop in self.properties:
            return True
        if self.value_properties and prop not in self.value_properties:
            return False
        return any(v in value for v in self.value_contains) or value in self.value_is


@dataclass(frozen=True)
class TermTables:
    """The generic alias and synonym sets of the authors' lexical guard (``retrieve.lexical_aliases``)."""

    aliases: dict[str, tuple[str, ...]] = field(default_factory=dict)
    rules: tuple[TermRule, ...] = ()
    word_forms: dict[str, frozenset[str]] = field(default_factory=dict)

    def rule_terms(self, prop: str, value: str) -> Optional[list[str]]:
        """The first matching rule's terms (plus the value's words where it says so), None if none."""
        v = norm(value)
        rule = next((r for r in self.rules if r.matches(prop, v)), None)
        if rule is None:
            return None
        return list(dict.fromkeys(list(rule.terms) + (v.split() if rule.value_words else [])))


def _strings(raw: Any, where: str, path: Path = ALIASES_FILE) -> tuple[str, ...]:
    if not isinstance(raw, list) or not all(isinstance(x, str) and x.strip() for x in raw):
        raise ValueError(f"{path}: {where} must be a list of non-empty strings")
    return tuple(norm(x) for x in raw)


@functools.lru_cache(maxsize=4)
def load_term_tables(path: Path = ALIASES_FILE) -> TermTables:
    """The tables of ``path``; ValueError naming the file and field when one is malformed."""
    data = load_yaml(path.read_text(encoding="utf-8")) or {}
    aliases = data.get("query_aliases") or {}
    if not isinstance(aliases, dict):
        raise ValueError(f"{path}: query_aliases must be a mapping of word -> list of words")
    rules = []
    for i, r in enumerate(data.get("property_terms") or []):
        if not isinstance(r, dict) or not r.get("name"):
            raise ValueError(f"{path}: property_terms[{i}] must be a mapping with a name")

        def field_(name: str, r: dict[str, Any] = r, i: int = i) -> tuple[str, ...]:
            return _strings(r.get(name, []), f"property_terms[{i}].{name}", path)

        rules.append(TermRule(
            name=str(r["name"]), terms=_strings(r.get("terms"), f"property_terms[{i}].terms", path),
            properties=frozenset(field_("properties")), value_contains=field_("value_contains"),
            value_is=frozenset(field_("value_is")), value_properties=frozenset(field_("value_properties")),
            value_words=bool(r.get("value_words", False))))
    forms = data.get("word_forms") or {}
    if not isinstance(forms, dict):
        raise ValueError(f"{path}: word_forms must be a mapping of word -> list of words")
    return TermTables(aliases={norm(k): _strings(v, f"query_aliases.{k}", path) for k, v in aliases.items()},
                      rules=tuple(rules),
                      word_forms={norm(k): frozenset(_strings(v, f"word_forms.{k}", path)) for k, v in forms.items()})


def _term_ok(term: str, stop: frozenset[str] = STOPWORDS) -> bool:
    return len(term) >= MIN_WORD and term not in stop


def question_terms(question: str, tables: Optional[TermTables] = None, stop: frozenset[str] = STOPWORDS) -> list[str]:
    """Content words, then the 4-, 3- and 2-grams over the filtered word list; minus the subject.

    ``tables``: each word is followed by its aliases (the ones of three letters or more that are
    not stop words), as the authors' term list; the n-grams stay over the question's own words.
    """
    words = content_words(question, stop=stop)
    grams = [" ".join(words[i:i + n]) for n in (4, 3, 2) for i in range(len(words) - n + 1)]
    with_aliases = words if tables is None else [
        t for w in words for t in (w, *(a for a in tables.aliases.get(w, ()) if _term_ok(a, stop)))]
    subject = question_subject(question)
    return [t for t in dict.fromkeys(with_aliases + grams) if t != subject]


def hop_terms(question: str, value: str = "", prop: str = "", tables: Optional[TermTables] = None,
              stop: frozenset[str] = STOPWORDS) -> list[str]:
    """The guard's terms for one hop: the question's terms plus the anchor value's 4+ letter words.

    ``tables``: the term set of the first rule matching the hop's property or value comes first
    (in place of the value's words), then the question's terms with their aliases. ``stop``:
    ``CODE_STOPWORDS`` (``retrieve.lexical_stopwords: code``) filters the question's words as the
    authors' do, and the value's 4+ letter words are then kept unfiltered, as theirs.
    """
    value_words = ([w for w in _WORD.findall(norm(value)) if len(w) >= MIN_VALUE_WORD] if stop is CODE_STOPWORDS
                   else content_words(value, MIN_VALUE_WORD))
    if tables is None:
        return list(dict.fromkeys(question_terms(question, stop=stop) + value_words))
    chosen = tables.rule_terms(prop, value)
    first = chosen if chosen is not None else value_words
    return list(dict.fromkeys(first + question_terms(question, tables, stop)))


_ALNUM = frozenset("abcdefghijklmnopqrstuvwxyz0123456789")
_BLANKS = re.compile(r"[ \t]+")


def squash(text: str) -> str:
    """Lower-cased, runs of spaces and tabs made one space (lines kept): what ``occurrences`` reads."""
    return _BLANKS.sub(" ", text.lower())


def occurrences(text: str, term: str, forms: Optional[frozenset[str]] = None) -> int:
    """Matches of ``term`` in ``squash``-ed text: a phrase as whole words, a word followed by any letters.

    A match must not start inside a word (no letter or digit before it); a phrase must not end
    inside one either, while a single word may (prefix/inflection matching: "camp" counts
    "camping"). ``forms``: the whole words a single-word term may be (``TermTables.word_forms``).
    A plain ``str.find`` scan: a regular expression with a look-behind at its start
    loses the literal-prefix search and was 50x slower on episode texts.
    """
    count, width, phrase = 0, len(term), " " in term
    i = text.find(term)
    while i != -1:
        end = i + width
        if (i == 0 or text[i - 1] not in _ALNUM) and (not phrase or end == len(text) or text[end] not in _ALNUM):
            if forms is not None:
                stop = end
                while stop < len(text) and text[stop] in _ALNUM:
                    stop += 1
                if text[i:stop] not in forms:
                    i = text.find(term, end)
                    continue
            count += 1
            i = text.find(term, end)
        else:
            i = text.find(term, i + 1)
    return count


def idf(df: int, n: int) -> float:
    return 1.0 + math.log((n + 1) / (df + 1))


@dataclass(frozen=True)
class EpisodeText:
    """What the guard reads of one episode: its speakers, every line, and the lines per speaker."""

    speakers: frozenset[str]  # normalized speaker names
    text: str  # the whole episode, ``squash``-ed
    lines_by_speaker: dict[str, str]  # normalized speaker -> that speaker's lines, ``squash``-ed


def _grounded(doc: EpisodeText, entity: str, possessor: str, cond_value: str) -> bool:
    names = [n for n in (entity, possessor) if n]
    if not any(n in doc.speakers or n in doc.text for n in names):
        return False
    return not cond_value or cond_value in doc.text


def lexical_guard(docs: Sequence[EpisodeText], terms: Sequence[str], entity: str,
                  condition_property: str = "", condition_value: str = "",
                  postings: Optional[dict[str, frozenset[int]]] = None,
                  forms: Optional[dict[str, frozenset[str]]] = None,
                  phrase_on: str = "counted") -> list[tuple[int, float]]:
    """(episode position, hits) of every episode with hits > 0, best first (ties in memory order).

    ``postings`` (term -> positions of the ``docs`` whose text holds it; df = its size) may be
    kept by the caller across hops of the same memory: it depends on the memory only (and on
    ``forms``, the word forms of ``TermTables``, fixed per retriever). A term counts only in
    episodes that hold it, so only those are scanned. ``phrase_on`` (``retrieve.lexical_phrase_text``):
    the phrase bonus counts in the text the hits were counted on (``counted``), or always in the
    entity's own lines when it has any (``speaker``, the authors' evidence text).
    """
    if not terms or not docs:
        return []
    wf = forms or {}

    def occ(text: str, t: str) -> int:
        return occurrences(text, t, wf.get(t))

    e = norm(entity)
    possessor = e.split("'s ")[0] if "'s " in e else ""
    unresolved = e in ("", "*") or not any(
        n in d.speakers or n in d.text for d in docs for n in (e, possessor) if n)
    cond = norm(condition_value) if condition_property == "with" else ""
    n = len(docs)
    cache: dict[str, frozenset[int]] = {} if postings is None else postings
    for t in terms:
        if t not in cache:
            cache[t] = frozenset(pos for pos, d in enumerate(docs) if occ(d.text, t))
    weights = {t: idf(len(cache[t]), n) for t in terms}
    present: dict[int, list[str]] = {}
    for t in terms:
        for pos in cache[t]:
            present.setdefault(pos, []).append(t)
    out: list[tuple[int, float]] = []
    for pos in sorted(present):
        doc, ts = docs[pos], present[pos]
        if unresolved:
            hits = float(sum(occ(doc.text, t) for t in ts))
            counted = doc.text
        else:
            if not _grounded(doc, e, possessor, cond):
                continue
            own = doc.lines_by_speaker.get(e, "")
            counted = own or doc.text
            hits = sum(occ(counted, t) * weights[t] for t in ts)
            if hits == 0 and own:
                counted = doc.text
                hits = sum(occ(counted, t) * weights[t] for t in ts)
        bonus_text = counted if unresolved or phrase_on == "counted" else (own or doc.text)
        hits += PHRASE_BONUS * sum(occ(bonus_text, t) for t in ts if " " in t)
        if hits > 0:
            out.append((pos, round(hits, 6)))
    return sorted(out, key=lambda ph: (-ph[1], ph[0]))


def answer_rank_scores(question: str, texts: Sequence[str], squashed: bool = False,
                       tables: Optional[TermTables] = None, stop: frozenset[str] = STOPWORDS) -> list[float]:
    """Question-term score of each text, weights over this list (phrases weigh 4x).

    ``squashed``: the texts already went through ``squash`` (the retriever keeps them so);
    ``tables``: the question's terms carry their aliases (the authors' word forms apply only in
    the guard, not here, as in their code).
    """
    terms = question_terms(question, tables, stop)
    low = list(texts) if squashed else [squash(t) for t in texts]
    n = len(low)
    # Each (text, term) scanned once: its count gives both the term's document frequency and
    # the text's score (it was scanned twice, once for each: a third of a question's retrieval CPU).
    counts = {t: [occurrences(x, t) for x in low] for t in terms}
    weights = {t: idf(sum(1 for c in counts[t] if c), n) for t in terms}
    return [sum((ANSWER_PHRASE_WEIGHT if " " in t else 1.0) * counts[t][i] * weights[t] for t in terms)
            for i in range(n)]


def rank_episodes_for_answer(question: str, texts: Sequence[str], squashed: bool = False,
                             tables: Optional[TermTables] = None, stop: frozenset[str] = STOPWORDS) -> list[int]:
    """Indices of ``texts`` by question-term score, stable (equal scores keep their order); none dropped."""
    scores = answer_rank_scores(question, texts, squashed, tables, stop)
    return sorted(range(len(texts)), key=lambda i: (-scores[i], i))
