"""Stage 06: requirement-aware retrieval (paper 3.3, eq. 5) and the evidence buffer (eq. 6).

For every hop of the plan three routes propose episodes:
1. structured: records whose entity, type, property and value are compatible with the hop's
   anchor, scored by a weighted mean of field matches (authors' weights), followed to their
   source episodes (an episode scores as its best record);
2. lexical: the authors' lexical recall guard, generically (``common.method.lexical``: question
   terms with IDF weights over episodes grounded in the hop's entity); ``retrieve.lexical=bm25``
   is the earlier BM25 route over whole episodes, fused with dense by reciprocal rank;
3. dense: cosine between question+anchor and overlapping chunks of each episode.
The plan sets the budget, as the authors' code does (reference_notes §3.5): a point hop keeps 5
structured episodes plus 12 lexical+dense episodes re-ranked by question terms; an all_matching
hop (counts, lists, comparisons, intervals) keeps every structured match, every lexical match and
20 dense episodes. No hop stops early by default; ``retrieve.stop_when_covered`` (the ablation
``coverage_stop``) ends a point hop at a confident structured match, as the paper's prose puts it.
Hops run in plan order: a hop that declares a bridge has it resolved over its selected episodes
(``common.method.bridge``, one LLM call) before the hops that use ``$hN.bridge`` search. Hops are
merged by episode id in hop order, each episode keeping the hop, route, record and score that
selected it; the buffer renders the ORIGINAL turns, episodes ordered by question terms (the
authors' Step 6; ``retrieve.buffer_order=conversation`` orders them by time). Nothing is dropped
unless a cap is configured (the paper configs set none, as the code); a binding cap drops
neighbour, dense, then lexical episodes before any structured match (``retrieve.cap_drop``).
The structured gates are the code's (``retrieve.gates``), with its placeholder anchor values on by
default. Two defaults are harness choices, not the authors' retrieval: the fuzzy entity gate
(``retrieve.entity_match: fuzzy``; ``exact`` is the authors' gate, used by the code configurations)
and the first-person anchor rewrite (I / my / the user -> the memory's user), which in the authors'
code is a planner rule, not a retrieval step. ``retrieve.field_scores: code`` scores fields as their
code (max of cosine and Jaccard, ties by episode id) and ``retrieve.block_empty_bridge`` blocks a
hop whose bridge resolved to nothing: by default any such placeholder blocks (the harness's rule,
stricter than theirs); ``retrieve.block_rule: code`` blocks only as they do (entity or property
empty after substitution, or a field still starting with ``$``). ``retrieve.lexical_aliases`` adds
their generic alias and term sets to the lexical guard and the question-term ranking.
"""
from __future__ import annotations

import time
from collections import Counter
from dataclasses import dataclass, replace
from typing import Any, Optional

import numpy as np
from rapidfuzz import fuzz, process

from common.core.config import RetrieveConfig, ScopeBudget
from common.core.schema import Anchor, Bridge, Episode, Hop, Plan, Question, RetrievalRow, Selected
from common.core.text import STOPWORDS, content_tokens, norm, normprop
from common.core.tokens import count_tokens
from common.method.bridge import ANCHOR_FIELDS, PLACEHOLDER, Resolver, resolve_anchor
from common.method.field_match import PLACEHOLDER_VALUES, jaccard, soft, value_compatible  # noqa: F401 - re-exported
from common.method.hop_guards import HopGuards, broad_state_lookup, widened
from common.method.index import EMBEDDED_FIELDS, MemoryIndex, field_text
from common.method.lexical import (
    CODE_STOPWORDS,
    EpisodeText,
    TermTables,
    hop_terms,
    lexical_guard,
    load_term_tables,
    rank_episodes_for_answer,
    squash,
)
from common.method.query_vectors import QueryVectors, anchor_texts, dense_text
from common.method.render import MemoryView, render_buffer, render_turn
from common.method.routes import Routes

