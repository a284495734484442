"""``make claims``: every published claim and every run re-scored on one protocol, one table.

    python -m common.report.claims [--results results] [--out results/claims] [--judge NAME]
                                   [--config CONFIG] [--set KEY=VALUE ...] [--no-rejudge]

For every run directory under ``results/locomo/`` and ``results/longmemeval/`` (imported with
``common.import_run`` or made by this harness), one row:

* the published claim (``configs/claims.yaml``: an imported run names its claim in
  ``source.json``, a harness run is named by a claim's ``runs``);
* the accuracy recomputed from the run's own labels on its own denominator (an imported file's
  own rule: all its rows, mapped or not, minus the rows its code leaves out), with its
  difference from the claim at the claim's printed precision;
* on the standard denominator (LoCoMo categories 1-4: 1,540; LongMemEval: 500): questions the
  run lacks count as wrong and are counted;
* on the audited key (locomo-audit ``errors.json``): the 99 questions with a corrected golden
  answer excluded, and re-judged against the corrected answers by our judge when it runs;
* with our judge (``--judge``, default ``harness``: the configured judge model, the mem0 prompt
  on LoCoMo or the official checker on LongMemEval, temperature 0), which needs an endpoint and
  is skipped with a one-line note otherwise; it is an ordinary 08_judge stage on the run
  directory (cached, resumable, counted in the ledger);
* our judge's agreement with the run's own labels (Cohen's kappa, flips both ways);
* answer and gold length in o200k tokens (mean, p95) and accuracy by answer-length quartile
  (a lenient judge passes long answers).

Writes ``claims.json`` (every cell with its source), ``claims.md`` and ``claims.csv``.
"""
from __future__ import annotations

import argparse
import contextlib
import dataclasses
import io
import json
import os
import sys
from pathlib import Path
from typing import Any, Optional, Sequence

from common.core import artifacts, progress
from common.core.config import ConfigError, load_config, resolve_path
from common.core.io import ArtifactError, read_jsonl, write_json
from common.core.tabular import describe, format_percent, write_table
from common.core.tokens import count_tokens
from common.core.yamlio import load_yaml
from common.evaluation import audited
from common.evaluation.claims import Claim, load_claims
from common.evaluation.coverage import EXPECTED_SCORED, coverage, denominator, question_set_id, question_sets_differ
from common.evaluation.labels import MISSING, RunLabels, clustered_accuracy, load_labels, run_benchmark, run_judges
from common.evaluation.stats import judge_agreement
from common.pipeline.audit import audit_dir
from common.pipeline.engine import EndpointNotConfigured, Run, StageFailed, run_stage
from common.pipeline.importer import SOURCE_FILE

BENCHMARKS = ("locomo", "longmemeval")
DEFAULT_JUDGE = "harness"
JUDGE_PROMPT = {"locomo": "judge_locomo_mem0", "longmemeval": "official"}
DASH = "—"


# ----------------------------------------------------------------------------- small helpers
def _pct(x: Optional[float], digits: int = 2) -> str:
    return format_percent(x, digits, DASH)


def _cell(k: int, n: int, source: str, **extra: Any) -> dict[str, Any]:
    return {"k": k, "n": n, "accuracy": k / n if n else None, "source": source, **extra}


def _text(c: Optional[dict[str, Any]]) -> str:
    if not c:
        return DASH
    if c.get("skipped"):
        return "skipped"
    return f"{_pct(c.get('accuracy'))} ({c['k']}/{c['n']})"


def _decimals(value: str) -> int:
    return len(value.split(".")[1]) if "." in value else 0


def versus_claim(accuracy: Optional[float], claim: Optional[Claim]) -> str:
    """``= claim`` when the recomputed number, at the claim's printed precision, is the claim."""
    if claim is None or accuracy is None or claim.percent is None:
        return "no claim" if claim is None else DASH
    d = _decimals(claim.value)
    diff = round(100 * accuracy, d) - claim.percent
    return "= claim" if abs(diff) < 0.5 * 10 ** -d else f"{diff:+.{max(d, 1)}f} pp vs claim"


