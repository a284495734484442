"""LoCoMo-Plus judging and aggregation: the official LLM judge, its reply parser and its defects.

Reproduces ``evaluation_framework/task_eval/`` of xjtuleeyf/Locomo-Plus at 059f4e3d (docs/locomo-plus.md):

* **One judge call per question**, its prompt chosen by the category (``prompt.PROMPT_TEMPLATES``:
  ``judge_locomo_plus_<category>`` here, byte for byte, ``default`` for any other category),
  filled with ``str.format(gold=, pred=, evidence=)`` as ``get_judge_prompt`` does. The
  adversarial and Cognitive prompts have no ``{gold}``: they are judged without a gold answer
  (Cognitive: the cue dialogue is the evidence). ``llm_as_judge.py`` sends the prompt through
  ``call_model`` without a category, so ``_prepend_conv_prefix`` puts the conversation prefix
  (``CONV_START_PROMPT`` with the names ``A`` and ``B``) before the stripped prompt: the request is
  that one user message. Officially gpt-4o-mini, temperature 0, 512 tokens, no JSON mode.
* **Scores**: correct 1, partial 0.5, wrong 0, anything else 0 (``label_to_score``); per category
  the mean over its questions and the overall mean over all questions (``_compute_summary``).
* **The reply parser** (``_parse_judge_response``): a regex for a ``{"label": ..., "reason": ...}``
  object, else ``json.loads``; when both fail (or the object is not a mapping), the fallback looks
  for ``"correct"`` in the lower-cased reply, then ``"wrong"``, then ``"partial"``, so a reply
  saying "incorrect" scores **correct** (the authors' committed outputs score 2,240 of 2,240
  correct: every judge reply was an "Incorrect API key" error). ``score.locomo_plus_parser: strict``
  makes the headline a JSON-only reading, where such a reply is a counted failure; both readings
  come from the same reply, so both are always reported.
* **Failed answers**: officially ``call_llm`` returns ``[API Error: <error>]`` (``(empty)`` for an
  empty reply) and that text is judged as the answer. The harness's rule (no call, the question
  scores 0, counted ``no_answer``) is the default; ``score.locomo_plus_error_answers: official``
  judges the text.

A judge call that fails after retries is a counted failure (label None, scores 0); officially its
error text would be parsed as the reply. Clustered CIs resample the LoCoMo conversations (every
Cognitive item stitched into a conversation shares its sessions).
"""
from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Optional

from common.benchmarks.locomo_plus import CATEGORIES, COGNITIVE, RELATION_TYPES
from common.core import prompts
from common.core.io import read_jsonl
from common.core.llm import LLMCallError, LLMClient
from common.core.schema import AnswerRow, Gold, JudgeRow
from common.core.tabular import write_table
from common.evaluation.scoring import failure_cause, method_label, partial_mark, summarize
from common.evaluation.stats import score_with_ci

PROMPT_IDS = {"multi-hop": "judge_locomo_plus_multi_hop", "single-hop": "judge_locomo_plus_single_hop",
              "temporal": "judge_locomo_plus_temporal", "common-sense": "judge_locomo_plus_common_sense",
              "adversarial": "judge_locomo_plus_adversarial", COGNITIVE: "judge_locomo_plus_cognitive",
              "default": "judge_locomo_plus_default"}
CONV_START = "judge_locomo_plus_conv_start"  # utils.CONV_START_PROMPT, two positional {} slots
LABEL_TO_SCORE = {"correct": 1.0, "partial": 0.5, "wrong": 0.0}
VARIANTS = ("official", "strict")
VARIANT_LABELS = {"official": "official parser", "strict": "strict parser (JSON only)"}
N_RESAMPLES = 10_000
# The official answer stand-ins (utils.call_llm): a failed call's text and an empty reply's.
ERROR_ANSWER = "[API Error: {error}]"
EMPTY_ANSWER = "(empty)"


@dataclass(frozen=True)
class Options:
    parser: str = "official"  # score.locomo_plus_parser: the headline variant
    error_answers: str = "zero"  # score.locomo_plus_error_answers


