"""The accuracy table shared by Tables 1 and 2: paper rows, the main run under each judge, the baselines.

Every measured cell is a ``metrics.json`` accuracy recounted from the gold and judge files
(``common.report.tables.runs.measured``); a baseline or judge that has not been run is a row
marked "not run" with the command that makes it, so one missing run never hides the others.

Under each measured row, the numbers that say how far to trust it (the "trust rows"):

* Judge runs (``judge.runs`` > 1, or an imported run with several published labels per answer):
  mean +- std of the per-run accuracies, the majority vote (the row's own label) and the share of
  questions whose label flips between runs, per category and overall.
* The audited LoCoMo answer key (``data.errata``): the accuracy with the corrected answers
  re-judged (and, with several judge runs, every run on that key) and without the wrong answers.
* Category 5 (``score.adversarial``): its own column, never inside Overall.
* The power note: per category the smallest difference the row's questions can separate.

Each block is read from ``metrics.json`` and recounted from the run's per-question files before it
is printed (a mismatch is ``InconsistentRun``): the runs from ``08_judge_<judge>.jsonl``'s ``labels``,
the audited key from its ``corrected`` entries, category 5 from ``07_answers.jsonl`` with the
stated abstention rule. A run without a block shows nothing for it.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Optional

from common.core.config import ConfigError
from common.core.tabular import format_percent as _pct
from common.evaluation.adversarial import abstains
from common.evaluation.metrics import accuracy
from common.evaluation.repeats import n_runs, row_labels, runs_block
from common.report.tables.published import (
    COMPARABLE_NOTE,
    DASH,
    NOT_REPORTED,
    NOT_RUN,
    Identity,
    PublishedRow,
    source_notes,
)
from common.report.tables.runs import (
    GROUP_KEY,
    MAKE_BASELINES,
    MAKE_JUDGE2,
    MAKE_MAIN,
    Context,
    InconsistentRun,
    MissingRun,
    RunData,
    differing_question_sets,
    measured,
    open_run,
    same_number,
)
from common.report.tables.table import Table, fmt_acc

ADVERSARIAL_HEADER = "Cat. 5 (adversarial)"


def accuracy_table(ctx: Context, name: str, benchmark: str, groups: list[str], headers: list[str],
                   title: str, extra: Optional[Callable[[RunData, str], tuple[str, dict]]] = None,
                   extra_header: str = "") -> Table:
    """Published rows, then the main run under each judge, then each baseline run.

    ``groups`` are the category/type names, ``headers`` their column titles plus the overall one;
    published values are read by ``tables.<name>.columns`` of published.yaml, in the same order.
    """
    pub_key = name
    pub_cols = list(ctx.published.tables[pub_key].get("columns") or [])
    if pub_cols[:len(groups)] != groups or len(pub_cols) != len(headers):
        raise ConfigError(f"{ctx.published.path}: tables.{pub_key}.columns: expected {groups} + one overall column")
    main = ctx.main_run(benchmark)
    entries = _entries(ctx, benchmark, main)
    # Category 5 gets its own column when any measured run scored it (never inside Overall).
    adversarial = any(run is not None and (run.metrics.get("adversarial") or {}).get("status") == "scored"
                      for _, run, _, _ in entries)
    value_cols = headers + ([extra_header] if extra else []) + ([ADVERSARIAL_HEADER] if adversarial else [])
    table = Table(name, title, ["Ref", "Method", "Coverage", "Question set", *value_cols, "Answer model", "Judge",
                                "Protocol", "Comparable with"])
    pubs: list[tuple[str, PublishedRow]] = []
    for i, prow in enumerate(ctx.published.rows(pub_key), 1):
        ref = f"P{i}"
        pubs.append((ref, prow))
        cells = {h: prow.values.get(g, NOT_REPORTED) for g, h in zip(pub_cols, headers)}
        table.rows.append({"Ref": ref, "Method": prow.method, "Coverage": DASH, "Question set": DASH, **cells,
                           **({extra_header: DASH} if extra else {}),
                           **({ADVERSARIAL_HEADER: NOT_REPORTED} if adversarial else {}),
                           "Answer model": prow.identity.answer_model, "Judge": prow.identity.judge_model,
                           "Protocol": prow.identity.protocol})
        table.add_published(ref, prow)
    meas: list[tuple[str, Identity]] = []
    trust_notes: list[str] = []  # judge runs, audited key and power of the measured rows
    not_run: list[str] = []  # notes on measured rows: not run, partial coverage
    shown: list[tuple[str, RunData]] = []  # measured rows, for the question-set check
    for i, (method, run, judge, hint) in enumerate(entries, 1):
        ref = f"M{i}"
        if run is None:
            table.rows.append({"Ref": ref, "Method": method, "Coverage": DASH, "Question set": DASH,
                               **{c: NOT_RUN for c in value_cols},
                               "Answer model": DASH, "Judge": judge or DASH, "Protocol": DASH, "Comparable with": DASH})
            not_run.append(f"{ref}: not run (`{hint}`)")
            continue
        # PARTIAL k / n when the run covers fewer questions than the benchmark (common.evaluation.coverage).
        row = {"Ref": ref, "Method": method, "Coverage": run.coverage.mark, "Question set": run.question_set_text}
        shown.append((ref, run))
        for g, h in zip(groups + [None], headers):
            m = measured(run, judge, g, judge_hint=hint)
            row[h] = fmt_acc(m.summary)
            table.add_cell(ref, h, row[h], m.source)
        if extra:
            row[extra_header], src = extra(run, judge)
            table.add_cell(ref, extra_header, row[extra_header], src)
        if adversarial:
            row[ADVERSARIAL_HEADER], adv_src = adversarial_cell(run, judge)
            if adv_src:
                table.add_cell(ref, ADVERSARIAL_HEADER, row[ADVERSARIAL_HEADER], adv_src)
        ident = run.identity(judge, ctx.published)
        row.update({"Answer model": ident.answer_model, "Judge": ident.judge_model, "Protocol": ident.protocol})
        table.rows.append(row)
        meas.append((ref, ident))
        trust = trust_rows(run, judge, ref, method, groups, headers)
        fill = {c: DASH for c in ["Coverage", "Question set", *value_cols]} | {"Answer model": DASH,
                                                                               "Judge": ident.judge_model,
                                                               "Protocol": DASH, "Comparable with": DASH}
        table.rows += [fill | r for r in trust.rows]
        for cell in trust.cells:
            table.add_cell(*cell)
        trust_notes += trust.notes
        if run.coverage_warning:
            not_run.append(f"{ref}: {run.coverage_warning}")
        if run.dataset_warning:
            not_run.append(f"{ref}: {run.dataset_warning}")
    table.link(pubs, meas)
    table.warnings += ([ctx.unnamed[benchmark]] if benchmark in ctx.unnamed else []) + differing_question_sets(shown)
    table.notes += [
        "P rows: transcribed from the paper (configs/published.yaml), values as printed. M rows: measured by "
        "this harness; each cell is accuracy % [95% CI when metrics.json has one; after 'cl' the cluster "
        "bootstrap CI, resampling conversations (LoCoMo) or haystacks (LongMemEval)] (k/n), recounted from "
        "01_gold.jsonl + 08_judge_<judge>.jsonl; failed judgments count as wrong. With few clusters (LoCoMo has "
        "10 conversations) the clustered interval is itself imprecise and tends to be too narrow; the power notes "
        "give the design effect beside it.",
        "Coverage: the questions a measured row's run labels of the benchmark's full set (k / n); PARTIAL when "
        "fewer, and such a row is not the paper's number on the full benchmark, nor comparable with it. Question "
        "set: the id of the run's scored questions (a hash of their ids) and their number; rows over different "
        "sets are not comparable with each other (a warning above the table says so).",
        *([f"Main run: {ctx.chosen[benchmark]}."] if benchmark in ctx.chosen else []),
        COMPARABLE_NOTE, *source_notes(pubs, ctx.published), *ctx.published.tables[pub_key].get("notes", []), *not_run,
        *trust_notes]
    if adversarial:
        table.notes.append(f"{ADVERSARIAL_HEADER}: the questions without an answer, answered like all others and "
                           "scored without an LLM judge by a stated abstention rule (score.adversarial); not part of "
                           "Overall. Recounted from 01_gold.jsonl + 07_answers.jsonl.")
    return table


def _entries(ctx: Context, benchmark: str, main: RunData) -> list[tuple[str, Optional[RunData], str, str]]:
    """(method, run or None when not run, judge, the command that makes it) of every measured row."""
    entries: list[tuple[str, Optional[RunData], str, str]] = []  # (method, run, judge, hint)
    for role in ("primary", "secondary"):
        judge = ctx.exp.judges[role]
        if role == "primary" or judge in main.judge_names():
            entries.append((f"EnSIMem (harness, run {main.name})", main, judge,
                            f"{MAKE_MAIN[benchmark]} RUN={main.name}"))
        else:
            entries.append((f"EnSIMem (harness, run {main.name}), judge {judge}", None, judge,
                            f"{MAKE_JUDGE2[benchmark]} RUN={main.name}"))
    for b in ctx.exp.baselines:
        try:
            baseline = open_run(ctx.results, benchmark, ctx.exp.baseline_run(b.name), MAKE_BASELINES[benchmark])
        except MissingRun:
            entries.append((b.label, None, "", MAKE_BASELINES[benchmark]))
            continue
        judges = [ctx.exp.judges["primary"]] + [j for j in baseline.judge_names() if j != ctx.exp.judges["primary"]]
        entries += [(b.label, baseline, j, MAKE_BASELINES[benchmark]) for j in judges]
    return entries


# ----------------------------------------------------------------------------- trust rows
@dataclass
class TrustBlock:
    """Rows to print under a measured row, their cells' sources, and notes."""

    rows: list[dict[str, str]] = field(default_factory=list)
    cells: list[tuple[str, str, str, dict[str, Any]]] = field(default_factory=list)  # (ref, column, text, source)
    notes: list[str] = field(default_factory=list)