def _strict(v: Optional[int]) -> int:
    return 1 if v == 1 else 0


# ----------------------------------------------------------------------------- one run
def find_runs(results: Path) -> list[Path]:
    """Run directories (with gold and at least one judge file) under results/<benchmark>/."""
    out = []
    for b in BENCHMARKS:
        root = results / b
        if not root.is_dir():
            continue
        for d in sorted(p for p in root.iterdir() if p.is_dir()):
            if artifacts.path(d, "gold").exists() and run_judges(d):
                out.append(d)
    return out


def _resolved(run_dir: Path) -> dict[str, Any]:
    path = run_dir / "config.resolved.yaml"
    data = load_yaml(path.read_text(encoding="utf-8")) if path.exists() else {}
    return data if isinstance(data, dict) else {}


def _own(run_dir: Path, judge: str, source: Optional[dict[str, Any]], labels: RunLabels) -> dict[str, Any]:
    """Accuracy from the run's own labels on its own denominator."""
    if source is None:  # a harness run: its scored questions, failures wrong (as metrics.json)
        k = sum(_strict(r.label) for r in labels.records)
        return _cell(k, len(labels.records), f"{artifacts.judge_path(run_dir, judge).name}: label == 1 over the "
                                             "run's scored questions (failures count wrong)")
    rows = read_jsonl(artifacts.judge_path(run_dir, judge))
    excluded = sum(1 for r in rows if "is_invalid" in (r.get("error") or ""))
    unmapped = source.get("unmapped_labels") or {}
    n = len(rows) - excluded + sum(1 for v in unmapped.values() if not v["excluded"])
    n_runs = max((len(r.get("labels") or []) for r in rows), default=0)
    where = (f"{artifacts.judge_path(run_dir, judge).name} + {SOURCE_FILE} unmapped_labels; rule: "
             f"{(source.get('own_accuracy') or {}).get('rule', 'not recorded')}")
    if n_runs > 1:  # the file's number is the mean over its judge runs
        per_run = [sum(1 for r in rows if (r.get("labels") or [None] * n_runs)[i] == 1) for i in range(n_runs)]
        acc = sum(k / n for k in per_run) / n_runs if n else None
        return {"k": round(sum(per_run) / n_runs, 2), "n": n, "accuracy": acc, "per_run": per_run, "source": where}
    k = sum(1 for r in rows if r.get("label") == 1) + sum(1 for v in unmapped.values() if v["label"] == 1)
    return _cell(k, n, where)


def _standard(benchmark: str, labels: RunLabels, judge_file: str, exclude: frozenset[str] = frozenset(),
              replace: Optional[dict[str, Optional[int]]] = None) -> dict[str, Any]:
    """k over the full benchmark (minus ``exclude``): a question without a label counts wrong.

    ``replace``: labels to use instead of the file's (the corrected key's re-judged labels).
    """
    n = EXPECTED_SCORED[benchmark] - len(exclude)
    kept = [r for r in labels.records if r.qid not in exclude]
    values = {r.qid: (replace or {}).get(r.qid, r.label) for r in kept if r.cause != MISSING}
    k = sum(_strict(v) for v in values.values())
    missing = n - len(values)
    failed = sum(1 for v in values.values() if v is None)
    return _cell(k, n, f"{judge_file}: label == 1 over all {n} scored questions; {missing} missing and "
                       f"{failed} failed count wrong", missing=missing, failed=failed)


def _intervals(labels: RunLabels, judge_file: str) -> dict[str, Any]:
    """95% CIs of the run's labelled questions: resampling questions, and resampling whole memories
    (questions of one conversation are not independent), with the smallest difference they separate."""
    present = dataclasses.replace(labels, records=tuple(r for r in labels.records if r.cause != MISSING))
    if not present.records:
        return {"ci": None, "ci_cluster": None, "source": f"{judge_file}: no labelled question"}
    acc = clustered_accuracy(present)
    cluster = acc.get("ci_cluster") or {}
    return {"accuracy": acc["accuracy"], "n": acc["n"], "ci": acc["ci"], "ci_cluster": cluster,
            "mdd": (acc.get("power") or {}).get("mdd"),
            "source": f"{judge_file}: the labelled questions (failures wrong); question bootstrap and "
                      "cluster bootstrap over memories (common.evaluation.stats.accuracy_with_ci)"}