FIELDS = ("entity", "entity_type", "property", "value", "condition_property", "condition_value")
# Record properties that name no specific predicate (the authors' code: activity, event, thing,
# other). ``retrieve.gates: loose`` adds "fact", the very_broad granularity's one property.
GENERIC_PROPERTIES = frozenset({"activity", "event", "thing", "other"})
LOOSE_GENERIC_PROPERTIES = GENERIC_PROPERTIES | {"fact"}
# First-person anchor entities; they name the memory's user (``Retriever.user_entity``).
FIRST_PERSON = frozenset({"i", "me", "my", "mine", "myself", "user", "the user", "user's", "the user's"})
FIRST_PERSON_POSSESSIVE = ("my ", "the user's ", "user's ")
ROUTE_PRIORITY = {"structured": 0, "lexical": 1, "dense": 1, "fused": 1, "guard": 1, "neighbor": 2}
# ``cap_drop: route``: what a binding cap keeps first (neighbour episodes go first, structured last).
CAP_PRIORITY = {"structured": 0, "lexical": 1, "fused": 1, "dense": 2, "guard": 2, "neighbor": 3}


@dataclass
class Hit:
    pos: int  # episode position in the index
    score: float
    route: str
    record_id: str = ""


class Retriever:
    """Retrieval over one memory's index; built once per memory, called per question."""

    def __init__(self, index: MemoryIndex, view: MemoryView, embedder: Any, cfg: RetrieveConfig,
                 include_images: bool = True, guards: Optional[Routes] = None):
        self.index, self.view, self.embedder, self.cfg = index, view, embedder, cfg
        self.include_images = include_images
        # answer.routes.guard_stage: retrieval: the authors' date and overlap guards, per hop (hop_guards)
        self.guards = HopGuards(guards, view, index.episodes, include_images) if guards else None
        self.pos_of = index.episode_pos()
        self.rec_entities = [norm(r.entity) for r in index.records]
        self.rec_props = np.array([r.property for r in index.records], dtype=object)
        self.rec_types = np.array([norm(r.entity_type) for r in index.records], dtype=object)
        self.user_entity = user_entity(view)
        self._episode_tokens: dict[int, int] = {}
        self._docs: Optional[list[EpisodeText]] = None
        self._postings: dict[str, frozenset[int]] = {}  # lexical guard: episodes holding each term
        # retrieve.lexical_aliases: the authors' generic alias and term sets (lexical.TermTables)
        self.terms: Optional[TermTables] = load_term_tables() if cfg.lexical_aliases else None
        self.stop = CODE_STOPWORDS if cfg.lexical_stopwords == "code" else STOPWORDS  # the guard's and ranking's
        self._small_fields: dict[str, tuple[np.ndarray, np.ndarray]] = {}
        self.queries = QueryVectors(embedder)  # query-side vectors of this memory, by text
        self.setup_seconds = self._prepare()

    def _prepare(self) -> float:
        """Build the memory's lazy tables now, once, instead of inside its first question: the
        lexical guard's episode texts, BM25 (``lexical: bm25``) and the tokenizer of the buffer's
        count. Returns the seconds spent. The embedding model is not loaded here (a rerun whose
        query texts are all cached never needs it); its load is left out of a question's
        ``seconds`` instead (``retrieve``)."""
        t0 = time.perf_counter()
        if (self.cfg.mode != "dense_only" and self.cfg.lexical == "guard") or self.cfg.buffer_order == "answer_rank":
            self.docs()
        if self.cfg.mode != "dense_only" and self.cfg.lexical == "bm25" and self.index.episodes:
            _ = self.index.bm25
        count_tokens("warm-up")
        return time.perf_counter() - t0

    # ------------------------------------------------------------------ query vectors
    def _hop_query_texts(self, question: str, anchor: Anchor, scope: str) -> list[str]:
        """Every query-side text ``hop_hits`` will embed for this hop, so one call embeds them all:
        the structured route's anchor fields (and its small fields under ``field_scores: code``),
        and the dense query unless a covered point hop may stop before the fallback."""
        texts: list[str] = []
        searched = self.normalize_anchor(anchor)  # what ``structured`` searches with
        if self.index.records and searched.entity and searched.property:
            texts += anchor_texts(searched).values()
            if self.cfg.field_scores == "code":
                texts += [field_text(f, getattr(searched, f)) for f in ("entity_type", "condition_property")
                          if getattr(searched, f)]
        may_stop = self.cfg.mode != "fixed_k" and scope == "point" and self.cfg.stop_when_covered
        if len(self.index.chunk_vecs) and not may_stop:
            texts.append(dense_text(question, anchor))
        return texts

    # ------------------------------------------------------------------ structured route
    def _anchor_cosines(self, anchor: Anchor) -> dict[str, np.ndarray]:
        n = len(self.index.records)
        texts = anchor_texts(anchor)
        out = {f: np.zeros(n, np.float32) for f in EMBEDDED_FIELDS}
        if texts and n:
            self.queries.prefetch(texts.values())
            for f, text in texts.items():
                out[f] = self.index.field_vecs[f] @ self.queries.get(text)
        return out

    def _small_field_cosines(self, name: str, value: str) -> np.ndarray:
        """Per record: cosine between ``"<name>: <value>"`` and the record's same field (0 for an
        empty field), for the fields the index does not embed (entity_type, condition_property):
        their values are a small closed set, so each distinct value is embedded once here, which
        gives the vectors the authors' per-record embedding gives."""
        n = len(self.index.records)
        if not value or not n:
            return np.zeros(n, np.float32)
        if name not in self._small_fields:
            values = [getattr(r, name) for r in self.index.records]
            distinct = sorted({v for v in values if v})
            where = {v: i for i, v in enumerate(distinct)}
            vecs = (self.embedder.encode([field_text(name, v) for v in distinct]) if distinct
                    else np.zeros((0, 1), np.float32))
            self._small_fields[name] = (np.asarray(vecs, np.float32), np.array([where.get(v, -1) for v in values]))
        vecs, at = self._small_fields[name]
        if len(vecs) == 0:
            return np.zeros(n, np.float32)
        sims = vecs @ self.queries.get(field_text(name, value))
        return np.where(at >= 0, sims[np.maximum(at, 0)], 0.0).astype(np.float32)

    def _entity_scores(self, entity: str) -> np.ndarray:
        """Per record: 1.0 exact, fuzzy ratio above the bar, 0.7 for the possessor of "X's Y"
        (``entity_match: fuzzy``, a harness choice); ``exact``: 1.0 for equality, else 0, as the
        authors' gate (without their LoCoMo alias map)."""
        e = norm(entity)
        if not self.rec_entities:
            return np.zeros(0, np.float32)
        if self.cfg.entity_match == "exact":
            return np.array([1.0 if r == e else 0.0 for r in self.rec_entities], np.float32)
        ratios = process.cdist([e], self.rec_entities, scorer=fuzz.ratio, workers=1)[0] / 100.0
        scores = np.where(ratios * 100 >= self.cfg.entity_fuzzy, ratios, 0.0).astype(np.float32)
        possessor = e.split("'s ")[0] if "'s " in e else ""
        if possessor:
            scores = np.maximum(scores, np.array([0.7 if r == possessor else 0.0 for r in self.rec_entities],
                                                 np.float32))
        return scores

    def normalize_entity(self, entity: str) -> str:
        """A first-person entity ("I", "my", "the user", ...) as the memory's user; "my X" as
        "<user>'s X". Unchanged without a user entity (two people talking) or ``first_person`` off."""
        if not self.cfg.first_person or not self.user_entity:
            return entity
        e = norm(entity)
        if e in FIRST_PERSON:
            return self.user_entity
        for prefix in FIRST_PERSON_POSSESSIVE:
            if e.startswith(prefix) and e[len(prefix):].strip():
                return f"{self.user_entity}'s {e[len(prefix):].strip()}"
        return entity

    def normalize_anchor(self, anchor: Anchor) -> Anchor:
        entity = self.normalize_entity(anchor.entity)
        return anchor if entity == anchor.entity else replace(anchor, entity=entity)

    def structured(self, anchor: Anchor) -> list[Hit]:
        """Records passing the entity, type, property and value gates, scored; best per episode.

        ``retrieve.gates`` (config.py) chooses the authors' gates (code) or the earlier wider ones.
        """
        recs = self.index.records
        if not recs or not anchor.entity or not anchor.property:
            return []
        anchor = self.normalize_anchor(anchor)
        cfg, w = self.cfg, self.cfg.weights
        code = cfg.gates == "code"
        generic = GENERIC_PROPERTIES if code else LOOSE_GENERIC_PROPERTIES
        cos = self._anchor_cosines(anchor)
        code_scores = cfg.field_scores == "code"
        small = {f: self._small_field_cosines(f, getattr(anchor, f) if code_scores else "")
                 for f in ("entity_type", "condition_property")}
        ent = self._entity_scores(anchor.entity)
        gate = ent > 0
        atype = norm(anchor.entity_type)
        if atype and code:
            gate &= self.rec_types == atype
        elif atype and atype != "other":
            gate &= (self.rec_types == atype) | (self.rec_types == "other")
        aprop = normprop(anchor.property)
        specific = aprop not in generic
        exact_prop = gate & (self.rec_props == aprop)
        # The semantic property fallback is barred where the entity has the exact property: per
        # record entity (code; the fuzzy entity gate may let several entities through), or over
        # everything the gate let through (loose).
        exact_entities = {self.rec_entities[i] for i in np.flatnonzero(exact_prop)}
        any_exact = bool(exact_entities)
        hits: dict[int, Hit] = {}
        for i in np.flatnonzero(gate):
            r = recs[i]
            generic_record = r.property in generic
            if r.property == aprop:
                prop_score = 1.0
            elif (generic_record and anchor.value and (specific or not code)
                  and value_compatible(anchor.value, r.value, 0.0, 1.01, cfg.placeholder_values)):
                prop_score = 1.0  # a generic record property carrying the anchor's value
            elif code and generic_record and specific:
                continue  # the code drops a generic record that does not carry the value
            elif (not (self.rec_entities[i] in exact_entities if code else any_exact)
                  and cos["property"][i] >= cfg.property_threshold):
                prop_score = float(cos["property"][i])
                if code_scores:  # the authors' field score: max(0, cosine, Jaccard)
                    prop_score = max(prop_score, jaccard(aprop.replace("_", " "), r.property.replace("_", " ")))
            else:
                continue
            if anchor.value and not value_compatible(anchor.value, r.value, float(cos["value"][i]),
                                                     cfg.value_threshold, cfg.placeholder_values):
                continue
            field_scores = {"entity": float(ent[i]), "property": prop_score}
            if anchor.entity_type:
                field_scores["entity_type"] = 1.0 if self.rec_types[i] == atype else (
                    soft("entity_type", anchor.entity_type, r.entity_type, small["entity_type"][i])
                    if code_scores else 0.0)
            if anchor.value:
                field_scores["value"] = 1.0 if norm(anchor.value) == norm(r.value) else (
                    soft("value", anchor.value, r.value, cos["value"][i]) if code_scores
                    else max(0.0, float(cos["value"][i]), jaccard(anchor.value, r.value)))
            if anchor.condition_property:
                field_scores["condition_property"] = 1.0 if r.condition_property == anchor.condition_property else (
                    soft("condition_property", anchor.condition_property, r.condition_property,
                         small["condition_property"][i]) if code_scores else 0.0)
            if anchor.condition_value:
                same = norm(anchor.condition_value) == norm(r.condition_value)
                field_scores["condition_value"] = 1.0 if same else (
                    soft("condition_value", anchor.condition_value, r.condition_value, cos["condition_value"][i])
                    if code_scores else max(0.0, float(cos["condition_value"][i]),
                                            jaccard(anchor.condition_value, r.condition_value)))
            score = sum(w[f] * s for f, s in field_scores.items()) / sum(w[f] for f in field_scores)
            if score < cfg.min_score:
                continue
            pos = self.pos_of[r.episode_id]
            if pos not in hits or score > hits[pos].score:
                hits[pos] = Hit(pos, round(score, 6), "structured", r.record_id)
        if code_scores:  # the authors' order: ties broken by episode id
            return sorted(hits.values(), key=lambda h: (-h.score, self.index.episodes[h.pos].episode_id))
        return sorted(hits.values(), key=lambda h: (-h.score, h.pos))

    # ------------------------------------------------------------------ fallback routes
    def lexical(self, query_terms: list[str], k: Optional[int]) -> list[Hit]:
        if not query_terms or not self.index.episodes:
            return []
        scores = self.index.bm25.get_scores(query_terms)
        order = [int(i) for i in np.argsort(-scores, kind="stable") if scores[i] > 0]
        return [Hit(i, round(float(scores[i]), 6), "lexical") for i in order[:k]]

    def dense(self, query_text: str, k: Optional[int]) -> list[Hit]:
        if len(self.index.chunk_vecs) == 0:
            return []
        sims = self.index.chunk_vecs @ self.queries.get(query_text)
        best = np.full(len(self.index.episodes), -1.0, np.float32)
        np.maximum.at(best, np.asarray(self.index.chunk_episode), sims)
        order = np.argsort(-best, kind="stable")
        return [Hit(int(i), round(float(best[i]), 6), "dense") for i in order[:k]]

    def docs(self) -> list[EpisodeText]:
        """What the lexical guard reads of every episode (built once per memory)."""
        if self._docs is None:
            docs = []
            for ep in self.index.episodes:
                turns = self.view.episode_turns(ep)
                by_speaker: dict[str, list[str]] = {}
                for t in turns:  # the first rendered line only: captions are not the speaker's words
                    by_speaker.setdefault(norm(t.speaker), []).append(squash(render_turn(t, False)))
                docs.append(EpisodeText(frozenset(by_speaker), squash(self.view.episode_text(ep, self.include_images)),
                                        {k: "\n".join(v) for k, v in by_speaker.items()}))
            self._docs = docs
        return self._docs

    def rank_for_answer(self, question: str, positions: list[int]) -> list[int]:
        """``positions`` re-ordered by question-term score (``lexical.rank_episodes_for_answer``)."""
        docs = self.docs()
        order = rank_episodes_for_answer(question, [docs[p].text for p in positions], squashed=True,
                                         tables=self.terms, stop=self.stop)
        return [positions[i] for i in order]

    def guard_fallback(self, question: str, anchor: Anchor, budget: ScopeBudget,
                       keep_top_dense: bool = False) -> list[Hit]:
        """The authors' fallback, generically: lexical guard + dense guard, merged (lexical first)
        and re-ranked by question terms; a point hop keeps ``fallback_k`` (12), all_matching all.

        ``keep_top_dense``: the best dense episode survives the cut (the authors' LongMemEval
        retrieval does this for a hop without structured matches).
        """
        lex = [Hit(p, h, "lexical") for p, h in lexical_guard(
            self.docs(), hop_terms(question, anchor.value, anchor.property, self.terms, self.stop), anchor.entity,
            anchor.condition_property, anchor.condition_value, self._postings,
            self.terms.word_forms if self.terms else None, self.cfg.lexical_phrase_text)]
        den = self.dense(dense_text(question, anchor), budget.dense_k)
        merged: dict[int, Hit] = {}
        for h in lex + den:
            merged.setdefault(h.pos, h)
        order = self.rank_for_answer(question, list(merged))
        kept = [merged[p] for p in order][: budget.fallback_k]
        if keep_top_dense and den and den[0].pos not in {h.pos for h in kept}:
            kept.append(merged[den[0].pos])
        return kept

    def fallback(self, question: str, anchor: Anchor, budget: ScopeBudget, structured_found: bool = True) -> list[Hit]:
        """The hop's lexical+dense candidates: the guard (default) or BM25 with reciprocal-rank fusion."""
        if self.cfg.lexical == "guard":
            return self.guard_fallback(question, anchor, budget,
                                       keep_top_dense=self.cfg.keep_top_dense and not structured_found)
        return self.bm25_fallback(question, anchor, budget)

    def bm25_fallback(self, question: str, anchor: Anchor, budget: ScopeBudget) -> list[Hit]:
        """Lexical and dense candidates fused by reciprocal rank (k=60), best first."""
        terms = content_tokens(" ".join([question, anchor.entity, anchor.property.replace("_", " "),
                                         anchor.value, anchor.condition_value]))
        lex = self.lexical(terms, budget.lexical_k)
        den = self.dense(dense_text(question, anchor), budget.dense_k)
        fused: dict[int, float] = {}
        for ranked in (lex, den):
            for rank, h in enumerate(ranked):
                fused[h.pos] = fused.get(h.pos, 0.0) + 1.0 / (60 + rank + 1)
        best_route = {}
        for ranked in (den, lex):  # lexical wins the label when both found it
            for h in ranked:
                best_route[h.pos] = h.route
        out = [Hit(p, round(s, 6), best_route[p]) for p, s in fused.items()]
        return sorted(out, key=lambda h: (-h.score, h.pos))[: budget.fallback_k]

    # ------------------------------------------------------------------ per hop and merge
    def hop_hits(self, question: str, anchor: Anchor, scope: str) -> tuple[list[Hit], bool]:
        """One hop's episodes for its (bridge-resolved) anchor, and whether it is covered."""
        cfg = self.cfg
        budget = cfg.all_matching if scope == "all_matching" else cfg.point
        if cfg.broad_state_lookup and broad_state_lookup(question):
            budget = widened(budget)
        self.queries.prefetch(self._hop_query_texts(question, anchor, scope))
        structured = self.structured(anchor)
        covered = bool(structured) and structured[0].score >= cfg.coverage_score
        found = bool(structured)
        if cfg.mode == "fixed_k":
            merged = structured + [h for h in self.fallback(question, anchor, budget, found)
                                   if h.pos not in {s.pos for s in structured}]
            return merged[: cfg.fixed_k], covered
        chosen = structured[: budget.structured_k]
        if scope == "point" and cfg.stop_when_covered and covered:
            return chosen, covered
        seen = {h.pos for h in chosen}
        return chosen + [h for h in self.fallback(question, anchor, budget, found) if h.pos not in seen], covered

    def _tokens_of(self, pos: int) -> int:
        if pos not in self._episode_tokens:
            ep = self.index.episodes[pos]
            self._episode_tokens[pos] = count_tokens(self.view.episode_text(ep, self.include_images))
        return self._episode_tokens[pos]

    def _resolve_bridge(self, resolve: Resolver, question: str, hop: Hop, anchor: Anchor, hits: list[Hit]
                        ) -> tuple[Bridge, list[dict[str, Any]], float]:
        """The hop's bridge over its first ``bridge_context_k`` episodes; also the wall time spent.

        ``answer_rank`` (the authors' code): the hop's episodes re-ranked by question terms, shown
        in that order; ``conversation``: the first by hop rank, shown in conversation order.
        """
        positions = list(dict.fromkeys(h.pos for h in hits))
        in_rank_order = self.cfg.buffer_order == "answer_rank"
        if in_rank_order:
            positions = self.rank_for_answer(question, positions)
        eps = [self.index.episodes[p] for p in positions[: self.cfg.bridge_context_k]]
        t = time.perf_counter()
        context = render_buffer(self.view, eps, self.include_images, keep_order=in_rank_order)
        bridge, calls = resolve(hop, anchor, context, [e.episode_id for e in eps])
        return bridge, calls, time.perf_counter() - t

    def retrieve(self, question: Question, plan: Plan, resolve: Optional[Resolver] = None) -> RetrievalRow:
        """The question's evidence buffer; ``resolve`` answers declared bridges (None: bridges off)."""
        t0 = time.perf_counter()
        # The embedding model loads on the process's first query text that is not cached: a cost of
        # the process (as loading the index is), not of the question that happens to come first.
        loaded = self.queries.load_seconds()
        cfg = self.cfg
        selected: dict[int, Selected] = {}
        coverage: dict[str, bool] = {}
        anchors: dict[str, Anchor] = {}
        bridges: list[Bridge] = []
        calls: list[dict[str, Any]] = []
        in_resolver = 0.0  # wall time inside bridge calls (may include waiting for other threads)
        blocked: list[str] = []  # hops blocked for a missing bridge (retrieve.block_empty_bridge, block_rule)
        guarded: dict[str, dict[str, Any]] = {}  # what the per-hop guards added (answer.routes.guard_stage)
        if cfg.mode == "dense_only":
            self._dense_only(question, plan, selected)
        else:
            values: dict[str, str] = {}
            for hop in plan.hops:  # plan order: a hop only depends on earlier hops (05 validates)
                anchor = anchors[hop.hop_id] = self.normalize_anchor(resolve_anchor(hop.anchor, values))
                if cfg.block_empty_bridge and resolve is not None and blocked_hop(hop.anchor, anchor, values,
                                                                                  cfg.block_rule):
                    # The authors' status blocked_missing_bridge: no episodes, and no bridge of its own.
                    blocked.append(hop.hop_id)
                    coverage[hop.hop_id] = False
                    values[hop.hop_id] = ""
                    continue
                hits, coverage[hop.hop_id] = self.hop_hits(question.question, anchor, plan.retrieval_scope)
                if self.guards is not None:  # before the bridge, which then reads them too (the authors')
                    more, log = self.guards.added(question, plan, [h.pos for h in hits])
                    hits = hits + [Hit(p, 0.0, "guard") for p in more]
                    guarded.update({hop.hop_id: log} if log else {})  # a guard that did not fire: no entry
                if hop.bridge_request and resolve is not None:
                    before = self.queries.load_seconds()
                    bridge, hop_calls, spent = self._resolve_bridge(resolve, question.question, hop, anchor, hits)
                    loaded += self.queries.load_seconds() - before  # another question's load, inside ``spent``
                    values[hop.hop_id] = bridge.value
                    bridges.append(bridge)
                    calls += hop_calls
                    in_resolver += spent
                for h in hits:
                    cur = selected.get(h.pos)
                    cand = Selected(self.index.episodes[h.pos].episode_id, hop.hop_id, h.route, h.score, h.record_id)
                    if cur is None or (ROUTE_PRIORITY[h.route], -h.score) < (ROUTE_PRIORITY[cur.route], -cur.score):
                        selected[h.pos] = cand
            if plan.reasoning_type == "temporal" and cfg.temporal_neighbors > 0:
                self._add_neighbors(selected)
        if cfg.buffer_order == "answer_rank":
            # Authors' Step 6: the hop-ordered union, re-ranked by question terms; nothing dropped
            # unless the caps bind (they are recorded in ``contributions``).
            ranked = [(p, selected[p]) for p in self.rank_for_answer(question.question, list(selected))]
        else:
            ranked = sorted(selected.items(), key=lambda kv: (ROUTE_PRIORITY[kv[1].route], -kv[1].score, kv[0]))
        kept, caps = self._apply_caps(ranked)
        episodes = [self.index.episodes[p] for p, _ in kept]
        in_rank_order = cfg.buffer_order == "answer_rank"
        buffer = render_buffer(self.view, episodes, self.include_images, keep_order=in_rank_order)
        ordered = episodes if in_rank_order else sorted(episodes, key=lambda e: self.view.position[e.dia_ids[0]])
        contributions = self._contributions(plan.retrieval_scope, kept, len(selected))
        if caps:
            contributions["caps"] = caps
        if blocked:
            contributions["blocked_missing_bridge"] = blocked
        if guarded:
            contributions["hop_guards"] = guarded
        # Retrieval time = our own compute plus the bridge calls' latency (the original call's
        # when cached, like every efficiency figure), not the time spent queued behind other work.
        bridge_seconds = sum(float(c.get("latency") or 0.0) for c in calls)
        loading = self.queries.load_seconds() - loaded
        failed = [b.error for b in bridges if b.error]
        return RetrievalRow(
            qid=question.qid, memory_id=question.memory_id, question=question.question,
            mode=cfg.mode, scope=plan.retrieval_scope, reasoning_type=plan.reasoning_type,
            selected=[s for _, s in kept], episode_ids=[e.episode_id for e in ordered],
            dia_ids=[d for e in ordered for d in e.dia_ids], coverage=coverage,
            buffer_text=buffer, buffer_tokens=count_tokens(buffer) if buffer else 0,
            seconds=round(time.perf_counter() - t0 - in_resolver - loading + bridge_seconds, 4),
            resolved_anchors=anchors, bridges=bridges, bridge_seconds=round(bridge_seconds, 4),
            fallback_used=bool(failed), error=failed[0] if failed else "", llm_calls=calls,
            contributions=contributions,
        )

    def _dense_only(self, question: Question, plan: Plan, selected: dict[int, Selected]) -> None:
        """The dense-only ablation. hops (the authors' script): per hop, "Question: ...\nRetrieval
        sub-question: <purpose>", top 5 (point plan) or 50 (all_matching) episodes, unioned in hop
        order; a plan without hops is searched once with an empty purpose. question: the question
        alone, top ``fixed_k``."""
        cfg = self.cfg
        if cfg.dense_only_query == "question":
            queries, k = [("question", question.question)], cfg.fixed_k
        else:
            k = cfg.dense_only_all_matching_k if plan.retrieval_scope == "all_matching" else cfg.dense_only_point_k
            queries = [(h.hop_id, f"Question: {question.question}\nRetrieval sub-question: {h.purpose}")
                       for h in plan.hops] or [("question", f"Question: {question.question}\nRetrieval sub-question: ")]
        if len(self.index.chunk_vecs):
            self.queries.prefetch(text for _, text in queries)  # every hop's query in one call
        for hop_id, text in queries:
            for h in self.dense(text, k):
                if h.pos not in selected:
                    selected[h.pos] = Selected(self.index.episodes[h.pos].episode_id, hop_id, "dense", h.score)

    def _apply_caps(self, ranked: list[tuple[int, Selected]]) -> tuple[list[tuple[int, Selected]], dict[str, Any]]:
        """The ranked buffer within ``max_episodes`` and ``max_buffer_tokens`` (None: no cap), and
        what each cap dropped ({} when nothing was). Candidates are considered in ``cap_drop``
        order (route: structured, lexical, dense, neighbour, each in answer-rank order; rank: the
        answer ranking); the first ``max_episodes`` of that order are kept unless adding one would
        pass the token cap (the first is always kept). Kept episodes stay in the answer ranking."""
        cfg = self.cfg
        if cfg.max_episodes is None and cfg.max_buffer_tokens is None:
            return ranked, {}
        order = list(range(len(ranked)))
        if cfg.cap_drop == "route":
            order.sort(key=lambda i: (CAP_PRIORITY[ranked[i][1].route], i))
        head = order if cfg.max_episodes is None else order[: cfg.max_episodes]
        dropped_routes: Counter[str] = Counter(ranked[i][1].route for i in order[len(head):])
        by_tokens, total = 0, 0
        keep: list[int] = []
        for i in head:
            n = self._tokens_of(ranked[i][0])
            if keep and cfg.max_buffer_tokens is not None and total + n > cfg.max_buffer_tokens:
                by_tokens += 1
                dropped_routes[ranked[i][1].route] += 1
                continue
            keep.append(i)
            total += n
        by_episodes = len(order) - len(head)
        caps: dict[str, Any] = {}
        if by_episodes or by_tokens:
            caps = {"max_episodes": by_episodes, "max_buffer_tokens": by_tokens,
                    "routes": dict(sorted(dropped_routes.items()))}
        return [ranked[i] for i in sorted(keep)], caps

    def _contributions(self, scope: str, kept: list[tuple[int, Selected]], n_selected: int) -> dict[str, Any]:
        """Episodes and tokens (o200k, episode text) that each route and scope put in the buffer."""
        routes: dict[str, dict[str, int]] = {}
        for pos, sel in kept:
            r = routes.setdefault(sel.route, {"episodes": 0, "tokens": 0})
            r["episodes"] += 1
            r["tokens"] += self._tokens_of(pos)
        return {"scope": scope, "routes": routes, "episodes": len(kept),
                "tokens": sum(r["tokens"] for r in routes.values()), "dropped_by_caps": n_selected - len(kept)}

    def _add_neighbors(self, selected: dict[int, Selected]) -> None:
        eps: list[Episode] = self.index.episodes
        for pos in list(selected):
            for d in range(1, self.cfg.temporal_neighbors + 1):
                for nb in (pos - d, pos + d):
                    if 0 <= nb < len(eps) and nb not in selected and eps[nb].session_id == eps[pos].session_id:
                        selected[nb] = Selected(eps[nb].episode_id, selected[pos].hop_id, "neighbor", 0.0)