def _source(run: RunData, metric: str, judge: str, recounted_from: list[str], **extra: Any) -> dict[str, Any]:
    return {"run_dir": str(run.dir), "metric": metric, "files": run.files("metrics", "gold", judges=[judge]),
            "recounted_from": recounted_from, "fingerprint": run.fingerprint_for(judge), **extra}


def _check(run: RunData, metric: str, stored: Any, recount: Any, what: str) -> None:
    same = same_number(stored, recount) if isinstance(recount, float) or recount is None else stored == recount
    if not same:
        raise InconsistentRun(f"{run.metrics_path}: {metric}: {stored!r} but {what} give {recount!r}; "
                              "rerun 09_aggregate (or the run is corrupt)")


def _group(block: dict[str, Any], key: str, group: Optional[str]) -> Optional[dict[str, Any]]:
    return block.get("overall") if group is None else (block.get(key) or {}).get(group)


def _runs_rows(run: RunData, judge: str, ref: str, method: str, block: dict[str, Any], key: str,
               groups: list[str], headers: list[str], tag: str, joined: list[dict[str, Any]],
               metric: str, files: list[str]) -> TrustBlock:
    """Mean +- std, majority and flips of one runs block, recounted from ``joined`` (labels per run)."""
    out = TrustBlock()
    n = block["n_runs"]
    recount = runs_block(joined, "cat", n)
    kinds = [("runs", f"{method}{tag}: {n} judge runs, mean ± std (population)"),
             ("majority", f"{method}{tag}: majority vote of the {n} judge runs (the row label)"),
             ("flips", f"{method}{tag}: questions whose label flips between the {n} runs")]
    for kind, label in kinds:
        row_ref = f"{ref}{tag.replace(' ', '-')}-{kind}"
        row = {"Ref": row_ref, "Method": label}
        for g, h in zip(groups + [None], headers):
            s = _group(block, key, g)
            r = recount["overall"] if g is None else recount["by_group"].get(g)
            if s is None or r is None:
                row[h] = DASH
                continue
            path = f"{metric}.{'overall' if g is None else f'{key}.{g}'}"
            if kind == "runs":
                _check(run, f"{path}.mean", s["mean"], r["mean"], " + ".join(files))
                row[h] = DASH if s["mean"] is None else f"{_pct(s['mean'])} ± {_pct(s['std'])}"
                extra = {"mean": s["mean"], "std": s["std"], "per_run": s["per_run"]}
            elif kind == "majority":
                _check(run, f"{path}.majority.k", s["majority"]["k"], r["majority"]["k"], " + ".join(files))
                row[h] = f"{_pct(s['majority']['accuracy'])} ({s['majority']['k']}/{s['majority']['n']})"
                extra = dict(s["majority"])
            else:
                _check(run, f"{path}.flips.k", s["flips"]["k"], r["flips"]["k"], " + ".join(files))
                row[h] = f"{_pct(s['flips']['fraction'])}% ({s['flips']['k']}/{s['flips']['n']})"
                extra = dict(s["flips"])
            out.cells.append((row_ref, h, row[h], _source(run, f"{path}", judge, files, **extra)))
        out.rows.append(row)
    return out


