"""BEAM judging and aggregation: the official rubric scorer, its two defects and their corrections.

Reproduces ``src/evaluation/compute_metrics.py`` and ``report_results.py`` of
mohammadtavakoli78/BEAM at b2a3ee8ba12d (docs/beam.md):

* One judge call per rubric item with the unified rubric prompt (``judge_beam_rubric``, the
  official ``unified_llm_judge_base_prompt`` byte for byte), one user message, the judge role's
  sampling (officially gpt-4.1-mini at temperature 0 through langchain's ChatOpenAI, no JSON
  mode). The reply is parsed as the official ``parse_json_response`` does (strip, unwrap a fenced
  block, ``json.loads``, else the first ``{...}``/``[...]`` span), and on any failure repaired with
  ``json_repair.repair_json`` (pinned as the official requirements pin it).
* A question's score is the mean of its item scores; event ordering is scored by the official LLM
  alignment (one YES/NO equivalence call per pair tried, ``judge_beam_align_*``) and the normalised
  Kendall tau-b (``tau_norm``, the number ``report_results.py`` reports for that ability); its
  rubric judge calls are made too (officially summed with ``float``), as the official code does.
* Aggregation: per chat and ability the mean over that chat's questions, then per ability the mean
  over chats; ``overall`` is the unweighted mean of the ten ability scores (the official report
  prints no overall).

The two defects, reproduced by default:

* ``int(response['score'])`` (every ability but event ordering) turns each 0.5 into 0.
  ``score.beam_float_scores`` corrects it; the corrected score comes from the same replies, so
  both are always reported and the switch only picks the headline.
* The prompt's ``<question>`` placeholder is never filled (the judge sees the literal text).
  ``score.beam_fill_question`` fills it, which needs its own judge calls (one more per rubric
  item); the official, unfilled calls are still made so both are reported side by side.

Scores are read as the official code reads them: ``int(score)`` for every ability but event
ordering (so ``true`` is 1 and ``"1"`` is 1), ``float(score)`` for event ordering's rubric replies
(so ``"0.5"``, ``2``, ``1.5`` and ``true`` are read; that mean is recorded, not reported). Any
reply becomes a score or a counted failure.

Two more switches follow the official runner where the harness differs by default:
``score.beam_empty_answers: official`` judges an empty answer as it is and a failed answer call's
error text as the answer (default ``zero``: no call, the question scores 0, counted as
``no_answer``); ``score.beam_judge_seed: false`` drops the judge request's seed 42 (the official
client sends none). BEAM runs score the answer's raw content, surrounding whitespace included, as
the official code does (``answer.strip: false`` in configs/beam.yaml).

Deviations, all counted and stated: a failed call or an unparsable reply makes the question a
counted failure (the official run would stop with an exception); a score outside [0, 1] or one
``int`` cannot read (e.g. the string "0.5", or ``Infinity`` / ``1e999``, on which the official
``int()`` raises OverflowError) is a parse failure, and so is a non-finite event-ordering rubric
score (officially summed into a mean it does not report); an undefined tau-b (officially NaN,
which turns the ability's mean into NaN) scores 0 and is counted as ``tau_undefined``; the
official event-ordering scorer's extra fact-extraction call, whose result it overwrites before use,
is not made (it changes no number).
"""
from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Optional

from common.core import prompts
from common.core.io import read_jsonl
from common.core.llm import LLMCallError, LLMClient
from common.core.schema import AnswerRow, Gold, JudgeRow
from common.core.tabular import write_table
from common.evaluation.scoring import failure_cause, method_label, partial_mark, score_cell
from common.evaluation.stats import score_with_ci

ABILITIES = ("abstention", "contradiction_resolution", "event_ordering", "information_extraction",
             "instruction_following", "knowledge_update", "multi_session_reasoning", "preference_following",
             "summarization", "temporal_reasoning")
SHORT_NAMES = {"abstention": "ABS", "contradiction_resolution": "CR", "event_ordering": "EO",
               "information_extraction": "IE", "instruction_following": "IF", "knowledge_update": "KU",
               "multi_session_reasoning": "MR", "preference_following": "PF", "summarization": "SUM",
               "temporal_reasoning": "TR"}
