"""How far a judge can be trusted: its verdicts on stress sets of known-wrong (and known-right) answers.

Sets (``make audit-judge``, orchestrated by ``common.pipeline.audit``):

* ``ap-v1``: 1,540 deliberately wrong but specific answers (locomo-audit); every accept is a
  false accept. Published: gpt-4o-mini with the EverMemOS judge prompt accepts 10.61 % (mean of
  three judge runs).
* ``ap-v2``: 1,540 deliberately wrong, vague-but-topical answers; published 62.81 %.
* ``gold``: the golden answer itself as the answer; a sound judge accepts ~100 %.
* ``fc-<run>``: real full-context answers with three published labels each; the interesting
  number is agreement with those labels.

Per set and per category: the accept rate with a 95 % bootstrap CI (the false-accept rate on the
ap sets), and, where labels were published, the published accept rate recomputed from them and
this judge's agreement with their majority label (exact agreement, Cohen's kappa with its CI).
"""
from __future__ import annotations

from typing import Any, Optional

from common.core.tabular import format_accuracy
from common.core.tabular import format_percent as _pct
from common.evaluation.labels import RunLabels
from common.evaluation.stats import accuracy_with_ci, judge_agreement

# The audit's printed figures (dial481/locomo-audit README and result files), for the table.
PUBLISHED: dict[str, dict[str, Any]] = {
    "ap-v1": {"accept_rate": 0.1061, "what": "false accepts of specific wrong answers (gpt-4o-mini, mean of 3 runs)"},
    "ap-v2": {"accept_rate": 0.6281, "what": "false accepts of vague wrong answers (gpt-4o-mini, mean of 3 runs)"},
    "fc-gpt-4.1-mini-cot": {"accept_rate": 0.9262, "what": "accuracy, gpt-4o-mini judge, mean of 3 runs"},
    "fc-gpt-4.1-mini-memos": {"accept_rate": 0.8195, "what": "accuracy, gpt-4o-mini judge, mean of 3 runs"},
    "fc-gpt-4o-mini-cot": {"accept_rate": 0.7989, "what": "accuracy, gpt-4o-mini judge, mean of 3 runs"},
}
ATTRIBUTION = "locomo-audit (github.com/dial481/locomo-audit), CC BY-NC 4.0"


def _kind(name: str) -> str:
    if name.startswith("ap-"):
        return "known wrong: every accept is a false accept"
    if name == "gold":
        return "known right: the golden answer itself"
    return "real answers: agreement with the published labels"


def _agreement(mine: dict[str, Optional[int]], theirs: dict[str, Optional[int]]) -> dict[str, Any]:
    a = judge_agreement(mine, theirs)
    return {"n": a.n, "exact": a.agreement, "kappa": a.kappa,
            "kappa_ci": list(a.kappa_ci) if a.kappa_ci[0] is not None else None}


def set_report(name: str, mine: RunLabels, published: Optional[RunLabels]) -> dict[str, Any]:
    """The audit of one set under one judge (``published``: the set's published labels, if any)."""
    out: dict[str, Any] = {"set": name, "kind": _kind(name), "judge_models": list(mine.judge_models),
                           "accept": accuracy_with_ci(r.label for r in mine.records), "by_category": {}}
    cats = sorted({r.category for r in mine.records})
    for c in cats:
        out["by_category"][c] = {"accept": accuracy_with_ci(r.label for r in mine.records if r.category == c)}
    if name in PUBLISHED:
        out["published_figure"] = PUBLISHED[name]
    if published is not None:
        theirs = published.by_qid()
        out["published_labels"] = {"accept_majority": accuracy_with_ci(theirs.values()),
                                   "agreement": _agreement(mine.by_qid(), theirs)}
        for c in cats:
            qids = {r.qid for r in mine.records if r.category == c}
            out["by_category"][c]["agreement"] = _agreement(
                {q: v for q, v in mine.by_qid().items() if q in qids}, {q: v for q, v in theirs.items() if q in qids})
    return out


def markdown(judge: str, reports: list[dict[str, Any]]) -> str:
    """audit.md: one row per set, then per-category rows."""
    lines = [f"# Judge audit: {judge}", "",
             f"Stress sets from {ATTRIBUTION}. Accept rate = share of answers the judge labels CORRECT "
             "(on ap-v1/ap-v2 every accept is a false accept); 95% bootstrap CI; agreement is with the "
             "majority of the published labels (gpt-4o-mini, three runs, the audit's judge prompt).", "",
             "| Set | Kind | Accept % [95% CI] (k/n) | Published figure | Published labels, majority | "
             "Agreement | Cohen's kappa |", "|---|---|---|---|---|---|---|"]
    for r in reports:
        lines.append(_row(r["set"], r["kind"], r["accept"], r.get("published_figure"),
                          (r.get("published_labels") or {}).get("accept_majority"),
                          (r.get("published_labels") or {}).get("agreement")))
    lines += ["", "Per category:", "", "| Set | Category | Accept % [95% CI] (k/n) | Agreement | Cohen's kappa |",
              "|---|---|---|---|---|"]
    for r in reports:
        for c, block in r["by_category"].items():
            ag = block.get("agreement")
            lines.append(f"| {r['set']} | {c} | {_acc(block['accept'])} | {_pct(ag['exact'] if ag else None)} | "
                         f"{_kappa(ag)} |")
    return "\n".join(lines) + "\n"


def _acc(s: dict[str, Any]) -> str:
    ci = s.get("ci") or {}
    band = f" [{100 * ci['low']:.1f}, {100 * ci['high']:.1f}]" if ci.get("low") is not None else ""
    return format_accuracy(s).replace(" (", f"{band} (", 1)


def _kappa(ag: Optional[dict[str, Any]]) -> str:
    if not ag or ag.get("kappa") is None:
        return "n/a"
    ci = ag.get("kappa_ci")
    return f"{ag['kappa']:.3f}" + (f" [{ci[0]:.3f}, {ci[1]:.3f}]" if ci else "")


def _row(name: str, kind: str, accept: dict[str, Any], figure: Optional[dict[str, Any]],
         published: Optional[dict[str, Any]], agreement: Optional[dict[str, Any]]) -> str:
    fig = f"{100 * figure['accept_rate']:.2f} ({figure['what']})" if figure else "none"
    pub = _acc(published) if published else "none"
    exact = agreement["exact"] if agreement else None
    return (f"| {name} | {kind} | {_acc(accept)} | {fig} | {pub} | {_pct(exact)} | "
            f"{_kappa(agreement)} |")
