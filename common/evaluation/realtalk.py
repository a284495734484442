"""REALTALK judging and aggregation: the official token F1 and GPT score, the LoCoMo judge beside them.

Reproduces ``evaluate_memory.py`` and ``eval_memory/qa_tool.py`` of danny911kr/REALTALK at b903e06a
(docs/realtalk.md):

* **Token F1** (``compute_lexical_score``): LoCoMo's F1 byte for byte (``common.evaluation.metrics.
  locomo_f1``): category 1 splits prediction and gold on ``,`` and averages each gold part's best
  match (partial credit), category 3 keeps the gold up to its first ``;``, category 2 plain F1. It is
  computed in 09 from the answers; it makes no call.
* **GPT score** (``QATool.gpt_score``): one call per question with the official prompt
  (``judge_realtalk_gpt_score``, byte for byte, filled in one pass as its f-string), JSON mode, the
  reply read with ``json.loads`` and its ``score`` taken as the question's score (0-1). A reply that
  is not JSON is asked again, up to three more times, as ``generate_json`` retries (each retry its
  own cache entry, ``repeat`` ``RETRY_STRIDE * attempt``). The call is made by role ``gpt_score``:
  the judge's model by default; ``score.realtalk_gpt_score_model: answer`` asks the answer model,
  as the official code does (``self.qa_model.generate_json``: the model judges its own answers).
* **The LLM judge** beside them: the harness's LoCoMo judge (``common.evaluation.judge``, prompt
  ``judge.prompt``), whose CORRECT/WRONG label is the row's ``label``: the accuracy with k/n that
  every table, comparison and the systems table read. The three numbers are never averaged.
* **Aggregation**: the official code scores one chat per run and prints each category's mean; how the
  paper combined the ten chats is not in the code. The harness gives each category's mean over its
  questions (the headline, pooled over chats) with the mean of the chat means and CIs clustered by
  chat beside it, and an overall over all questions (the official code prints none).

Deviations, each counted and stated: a question without an answer (the call failed, or the reply was
empty) makes no GPT-score call and scores 0 in the GPT score and the F1 (officially the run stops at
the failed call); a GPT-score reply that is not a JSON object after the retries, has no ``score``, or
whose score is not a number in [0, 1] (officially summed as it is, or the run stops) is a counted
failure that scores 0 in the strict mean and is left out of the clean one.
"""
from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any, Optional

from common.benchmarks import realtalk_errata
from common.benchmarks.realtalk import ADAPTER as DATA
from common.benchmarks.realtalk import CATEGORY_NAMES
from common.core import prompts
from common.core.io import read_jsonl
from common.core.llm import LLMCallError, LLMClient
from common.core.schema import AnswerRow, Gold, JudgeRow
from common.core.tabular import describe, format_accuracy, write_table
from common.evaluation.judge import judge_answer
from common.evaluation.loss import decompose as loss_decomposition
from common.evaluation.metrics import gold_evidence_recall, locomo_f1
from common.evaluation.scoring import failure_cause, judge_block, method_label, partial_mark, score_cell, score_note
from common.evaluation.stats import score_with_ci

GPT_PROMPT = "judge_realtalk_gpt_score"
GPT_ROLE = "gpt_score"
ROLES = (GPT_ROLE,)  # roles 08 calls besides the judge's (its endpoint is checked before any row)
JSON_RETRIES = 3  # generate_json: max_retries = 3, so up to four attempts in all
RETRY_STRIDE = 1000  # retry a of judge run i is repeat i + 1000 * a: a cache entry of its own
N_RESAMPLES = 10_000
METRICS = ("f1", "gpt_score", "judge")
METRIC_LABELS = {"f1": "token F1 (official)", "gpt_score": "GPT score (official, 0-1)",
                 "judge": "LLM judge accuracy (LoCoMo judge)"}


def gpt_messages(question: str, gold: str, prediction: str) -> list[dict[str, str]]:
    """The official GPT-score request: one user message."""
    return [{"role": "user", "content": prompts.fill_once(GPT_PROMPT, question=question, answer=gold,
                                                          prediction=prediction)}]