EVENT_ORDERING = "event_ordering"
RUBRIC_PROMPT = "judge_beam_rubric"
ALIGN_SYSTEM = "judge_beam_align_system"
ALIGN_USER = "judge_beam_align_user"
PROMPT_IDS = (RUBRIC_PROMPT, ALIGN_SYSTEM, ALIGN_USER)
# The four scores of a question: official (int scores, placeholder unfilled), float (int defect
# corrected), filled (placeholder filled, int scores), corrected (both corrected).
VARIANTS = ("official", "float", "filled", "corrected")
# Bootstrap resamples of every CI (as common.evaluation.stats' default).
N_RESAMPLES = 10_000
VARIANT_LABELS = {"official": "official (int, <question> unfilled)", "float": "float scores",
                  "filled": "<question> filled", "corrected": "both corrected"}


EMPTY_ANSWERS = ("zero", "official")
# The official runner's answer when its answer call raised (src/answer_probing_questions/
# answer_generation.py); the last slot names its output file, here the harness's answer file.
OFFICIAL_ERROR_ANSWER = "Error in {ability} question type and {question} and for {path}"
ANSWERS_FILE = "07_answer.jsonl"


@dataclass(frozen=True)
class Options:
    float_scores: bool = False
    fill_question: bool = False
    empty_answers: str = "zero"  # score.beam_empty_answers

    @property
    def headline(self) -> str:
        return {(False, False): "official", (True, False): "float", (False, True): "filled",
                (True, True): "corrected"}[(self.float_scores, self.fill_question)]


def options(cfg: Any) -> Options:
    score = getattr(cfg, "score", None)
    return Options(float_scores=bool(getattr(score, "beam_float_scores", False)),
                   fill_question=bool(getattr(score, "beam_fill_question", False)),
                   empty_answers=str(getattr(score, "beam_empty_answers", "zero")))


# --------------------------------------------------------------------------- prompts
_PLACEHOLDER_RE = re.compile(r"<(question|rubric_item|llm_response)>")
_ALIGN_RE = re.compile(r"\{(first|second)\}")


def rubric_prompt(item: str, response: str, question: Optional[str] = None) -> str:
    """The rubric judge prompt of one item.

    Official (``question`` None): ``<rubric_item>`` then ``<llm_response>`` replaced one after the
    other with ``str.replace``, ``<question>`` left as it is. Corrected: the three placeholders
    filled in one pass, so a filled value is never rescanned.
    """
    text = prompts.load(RUBRIC_PROMPT)
    if question is None:
        return text.replace("<rubric_item>", item).replace("<llm_response>", response)
    values = {"question": question, "rubric_item": item, "llm_response": response}
    return _PLACEHOLDER_RE.sub(lambda m: values[m.group(1)], text)


def align_messages(first: str, second: str) -> list[dict[str, str]]:
    """The official equivalence call: a system message and a user message holding the two snippets."""
    values = {"first": first, "second": second}
    return [{"role": "system", "content": prompts.load(ALIGN_SYSTEM)},
            {"role": "user", "content": _ALIGN_RE.sub(lambda m: values[m.group(1)], prompts.load(ALIGN_USER))}]


# --------------------------------------------------------------------------- parsing
_FENCED_RE = re.compile(r"```(?:json)?\s*(\[.*\]|\{.*\})\s*```", re.DOTALL)
_SPAN_RE = re.compile(r"(\{.*?\}|\[.*?\])", re.DOTALL)


def _parse_strict(text: str) -> Any:
    s = text.strip()
    if s.startswith("```"):
        fenced = _FENCED_RE.search(s)
        if fenced:
            s = fenced.group(1).strip()
    try:
        return json.loads(s)
    except json.JSONDecodeError:
        pass
    span = _SPAN_RE.search(s)
    if span is None:
        raise ValueError("no JSON in the reply")
    return json.loads(span.group(1))  # raises when the span is not JSON either


def parse_reply(text: str) -> Any:
    """The reply as the official scorer reads it: the strict parse, else ``json_repair``'s repair.

    ``ValueError`` when neither gives JSON.
    """
    try:
        return _parse_strict(text.strip())
    except Exception:  # the official fallback catches everything (a bare except)
        pass
    from json_repair import repair_json  # pinned in requirements.txt, as the official code pins it

    try:
        return json.loads(repair_json(text.strip()))
    except Exception as exc:
        raise ValueError(f"reply is not JSON even after json_repair: {type(exc).__name__}") from None