def _interval_text(c: dict[str, Any]) -> str:
    ci, cl = c.get("ci"), c.get("ci_cluster") or {}

    def span(x: Any) -> str:
        if not x or x.get("low") is None:
            return DASH
        return f"{100 * x['low']:.1f}-{100 * x['high']:.1f}"
    return f"q {span(ci)}; cl {span(cl)}" if ci else DASH


def _lengths(run_dir: Path, labels: RunLabels) -> dict[str, Any]:
    """Answer and gold length (o200k tokens) and accuracy by answer-length quartile."""
    import pandas as pd

    answers = {r["qid"]: r.get("answer") for r in read_jsonl(artifacts.path(run_dir, "answers"))}
    gold = {r["qid"]: r.get("answer") for r in read_jsonl(artifacts.path(run_dir, "gold"))}
    scored = [r for r in labels.records if answers.get(r.qid)]
    if not scored:
        return {"answer_tokens": describe([]), "gold_tokens": describe([]), "quartiles": []}
    a_tok = [count_tokens(str(answers[r.qid])) for r in scored]
    g_tok = [count_tokens(str(gold.get(r.qid) or "")) for r in scored]
    frame = pd.DataFrame({"tokens": a_tok, "label": [_strict(r.label) for r in scored]})
    # Equal-size groups by rank (ties broken by question order), so each quartile has n/4 answers.
    frame["q"] = pd.qcut(frame["tokens"].rank(method="first"), 4, labels=False) if len(frame) >= 4 else 0
    quartiles = []
    for q, part in frame.groupby("q"):
        quartiles.append({"quartile": int(q) + 1, "tokens": [int(part["tokens"].min()), int(part["tokens"].max())],
                          **_cell(int(part["label"].sum()), len(part), "")})
    return {"answer_tokens": describe(a_tok), "gold_tokens": describe(g_tok), "quartiles": quartiles,
            "source": f"{artifacts.path(run_dir, 'answers').name} and {artifacts.path(run_dir, 'gold').name}, "
                      "o200k tokens; quartiles of answered scored questions by answer tokens, the run's own labels"}


def _agreement(ours: RunLabels, theirs: RunLabels, judge: str, source_judge: str) -> dict[str, Any]:
    a = judge_agreement(theirs.by_qid(), ours.by_qid(), failures="clean")
    m = a.mcnemar
    return {"n": a.n, "exact": a.agreement, "kappa": a.kappa,
            "kappa_ci": list(a.kappa_ci) if a.kappa_ci[0] is not None else None,
            "source_right_ours_wrong": m.only_a_right, "source_wrong_ours_right": m.only_b_right,
            "source": f"08_judge_{source_judge}.jsonl vs 08_judge_{judge}.jsonl on questions both labelled "
                      "(Cohen's kappa, statsmodels)"}