def _audited(run: RunData, judge: str, ref: str, method: str, groups: list[str], headers: list[str],
             joined_rows: dict[str, dict[str, Any]], categories: dict[str, str]) -> TrustBlock:
    out = TrustBlock()
    jm = run.metrics["judges"][judge]
    a = jm.get("audited_key") or {}
    if a.get("status") != "configured":
        return out
    files = [run.path("gold").name, run.judge_path(judge).name]
    wrong = a["wrong_golden_answers"]
    out.notes.append(f"{ref}: audited answer key ({a.get('attribution', 'locomo-audit')}; errata sha256 "
                     f"{str(a.get('sha256', ''))[:12]}): {wrong} scored questions have a wrong golden answer, "
                     f"{a.get('wrong_citations_only')} more only cite wrong evidence; the {ref} row is the original "
                     "key (the headline), the rows below it the audited ones.")
    corrected = a.get("corrected") or {}
    # Recount from the judge file: a question the audit corrected carries a ``corrected`` judgment.
    fixed = {q for q, r in joined_rows.items() if r.get("corrected")}
    variants = [("excluding_wrong_answers", f" [original key without its {wrong} wrong answers]", "excl")]
    if "overall" in corrected:
        variants.insert(0, ("corrected", f" [audited key: {wrong} corrected answers re-judged]", "audited"))
    else:
        out.notes.append(f"{ref}: audited key, corrected answers: {corrected.get('status', 'not available')}.")
    for name, tag, short in variants:
        block = a.get(name) or {}
        if "overall" not in block:
            continue
        if name == "corrected":
            labels = {q: (joined_rows.get(q) or {}).get("corrected") or joined_rows.get(q) for q in categories}
        else:
            labels = {q: joined_rows.get(q) for q in categories if q not in fixed}
        row_ref = f"{ref}-{short}"
        row = {"Ref": row_ref, "Method": f"{method}{tag}"}
        for g, h in zip(groups + [None], headers):
            s = _group(block, "by_category", g)
            if s is None:
                row[h] = DASH
                continue
            metric = f"judges.{judge}.audited_key.{name}.{'overall' if g is None else f'by_category.{g}'}"
            if "overall" in corrected:  # the corrected judgments name the wrong answers only when all are judged
                expect = accuracy([(r or {}).get("label") for q, r in labels.items()
                                   if g is None or categories[q] == g])
                _check(run, f"{metric}.k", s["k"], expect["k"], " + ".join(files))
                _check(run, f"{metric}.n", s["n"], expect["n"], " + ".join(files))
            row[h] = fmt_acc(s)
            out.cells.append((row_ref, h, row[h], _source(run, metric, judge, files, k=s["k"], n=s["n"],
                                                          accuracy=s["accuracy"], ci=s.get("ci"),
                                                          ci_cluster=s.get("ci_cluster"))))
        out.rows.append(row)
        if "runs" in block:  # every judge run on this key, not only the majority vote
            runs = block["runs"]["n_runs"]
            joined = [{"cat": categories[q], "labels": row_labels(r, runs)} for q, r in labels.items()]
            sub = _runs_rows(run, judge, ref, method, block["runs"], "by_category", groups, headers, f" {short}",
                             joined, f"judges.{judge}.audited_key.{name}.runs", files)
            out.rows += sub.rows[:1] + sub.rows[2:]  # mean +- std and flips; the majority is the row above
            out.cells += [c for c in sub.cells if not c[0].endswith("-majority")]
    return out