def item_scores(obj: Any, ability: str = "") -> tuple[Optional[int], float]:
    """(official score, float score) of one parsed reply, read as the official code reads it.

    Every ability but event ordering: ``int(score)`` (``true`` -> 1, ``"1"`` -> 1, ``0.5`` -> 0)
    and ``float(score)``, which must lie in [0, 1]. Event ordering: ``float(score)`` only (official
    None), any finite number. ``ValueError`` when the reply has no usable score: no ``score`` key,
    a value the official reader rejects (``int("0.5")``), or one it would crash on (``Infinity``,
    ``1e999``: OverflowError in ``int``); never any other exception.
    """
    try:
        raw = obj["score"]
        official = None if ability == EVENT_ORDERING else int(raw)
        corrected = float(raw)
    except (KeyError, TypeError, ValueError, IndexError, OverflowError) as exc:
        raise ValueError(f"judge reply has no usable score ({type(exc).__name__})") from None
    if not math.isfinite(corrected):
        raise ValueError(f"judge score {raw!r} is not a finite number")
    if ability != EVENT_ORDERING and not 0.0 <= corrected <= 1.0:
        raise ValueError(f"judge score {raw!r} is not in [0, 1]")
    return official, corrected


def equivalent(reply: str) -> bool:
    """The official YES/NO rule: True iff 'yes' occurs in the lower-cased reply."""
    return "yes" in reply.lower()


# --------------------------------------------------------------------------- event ordering
def align(reference: list[str], system: list[str], same: Callable[[str, str], bool]) -> list[str]:
    """Each system line replaced by the first unused reference item it is equivalent to (asked as
    ``same(reference_item, system_line)`` in reference order); unmatched lines stay as they are."""
    used: set[int] = set()
    out: list[str] = []
    for s in system:
        match = next((i for i, r in enumerate(reference) if i not in used and same(r, s)), None)
        if match is None:
            out.append(s)
        else:
            used.add(match)
            out.append(reference[match])
    return out


def ordering_score(reference: list[str], system: list[str]) -> dict[str, Any]:
    """Precision, recall, F1 and the normalised Kendall tau-b of an aligned system list.

    The ranks are over the union of both lists (first-seen order); an item missing from a list
    gets the rank len(union) + 1 there; a repeated item keeps the rank of its last position.
    ``tau_norm`` = (tau_b + 1) / 2, NaN when tau-b is undefined (a constant ranking).
    """
    from scipy.stats import kendalltau

    tp = len(set(reference) & set(system))
    fp = sum(1 for x in system if x not in reference)
    fn = sum(1 for x in reference if x not in system)
    precision = tp / (tp + fp) if tp + fp else 0
    recall = tp / (tp + fn) if tp + fn else 0
    f1 = 2 * precision * recall / (precision + recall) if precision + recall else 0
    union = list(dict.fromkeys(reference + system))
    missing = len(union) + 1

    def ranks(seq: list[str]) -> list[int]:
        pos = {item: i + 1 for i, item in enumerate(seq)}
        return [pos.get(u, missing) for u in union]

    tau_b = float(kendalltau(ranks(reference), ranks(system), variant="b", method="auto")[0])
    tau_norm = (tau_b + 1) / 2
    return {"precision": precision, "recall": recall, "f1": f1, "tau_norm": tau_norm,
            "final_score": tau_norm * f1}


# --------------------------------------------------------------------------- judging
Call = Callable[[list[dict[str, str]], str], str]


def _judge_items(call: Call, rubric: list[str], response: str, question: Optional[str],
                 ability: str = "") -> list[dict[str, Any]]:
    out = []
    for item in rubric:
        reply = call([{"role": "user", "content": rubric_prompt(item, response, question)}], RUBRIC_PROMPT)
        obj = parse_reply(reply.strip())
        official, corrected = item_scores(obj, ability)
        out.append({"item": item, "score": obj["score"], "reason": obj.get("reason", "") if isinstance(obj, dict)
                    else "", "int": official, "float": corrected})
    return out


def _mean(items: list[dict[str, Any]], key: str) -> float:
    return sum(i[key] for i in items) / len(items)