# ----------------------------------------------------------------------------- re-judging
class Rejudge:
    """Our judge over a run directory (08_judge with a new judge name; data.errata when available)."""

    def __init__(self, name: str, config: Optional[str], overrides: Sequence[str], errata: Optional[Path],
                 enabled: bool) -> None:
        self.name, self.config, self.overrides, self.errata = name, config, list(overrides), errata
        self.note = "" if enabled else "our judge: skipped (--no-rejudge)"

    def _cfg(self, run_dir: Path, benchmark: str, with_errata: bool) -> Any:
        base = load_config([self.config or f"configs/{benchmark}.yaml"], self.overrides)
        judge = base.models.judge
        sets = [*self.overrides, f"run.results_dir={run_dir.parent.parent}", f"run.name={run_dir.name}",
                f"judge.name={self.name}", f"judge.prompt={JUDGE_PROMPT[benchmark]}", "judge.runs=1",
                f"models.judge.model={base.role('judge').model}", "models.judge.temperature=0.0"]
        if judge.base_url:
            sets.append(f"models.judge.base_url={json.dumps(judge.base_url)}")
        if benchmark == "locomo" and self.errata is not None and with_errata:
            sets.append(f"data.errata={self.errata}")
        return load_config([str(run_dir / "config.resolved.yaml")], sets)

    def run(self, run_dir: Path, benchmark: str, with_errata: bool) -> Optional[str]:
        """Judge the run; returns a one-line note when it could not (then every later run skips too)."""
        if self.note:
            return self.note
        try:
            cfg = self._cfg(run_dir, benchmark, with_errata)
            run = Run(cfg, progress=progress.interactive())
            run_stage(run, "judge")
            with contextlib.redirect_stdout(io.StringIO()):  # its tables would bury the claims table
                run_stage(run, "aggregate")
        except EndpointNotConfigured:
            self.note = ("our judge: skipped (no judge endpoint: export OPENAI_API_KEY, or OPENAI_BASE_URL for a "
                         "local server, to re-judge)")
            return self.note
        except (ConfigError, StageFailed, RuntimeError, ValueError) as exc:
            return f"our judge: failed on {run_dir.name}: {' '.join(str(exc).split())}"
        return None


def _errata(run_dir: Path, errata: Optional[Path]) -> tuple[Any, str]:
    if errata is None:
        return None, "not configured (no locomo-audit errors.json; set LOCOMO_AUDIT)"
    try:
        cfg = load_config([str(run_dir / "config.resolved.yaml")], [f"data.errata={errata}"])
        return audited.run_errata(cfg), ""
    except (ConfigError, ValueError) as exc:
        return None, f"not available for this run: {' '.join(str(exc).split())}"


def _corrected_labels(run_dir: Path, judge: str) -> dict[str, Optional[int]]:
    out = {}
    for r in read_jsonl(artifacts.judge_path(run_dir, judge)):
        corrected = r.get("corrected") or {}
        out[r["qid"]] = corrected["label"] if corrected else r.get("label")
    return out