def trust_rows(run: RunData, judge: str, ref: str, method: str, groups: list[str], headers: list[str]) -> TrustBlock:
    """The judge-runs and audited-key rows (and the power note) of measured row ``ref``."""
    out = TrustBlock()
    jm = run.metrics["judges"][judge]
    key = GROUP_KEY[run.benchmark]
    categories = {r.qid: r.category for r in run.labels(judge).records}
    joined_rows = {r["qid"]: r for r in run.judge_rows(judge) if r.get("qid") in categories}
    files = [run.path("gold").name, run.judge_path(judge).name]
    if "runs" in jm:
        n = jm["runs"]["n_runs"]
        stored_n = n_runs(list(joined_rows.values()))
        _check(run, f"judges.{judge}.runs.n_runs", n, stored_n, " + ".join(files))
        joined = [{"cat": c, "labels": row_labels(joined_rows.get(q), n)} for q, c in categories.items()]
        block = _runs_rows(run, judge, ref, method, jm["runs"], key, groups, headers, "", joined,
                           f"judges.{judge}.runs", files)
        out.rows += block.rows
        out.cells += block.cells
    audited = _audited(run, judge, ref, method, groups, headers, joined_rows, categories)
    out.rows += audited.rows
    out.cells += audited.cells
    out.notes += audited.notes
    power = power_line(ref, [(h, _group(jm, key, g)) for g, h in zip(groups + [None], headers)])
    if power:
        out.notes.append(power)
    return out