def question_scores(call: Call, ability: str, rubric: list[str], response: str, question: str,
                    fill_question: bool) -> dict[str, Any]:
    """Every judge call of one question and its four scores (``VARIANTS``); ``ValueError`` on a
    reply that cannot be scored, ``LLMCallError`` on a failed call."""
    if not rubric:
        raise ValueError("the question has no rubric items (officially a division by zero)")
    out: dict[str, Any] = {"ability": ability}
    if ability == EVENT_ORDERING:
        # Official: the system list is the answer's lines (empty ones included), aligned by LLM.
        system = response.split("\n")
        aligned = align(rubric, system, lambda r, s: equivalent(call(align_messages(r, s), ALIGN_USER)))
        ordering = ordering_score(rubric, aligned)
        undefined = math.isnan(ordering["tau_norm"])
        ordering["tau_norm"] = None if undefined else ordering["tau_norm"]
        ordering["final_score"] = None if undefined else ordering["final_score"]
        out["ordering"] = {**ordering, "tau_undefined": undefined, "aligned": aligned}
    out["items"] = _judge_items(call, rubric, response, None, ability)
    if fill_question:
        out["filled_items"] = _judge_items(call, rubric, response, question, ability)
    if ability == EVENT_ORDERING:
        tau = out["ordering"]["tau_norm"] or 0.0  # the reported number; the question does not enter it
        out["rubric_judge"] = {"float": _mean(out["items"], "float")}  # officially summed with float()
        for v in VARIANTS:
            out[v] = tau if v in ("official", "float") or fill_question else None
        return out
    out["official"], out["float"] = _mean(out["items"], "int"), _mean(out["items"], "float")
    if fill_question:
        out["filled"], out["corrected"] = _mean(out["filled_items"], "int"), _mean(out["filled_items"], "float")
    else:
        out["filled"] = out["corrected"] = None
    return out


def judge_beam(client: LLMClient, name: str, answer: AnswerRow, gold: Gold, opts: Options,
               repeat: int = 0) -> JudgeRow:
    """All judge calls of one BEAM question; ``label`` = 1 iff the headline score is 1.0.

    A missing or empty answer makes no request (``no_answer``) under the harness's rule
    (``score.beam_empty_answers: zero``); under the official one the empty answer is judged as it
    is and a failed answer is judged as the official runner's error text (``answer_stand_in`` in
    the scores says which). A failed call or an unscorable reply makes the question a counted
    failure (label None) with its cause, the calls made so far kept.
    """
    settings = client.settings("judge")
    row = JudgeRow(qid=answer.qid, judge=name, judge_model=settings.model, prompt_id=RUBRIC_PROMPT, label=None)
    stand_in = ""
    if opts.empty_answers == "official":
        if answer.answer is None:
            stand_in = "error_text"
        elif not answer.answer.strip():
            stand_in = "empty_answer"
    elif not (answer.answer or "").strip():
        empty = answer.answer is not None
        row.error = f"no_answer: {answer.error or ('empty_answer' if empty else 'answer stage failed')}"
        return row
    response = answer.answer if answer.answer is not None else OFFICIAL_ERROR_ANSWER.format(
        ability=gold.question_type, question=answer.question, path=ANSWERS_FILE)
    calls: list[dict[str, Any]] = []
    raws: list[str] = []

    def call(messages: list[dict[str, str]], prompt_id: str) -> str:
        kw: dict[str, Any] = {"repeat": repeat} if repeat else {}
        c = client.complete("judge", messages, prompt_id=prompt_id, **kw)
        calls.append(c.record(prompt_id))
        raws.append(c.text)
        return c.text

    try:
        row.scores = question_scores(call, gold.question_type, list(gold.rubric), response, answer.question,
                                     opts.fill_question)
        if stand_in:
            row.scores["answer_stand_in"] = stand_in
    except LLMCallError as exc:
        row.error = f"{exc.cause}: {exc}"
    except ValueError as exc:
        row.error = f"judge_parse_error: {exc}"
    row.llm_calls = calls
    row.raw = raws[-1] if raws else ""
    row.cache_key = calls[-1]["cache_key"] if calls else ""
    row.usage = {k: sum(c["usage"].get(k, 0) for c in calls) for k in {k for c in calls for k in c["usage"]}}
    row.latency = round(sum(c["latency"] for c in calls), 4)
    row.cached = bool(calls) and all(c["cached"] for c in calls)
    if not row.error:
        row.scores["headline"] = opts.headline
        row.label, row.parse_ok = int(row.scores[opts.headline] == 1.0), True
    return row


