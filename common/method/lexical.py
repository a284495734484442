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
"""
from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Optional, Sequence

from common.core.text import STOPWORDS, norm

_WORD = re.compile(r"[a-z0-9]+")
_CAPITALIZED = re.compile(r"[A-Za-z][\w'’-]*")
# Question and auxiliary words that start a question with a capital letter but are never its subject.
_QUESTION_WORDS = frozenset(
    "what when where who whom whose why how which did does do is are was were would could can should "
    "has have had will shall may might must".split())
PHRASE_BONUS = 3.0  # guard: added per phrase occurrence in the counted text
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


def content_words(text: str, min_len: int = MIN_WORD) -> list[str]:
    return [t for t in _WORD.findall(norm(text)) if len(t) >= min_len and t not in STOPWORDS]


def question_terms(question: str) -> list[str]:
    """Content words, then the 4-, 3- and 2-grams over the filtered word list; minus the subject."""
    words = content_words(question)
    grams = [" ".join(words[i:i + n]) for n in (4, 3, 2) for i in range(len(words) - n + 1)]
    subject = question_subject(question)
    return [t for t in dict.fromkeys(words + grams) if t != subject]


def hop_terms(question: str, value: str = "") -> list[str]:
    """The guard's terms for one hop: the question's terms plus the anchor value's 4+ letter words."""
    return list(dict.fromkeys(question_terms(question) + content_words(value, MIN_VALUE_WORD)))


_ALNUM = frozenset("abcdefghijklmnopqrstuvwxyz0123456789")
_BLANKS = re.compile(r"[ \t]+")


def squash(text: str) -> str:
    """Lower-cased, runs of spaces and tabs made one space (lines kept): what ``occurrences`` reads."""
    return _BLANKS.sub(" ", text.lower())


def occurrences(text: str, term: str) -> int:
    """Matches of ``term`` in ``squash``-ed text: a phrase as whole words, a word followed by any letters.

    A match must not start inside a word (no letter or digit before it); a phrase must not end
    inside one either, while a single word may (prefix/inflection matching: "camp" counts
    "camping"). A plain ``str.find`` scan: a regular expression with a look-behind at its start
    loses the literal-prefix search and was 50x slower on episode texts.
    """
    count, width, phrase = 0, len(term), " " in term
    i = text.find(term)
    while i != -1:
        end = i + width
        if (i == 0 or text[i - 1] not in _ALNUM) and (not phrase or end == len(text) or text[end] not in _ALNUM):
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
                  postings: Optional[dict[str, frozenset[int]]] = None) -> list[tuple[int, float]]:
    """(episode position, hits) of every episode with hits > 0, best first (ties in memory order).

    ``postings`` (term -> positions of the ``docs`` whose text holds it; df = its size) may be
    kept by the caller across hops of the same memory: it depends on the memory only. A term
    counts only in episodes that hold it, so only those are scanned.
    """
    if not terms or not docs:
        return []
    e = norm(entity)
    possessor = e.split("'s ")[0] if "'s " in e else ""
    unresolved = e in ("", "*") or not any(
        n in d.speakers or n in d.text for d in docs for n in (e, possessor) if n)
    cond = norm(condition_value) if condition_property == "with" else ""
    n = len(docs)
    cache: dict[str, frozenset[int]] = {} if postings is None else postings
    for t in terms:
        if t not in cache:
            cache[t] = frozenset(pos for pos, d in enumerate(docs) if occurrences(d.text, t))
    weights = {t: idf(len(cache[t]), n) for t in terms}
    present: dict[int, list[str]] = {}
    for t in terms:
        for pos in cache[t]:
            present.setdefault(pos, []).append(t)
    out: list[tuple[int, float]] = []
    for pos in sorted(present):
        doc, ts = docs[pos], present[pos]
        if unresolved:
            hits = float(sum(occurrences(doc.text, t) for t in ts))
            counted = doc.text
        else:
            if not _grounded(doc, e, possessor, cond):
                continue
            own = doc.lines_by_speaker.get(e, "")
            counted = own or doc.text
            hits = sum(occurrences(counted, t) * weights[t] for t in ts)
            if hits == 0 and own:
                counted = doc.text
                hits = sum(occurrences(counted, t) * weights[t] for t in ts)
        hits += PHRASE_BONUS * sum(occurrences(counted, t) for t in ts if " " in t)
        if hits > 0:
            out.append((pos, round(hits, 6)))
    return sorted(out, key=lambda ph: (-ph[1], ph[0]))


def answer_rank_scores(question: str, texts: Sequence[str], squashed: bool = False) -> list[float]:
    """Question-term score of each text, weights over this list (phrases weigh 4x).

    ``squashed``: the texts already went through ``squash`` (the retriever keeps them so).
    """
    terms = question_terms(question)
    low = list(texts) if squashed else [squash(t) for t in texts]
    n = len(low)
    # Each (text, term) scanned once: its count gives both the term's document frequency and
    # the text's score (it was scanned twice, once for each: a third of a question's retrieval CPU).
    counts = {t: [occurrences(x, t) for x in low] for t in terms}
    weights = {t: idf(sum(1 for c in counts[t] if c), n) for t in terms}
    return [sum((ANSWER_PHRASE_WEIGHT if " " in t else 1.0) * counts[t][i] * weights[t] for t in terms)
            for i in range(n)]


def rank_episodes_for_answer(question: str, texts: Sequence[str], squashed: bool = False) -> list[int]:
    """Indices of ``texts`` by question-term score, stable (equal scores keep their order); none dropped."""
    scores = answer_rank_scores(question, texts, squashed)
    return sorted(range(len(texts)), key=lambda i: (-scores[i], i))