def options(cfg: Any) -> Options:
    score = getattr(cfg, "score", None)
    return Options(parser=str(getattr(score, "locomo_plus_parser", "official")),
                   error_answers=str(getattr(score, "locomo_plus_error_answers", "zero")))


# --------------------------------------------------------------------------- the prompt
def prompt_id(category: str) -> str:
    """``PROMPT_TEMPLATES.get(category) or PROMPT_TEMPLATES["default"]``."""
    return PROMPT_IDS.get(category) or PROMPT_IDS["default"]


def judge_prompt(category: str, evidence: str, pred: str, gold: str = "") -> str:
    """The request's text: the conversation prefix, then the category's filled prompt, stripped.

    ``str.format`` as the official ``get_judge_prompt`` (the templates' ``{{``/``}}`` are its JSON
    braces; a filled value is never rescanned); ``_prepend_conv_prefix`` with its default names.
    """
    text = prompts.load(prompt_id(category)).format(gold=gold or "", pred=pred or "", evidence=evidence or "")
    prefix = prompts.load(CONV_START).format("A", "B")
    return prefix.strip() if not text.strip() else prefix + text.strip()


# --------------------------------------------------------------------------- the reply
_LABEL_REASON = re.compile(r'\{[^{}]*"label"\s*:\s*["\']([^"\']+)["\'][^{}]*"reason"\s*:\s*["\']([^"\']*)["\']',
                           re.DOTALL)
_FENCED = re.compile(r"^```(?:json)?\s*(.*?)\s*```$", re.DOTALL)


def parse_official(raw: str) -> tuple[str, str]:
    """``_parse_judge_response``: (label, reason) as the official code reads the reply."""
    label, reason = "", ""
    raw = (raw or "").strip()
    try:
        m = _LABEL_REASON.search(raw)
        if m:
            label, reason = m.group(1).strip(), (m.group(2) or "").strip()
        else:
            obj = json.loads(raw)
            label = (obj.get("label") or "").strip()
            reason = (obj.get("reason") or "").strip()
    except Exception:  # the official catch-all: a non-JSON reply, a non-mapping, a non-string label or reason
        # The fallback only sets a label it finds; one read before the failure stays (as officially).
        if "correct" in raw.lower():
            label = "correct"
        elif "wrong" in raw.lower():
            label = "wrong"
        elif "partial" in raw.lower():
            label = "partial"
        reason = raw[:200] if raw else ""
    return label, reason


def score_of(label: str) -> float:
    """``label_to_score``: correct 1, partial 0.5, wrong 0, anything else 0."""
    return LABEL_TO_SCORE.get((label or "").strip().lower(), 0.0)


def parse_strict(raw: str) -> tuple[str, str]:
    """The label the reply's JSON states (a ``{"label", "reason"}`` object, fenced or not), one of
    correct / partial / wrong in any case; ``ValueError`` for anything else (no guessing from words)."""
    s = (raw or "").strip()
    m = _LABEL_REASON.search(s)
    if m:
        label, reason = m.group(1).strip(), m.group(2).strip()
    else:
        fenced = _FENCED.match(s)
        try:
            obj = json.loads(fenced.group(1) if fenced else s)
        except json.JSONDecodeError as exc:
            raise ValueError(f"judge reply is not JSON: {exc.msg}") from None
        if not isinstance(obj, dict) or not isinstance(obj.get("label"), str):
            raise ValueError("judge reply has no string 'label'")
        label, reason = obj["label"].strip(), str(obj.get("reason") or "").strip()
    if label.lower() not in LABEL_TO_SCORE:
        raise ValueError(f"judge label {label!r} is not correct, partial or wrong")
    return label.lower(), reason


def read_reply(raw: str) -> dict[str, Any]:
    """Both readings of one reply: label and score under each variant (strict None when it fails)."""
    label, reason = parse_official(raw)
    out: dict[str, Any] = {"label_official": label, "official": score_of(label), "reason": reason}
    try:
        out["label_strict"], _ = parse_strict(raw)
        out["strict"] = LABEL_TO_SCORE[out["label_strict"]]
    except ValueError as exc:
        out["label_strict"], out["strict"], out["strict_error"] = None, None, str(exc)
    return out