class Beam:
    """The BEAM ``Evaluator`` (``common.evaluation.registry``) with the run's scoring switches."""

    def __init__(self, opts: Options = Options()):
        self.opts = opts

    def judge(self, client: Any, name: str, prompt_id: str, answer: Any, gold: Gold, repeat: int = 0) -> Any:
        return judge_beam(client, name, answer, gold, self.opts, repeat=repeat)

    def aggregate(self, run: Any, judges: list[str]) -> dict[str, Any]:
        return aggregate(run, judges)

    def write_tables(self, run: Any, metrics: dict[str, Any]) -> list[Path]:
        return write_tables(run, metrics)


# --------------------------------------------------------------------------- aggregation
def official_report(per_question: list[tuple[str, str, Optional[float]]]) -> dict[str, Optional[float]]:
    """``report_results.py``: per chat and ability the mean of its questions' scores (a failure
    counts 0), then per ability the mean over the chats that have it.

    ``per_question``: (chat, ability, score) triples."""
    by: dict[str, dict[str, list[float]]] = {}
    for chat, ability, score in per_question:
        by.setdefault(ability, {}).setdefault(chat, []).append(0.0 if score is None else score)
    out: dict[str, Optional[float]] = {}
    for ability in ABILITIES:
        chats = by.get(ability, {})
        out[ability] = (sum(sum(v) / len(v) for v in chats.values()) / len(chats)) if chats else None
    return out


def overall(by_ability: dict[str, Optional[float]]) -> Optional[float]:
    """The unweighted mean of the ten ability scores; None unless all ten are present."""
    values = [by_ability.get(a) for a in ABILITIES]
    return None if any(v is None for v in values) else sum(v for v in values if v is not None) / len(values)


def aggregate(run: Any, judges: list[str]) -> dict[str, Any]:
    gold = [Gold(**g) for g in read_jsonl(run.path("gold"))]
    opts = options(run.cfg)
    out: dict[str, Any] = {"benchmark": "beam", "run": run.cfg.run.name, "config": "config.resolved.yaml",
                           "questions": {"total": len(gold), "chats": len({g.memory_id for g in gold}),
                                         "by_ability": {a: sum(g.question_type == a for g in gold)
                                                        for a in ABILITIES},
                                         "rubric_items": sum(len(g.rubric) for g in gold)},
                           "headline": opts.headline, "judges": {}}
    for j in judges:
        rows = {r["qid"]: r for r in read_jsonl(run.judge_path(j))}
        any_row = next(iter(rows.values()), {})
        block: dict[str, Any] = {"judge_model": any_row.get("judge_model"), "prompt_id": RUBRIC_PROMPT,
                                 "headline": opts.headline, "variants": {}}
        for v in VARIANTS:
            scored = [(g, (rows.get(g.qid) or {}).get("scores") or {}) for g in gold]
            if not all(s.get(v) is not None or not s for _, s in scored) or not any(s.get(v) is not None
                                                                                    for _, s in scored):
                block["variants"][v] = {"status": "not computed: set score.beam_fill_question: true "
                                                  "(one more judge call per rubric item)"}
                continue
            triples = [(g.memory_id, g.question_type, s.get(v)) for g, s in scored]
            report = official_report(triples)
            by_ability: dict[str, Any] = {}
            for a in ABILITIES:
                sel = [(g, s) for g, s in scored if g.question_type == a]
                if not sel:
                    continue
                summary = score_with_ci([s.get(v) for _, s in sel], [g.memory_id for g, _ in sel],
                                        n_resamples=N_RESAMPLES)
                by_ability[a] = {"score": report[a], **summary}
            allq = score_with_ci([s.get(v) for _, s in scored], [g.memory_id for g, _ in scored],
                                 n_resamples=N_RESAMPLES)
            block["variants"][v] = {"by_ability": by_ability, "overall": overall(report),
                                    "overall_over": sum(report[a] is not None for a in ABILITIES),
                                    "questions": allq}
        causes: dict[str, int] = {}
        for g in gold:
            c = failure_cause(rows.get(g.qid))
            if c:
                causes[c] = causes.get(c, 0) + 1
        head = block["variants"].get(opts.headline, {})
        q = head.get("questions") or {}
        # ``overall`` in the shape the pipeline reads (n for coverage); accuracy = questions fully met.
        labels = [(rows.get(g.qid) or {}).get("label") for g in gold]
        block["overall"] = {"n": len(gold), "k": sum(1 for x in labels if x == 1),
                            "accuracy": (sum(1 for x in labels if x == 1) / len(gold)) if gold else None,
                            "score": head.get("overall"), "mean_over_questions": q.get("mean"),
                            "label": "k = questions whose headline score is 1.0"}
        block["failures"] = causes
        block["failures_total"] = sum(causes.values())
        block["rubric_items_with_half_score"] = sum(
            1 for r in rows.values() for i in (r.get("scores") or {}).get("items", []) if i.get("float") == 0.5)
        block["tau_undefined"] = sum(1 for r in rows.values()
                                     if ((r.get("scores") or {}).get("ordering") or {}).get("tau_undefined"))
        block["calls"] = sum(len(r.get("llm_calls") or []) for r in rows.values())
        out["judges"][j] = block
    return out