def parse_gpt_score(text: str) -> float:
    """The score of a reply as ``generate_json`` and ``gpt_score`` read it (``json.loads``, a JSON
    object, its ``score``), checked to be a number in [0, 1]. ``json.JSONDecodeError`` for a reply
    that is not JSON (the official code retries it); ``ValueError`` for any other unusable reply."""
    obj = json.loads(text)
    if not isinstance(obj, dict):
        raise ValueError(f"the reply is JSON but not an object ({type(obj).__name__})")
    if "score" not in obj:
        raise ValueError("the reply has no 'score'")
    score = obj["score"]
    if isinstance(score, bool) or not isinstance(score, (int, float)) or not math.isfinite(score):
        raise ValueError(f"score {score!r} is not a number")
    if not 0.0 <= score <= 1.0:
        raise ValueError(f"score {score!r} is not in [0, 1]")
    return float(score)


def gpt_score(client: LLMClient, question: str, gold: str, prediction: str, repeat: int = 0
              ) -> tuple[Optional[float], str, list[dict[str, Any]]]:
    """(score or None, error, the call records) of one question's GPT score."""
    calls: list[dict[str, Any]] = []
    error = ""
    for attempt in range(JSON_RETRIES + 1):
        kw: dict[str, Any] = {"repeat": repeat + RETRY_STRIDE * attempt} if repeat or attempt else {}
        try:
            c = client.complete(GPT_ROLE, gpt_messages(question, gold, prediction), json_mode=True,
                                prompt_id=GPT_PROMPT, **kw)
        except LLMCallError as exc:
            return None, f"{exc.cause}: {exc}", calls
        calls.append({**c.record(GPT_PROMPT), "role": GPT_ROLE, "reply": c.text})
        try:
            return parse_gpt_score(c.text), "", calls
        except json.JSONDecodeError as exc:
            error = f"judge_parse_error: gpt score reply is not JSON after {attempt + 1} attempt(s): {exc.msg}"
        except ValueError as exc:
            return None, f"judge_parse_error: gpt score: {exc}", calls
    return None, error, calls


def judge_realtalk(client: LLMClient, name: str, prompt_id: str, answer: AnswerRow, gold: Gold,
                   repeat: int = 0) -> JudgeRow:
    """The LoCoMo judge's label (the row's ``label``) and the official GPT score (``scores``) of one answer."""
    row = judge_answer(client, name, prompt_id, answer, gold, repeat=repeat)
    calls: list[dict[str, Any]] = []
    if row.cache_key:  # the LoCoMo judge call, as the ledger reads a multi-call row
        calls.append({"prompt_id": prompt_id, "model": row.judge_model, "cache_key": row.cache_key,
                      "cached": row.cached, "usage": dict(row.usage), "latency": row.latency, "role": "judge"})
    scores: dict[str, Any] = {"gpt_score_model": client.settings(GPT_ROLE).model}
    if not answer.answer:  # nothing to score: 0 in the strict means, counted
        scores.update(gpt_score=None, gpt_score_error="no_answer")
    else:
        value, error, gpt_calls = gpt_score(client, answer.question, gold.answer, answer.answer, repeat)
        scores.update(gpt_score=value, gpt_score_error=error, gpt_score_attempts=len(gpt_calls),
                      gpt_score_raw=gpt_calls[-1]["reply"] if gpt_calls else "")
        calls += [{k: v for k, v in c.items() if k != "reply"} for c in gpt_calls]
    row.llm_calls, row.scores = calls, scores
    row.usage = {k: sum(c["usage"].get(k, 0) for c in calls) for k in {k for c in calls for k in c["usage"]}}
    row.latency = round(sum(c["latency"] for c in calls), 4)
    row.cached = bool(calls) and all(c["cached"] for c in calls)
    return row


def row_failed(row: dict[str, Any]) -> bool:
    """A row whose GPT score failed for a reason a rerun can mend (redone like a failed label)."""
    scores = row.get("scores") or {}
    return scores.get("gpt_score") is None and scores.get("gpt_score_error", "") != "no_answer"