def claim_row(run_dir: Path, claims: dict[str, Claim], rejudge: Rejudge, errata_path: Optional[Path],
              partial_vs_claim: bool = False) -> dict[str, Any]:
    """The claims-table row of one run directory, every cell with its source."""
    benchmark = run_benchmark(run_dir)
    source_path = run_dir / SOURCE_FILE
    source = json.loads(source_path.read_text(encoding="utf-8")) if source_path.exists() else None
    cfg = _resolved(run_dir)
    if source is not None:
        judge = source["judge"]
        claim = Claim(**{**source["claim"], "per_question": claims[source["claim"]["id"]].per_question}) \
            if source.get("claim") and source["claim"]["id"] in claims else None
    else:
        configured = (cfg.get("judge") or {}).get("name")
        judges = [j for j in run_judges(run_dir) if j != rejudge.name]
        judge = configured if configured in judges else (judges[0] if judges else run_judges(run_dir)[0])
        claim = next((c for c in claims.values() if c.benchmark == benchmark and run_dir.name in c.runs), None)
    notes: list[str] = []
    metrics_file = artifacts.path(run_dir, "metrics")
    dataset = (json.loads(metrics_file.read_text(encoding="utf-8")).get("dataset") or {}) \
        if metrics_file.exists() else {}
    if dataset.get("warning"):  # 09_aggregate: the benchmark file is not the official release
        notes.append(f"{run_dir.name}: {dataset['warning']}")
    labels = load_labels(run_dir, judge)
    judge_file = artifacts.judge_path(run_dir, judge).name
    labelled = {r.qid for r in labels.records if r.cause != MISSING}  # the questions its own number is over
    row: dict[str, Any] = {
        "run": run_dir.name, "run_dir": str(run_dir), "benchmark": benchmark,
        "question_set": {"id": question_set_id(labelled), "n": len(labelled)},
        "kind": "imported" if source is not None else "harness",
        "system": claim.system if claim else (f"imported ({source.get('format')})" if source is not None
                                              else str((cfg.get("method") or {}).get("name") or DASH)),
        "judge": judge, "claim": claim.to_dict() if claim else None,
        "origin": (source or {}).get("origin"),
        "file": (source or {}).get("file"), "sha256": (source or {}).get("sha256"),
        "mapping": (source or {}).get("mapping"), "unmapped": (source or {}).get("unmapped", []),
    }
    cells: dict[str, Any] = {}
    cells["claim"] = ({"value": claim.value, "printed": claim.printed,
                       "source": f"configs/claims.yaml claims.{claim.id} (published in {claim.published_in})"}
                      if claim else {"value": None, "source": "no claim in configs/claims.yaml names this run"})
    own = _own(run_dir, judge, source, labels)
    own["vs_claim"] = versus_claim(own["accuracy"], claim)
    # What the run covers against the claim's denominator (else the benchmark's): a partial run's
    # difference to a full claim is not printed unless asked (--partial-vs-claim).
    cov = coverage(sum(1 for r in labels.records if r.cause != MISSING),
                   denominator(claim.denominator, benchmark) if claim else EXPECTED_SCORED.get(benchmark))
    row["coverage"] = cov.to_dict()
    own["vs_claim_printed"] = own["vs_claim"] if cov.complete or partial_vs_claim or claim is None else (
        f"not compared: {cov.mark} (--partial-vs-claim prints it)")
    for check in (source or {}).get("stated_checks") or []:
        if not check.get("reproduced"):
            notes.append(f"{run_dir.name}: the file states {check['field']}: {check['stated']} but its own rows "
                         f"give {_pct(check['own'])}%: not reproduced")
    if source is not None and (source.get("own_accuracy") or {}).get("accuracy") is not None:
        recorded = source["own_accuracy"]["accuracy"]
        own["equals_import_record"] = own["accuracy"] is not None and abs(own["accuracy"] - recorded) < 1e-12
    cells["own"] = own
    cells["standard"] = _standard(benchmark, labels, judge_file)
    cells["intervals"] = _intervals(labels, judge_file)
    # The errata load only against the whole LoCoMo file; our judge re-judges with them only then.
    errata, why = _errata(run_dir, errata_path) if benchmark == "locomo" else (None, "")
    # Our judge first: the audited key's re-judged cell reads its corrected labels.
    note = rejudge.run(run_dir, benchmark, with_errata=errata is not None)
    ours = load_labels(run_dir, rejudge.name) if rejudge.name in run_judges(run_dir) and not note else None
    if note:
        notes.append(note)
    if benchmark == "locomo":
        if errata is None:
            cells["audited_excluding"] = {"skipped": True, "source": f"audited key: {why}"}
            cells["audited_rejudged"] = {"skipped": True, "source": f"audited key: {why}"}
        else:
            wrong = frozenset(errata.corrected_answers())
            cells["audited_excluding"] = _standard(benchmark, labels, judge_file, wrong)
            cells["audited_excluding"]["source"] += f"; the {len(wrong)} corrected questions of {errata.path} excluded"
            if ours is None:
                cells["audited_rejudged"] = {"skipped": True, "source": note or "our judge did not run"}
            else:
                cells["audited_rejudged"] = _standard(
                    benchmark, ours, f"08_judge_{rejudge.name}.jsonl (corrected labels for the {len(wrong)} "
                                     "corrected questions)", replace=_corrected_labels(run_dir, rejudge.name))
    else:
        cells["audited_excluding"] = cells["audited_rejudged"] = {"skipped": True,
                                                                  "source": "LongMemEval has no audited key"}
    if ours is None:
        cells["our_judge"] = {"skipped": True, "source": note or "our judge did not run"}
        cells["agreement"] = {"skipped": True, "source": note or "our judge did not run"}
    else:
        cells["our_judge"] = _standard(benchmark, ours, f"08_judge_{rejudge.name}.jsonl")
        cells["our_judge"]["judge_model"] = ours.judge_models
        cells["agreement"] = _agreement(ours, labels, rejudge.name, judge)
    cells["lengths"] = _lengths(run_dir, labels)
    row["cells"], row["notes"] = cells, notes
    return row


