"""Accuracy on the audited LoCoMo answer key, beside the original (``data.errata``).

The original key stays the headline (as the paper reports it). With ``data.errata`` configured:

* 08_judge judges each answer whose golden answer the audit corrected a second time, against the
  corrected answer (``JudgeRow.corrected``); only those calls are new, the original judgment
  comes from the cache.
* 09_aggregate reports ``audited_key``: accuracy with the corrected labels substituted
  (``corrected``), accuracy with the 99 wrong-key questions excluded (``excluding_wrong_answers``),
  and evidence recall against the corrected evidence ids (``evidence_recall_audited``).

Absent ``data.errata``: ``{"status": "not configured"}``. LongMemEval has no audited key.
"""
from __future__ import annotations

import dataclasses
from functools import lru_cache
from typing import Any, Callable, Mapping, Optional, Sequence

from common.benchmarks.errata import Errata, load_errata
from common.benchmarks.registry import adapter
from common.core.config import resolve_path
from common.core.schema import Gold, JudgeRow
from common.evaluation.repeats import judge_repeated, n_runs, row_labels, runs_block
from common.evaluation.scoring import failure_cause, judge_block

ATTRIBUTION = "locomo-audit (github.com/dial481/locomo-audit), CC BY-NC 4.0"
NOT_CONFIGURED = {"status": "not configured",
                  "how": "set data.errata to the locomo-audit errors.json "
                         "(e.g. ../shared/data/locomo-audit/errors.json)"}


@lru_cache(maxsize=4)
def _load(errata_path: str, data_path: str) -> Errata:
    data = adapter("locomo").load(resolve_path(data_path))
    memories = list(dict.fromkeys(s.memory_id for s in data.sessions))  # file order of locomo10.json
    return load_errata(resolve_path(errata_path), memories, data.questions, data.sessions)


def run_errata(cfg: Any) -> Optional[Errata]:
    """The configured errata checked against the whole benchmark file; None when not configured."""
    # getattr: recounts hand aggregate() a minimal run handle whose cfg has only the run name.
    errata = getattr(getattr(cfg, "data", None), "errata", None)
    if getattr(cfg, "benchmark", "locomo") != "locomo" or not errata:
        return None
    return _load(errata, str(adapter("locomo").data_path(cfg)))


def corrected_evidence(cfg: Any) -> dict[str, list[str]]:
    """qid -> the audit's corrected evidence turn ids ({} when ``data.errata`` is not configured).

    For diagnostics that attribute losses to retrieval: the 156 audited questions' evidence as
    the audit corrected it (57 wrong citations and the 99 wrong answers' evidence).
    """
    errata = run_errata(cfg)
    return errata.corrected_evidence() if errata else {}


def judge_row(judge_with: Callable[[Gold, int], JudgeRow], gold: Gold, runs: int,
              corrected_answer: Optional[str]) -> JudgeRow:
    """The judge row of one answer (``runs`` judge runs); plus, when the audit corrected its golden
    answer, the same judging against the corrected answer in ``row.corrected``."""
    row = judge_repeated(lambda i: judge_with(gold, i), runs)
    if corrected_answer is not None:
        fixed = dataclasses.replace(gold, answer=corrected_answer)
        again = judge_repeated(lambda i: judge_with(fixed, i), runs)
        row.corrected = {"answer": corrected_answer, "label": again.label, "labels": again.labels,
                         "error": again.error}
    return row


def corrected_failed(row: Mapping[str, Any]) -> bool:
    """A row whose corrected-key judgment failed (redone on rerun like a failed label)."""
    corrected = row.get("corrected") or {}
    return bool(corrected) and corrected.get("label") is None


def _block(joined: Sequence[Mapping[str, Any]], runs: int) -> dict[str, Any]:
    b = judge_block(joined, "cat")
    out = {"overall": b["overall"], "by_category": b["by_group"], "failures": b["failures"],
           "failures_total": b["failures_total"]}
    if runs > 1:  # every judge run on this key, not only the majority vote (as judges.<j>.runs)
        rb = runs_block(joined, "cat", runs)
        out["runs"] = {"n_runs": runs, "std_kind": rb["std_kind"], "overall": rb["overall"],
                       "by_category": rb["by_group"], "label": "the row label is the majority vote of the runs"}
    return out


def audited_key(errata: Optional[Errata], scored: Sequence[Gold], rows: Mapping[str, Mapping[str, Any]],
                category: Callable[[Gold], str]) -> dict[str, Any]:
    """The ``audited_key`` block of one judge in metrics.json."""
    if errata is None:
        return dict(NOT_CONFIGURED)
    wrong = errata.corrected_answers()
    runs = n_runs(list(rows.values()))
    in_scope = [g for g in scored if g.qid in wrong]
    out: dict[str, Any] = {
        "status": "configured", "errata": errata.path, "sha256": errata.sha256, "attribution": ATTRIBUTION,
        "wrong_golden_answers": len(in_scope),
        "wrong_citations_only": sum(1 for g in scored if g.qid in errata.items and g.qid not in wrong),
        "excluding_wrong_answers": _block([{"cat": category(g), "label": (rows.get(g.qid) or {}).get("label"),
                                            "cause": failure_cause(rows.get(g.qid)), "cluster": g.memory_id,
                                            "labels": row_labels(rows.get(g.qid), runs)}
                                           for g in scored if g.qid not in wrong], runs),
    }
    judged = [g for g in in_scope if (rows.get(g.qid) or {}).get("corrected")]
    if len(judged) < len(in_scope):
        out["corrected"] = {"status": f"incomplete: {len(judged)} of {len(in_scope)} corrected answers judged; "
                                      "run 08_judge again (only those calls are new)"}
        return out
    joined = []
    changed = 0
    for g in scored:
        row = rows.get(g.qid)
        use = row["corrected"] if row and g.qid in wrong else row
        if row and use and g.qid in wrong and row.get("label") != use.get("label"):
            changed += 1
        # The corrected judgment keeps every run's label (``judge_row``), so the runs block below
        # reports them all on the corrected key, not only their majority.
        joined.append({"cat": category(g), "label": (use or {}).get("label"), "cause": failure_cause(use),
                       "cluster": g.memory_id, "labels": row_labels(use, runs)})
    out["corrected"] = _block(joined, runs)
    out["labels_changed_by_correction"] = changed
    return out