# --------------------------------------------------------------------------- judging
def prediction(answer: AnswerRow, opts: Options) -> tuple[Optional[str], str]:
    """(the text judged, its stand-in kind): None when the harness's rule makes no call."""
    if opts.error_answers == "official":
        if answer.answer is None:
            return ERROR_ANSWER.format(error=answer.error or "answer stage failed"), "error_text"
        if not answer.answer.strip():
            return EMPTY_ANSWER, "empty_answer"
    elif not (answer.answer or "").strip():
        return None, ""
    return answer.answer, ""


def judge_locomo_plus(client: LLMClient, name: str, answer: AnswerRow, gold: Gold, opts: Options,
                      repeat: int = 0) -> JudgeRow:
    """The official judge call of one question; ``label`` 1 iff the headline score is 1.0."""
    settings = client.settings("judge")
    pid = prompt_id(gold.question_type)
    row = JudgeRow(qid=answer.qid, judge=name, judge_model=settings.model, prompt_id=pid, label=None)
    pred, stand_in = prediction(answer, opts)
    if pred is None:
        empty = answer.answer is not None
        row.error = f"no_answer: {answer.error or ('empty_answer' if empty else 'answer stage failed')}"
        return row
    # build_output_record: a blank answer is no answer ("").
    reference = gold.answer if gold.answer.strip() else ""
    text = judge_prompt(gold.question_type, str(gold.details.get("judge_evidence", "")), pred, reference)
    kw: dict[str, Any] = {"repeat": repeat} if repeat else {}  # run 0 is the same request as before
    try:
        c = client.complete("judge", [{"role": "user", "content": text}], prompt_id=pid, **kw)
    except LLMCallError as exc:
        row.error = f"{exc.cause}: {exc}"
        return row
    row.raw, row.cache_key = c.text, c.cache_key
    row.usage, row.latency, row.cached = c.usage, round(c.latency, 4), c.cached
    row.scores = {**read_reply(c.text), "headline": opts.parser, **({"answer_stand_in": stand_in} if stand_in else {})}
    head = row.scores[opts.parser]
    if head is None:
        row.error = f"judge_parse_error: {row.scores['strict_error']}"
    else:
        row.label, row.parse_ok = int(head == 1.0), True
    return row


class LocomoPlus:
    """The LoCoMo-Plus ``Evaluator`` (``common.evaluation.registry``) with the run's scoring switches."""

    def __init__(self, opts: Options = Options()):
        self.opts = opts

    def judge(self, client: Any, name: str, prompt_id: str, answer: Any, gold: Gold, repeat: int = 0) -> Any:
        return judge_locomo_plus(client, name, answer, gold, self.opts, repeat=repeat)

    def digest(self, gold: Gold) -> list[Any]:
        """What else a judgment depends on (08's row digest): the evidence judged and the switches."""
        return [gold.question_type, gold.details.get("judge_evidence", ""), repr(self.opts)]

    def aggregate(self, run: Any, judges: list[str]) -> dict[str, Any]:
        return aggregate(run, judges)

    def write_tables(self, run: Any, metrics: dict[str, Any]) -> list[Path]:
        return write_tables(run, metrics)


# --------------------------------------------------------------------------- aggregation
def conversation(gold: Gold) -> str:
    """The cluster of a question: the LoCoMo conversation its memory is built from."""
    return str(gold.details.get("conversation") or gold.memory_id)


def _score(rows: list[tuple[Gold, Optional[float]]]) -> dict[str, Any]:
    """The official mean over these questions (a failure counts 0) with its sum, n and CIs (the
    question bootstrap, and the conversations resampled)."""
    summary = score_with_ci([s for _, s in rows], [conversation(g) for g, _ in rows], n_resamples=N_RESAMPLES,
                            pooled=True)
    return {"score": summary["mean"], **summary}