def power_line(ref: str, summaries: list[tuple[str, Optional[dict[str, Any]]]]) -> str:
    """``M1 power: ...`` the smallest difference each column can separate, or '' without power notes."""
    parts = []
    for header, s in summaries:
        p = (s or {}).get("power")
        if not p:
            continue
        mdd = "none separable" if p.get("mdd") is None else f"{100 * p['mdd']:.1f} pp"
        if p.get("icc") is None and p["n_clusters"] < 2 <= p["n"]:
            deff = "design effect not estimable from one cluster, 1 assumed"
        else:
            deff = f"design effect {p['design_effect']:.2f}"
        parts.append(f"{header} {mdd} (n {p['n']}, {p['n_clusters']} clusters, {deff})")
    if not parts:
        return ""
    return (f"{ref} power: the smallest accuracy difference these questions can separate (two-sided alpha 0.05, "
            "power 0.8, two samples of n / design effect questions, Cohen's h from the observed rate toward 50%): "
            + "; ".join(parts) + ".")


def adversarial_cell(run: RunData, judge: str) -> tuple[str, Optional[dict[str, Any]]]:
    """The category-5 cell of a measured row: the scored accuracy, recounted from the answers, or why not."""
    adv = run.metrics.get("adversarial") or {}
    if adv.get("status") != "scored":
        return (adv.get("status") or "not scored"), None
    gold = [g for g in run.rows("gold") if g.get("category") == 5]
    answers = {a["qid"]: a for a in run.rows("answers")}
    expect = accuracy([abstains((answers.get(g["qid"]) or {}).get("answer")) for g in gold])
    for f in ("k", "n", "n_failed"):
        _check(run, f"adversarial.{f}", adv.get(f), expect[f], f"{run.path('gold').name} + {run.path('answers').name}")
    text = fmt_acc(adv)
    source = {"run_dir": str(run.dir), "metric": "adversarial", "files": run.files("metrics", "gold", "answers"),
              "recounted_from": [run.path("gold").name, run.path("answers").name], "rule": adv.get("rule"),
              "k": adv["k"], "n": adv["n"], "accuracy": adv["accuracy"], "n_failed": adv["n_failed"],
              "ci": adv.get("ci"), "ci_cluster": adv.get("ci_cluster"), "fingerprint": run.fingerprint_for(judge)}
    return text, source