class Realtalk:
    """The REALTALK ``Evaluator`` (``common.evaluation.registry``)."""

    roles = ROLES

    def judge(self, client: Any, name: str, prompt_id: str, answer: Any, gold: Gold, repeat: int = 0) -> Any:
        return judge_realtalk(client, name, prompt_id, answer, gold, repeat=repeat)

    def row_failed(self, row: dict[str, Any]) -> bool:
        return row_failed(row)

    def aggregate(self, run: Any, judges: list[str]) -> dict[str, Any]:
        return aggregate(run, judges)

    def write_tables(self, run: Any, metrics: dict[str, Any]) -> list[Path]:
        return write_tables(run, metrics)


# --------------------------------------------------------------------------- aggregation
def by_category(values: dict[str, Optional[float]], golds: list[Gold]) -> dict[str, Any]:
    """``overall`` and per-category summaries (``score_with_ci``: strict mean, sum/n, CIs by chat)."""
    def block(sel: list[Gold]) -> dict[str, Any]:
        return score_with_ci([values.get(g.qid) for g in sel], [g.memory_id for g in sel], n_resamples=N_RESAMPLES)

    return {"overall": block(golds),
            "by_category": {c: block([g for g in golds if DATA.category(g) == c])
                            for c in DATA.categories if any(DATA.category(g) == c for g in golds)}}


def clean_mean(values: list[Optional[float]]) -> Optional[float]:
    kept = [v for v in values if v is not None]
    return round(sum(kept) / len(kept), 4) if kept else None


def f1_scores(golds: list[Gold], answers: dict[str, dict[str, Any]]) -> dict[str, float]:
    """qid -> the official token F1 of its answer (a missing answer: the empty prediction, 0)."""
    return {g.qid: locomo_f1(answers.get(g.qid, {}).get("answer") or "", g.answer, g.category) for g in golds}


def gpt_values(golds: list[Gold], rows: dict[str, dict[str, Any]]) -> dict[str, Optional[float]]:
    return {g.qid: ((rows.get(g.qid) or {}).get("scores") or {}).get("gpt_score") for g in golds}


def aggregate(run: Any, judges: list[str]) -> dict[str, Any]:
    gold = [Gold(**g) for g in read_jsonl(run.path("gold"))]
    answers = {a["qid"]: a for a in read_jsonl(run.path("answers"))}
    rets = {r["qid"]: r for r in read_jsonl(run.path("retrievals"), missing_ok=True)}
    out: dict[str, Any] = {
        "benchmark": "realtalk", "run": run.cfg.run.name, "config": "config.resolved.yaml",
        "category_names": {str(k): v for k, v in CATEGORY_NAMES.items()},
        "questions": {"total": len(gold), "scored": len(gold), "chats": len({g.memory_id for g in gold}),
                      "by_category": {c: sum(DATA.category(g) == c for g in gold) for c in DATA.categories}},
        "judges": {},
    }
    for j in judges:
        rows = {r["qid"]: r for r in read_jsonl(run.judge_path(j))}
        joined = [{"cat": DATA.category(g), "label": rows.get(g.qid, {}).get("label"),
                   "cause": failure_cause(rows.get(g.qid)), "cluster": g.memory_id} for g in gold]
        block = judge_block(joined, "cat")
        any_row = next(iter(rows.values()), {})
        values = gpt_values(gold, rows)
        errors: dict[str, int] = {}
        for g in gold:
            row = rows.get(g.qid)
            err = ("missing_judgment" if row is None else "not_scored" if "gpt_score" not in (row.get("scores") or {})
                   else row["scores"].get("gpt_score_error") or "")
            if err:
                cause = err.split(":")[0]
                errors[cause] = errors.get(cause, 0) + 1
        models = sorted({str((r.get("scores") or {}).get("gpt_score_model")) for r in rows.values()})
        out["judges"][j] = {
            "judge_model": any_row.get("judge_model"), "prompt_id": any_row.get("prompt_id"),
            "overall": block["overall"], "by_category": block["by_group"],
            "failures": block["failures"], "failures_total": block["failures_total"],
            "gpt_score": {**by_category(values, gold), "model": models[0] if len(models) == 1 else models,
                          "clean_overall": clean_mean(list(values.values())), "failures": errors,
                          "failures_total": sum(errors.values()),
                          "calls": sum(1 for r in rows.values() for c in r.get("llm_calls") or []
                                       if c.get("role") == GPT_ROLE)},
        }
    f1 = f1_scores(gold, answers)
    out["f1_official"] = {**by_category(dict(f1), gold),
                          "by_chat": {m: {c: describe([f1[g.qid] for g in gold if g.memory_id == m
                                                       and DATA.category(g) == c])["mean"] for c in DATA.categories}
                                      for m in dict.fromkeys(g.memory_id for g in gold)}}
    # A diagnostic of the harness (the official code computes none): the evidence ids that name a turn.
    out["evidence_recall"] = gold_evidence_recall(gold, {q: r.get("dia_ids", []) for q, r in rets.items()},
                                                  DATA.category)
    out["buffer_tokens"] = describe([float(rets[g.qid]["buffer_tokens"]) for g in gold if g.qid in rets])
    out["answer_failures"] = sum(1 for g in gold if answers.get(g.qid, {}).get("answer") is None)
    out["loss"] = loss_decomposition(run.dir, judges)  # where the judge's points went (common.evaluation.loss)
    out["data_quirks"] = realtalk_errata.counts(gold)
    out["data_quirks_note"] = realtalk_errata.summary(gold)
    return out