# The Cognitive subsets reported beside the category (the stitching's flags, per item).
def _relation(name: str) -> Callable[[Gold], bool]:
    return lambda g: g.details.get("relation_type") == name


SUBSETS: dict[str, Callable[[Gold], bool]] = {
    "cue_before_trigger": lambda g: bool(g.details.get("cue_before_trigger")),
    "cue_not_before_trigger": lambda g: not g.details.get("cue_before_trigger"),
    "time_gap_not_parsed": lambda g: not g.details.get("gap_parsed", True),
    **{f"relation_{r}": _relation(r) for r in RELATION_TYPES},
}


def variant_block(gold: list[Gold], scores: dict[str, Optional[float]]) -> dict[str, Any]:
    """One variant's per-category means, overall mean, LoCoMo-five mean and Cognitive subsets."""
    rows = [(g, scores.get(g.qid)) for g in gold]
    by_category = {c: _score(sel) for c in CATEGORIES if (sel := [r for r in rows if r[0].question_type == c])}
    cognitive = [r for r in rows if r[0].question_type == COGNITIVE]
    locomo = [r for r in rows if r[0].question_type != COGNITIVE]
    return {"by_category": by_category, "overall": _score(rows) if rows else None,
            "locomo_categories": _score(locomo) if locomo else None,
            "subsets": {k: _score(sel) for k, f in SUBSETS.items() if (sel := [r for r in cognitive if f(r[0])])}}


def question_scores(rows: dict[str, dict[str, Any]], variant: str) -> dict[str, Optional[float]]:
    """qid -> the question's score under ``variant`` (None: no judgment, or unreadable under it)."""
    return {q: (r.get("scores") or {}).get(variant) for q, r in rows.items()}


def aggregate(run: Any, judges: list[str]) -> dict[str, Any]:
    gold = [Gold(**g) for g in read_jsonl(run.path("gold"))]
    opts = options(run.cfg)
    cognitive = [g for g in gold if g.question_type == COGNITIVE]
    out: dict[str, Any] = {
        "benchmark": "locomo_plus", "run": run.cfg.run.name, "config": "config.resolved.yaml", "headline": opts.parser,
        "questions": {"total": len(gold), "conversations": len({conversation(g) for g in gold}),
                      "by_category": {c: sum(g.question_type == c for g in gold) for c in CATEGORIES},
                      "cognitive_flags": {k: sum(f(g) for g in cognitive) for k, f in SUBSETS.items()}},
        "judges": {}}
    for j in judges:
        rows = {r["qid"]: r for r in read_jsonl(run.judge_path(j))}
        any_row = next(iter(rows.values()), {})
        block: dict[str, Any] = {"judge_model": any_row.get("judge_model"), "prompt_id": "judge_locomo_plus_*",
                                 "headline": opts.parser,
                                 "variants": {v: variant_block(gold, question_scores(rows, v)) for v in VARIANTS}}
        labels = [(rows.get(g.qid) or {}).get("label") for g in gold]
        # ``overall`` in the shape every table reads (k/n, coverage); k = questions judged fully correct.
        block["overall"] = {**summarize(labels, [conversation(g) for g in gold]),
                            "score": (block["variants"][opts.parser]["overall"] or {}).get("score"),
                            "label": "k = questions whose headline score is 1 (correct); score = the official mean"}
        causes: dict[str, int] = {}
        for g in gold:
            c = failure_cause(rows.get(g.qid))
            if c:
                causes[c] = causes.get(c, 0) + 1
        block["failures"], block["failures_total"] = causes, sum(causes.values())
        read = [r.get("scores") or {} for r in rows.values()]
        block["parser"] = {"disagree": sum(1 for s in read if s and s.get("official") != s.get("strict")),
                           "not_json": sum(1 for s in read if s and s.get("strict") is None),
                           "partial_labels": sum(1 for s in read if s.get("official") == 0.5),
                           "answer_stand_ins": sum(1 for s in read if s.get("answer_stand_in"))}
        out["judges"][j] = block
    return out