def _cell(summary: Optional[dict[str, Any]]) -> str:
    return score_cell(summary, "score")


def table_rows(metrics: dict[str, Any], judge: str) -> list[dict[str, str]]:
    """One row per ability (and the overall): each computed variant's score, cluster CI, sum/count."""
    m = metrics["judges"][judge]
    computed = [v for v in VARIANTS if "by_ability" in m["variants"].get(v, {})]
    rows = []
    for a in ABILITIES:
        row = {"Ability": a}
        for v in computed:
            row[VARIANT_LABELS[v]] = _cell(m["variants"][v]["by_ability"].get(a))
        rows.append(row)
    last = {"Ability": "overall (mean of the 10 abilities)"}
    for v in computed:
        o = m["variants"][v]["overall"]
        last[VARIANT_LABELS[v]] = "n/a" if o is None else f"{100 * o:.1f}"
    rows.append(last)
    return rows


def write_tables(run: Any, metrics: dict[str, Any]) -> list[Path]:
    """One Markdown+CSV pair per judge: abilities as rows, official and corrected scores as columns."""
    paths: list[Path] = []
    for j, m in metrics["judges"].items():
        fp = metrics.get("fingerprint", {})
        missing = [VARIANT_LABELS[v] for v in VARIANTS if "by_ability" not in m["variants"].get(v, {})]
        failures = ", ".join(f"{k} {v}" for k, v in m["failures"].items()) or "none"
        title = (f"{partial_mark(metrics)}BEAM scores of {method_label(run.cfg, metrics)}, judge {m['judge_model']} "
                 "(official rubric scorer; "
                 f"headline: {VARIANT_LABELS[m['headline']]}). Per ability: mean over chats of the chat means, "
                 "95% CI by bootstrap over chats, sum of question scores / questions; event ordering = tau_norm. "
                 f"Failures count 0: {m['failures_total']} ({failures}); "
                 f"rubric items judged 0.5: {m['rubric_items_with_half_score']}; judge calls: {m['calls']}. "
                 f"Protocol fingerprint: run {fp.get('run', '?')}, judge {fp.get('judges', {}).get(j, '?')}.")
        if missing:
            title += (f" Not computed: {', '.join(missing)} "
                      "(set score.beam_fill_question: true; it makes its own calls).")
        for note in ((metrics.get("coverage") or {}).get("warning"), (metrics.get("dataset") or {}).get("warning")):
            if note:  # a partial run; a BEAM folder other than the official release
                title += f" {note}."
        paths += write_table(table_rows(metrics, j), run.dir / f"table_{j}.md", title)
    return paths


# --------------------------------------------------------------------------- dry run
def judge_calls(golds: list[Gold], fill_question: bool) -> dict[str, int]:
    """How many judge calls scoring ``golds`` makes (``make beam DRY_RUN=1``, docs/beam.md).

    ``rubric``: one per rubric item (twice with ``score.beam_fill_question``: the official unfilled
    call and the filled one). ``align_max``: the event-ordering YES/NO calls, at most one per
    (answer line, unused rubric item) pair; with an answer of as many lines as the rubric that is
    R*R when no line matches (each line is tried against every item), R when each line matches
    its own item first, and R*(R+1)/2 when the lines match the items in reverse order; R*R, the
    most, is assumed here. The exact count depends on the answer and is in the ledger after.
    """
    items = sum(len(g.rubric) for g in golds)
    align = sum(len(g.rubric) ** 2 for g in golds if g.question_type == EVENT_ORDERING)
    return {"rubric": items * (2 if fill_question else 1), "align_max": align}