# --------------------------------------------------------------------------- tables
def cell(summary: Optional[dict[str, Any]]) -> str:
    """``52.3 [44.1, 60.2] (sum 36.6/70)``: the pooled mean over the questions, its CI clustered by chat, sum/n."""
    return score_cell(summary, "mean")


def metric_rows(metrics: dict[str, Any], judge: str) -> dict[str, dict[str, Any]]:
    """metric -> its ``overall`` and ``by_category`` blocks (the F1 is the same for every judge)."""
    m = metrics["judges"][judge]
    return {"f1": metrics["f1_official"], "gpt_score": m["gpt_score"],
            "judge": {"overall": m["overall"], "by_category": m["by_category"]}}


def judge_cell(summary: Optional[dict[str, Any]]) -> str:
    return format_accuracy(summary or {"accuracy": None})


def write_tables(run: Any, metrics: dict[str, Any]) -> list[Path]:
    """One Markdown+CSV pair per judge: categories as rows, the three metrics as columns (never averaged)."""
    paths: list[Path] = []
    for j, m in metrics["judges"].items():
        blocks = metric_rows(metrics, j)
        rows = []
        for c in [*DATA.categories, "overall"]:
            row = {"Category": c}
            for key in METRICS:
                b = blocks[key]["overall"] if c == "overall" else blocks[key]["by_category"].get(c)
                row[METRIC_LABELS[key]] = judge_cell(b) if key == "judge" else cell(b)
            rows.append(row)
        g = m["gpt_score"]
        failures = ", ".join(f"{k} {v}" for k, v in g["failures"].items()) or "none"
        title = (f"{partial_mark(metrics)}REALTALK scores of {method_label(run.cfg, metrics)}: the official token F1 "
                 f"and GPT score (model {g['model']}), and the LoCoMo LLM judge {m['judge_model']} (prompt "
                 f"{m['prompt_id']}) beside them, never averaged. F1 and GPT score: mean over the questions % "
                 "[95% CI, bootstrap over chats] (sum/questions); failures count 0 (GPT score failures: "
                 f"{failures}; clean mean {_pct(g['clean_overall'])}).\n\n{score_note(metrics, j)}\n\n"
                 f"{metrics['data_quirks_note']}.")
        paths += write_table(rows, run.dir / f"table_{j}.md", title)
    return paths


def _pct(x: Optional[float]) -> str:
    return "n/a" if x is None else f"{100 * x:.1f}"