def missing_bridge(anchor: Anchor, values: dict[str, str]) -> bool:
    """The anchor uses ``$hN.bridge`` of a hop whose bridge is empty (unresolved or not established)."""
    return any(not values.get(m.group(1), "") for f in ANCHOR_FIELDS
               for m in PLACEHOLDER.finditer(getattr(anchor, f) or ""))


def blocked_hop(planned: Anchor, resolved: Anchor, values: dict[str, str], rule: str = "empty_bridge") -> bool:
    """Whether a hop is blocked (``retrieve.block_empty_bridge``) under ``retrieve.block_rule``.

    empty_bridge (the harness's stricter rule): any ``$hN.bridge`` of the planned anchor whose bridge
    is empty, in whatever field. code (the authors' rule, reference_notes 3.5 step 5.1.2): the
    resolved anchor's entity or property is empty, or one of its fields still starts with ``$``; an
    emptied value or condition value leaves the hop searching with its other fields.
    """
    if rule == "code":
        return (not resolved.entity or not resolved.property
                or any((getattr(resolved, f) or "").startswith("$") for f in ANCHOR_FIELDS))
    return missing_bridge(planned, values)


def user_entity(view: MemoryView) -> str:
    """The memory's user: the one speaker of its user turns when it also has assistant turns (a
    user/assistant chat, as LongMemEval); "" for a conversation between people (LoCoMo)."""
    users = {norm(t.speaker) for t in view.turns.values() if t.role == "user"}
    has_assistant = any(t.role == "assistant" for t in view.turns.values())
    return next(iter(users)) if has_assistant and len(users) == 1 else ""