# ----------------------------------------------------------------------------- the table
COLUMNS = ["Run", "System", "Claim", "Coverage", "Question set", "Own labels, own denominator", "vs claim",
           "Standard denominator (missing)", "Audited key: corrected excluded", "Audited key: re-judged", "Our judge",
           "Agreement kappa (flips)",
           "Answer / gold tokens mean (p95)", "Accuracy by answer-length quartile", "Unmapped rows"]


def _md_row(r: dict[str, Any]) -> dict[str, str]:
    c = r["cells"]
    ag = c["agreement"]
    lens = c["lengths"]
    a, g = lens["answer_tokens"], lens["gold_tokens"]
    return {
        "Run": f"{r['benchmark']}/{r['run']} ({r['kind']})",
        "System": r["system"],
        "Claim": c["claim"]["value"] or DASH,
        "Coverage": (r.get("coverage") or {}).get("mark", DASH),
        "Question set": f"{r['question_set']['id']} ({r['question_set']['n']:,})" if r.get("question_set") else DASH,
        "Own labels, own denominator": _text(c["own"]),
        "vs claim": c["own"].get("vs_claim_printed", c["own"]["vs_claim"]),
        "95% CI (questions; conversations)": _interval_text(c["intervals"]),
        "Standard denominator (missing)": f"{_text(c['standard'])} ({c['standard']['missing']} missing)",
        "Audited key: corrected excluded": _text(c["audited_excluding"]),
        "Audited key: re-judged": _text(c["audited_rejudged"]),
        "Our judge": _text(c["our_judge"]),
        "Agreement kappa (flips)": "skipped" if ag.get("skipped") else (
            f"{DASH if ag['kappa'] is None else format(ag['kappa'], '.3f')} "
            f"(+{ag['source_wrong_ours_right']}/-{ag['source_right_ours_wrong']})"),
        "Answer / gold tokens mean (p95)": (f"{a['mean']:.1f} ({a['p95']:.0f}) / {g['mean']:.1f} ({g['p95']:.0f})"
                                            if a["n"] else DASH),
        "Accuracy by answer-length quartile": " · ".join(f"Q{q['quartile']} {_pct(q['accuracy'], 1)}"
                                                         for q in lens["quartiles"]) or DASH,
        "Unmapped rows": str(len(r["unmapped"])),
    }


def write(rows: list[dict[str, Any]], out: Path, notes: list[str]) -> list[Path]:
    out.mkdir(parents=True, exist_ok=True)
    write_json(out / "claims.json", {"columns": COLUMNS, "notes": notes, "rows": rows})
    table = [_md_row(r) for r in rows] or [{c: DASH for c in COLUMNS}]
    paths = write_table(table, out / "claims.md", "# Published claims, re-scored on one protocol")
    lines = ["", "Notes:", ""] + [f"- {n}" for n in notes] + [
        "- Coverage: the questions the run labels against the claim's denominator (else the benchmark's); a PARTIAL "
        "run's difference to the claim is not printed unless asked (--partial-vs-claim; claims.json keeps it).",
        "- Question set: the id of the questions the run's own labels are over (a hash of their ids) and their "
        "number; runs over different sets are warned about above.",
        "- Claim: the number as printed (configs/claims.yaml). Own labels: the run's own labels on its own "
        "denominator (an imported file's rule, all its rows, unmapped ones included); vs claim at the claim's "
        "printed precision.",
        "- Standard denominator: LoCoMo categories 1-4 (1,540) or LongMemEval (500); questions the run lacks count "
        "wrong and are counted. Audited key: locomo-audit errors.json (dial481/locomo-audit, CC BY-NC 4.0).",
        "- Agreement: our judge vs the run's own labels on the questions both labelled; flips +a/-b: a wrong->right, "
        "b right->wrong under our judge. Quartiles: answered questions split into four equal groups by answer "
        "length (o200k tokens), the run's own labels.",
        "- The source of every cell is in claims.json (rows[].cells.*.source)."]
    for r in rows:
        if r["unmapped"]:
            lines.append(f"- {r['run']}: {len(r['unmapped'])} unmapped rows: " + "; ".join(
                f"{u['where']} ({u['reason']}{': ' + ', '.join(u['candidates']) if u['candidates'] else ''})"
                for u in r["unmapped"][:20]) + (" ..." if len(r["unmapped"]) > 20 else ""))
    with (out / "claims.md").open("a", encoding="utf-8") as f:
        f.write("\n".join(lines) + "\n")
    return [out / "claims.json", *paths]