# --------------------------------------------------------------------------- tables
def cell(summary: Optional[dict[str, Any]]) -> str:
    """``45.7 [40.1, 51.2; cl 38.0, 53.3] (183.5/401)``: the mean %, its CIs, the sum of scores / n."""
    if not summary or summary.get("score") is None:
        return "n/a"
    text = f"{100 * summary['score']:.1f}"
    ci, cl = summary.get("ci") or {}, summary.get("ci_cluster") or {}
    if ci.get("low") is not None:
        band = f"{100 * ci['low']:.1f}, {100 * ci['high']:.1f}"
        if cl.get("low") is not None:
            band += f"; cl {100 * cl['low']:.1f}, {100 * cl['high']:.1f}"
        text += f" [{band}]"
    return f"{text} ({summary['sum']:g}/{summary['n']})"


SUBSET_LABELS = {"cue_before_trigger": "Cognitive, cue right before its trigger",
                 "cue_not_before_trigger": "Cognitive, sessions between cue and trigger",
                 "time_gap_not_parsed": "Cognitive, time gap not parsed (0 days)",
                 **{f"relation_{r}": f"Cognitive, relation {r}" for r in RELATION_TYPES}}


def table_rows(metrics: dict[str, Any], judge: str) -> list[dict[str, str]]:
    """One row per category, the overall, the LoCoMo five and the Cognitive subsets; one column per variant."""
    m = metrics["judges"][judge]
    rows = []
    for label, pick in ([(c, lambda b, c=c: b["by_category"].get(c)) for c in CATEGORIES]
                        + [("overall (all questions)", lambda b: b["overall"]),
                           ("LoCoMo's five categories", lambda b: b["locomo_categories"])]
                        + [(SUBSET_LABELS[k], lambda b, k=k: b["subsets"].get(k)) for k in SUBSETS]):
        row = {"Category": label}
        for v in VARIANTS:
            row[VARIANT_LABELS[v] + (" (headline)" if v == m["headline"] else "")] = cell(pick(m["variants"][v]))
        if any(text != "n/a" for k, text in row.items() if k != "Category"):
            rows.append(row)
    return rows


def write_tables(run: Any, metrics: dict[str, Any]) -> list[Path]:
    """One Markdown+CSV pair per judge: categories as rows, the two parser readings as columns."""
    paths: list[Path] = []
    for j, m in metrics["judges"].items():
        fp = metrics.get("fingerprint", {})
        failures = ", ".join(f"{k} {v}" for k, v in m["failures"].items()) or "none"
        p = m["parser"]
        title = (f"{partial_mark(metrics)}LoCoMo-Plus scores of {method_label(run.cfg, metrics)}, judge "
                 f"{m['judge_model']} (the official judge: correct 1, partial 0.5, wrong 0; mean over questions). "
                 "95% CI: question bootstrap; cl: the LoCoMo conversations resampled. "
                 f"Failures count 0: {m['failures_total']} ({failures}). Replies the official parser reads "
                 f"differently from their JSON: {p['disagree']} ({p['not_json']} not JSON); partial labels: "
                 f"{p['partial_labels']}; answers judged as error text: {p['answer_stand_ins']}. "
                 f"Protocol fingerprint: run {fp.get('run', '?')}, judge {fp.get('judges', {}).get(j, '?')}.")
        for note in ((metrics.get("coverage") or {}).get("warning"), (metrics.get("dataset") or {}).get("warning")):
            if note:
                title += f" {note}."
        paths += write_table(table_rows(metrics, j), run.dir / f"table_{j}.md", title)
    return paths


# --------------------------------------------------------------------------- dry run
def judge_prompt_tokens(golds: list[Gold], answer_text: str, count: Callable[[str], int]) -> int:
    """Prompt tokens of the judge calls: each question's exact prompt with an assumed answer."""
    return sum(count(judge_prompt(g.question_type, str(g.details.get("judge_evidence", "")), answer_text,
                                  g.answer)) + 4 for g in golds)