def judge_prompt_tokens(golds: list[Gold], questions: dict[str, str], answer_text: str, fill_question: bool,
                        count: Callable[[str], int]) -> int:
    """Prompt tokens of those calls: the exact rubric prompts with an assumed answer, plus the
    alignment messages of the R*R bound with one rubric item standing in for each answer line."""
    tokens = 0
    for g in golds:
        for item in g.rubric:
            tokens += count(rubric_prompt(item, answer_text)) + 4
            if fill_question:
                tokens += count(rubric_prompt(item, answer_text, questions.get(g.qid, ""))) + 4
        if g.question_type == EVENT_ORDERING:
            for r in g.rubric:
                tokens += len(g.rubric) * sum(count(m["content"]) + 4 for m in align_messages(r, r))
    return tokens


# --------------------------------------------------------------------------- judge audit
def wrong_answers(golds: list[Gold]) -> dict[str, str]:
    """qid -> a known-wrong answer: the ideal answer of the next question of the same ability in
    another chat (another question's gold, so it is fluent, on-format and off-target); a question
    with no such partner gets the next question's answer of any ability in another chat."""
    out: dict[str, str] = {}
    for i, g in enumerate(golds):
        others = golds[i + 1:] + golds[:i]
        partner = next((o for o in others if o.question_type == g.question_type and o.memory_id != g.memory_id),
                       next((o for o in others if o.memory_id != g.memory_id), None))
        if partner is not None and partner.answer:
            out[g.qid] = partner.answer
    return out


def audit_report(rows: list[JudgeRow]) -> dict[str, Any]:
    """How often the rubric judge still gives credit to known-wrong answers: item verdicts 1.0 / 0.5
    / 0.0 (counts and shares), per ability and overall, and the mean question score under the
    official (int) and the float rule. A failed judgment is counted apart, never dropped."""
    def block(sel: list[JudgeRow]) -> dict[str, Any]:
        items = [i["float"] for r in sel for i in (r.scores or {}).get("items", [])]
        counts = {"1.0": sum(x == 1.0 for x in items), "0.5": sum(x == 0.5 for x in items),
                  "0.0": sum(x == 0.0 for x in items)}
        ok = [r for r in sel if r.label is not None]
        return {"questions": len(sel), "failed": len(sel) - len(ok), "items": len(items), "verdicts": counts,
                "share_full": counts["1.0"] / len(items) if items else None,
                "share_half": counts["0.5"] / len(items) if items else None,
                "mean_official": sum(r.scores["official"] for r in ok) / len(ok) if ok else None,
                "mean_float": sum(r.scores["float"] for r in ok) / len(ok) if ok else None}

    return {"overall": block(rows),
            "by_ability": {a: block([r for r in rows if (r.scores or {}).get("ability") == a])
                           for a in ABILITIES if any((r.scores or {}).get("ability") == a for r in rows)}}


def audit_markdown(judge: str, report: dict[str, Any]) -> str:
    def pct(x: Optional[float]) -> str:
        return "n/a" if x is None else f"{100 * x:.1f}"

    lines = [f"# BEAM judge audit: {judge}", "",
             "Each question's answer is another question's ideal answer (same ability, another chat): "
             "every rubric credit is a false credit. Item verdicts as the judge replied (1.0 / 0.5 / 0.0); "
             "question scores under the official int() rule and the float rule.", "",
             "| Ability | Questions (failed) | Items | 1.0 % (k) | 0.5 % (k) | Mean score official "
             "| Mean score float |",
             "|---|---|---|---|---|---|---|"]
    for name, b in [("overall", report["overall"]), *report["by_ability"].items()]:
        v = b["verdicts"]
        lines.append(f"| {name} | {b['questions']} ({b['failed']}) | {b['items']} | {pct(b['share_full'])} "
                     f"({v['1.0']}) | {pct(b['share_half'])} ({v['0.5']}) | {pct(b['mean_official'])} | "
                     f"{pct(b['mean_float'])} |")
    return "\n".join(lines) + "\n"