def import_command(claim: Claim) -> tuple[str, str]:
    """(the command that imports ``claim``'s per-question file, where that file is)."""
    pq = claim.per_question
    name = Path(pq.path).name if pq.path else "<per-question file>"
    command = (f"make import FILE={name} FORMAT={pq.format or '<format>'} CLAIM={claim.id} RUN={claim.id}"
               + ("" if claim.benchmark == "locomo" else f" BENCH={claim.benchmark}"))
    if pq.available and pq.repository and pq.path:
        where = f"the file: https://raw.githubusercontent.com/{pq.repository}/{pq.commit or 'HEAD'}/{pq.path}"
    else:
        where = f"no per-question file is published: {' '.join((pq.why or 'not stated').split())}"
    if claim.runs:  # the harness reproduces the claimed setting itself
        where += "; or run it here: " + ", ".join(f"make {claim.benchmark} RUN={r}" for r in claim.runs)
    return command, where


def unimported(claims: dict[str, Claim], rows: list[dict[str, Any]]) -> list[dict[str, str]]:
    """The registered claims no run of the table backs, each with the command that imports it."""
    backed = {r["claim"]["id"] for r in rows if r.get("claim")}
    return [{"claim": c.id, "system": c.system, "benchmark": c.benchmark,
             "command": import_command(c)[0], "where": import_command(c)[1]}
            for c in claims.values() if c.id not in backed]


def _unimported_lines(missing: list[dict[str, str]]) -> list[str]:
    if not missing:
        return ["", "Every registered claim has a run in this table."]
    return ["", f"Claims without a run here ({len(missing)} of configs/claims.yaml), each with the command "
                "that imports it:", ""] + [
        f"- {m['claim']} ({m['system']}, {m['benchmark']}): `{m['command']}` ({m['where']})" for m in missing]
def paired(ours: RunLabels, theirs: RunLabels) -> dict[str, Any]:
    """Two runs on the questions both labelled (a question either lacks is left out of both):
    the claim's imported run beside a harness run of the same system's engine."""
    a = {r.qid: r.label for r in ours.records if r.cause != MISSING}
    b = {r.qid: r.label for r in theirs.records if r.cause != MISSING}
    shared = sorted(set(a) & set(b))
    k, k_claim = sum(_strict(a[q]) for q in shared), sum(_strict(b[q]) for q in shared)
    return {"n": len(shared), "k": k, "k_claim_run": k_claim,
            "accuracy": k / len(shared) if shared else None,
            "accuracy_claim_run": k_claim / len(shared) if shared else None}


def _pair_with_claim_runs(rows: list[dict[str, Any]], notes: list[str]) -> None:
    """A harness run a claim names (``runs``) gets a ``paired`` cell per imported run of that claim."""
    for r in rows:
        if r["kind"] != "harness" or not r["claim"]:
            continue
        for imp in (i for i in rows if i["kind"] == "imported" and (i["claim"] or {}).get("id") == r["claim"]["id"]):
            p = paired(load_labels(r["run_dir"], r["judge"]), load_labels(imp["run_dir"], imp["judge"]))
            p["source"] = (f"08_judge_{r['judge']}.jsonl of {r['run']} and 08_judge_{imp['judge']}.jsonl of "
                           f"{imp['run']}: label == 1 on the {p['n']} questions both labelled")
            r["cells"].setdefault("paired", {})[imp["run"]] = p
            notes.append(f"{r['benchmark']}/{r['run']} beside {imp['run']} on the {p['n']} questions both labelled: "
                         f"{format_percent(p['accuracy'])} vs {format_percent(p['accuracy_claim_run'])}")


def build(results: Path, out: Path, *, judge: str = DEFAULT_JUDGE, config: Optional[str] = None,
          overrides: Sequence[str] = (), rejudge: bool = True, claims_path: Optional[str] = None,
          errata: Optional[Path] = None, partial_vs_claim: bool = False) -> list[Path]:
    """Write results/claims/claims.{json,md,csv}; returns the files written."""
    claims = load_claims(claims_path)
    if errata is None:
        candidate = audit_dir() / "errors.json"
        errata = candidate if candidate.exists() else None
    judging = Rejudge(judge, config, overrides, errata, rejudge)
    rows: list[dict[str, Any]] = []
    notes: list[str] = []
    for run_dir in find_runs(results):
        source = run_dir / SOURCE_FILE
        if source.exists() and json.loads(source.read_text(encoding="utf-8")).get("judge") == judge:
            raise ValueError(f"--judge {judge}: is the name of {run_dir.name}'s published labels; choose another")
        rows.append(claim_row(run_dir, claims, judging, errata, partial_vs_claim))
    _pair_with_claim_runs(rows, notes)
    for benchmark in dict.fromkeys(r["benchmark"] for r in rows):  # own labels over different questions
        differ = question_sets_differ({r["run"]: (r["question_set"]["id"], r["question_set"]["n"])
                                       for r in rows if r["benchmark"] == benchmark})
        if differ:
            notes.insert(0, f"WARNING: {benchmark}: {differ} (the standard denominator counts the missing ones wrong)")
            print(f"claims: WARNING: {benchmark}: {differ}")
    for r in rows:
        for n in r["notes"]:
            if n not in notes:
                notes.append(n)
    paths = write(rows, out, notes)
    missing = unimported(claims, rows)
    data = json.loads((out / "claims.json").read_text(encoding="utf-8"))
    write_json(out / "claims.json", {**data, "claims_without_a_run": missing})
    with (out / "claims.md").open("a", encoding="utf-8") as f:
        f.write("\n".join(_unimported_lines(missing)) + "\n")
    return paths


def main(argv: Optional[Sequence[str]] = None) -> int:
    p = argparse.ArgumentParser(prog="python -m common.report.claims", description=(__doc__ or "").split("\n\n")[0])
    p.add_argument("--results", default="results", help="results root (runs under <results>/<benchmark>/)")
    p.add_argument("--out", default=None, help="output folder (default <results>/claims)")
    p.add_argument("--judge", default=DEFAULT_JUDGE, help=f"name of our judge's label files (default {DEFAULT_JUDGE})")
    p.add_argument("--config", default=None, help="config giving our judge's model (default configs/<benchmark>.yaml)")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="config override")
    p.add_argument("--claims", default=None, help="claims registry (default configs/claims.yaml)")
    p.add_argument("--errata", default=None, help="locomo-audit errors.json (default $LOCOMO_AUDIT/errors.json)")
    p.add_argument("--no-rejudge", action="store_true", help="do not run our judge (no LLM call)")
    p.add_argument("--partial-vs-claim", action="store_true",
                   help="print the difference to the claim also for a run covering fewer questions than the claim")
    a = p.parse_args(argv)
    results = resolve_path(a.results)
    try:
        paths = build(results, Path(a.out) if a.out else results / "claims", judge=a.judge, config=a.config,
                      overrides=a.set, rejudge=not a.no_rejudge, claims_path=a.claims,
                      errata=resolve_path(a.errata) if a.errata else None, partial_vs_claim=a.partial_vs_claim)
    except (ConfigError, ArtifactError, ValueError, FileNotFoundError) as exc:
        print(f"error: {' '.join(str(exc).split())}", file=sys.stderr)
        return 2
    md = paths[1].read_text(encoding="utf-8")
    print(md, flush=True)
    print(f"claims: {', '.join(str(p) for p in paths)}", flush=True)
    return 0


if __name__ == "__main__":
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    sys.exit(main())
