"""The paper's Tables 1, 2, 3, 4 and 10 from the harness's runs (``python -m common.tables``).

Reads only each run's ``metrics.json`` and per-question artifacts (01_gold, 05-08 JSONL) of the
runs named in ``configs/experiments.yaml``, and the paper's transcribed rows in
``configs/published.yaml``; it makes no LLM call. Before a measured accuracy is printed its
k, n and failures are recounted from ``01_gold.jsonl`` + ``08_judge_<judge>.jsonl`` and a
mismatch with ``metrics.json`` is an error: a number that cannot be traced is never printed.

Each table is written to ``results/tables/`` as ``tableN.md``, ``.csv`` and ``.tex`` plus
``tableN.sources.json``, which maps every measured cell to its run directory, files (sha256),
metric key, k, n, CI and config fingerprint when present. ``common.figures`` reuses the run
readers below.

    python -m common.tables [--results results] [--out results/tables] [--only 1,2,3,4,10]
"""
from __future__ import annotations

import argparse
import fnmatch
import json
import math
import re
import statistics
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Optional, Sequence

import pandas as pd

from common import experiments as exp_mod
from common.config import ConfigError, read_yaml_mapping, resolve_path
from common.io import ArtifactError, read_jsonl, sha256_file
from common.metrics import accuracy

NOT_STATED, NOT_REPORTED, NOT_RUN, NOT_APPLICABLE = "not stated", "not reported", "not run", "not applicable"
DASH = "—"
DEFAULT_PUBLISHED = "configs/published.yaml"
DEFAULT_OUT = "results/tables"
GROUP_KEY = {"locomo": "by_category", "longmemeval": "by_type"}
# The commands that create each kind of run (error messages name them).
MAKE_MAIN = {"locomo": "make locomo", "longmemeval": "make longmemeval"}
MAKE_JUDGE2 = {"locomo": "make judge2", "longmemeval": "make judge2-longmemeval"}
MAKE_BASELINES = {"locomo": "make baselines", "longmemeval": "make baselines-longmemeval"}
MAKE_ABLATIONS = {"locomo": "make ablations", "longmemeval": "make ablations-longmemeval"}
EFFICIENCY_PROTOCOL = "online_efficiency_locomo"


class TableError(RuntimeError):
    """A table cannot be built; the message is one line naming the file and what to run."""


class MissingRun(TableError):
    """A run, or a judge of a run, that a table needs does not exist yet."""


class InconsistentRun(TableError):
    """``metrics.json`` disagrees with the per-question files it was aggregated from."""


# ----------------------------------------------------------------------------- published rows
@dataclass(frozen=True)
class Identity:
    """What decides comparability: answer model, judge model, evaluation protocol (display forms)."""

    answer_model: str
    judge_model: str
    protocol: str


@dataclass(frozen=True)
class PublishedRow:
    method: str
    values: dict[str, str]  # column key -> value as printed, or "not reported"
    source: str
    identity: Identity
    note: str = ""
    benchmark: str = ""


@dataclass
class Published:
    path: Path
    protocols: dict[str, dict[str, Any]]
    tables: dict[str, dict[str, Any]]
    ablations: dict[str, Any]

    def rows(self, table: str) -> list[PublishedRow]:
        return [self._row(f"tables.{table}.rows[{i}]", r) for i, r in enumerate(self.tables[table]["rows"])]

    def panel(self, name: str) -> tuple[dict[str, str], str, Identity, str]:
        """(values by variant, source, identity, figure) of one ablation panel."""
        p = self.ablations.get("panels", {}).get(name)
        if p is None:
            raise ConfigError(f"{self.path}: ablations.panels.{name}: missing")
        row = self._row(f"ablations.panels.{name}", {"method": name, **p})
        return row.values, row.source, row.identity, str(p.get("figure", ""))

    def _row(self, where: str, raw: Any) -> PublishedRow:
        if not isinstance(raw, dict):
            raise ConfigError(f"{self.path}: {where}: expected a mapping")
        for key in ("method", "values", "source", "answer_model", "judge_model", "protocol"):
            if key not in raw:
                raise ConfigError(f"{self.path}: {where}.{key}: missing (write '{NOT_STATED}' if the paper does not say)")
        values = raw["values"]
        if not isinstance(values, dict) or not all(isinstance(v, str) for v in values.values()):
            raise ConfigError(f"{self.path}: {where}.values: expected strings as printed in the paper")
        for col, v in values.items():
            if v != NOT_REPORTED and number(v) is None:
                raise ConfigError(f"{self.path}: {where}.values.{col}: {v!r} is neither a number nor '{NOT_REPORTED}'")
        proto = str(raw["protocol"])
        if proto not in self.protocols and proto != NOT_STATED:
            raise ConfigError(f"{self.path}: {where}.protocol: unknown protocol {proto!r} (see protocols:)")
        return PublishedRow(str(raw["method"]), dict(values), str(raw["source"]),
                            Identity(str(raw["answer_model"]), str(raw["judge_model"]), proto),
                            str(raw.get("note", "")).strip(), str(raw.get("benchmark", "")))

    def protocol_of(self, prompt_ids: set[str]) -> str:
        """The protocol id whose ``judge_prompts`` patterns cover every prompt id of a judge file."""
        for pid, spec in self.protocols.items():
            pats = spec.get("judge_prompts") or []
            if prompt_ids and pats and all(any(fnmatch.fnmatchcase(p, pat) for pat in pats) for p in prompt_ids):
                return pid
        return f"unknown (judge prompts {', '.join(sorted(prompt_ids)) or 'none'})"


def load_published(path: str = DEFAULT_PUBLISHED) -> Published:
    source = resolve_path(path)
    data = read_yaml_mapping(source, "published rows")
    pub = Published(source, dict(data.get("protocols") or {}), dict(data.get("tables") or {}),
                    dict(data.get("ablations") or {}))
    for name in ("table1", "table2", "table3", "table10"):
        if name not in pub.tables:
            raise ConfigError(f"{source}: tables.{name}: missing")
        pub.rows(name)  # validate every row now: a typo fails before any table is written
    return pub


def number(text: str) -> Optional[float]:
    """A printed value ("90.6", "8,499", "+0.750") as a float, or None."""
    try:
        return float(text.replace(",", ""))
    except (AttributeError, ValueError):
        return None


def canonical_model(name: str) -> Optional[str]:
    """Model names as compared: lowercase, no ``org/`` prefix, no ``-YYYY-MM-DD`` snapshot date.

    "GPT-4.1-mini" (paper) and "gpt-4.1-mini-2025-04-14" (config) are the same model; a pair
    "A vs B" is compared part by part. None for "not stated".
    """
    text = name.strip()
    if not text or text.lower() == NOT_STATED:
        return None
    parts = [re.sub(r"-\d{4}-\d{2}-\d{2}$", "", p.strip().rsplit("/", 1)[-1].lower())
             for p in re.split(r"\s+vs\.?\s+", text)]
    return " vs ".join(parts)


def comparable(published: Identity, measured: Identity) -> tuple[bool, str]:
    """Same answer model, judge model and protocol; else the reasons why not."""
    reasons = []
    for attr, label in (("answer_model", "answer model"), ("judge_model", "judge"), ("protocol", "protocol")):
        a, b = getattr(published, attr), getattr(measured, attr)
        if a.strip().lower() == NOT_STATED:
            reasons.append(f"{label} not stated")
        elif (canonical_model(a) != canonical_model(b)) if attr != "protocol" else a != b:
            reasons.append(f"{label} {a} vs {b}")
    return not reasons, "; ".join(reasons)


# ----------------------------------------------------------------------------- runs
@dataclass
class RunData:
    """One run directory, read lazily; every file it serves is hashed for provenance."""

    benchmark: str
    name: str
    dir: Path
    metrics: dict[str, Any]

    @property
    def metrics_path(self) -> Path:
        return self.dir / "metrics.json"

    @property
    def fingerprint(self) -> Any:
        return self.metrics.get("fingerprint")

    def fingerprint_for(self, judge: str) -> Any:
        """The run fingerprint and this judge's fingerprint (metrics.json ``fingerprint``), if present."""
        fp = self.fingerprint
        if isinstance(fp, dict) and "run" in fp:
            return {"run": fp.get("run"), "judge": (fp.get("judges") or {}).get(judge)}
        return fp

    @property
    def coverage_warning(self) -> str:
        """09_aggregate's PARTIAL warning when the run covers fewer questions than the benchmark."""
        cov = self.metrics.get("coverage")
        return str(cov.get("warning") or "") if isinstance(cov, dict) else ""

    _sha: dict[str, str] = field(default_factory=dict, repr=False)
    _rows: dict[str, list[dict[str, Any]]] = field(default_factory=dict, repr=False)
    _labels: dict[str, Any] = field(default_factory=dict, repr=False)

    def sha(self, filename: str) -> str:
        if filename not in self._sha:
            self._sha[filename] = sha256_file(self.dir / filename)
        return self._sha[filename]

    def files(self, *names: str) -> dict[str, str]:
        return {n: self.sha(n) for n in names}

    def rows(self, filename: str) -> list[dict[str, Any]]:
        if filename not in self._rows:
            try:
                self._rows[filename] = read_jsonl(self.dir / filename)
            except ArtifactError as exc:
                raise TableError(str(exc)) from None
        return self._rows[filename]

    def labels(self, judge: str) -> Any:
        """``common.stats.RunLabels``: the scored questions joined with one judge's labels."""
        from common import stats

        if judge not in self._labels:
            try:
                self._labels[judge] = stats.load_labels(self.dir, judge)
            except ArtifactError as exc:
                raise TableError(str(exc)) from None
        return self._labels[judge]

    def judge_names(self) -> list[str]:
        return list(self.metrics.get("judges") or {})

    def answer_model(self) -> str:
        models = sorted({str(r.get("model")) for r in self.rows("07_answers.jsonl") if r.get("model")})
        return " + ".join(models) or NOT_STATED

    def identity(self, judge: str, published: Published) -> Identity:
        prompts = {str(r.get("prompt_id", "")) for r in self.rows(f"08_judge_{judge}.jsonl")}
        return Identity(self.answer_model(), self.judge_model(judge), published.protocol_of(prompts))

    def judge_model(self, judge: str) -> str:
        return str(self.metrics["judges"][judge].get("judge_model") or judge)


def open_run(results: Path, benchmark: str, run: str, make_hint: str) -> RunData:
    """A run with a ``metrics.json``, or ``MissingRun`` naming the path and the command."""
    run_dir = exp_mod.Experiments.run_dir(results, benchmark, run)
    path = run_dir / "metrics.json"
    if not path.exists():
        what = "run directory not found" if not run_dir.exists() else "no metrics.json (run not finished)"
        raise MissingRun(f"{path}: {what}; create it with `{make_hint}`")
    try:
        metrics = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise TableError(f"{path}: invalid JSON ({exc.msg})") from None
    if not isinstance(metrics.get("judges"), dict):
        raise TableError(f"{path}: judges: expected a mapping of judge name -> accuracies")
    return RunData(benchmark, run, run_dir, metrics)


@dataclass(frozen=True)
class Measured:
    """One verified accuracy: the metrics.json summary and where it came from."""

    summary: dict[str, Any]
    source: dict[str, Any]


def _same(a: Any, b: Any) -> bool:
    if a is None or b is None:
        return a is b
    return math.isclose(float(a), float(b), rel_tol=0, abs_tol=1e-9)


def measured(run: RunData, judge: str, group: Optional[str] = None, *, judge_hint: str = "") -> Measured:
    """``metrics.json`` accuracy of ``judge`` (overall, or one category/type), checked against
    ``01_gold.jsonl`` + ``08_judge_<judge>.jsonl``.

    Raises:
        MissingRun: the judge is not in the run (names the judge file and ``judge_hint``).
        InconsistentRun: k, n, n_failed or accuracy differ from the per-question recount.
    """
    jm = run.metrics["judges"].get(judge)
    if jm is None:
        hint = f"; create it with `{judge_hint}`" if judge_hint else ""
        raise MissingRun(f"{run.dir / f'08_judge_{judge}.jsonl'}: judge {judge!r} not in {run.metrics_path}{hint}")
    key = "overall" if group is None else f"{GROUP_KEY[run.benchmark]}.{group}"
    summary = jm.get("overall") if group is None else (jm.get(GROUP_KEY[run.benchmark]) or {}).get(group)
    labels = [r.label for r in run.labels(judge).records if group is None or r.category == group]
    expect = accuracy(labels)
    judge_file = f"08_judge_{judge}.jsonl"
    if summary is None:
        if expect["n"]:
            raise InconsistentRun(f"{run.metrics_path}: judges.{judge}.{key}: absent, but 01_gold.jsonl + "
                                  f"{judge_file} hold {expect['n']} such questions; rerun 09_aggregate")
        summary = dict(expect)
    bad = [f for f in ("k", "n", "n_failed") if summary.get(f) != expect[f]]
    if bad or not _same(summary.get("accuracy"), expect["accuracy"]):
        field_ = bad[0] if bad else "accuracy"
        raise InconsistentRun(
            f"{run.metrics_path}: judges.{judge}.{key}.{field_}: {summary.get(field_)!r} but 01_gold.jsonl + "
            f"{judge_file} give {expect[field_]!r}; rerun 09_aggregate (or the run is corrupt)")
    source = {
        "run_dir": str(run.dir), "metric": f"judges.{judge}.{key}",
        "files": run.files("metrics.json", "01_gold.jsonl", judge_file),
        "recounted_from": ["01_gold.jsonl", judge_file],
        "k": summary["k"], "n": summary["n"], "accuracy": summary["accuracy"], "n_failed": summary["n_failed"],
        "judge_model": jm.get("judge_model"), "ci": summary.get("ci"), "fingerprint": run.fingerprint_for(judge),
    }
    return Measured(dict(summary), source)


def ci_bounds(ci: Any) -> Optional[tuple[float, float]]:
    """A CI as stored in metrics.json ({low, high} or [low, high]) -> (low, high), else None."""
    if isinstance(ci, dict):
        lo, hi = ci.get("low", ci.get("lower")), ci.get("high", ci.get("upper"))
    elif isinstance(ci, (list, tuple)) and len(ci) == 2:
        lo, hi = ci
    else:
        return None
    return (float(lo), float(hi)) if isinstance(lo, (int, float)) and isinstance(hi, (int, float)) else None


def fmt_acc(summary: dict[str, Any], digits: int = 1) -> str:
    """``90.6 [89.1, 92.0] (1395/1540)``: accuracy in %, bootstrap CI if present, always k/n."""
    if summary.get("accuracy") is None:
        return f"n/a ({summary.get('k', 0)}/{summary.get('n', 0)})"
    text = f"{100 * summary['accuracy']:.{digits}f}"
    ci = ci_bounds(summary.get("ci"))
    if ci:
        text += f" [{100 * ci[0]:.{digits}f}, {100 * ci[1]:.{digits}f}]"
    return f"{text} ({summary['k']}/{summary['n']})"


# ----------------------------------------------------------------------------- ablation runs
def ablation_runs(results: Path, exp: exp_mod.Experiments, variants: Sequence[str],
                  subset_choice: Optional[str] = None, benchmark: str = "locomo") -> tuple[dict[str, RunData], Any]:
    """Every named ablation run, or one ``MissingRun`` listing all missing run dirs."""
    subset = exp.subset(benchmark, subset_choice)
    runs, missing = {}, []
    for v in dict.fromkeys(variants):  # a variant shown in two panels is one run
        exp.variant(v)
        try:
            runs[v] = open_run(results, benchmark, exp.ablation_run(v, subset), MAKE_ABLATIONS[benchmark])
        except MissingRun:
            missing.append(str(exp_mod.Experiments.run_dir(results, benchmark, exp.ablation_run(v, subset))))
    if missing:
        sub = f" SUBSET={subset_choice}" if subset_choice else ""
        raise MissingRun(f"missing ablation run(s) {', '.join(missing)} (no metrics.json); create them with "
                         f"`{MAKE_ABLATIONS[benchmark]}{sub}`")
    if subset is not None:
        for v, run in runs.items():
            qids = {g["qid"] for g in run.rows("01_gold.jsonl")}
            extra = sorted(qids - set(subset.question_ids))
            if extra:
                raise InconsistentRun(f"{run.dir / '01_gold.jsonl'}: question {extra[0]} is not in subset "
                                      f"{subset.path}; the run was made with another subset, rerun `{MAKE_ABLATIONS[benchmark]}`")
    return runs, subset


def subset_note(subset: Any, runs: dict[str, RunData]) -> str:
    sizes = sorted({len(r.rows("01_gold.jsonl")) for r in runs.values()})
    if subset is None:
        return f"Ablation runs on every question of the main config ({'/'.join(map(str, sizes))} questions)."
    return (f"Measured on subset {subset.name} ({subset.path.name}, {len(subset.question_ids)} question ids; runs hold "
            f"{'/'.join(map(str, sizes))}). The paper's ablation subset is unpublished (88 questions inferred), so its questions differ.")


# ----------------------------------------------------------------------------- table model
@dataclass
class Table:
    """A table as written: display rows, notes, and the provenance of its measured cells."""

    name: str
    title: str
    columns: list[str]
    rows: list[dict[str, str]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    cells: list[dict[str, Any]] = field(default_factory=list)
    published: list[dict[str, Any]] = field(default_factory=list)

    def add_cell(self, ref: str, column: str, text: str, source: dict[str, Any]) -> None:
        self.cells.append({"row": ref, "column": column, "text": text, **source})

    def frame(self) -> pd.DataFrame:
        return pd.DataFrame([[r.get(c, "") for c in self.columns] for r in self.rows], columns=self.columns)


@dataclass
class Context:
    results: Path
    exp: exp_mod.Experiments
    published: Published
    subset_choice: Optional[str] = None
    _runs: dict[tuple[str, str], RunData] = field(default_factory=dict, repr=False)

    def main_run(self, benchmark: str) -> RunData:
        key = (benchmark, self.exp.main_run)
        if key not in self._runs:
            self._runs[key] = open_run(self.results, benchmark, self.exp.main_run,
                                       f"{MAKE_MAIN[benchmark]} RUN={self.exp.main_run}")
        return self._runs[key]


def _published_row(table: Table, ref: str, row: PublishedRow) -> None:
    table.published.append({"row": ref, "method": row.method, "values": row.values, "source": row.source,
                            "answer_model": row.identity.answer_model, "judge_model": row.identity.judge_model,
                            "protocol": row.identity.protocol, "note": row.note})


def _link(table: Table, pubs: list[tuple[str, PublishedRow]], meas: list[tuple[str, Identity]]) -> None:
    """Fill the "Comparable with" column both ways and explain every non-comparable paper row."""
    by_ref = {r["Ref"]: r for r in table.rows}
    links: dict[str, list[str]] = {ref: [] for ref in [p for p, _ in pubs] + [m for m, _ in meas]}
    for pref, prow in pubs:
        best = None
        for mref, ident in meas:
            ok, why = comparable(prow.identity, ident)
            if ok:
                links[pref].append(mref)
                links[mref].append(pref)
            elif best is None or why.count(";") < best.count(";"):
                best = why
        by_ref[pref]["Comparable with"] = ", ".join(links[pref]) or f"none ({best or 'no measured row'})"
    for mref, _ in meas:
        by_ref[mref]["Comparable with"] = ", ".join(links[mref]) or "none"


COMPARABLE_NOTE = ("Comparable with: a paper row (P) and a measured row (M) are comparable only if answer model, "
                   "judge model and evaluation protocol all match (model names compared without snapshot date); "
                   "other settings (e.g. the embedding model) may still differ, see each run's config.resolved.yaml.")


def _source_notes(pubs: list[tuple[str, PublishedRow]], published: Published) -> list[str]:
    """Where each paper row comes from, its own note, and what its protocol id means."""
    grouped: dict[str, list[str]] = {}
    for ref, row in pubs:
        grouped.setdefault(row.source, []).append(ref)
    notes = [f"{', '.join(refs)}: {src}." for src, refs in grouped.items()]
    notes += [f"{ref} ({row.method}): {row.note}" for ref, row in pubs if row.note]
    used = dict.fromkeys(row.identity.protocol for _, row in pubs if row.identity.protocol in published.protocols)
    return notes + [f"Protocol {pid}: {' '.join(str(published.protocols[pid].get('description', '')).split())}"
                    for pid in used]


# ----------------------------------------------------------------------------- Tables 1 and 2
def _accuracy_table(ctx: Context, name: str, benchmark: str, groups: list[str], headers: list[str],
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
    value_cols = headers + ([extra_header] if extra else [])
    table = Table(name, title, ["Ref", "Method", *value_cols, "Answer model", "Judge", "Protocol", "Comparable with"])
    pubs: list[tuple[str, PublishedRow]] = []
    for i, row in enumerate(ctx.published.rows(pub_key), 1):
        ref = f"P{i}"
        pubs.append((ref, row))
        cells = {h: row.values.get(g, NOT_REPORTED) for g, h in zip(pub_cols, headers)}
        table.rows.append({"Ref": ref, "Method": row.method, **cells, **({extra_header: DASH} if extra else {}),
                           "Answer model": row.identity.answer_model, "Judge": row.identity.judge_model,
                           "Protocol": row.identity.protocol})
        _published_row(table, ref, row)
    meas: list[tuple[str, Identity]] = []
    main = ctx.main_run(benchmark)
    entries: list[tuple[str, Optional[RunData], str, str]] = []  # (method, run, judge, hint)
    for role in ("primary", "secondary"):
        judge = ctx.exp.judges[role]
        if role == "primary" or judge in main.judge_names():
            entries.append((f"EnSIMem (harness, run {main.name})", main, judge, f"{MAKE_MAIN[benchmark]} RUN={main.name}"))
        else:
            entries.append((f"EnSIMem (harness, run {main.name}), judge {judge}", None, judge,
                            f"{MAKE_JUDGE2[benchmark]} RUN={main.name}"))
    for b in ctx.exp.baselines:
        try:
            run = open_run(ctx.results, benchmark, ctx.exp.baseline_run(b.name), MAKE_BASELINES[benchmark])
        except MissingRun:
            entries.append((b.label, None, "", MAKE_BASELINES[benchmark]))
            continue
        judges = [ctx.exp.judges["primary"]] + [j for j in run.judge_names() if j != ctx.exp.judges["primary"]]
        entries += [(b.label, run, j, MAKE_BASELINES[benchmark]) for j in judges]
    not_run: list[str] = []  # notes on measured rows: not run, partial coverage
    for i, (method, run, judge, hint) in enumerate(entries, 1):
        ref = f"M{i}"
        if run is None:
            table.rows.append({"Ref": ref, "Method": method, **{c: NOT_RUN for c in value_cols},
                               "Answer model": DASH, "Judge": judge or DASH, "Protocol": DASH, "Comparable with": DASH})
            not_run.append(f"{ref}: not run (`{hint}`)")
            continue
        row = {"Ref": ref, "Method": method}
        for g, h in zip(groups + [None], headers):
            m = measured(run, judge, g, judge_hint=hint)
            row[h] = fmt_acc(m.summary)
            table.add_cell(ref, h, row[h], m.source)
        if extra:
            row[extra_header], src = extra(run, judge)
            table.add_cell(ref, extra_header, row[extra_header], src)
        ident = run.identity(judge, ctx.published)
        row.update({"Answer model": ident.answer_model, "Judge": ident.judge_model, "Protocol": ident.protocol})
        table.rows.append(row)
        meas.append((ref, ident))
        if run.coverage_warning:
            not_run.append(f"{ref}: {run.coverage_warning}")
    _link(table, pubs, meas)
    table.notes += [
        "P rows: transcribed from the paper (configs/published.yaml), values as printed. M rows: measured by "
        "this harness; each cell is accuracy % [95% CI when metrics.json has one] (k/n), recounted from "
        "01_gold.jsonl + 08_judge_<judge>.jsonl; failed judgments count as wrong.",
        COMPARABLE_NOTE, *_source_notes(pubs, ctx.published), *ctx.published.tables[pub_key].get("notes", []), *not_run]
    return table


def table1(ctx: Context) -> Table:
    from common.benchmarks import registry

    groups = list(registry("locomo").categories)
    headers = [g.capitalize() for g in groups] + ["Overall"]
    table = _accuracy_table(ctx, "table1", "locomo", groups, headers,
                            "Table 1: LLM-judge accuracy (%) on LoCoMo, categories 1-4 (category 5 excluded)")
    main = ctx.main_run("locomo")
    excluded = (main.metrics.get("questions") or {}).get("excluded")
    if excluded:
        shown = "; ".join(f"category {k}: {v} questions" for k, v in excluded.items())
        table.notes.append(f"Not judged in the main run (as in Memora/mem0): {shown}.")
    return table


def _task_average(run: RunData, judge: str) -> tuple[str, dict[str, Any]]:
    """The unweighted mean of the six type accuracies, recomputed from verified type accuracies."""
    from common.benchmarks.longmemeval import QUESTION_TYPES

    parts = [measured(run, judge, t) for t in QUESTION_TYPES]
    accs = [p.summary["accuracy"] for p in parts]
    value = None if any(a is None for a in accs) else sum(accs) / len(accs)
    stored = run.metrics["judges"][judge].get("task_averaged")
    if stored is not None and value is not None and not _same(stored, value):
        raise InconsistentRun(f"{run.metrics_path}: judges.{judge}.task_averaged: {stored!r} but the six verified "
                              f"type accuracies average {value!r}; rerun 09_aggregate")
    text = "n/a" if value is None else f"{100 * value:.1f}"
    return text, {"run_dir": str(run.dir), "metric": f"judges.{judge}.task_averaged", "value": value,
                  "computed_as": "mean of the six by_type accuracies", "inputs": [p.source for p in parts],
                  "fingerprint": run.fingerprint}


def _average_check(ctx: Context) -> str:
    """Which mean the paper's LongMemEval "Average" column is, recomputed from each row's values."""
    spec = ctx.published.tables["table2"]
    sizes: dict[str, int] = spec["type_sizes"]
    verdicts: dict[str, list[str]] = {}
    for i, row in enumerate(ctx.published.rows("table2"), 1):
        vals = {t: number(row.values[t]) for t in sizes}
        avg = number(row.values.get("average", ""))
        if avg is None or any(v is None for v in vals.values()):
            continue
        task = sum(vals.values()) / len(vals)  # type: ignore[arg-type]
        weighted = sum(vals[t] * n for t, n in sizes.items()) / sum(sizes.values())  # type: ignore[operator]
        tol = 0.1  # the printed average and each printed input are rounded to 0.1
        kind = ("question-weighted overall" if abs(weighted - avg) <= tol else
                "task-averaged mean" if abs(task - avg) <= tol else
                f"neither (task mean {task:.2f}, question-weighted {weighted:.2f}, printed {avg})")
        verdicts.setdefault(kind, []).append(f"P{i}")
    found = "; ".join(f"{', '.join(refs)}: {kind}" for kind, refs in verdicts.items())
    return (f"Paper's Average, recomputed from each row's six values with LongMemEval_S type sizes "
            f"{'/'.join(str(n) for n in sizes.values())} (type order as the columns; match within 0.1 pp): {found}. We report overall "
            f"accuracy over all questions (k/n) in the Average column, and the unweighted task average beside it.")


def table2(ctx: Context) -> Table:
    from common.benchmarks.longmemeval import QUESTION_TYPES, SHORT_NAMES

    groups = list(QUESTION_TYPES)
    headers = [SHORT_NAMES[t] for t in groups] + ["Average (overall)"]
    table = _accuracy_table(ctx, "table2", "longmemeval", groups, headers,
                            "Table 2: LLM-judge accuracy (%) on LongMemEval (official checker)",
                            extra=_task_average, extra_header="Task-avg")
    table.notes.append(_average_check(ctx))
    return table


# ----------------------------------------------------------------------------- Table 3
def _mean(values: list[float]) -> float:
    return statistics.fmean(values) if values else float("nan")


def table3(ctx: Context) -> Table:
    """Mean online cost per scored LoCoMo question of the main run (per-question values from
    ``common.ledger.efficiency``, the harness's one definition of the Table 3 quantities)."""
    from common import ledger
    from common.benchmarks import registry
    from common.schema import Gold, from_dict

    run = ctx.main_run("locomo")
    adapter = registry("locomo")
    scored = [g["qid"] for g in run.rows("01_gold.jsonl") if adapter.is_scored(from_dict(Gold, g))]
    files = ("05_plans.jsonl", "06_retrievals.jsonl", "07_answers.jsonl")
    by = {f: {r["qid"]: r for r in run.rows(f)} for f in files}
    for f in files:  # the ledger would count a missing row as 0 s: refuse instead
        missing = [q for q in scored if q not in by[f]]
        if missing:
            raise InconsistentRun(f"{run.dir / f}: no row for scored question {missing[0]} "
                                  f"({len(missing)} missing); finish the run with `{MAKE_MAIN['locomo']} RUN={run.name}`")
    eff = ledger.efficiency(run.dir, qids=set(scored))
    per_q = eff["per_question"]
    tokens = _mean([q["context_tokens"] for q in per_q])
    stored = (run.metrics.get("buffer_tokens") or {}).get("mean")
    if stored is not None and per_q and abs(stored - tokens) > 1e-3:
        raise InconsistentRun(f"{run.metrics_path}: buffer_tokens.mean: {stored!r} but 06_retrievals.jsonl gives "
                              f"{tokens!r} over the scored questions; rerun 09_aggregate")
    series = {"Planning (s)": ("plan_s", "sum of 05_plans.llm_calls[].latency", ["05_plans.jsonl"]),
              "Retrieval (s)": ("retrieval_s", "06_retrievals.seconds", ["06_retrievals.jsonl"]),
              "Search (s)": ("search_s", "planning + retrieval", ["05_plans.jsonl", "06_retrievals.jsonl"]),
              "Generation (s)": ("generation_s", "07_answers.latency", ["07_answers.jsonl"]),
              "End-to-end (s)": ("end_to_end_s", "planning + retrieval + generation", list(files)),
              "Context tokens": ("context_tokens", "06_retrievals.buffer_tokens", ["06_retrievals.jsonl"])}
    for q in per_q:
        q["search_s"] = q["plan_s"] + q["retrieval_s"]
    keys = ["planning_s", "retrieval_s", "search_s", "generation_s", "end_to_end_s", "context_tokens"]
    cols = list(series)
    table = Table("table3", "Table 3: mean online cost per question on LoCoMo (offline construction excluded)",
                  ["Ref", "System", *cols, "n", "Answer model", "Comparable with"])
    pubs = []
    for i, row in enumerate(ctx.published.rows("table3"), 1):
        ref = f"P{i}"
        pubs.append((ref, row))
        table.rows.append({"Ref": ref, "System": row.method, **{c: row.values.get(k, NOT_REPORTED) for c, k in zip(cols, keys)},
                           "n": NOT_STATED, "Answer model": row.identity.answer_model})
        _published_row(table, ref, row)
    ref = "M1"
    row = {"Ref": ref, "System": f"EnSIMem (harness, run {run.name})", "n": str(eff["n"]), "Answer model": run.answer_model()}
    for col, (key, how, used) in series.items():
        value = _mean([q[key] for q in per_q])
        row[col] = f"{value:,.0f}" if col == "Context tokens" else f"{value:.2f}"
        table.add_cell(ref, col, row[col], {"run_dir": str(run.dir), "metric": f"mean over scored questions of {how}",
                                            "value": value, "n": eff["n"], "files": run.files("01_gold.jsonl", *used),
                                            "fingerprint": run.fingerprint})
    table.rows.append(row)
    _link(table, pubs, [(ref, Identity(run.answer_model(), NOT_APPLICABLE, EFFICIENCY_PROTOCOL))])
    n_calls = sum(len(by["05_plans.jsonl"][q].get("llm_calls") or []) for q in scored) + len(scored)
    hits = f"Cache hits among the measured planning and answer calls: {eff['cached_calls']}/{n_calls}."
    if eff["cached_calls"]:
        hits += (" WARNING: these latencies include cache hits, which carry the original call's latency only "
                 "if the cache kept it (else 0 s), so the means may understate live latency; for timing, rerun "
                 "with SET=\"llm.cache_mode=off\" under a new RUN.")
    table.notes += [
        "M1: means over the scored questions (categories 1-4) of the main run; planning = sum of the latencies "
        "of the plan calls (repairs included), retrieval = 06 wall time, generation = answer call latency, "
        "context tokens = evidence buffer tokens (o200k_base).", hits,
        *([f"M1: {run.coverage_warning}"] if run.coverage_warning else []), COMPARABLE_NOTE, *_source_notes(pubs, ctx.published),
        *ctx.published.tables["table3"].get("notes", [])]
    return table


# ----------------------------------------------------------------------------- Table 4
def table4(ctx: Context) -> Table:
    variants = ctx.exp.panels.get("retrieval_route")
    if not variants:
        raise TableError(f"{ctx.exp.source}: ablations.panels.retrieval_route: missing")
    runs, subset = ablation_runs(ctx.results, ctx.exp, variants, ctx.subset_choice)
    values, source, pub_ident, figure = ctx.published.panel("retrieval_route")
    judge = ctx.exp.judges["primary"]
    table = Table("table4", "Table 4: retrieval-route ablation on LoCoMo (accuracy %, primary judge)",
                  ["Retrieval variant", "Measured", "Paper", "Run", "Paper comparable"])
    for v in variants:
        run = runs[v]
        m = measured(run, judge, None, judge_hint=MAKE_ABLATIONS["locomo"])
        text = fmt_acc(m.summary, digits=2)
        ok, why = comparable(pub_ident, run.identity(judge, ctx.published))
        paper = values.get(v, NOT_REPORTED)
        table.rows.append({"Retrieval variant": ctx.exp.variant(v).label, "Measured": text, "Paper": paper,
                           "Run": run.name, "Paper comparable": DASH if paper == NOT_REPORTED else ("yes" if ok else f"no ({why})")})
        table.add_cell(v, "Measured", text, m.source)
    table.published.append({"panel": "retrieval_route", "values": values, "source": source, "figure": figure,
                            "answer_model": pub_ident.answer_model, "judge_model": pub_ident.judge_model,
                            "protocol": pub_ident.protocol})
    table.notes += [f"Measured: {judge} judge, accuracy % (k/n) recounted from 01_gold.jsonl + 08_judge_{judge}.jsonl.",
                    f"Paper: {source}; answer model {pub_ident.answer_model}, judge {pub_ident.judge_model}.",
                    subset_note(subset, runs), COMPARABLE_NOTE]
    return table


# ----------------------------------------------------------------------------- Table 10
T10_COLUMNS = [("m", "m", "{:d}"), ("mean_delta", "mean Δ (pp)", "{:+.3f}"), ("mae", "MAE (pp)", "{:.2f}"),
               ("sd_delta", "SD(Δ) (pp)", "{:.2f}"), ("max_abs_delta", "max|Δ| (pp)", "{:.2f}"),
               ("abs_delta_overall", "|Δ overall| (pp)", "{:.3f}"), ("r", "r", "{:.3f}")]
STATS_KEYS = {"m": "m", "mean_delta": "mean_delta_pp", "mae": "mae_pp", "sd_delta": "sd_delta_pp",
              "max_abs_delta": "max_abs_delta_pp", "abs_delta_overall": "abs_delta_overall_pp", "r": "pearson_r"}


def table10(ctx: Context) -> Table:
    """Judge consistency on the main runs: the paper's aggregate statistics plus per-question agreement."""
    from common import stats
    from common.stats import category_order

    primary, secondary = ctx.exp.judges["primary"], ctx.exp.judges["secondary"]
    agree_cols = ["n paired", "Agreement (%)", "Cohen's κ", "McNemar p"]
    table = Table("table10", f"Table 10: consistency of the {primary} and {secondary} judges (Δ = {secondary} − {primary})",
                  ["Ref", "Benchmark", *[h for _, h, _ in T10_COLUMNS], *agree_cols, "Judges", "Comparable with"])
    pubs_all = ctx.published.rows("table10")
    links_p, links_m = [], []
    errors = []
    for bi, benchmark in enumerate(("locomo", "longmemeval"), 1):
        try:
            run = ctx.main_run(benchmark)
            cats = category_order(benchmark)
            acc = {j: {c: measured(run, j, c, judge_hint=f"{hint} RUN={run.name}") for c in cats}
                   for j, hint in ((primary, MAKE_MAIN[benchmark]), (secondary, MAKE_JUDGE2[benchmark]))}
        except MissingRun as exc:
            errors.append(str(exc))
            continue
        overall = {j: measured(run, j) for j in (primary, secondary)}
        frac = {j: {c: acc[j][c].summary["accuracy"] for c in cats} for j in acc}
        present = [c for c in cats if frac[primary][c] is not None and frac[secondary][c] is not None]
        result = stats.table10({c: frac[primary][c] for c in present}, {c: frac[secondary][c] for c in present},
                               overall[primary].summary["accuracy"], overall[secondary].summary["accuracy"])
        agreement = stats.judge_agreement(run.labels(primary).by_qid(), run.labels(secondary).by_qid())
        ref = f"M{bi}"
        row: dict[str, str] = {"Ref": ref, "Benchmark": benchmark}
        inputs = [m.source for j in acc for m in acc[j].values()] + [overall[j].source for j in overall]
        for key, header, fmt in T10_COLUMNS:
            value = result[STATS_KEYS[key]]
            row[header] = "n/a" if value is None else fmt.format(value)
            table.add_cell(ref, header, row[header], {"run_dir": str(run.dir), "metric": f"common.stats.table10.{STATS_KEYS[key]}",
                                                      "value": value, "categories": present, "inputs": inputs,
                                                      "fingerprint": run.fingerprint})
        agree_src = {"run_dir": str(run.dir), "files": run.files("01_gold.jsonl", f"08_judge_{primary}.jsonl",
                                                                  f"08_judge_{secondary}.jsonl"),
                     "failures": agreement.failures, "fingerprint": run.fingerprint}
        p = agreement.mcnemar.p_value
        for header, value, text in (
                ("n paired", agreement.n, str(agreement.n)),
                ("Agreement (%)", agreement.agreement, "n/a" if agreement.agreement is None else f"{100 * agreement.agreement:.1f}"),
                ("Cohen's κ", agreement.kappa, "n/a" if agreement.kappa is None else f"{agreement.kappa:.3f}"),
                ("McNemar p", p, "n/a" if p is None else f"{p:.3g}")):
            row[header] = text
            table.add_cell(ref, header, text, {**agree_src, "metric": f"common.stats.judge_agreement.{header}", "value": value,
                                               "mcnemar": agreement.mcnemar.to_dict() if header == "McNemar p" else None})
        ident = Identity(run.answer_model(), f"{run.judge_model(primary)} vs {run.judge_model(secondary)}",
                         run.identity(primary, ctx.published).protocol)
        row["Judges"] = ident.judge_model
        table.rows.append(row)
        if run.coverage_warning:
            table.notes.append(f"{ref}: {run.coverage_warning}")
        links_m.append((ref, ident))
        for pi, prow in enumerate(pubs_all, 1):
            if prow.benchmark == benchmark:
                pref = f"P{pi}"
                links_p.append((pref, prow))
                table.rows.append({"Ref": pref, "Benchmark": f"{benchmark} (paper)",
                                   **{h: prow.values.get(k, NOT_REPORTED) for k, h, _ in T10_COLUMNS},
                                   **{h: NOT_REPORTED for h in agree_cols}, "Judges": prow.identity.judge_model})
                _published_row(table, pref, prow)
    if errors:
        raise MissingRun(" | ".join(errors))
    _link(table, links_p, links_m)
    table.notes += [
        "M rows: computed by common.stats from the main runs' per-category accuracies (verified against "
        "01_gold.jsonl + 08_judge files; failures count as wrong); r across categories, overall excluded; SD is "
        "the population SD. Agreement, Cohen's κ and the exact McNemar test pair the two judges' labels per "
        "question (strict: a failed judgment is wrong); the paper could not report them.",
        COMPARABLE_NOTE, *_source_notes(links_p, ctx.published), *ctx.published.tables["table10"].get("notes", [])]
    return table


BUILDERS: dict[str, Callable[[Context], Table]] = {"1": table1, "2": table2, "3": table3, "4": table4, "10": table10}


# ----------------------------------------------------------------------------- writers
def markdown(table: Table) -> str:
    def esc(text: str) -> str:
        return str(text).replace("|", "\\|")

    head = "| " + " | ".join(map(esc, table.columns)) + " |\n|" + "---|" * len(table.columns) + "\n"
    body = "".join("| " + " | ".join(esc(r.get(c, "")) for c in table.columns) + " |\n" for r in table.rows)
    notes = "".join(f"- {n}\n" for n in table.notes)
    return f"{table.title}\n\n{head}{body}\nNotes:\n\n{notes}"


_LATEX_SPECIAL = {"\\": r"\textbackslash{}", "&": r"\&", "%": r"\%", "$": r"\$", "#": r"\#", "_": r"\_",
                  "{": r"\{", "}": r"\}", "~": r"\textasciitilde{}", "^": r"\textasciicircum{}",
                  "|": r"\textbar{}", "<": r"\textless{}", ">": r"\textgreater{}"}
# Non-ASCII symbols our tables use, as LaTeX that compiles without extra packages.
_LATEX_SYMBOLS = {"Δ": r"\ensuremath{\Delta}", "κ": r"\ensuremath{\kappa}", "−": "--", "—": "---", "↔": "/"}


def latex_escape(text: str) -> str:
    out = "".join(_LATEX_SPECIAL.get(ch, ch) for ch in str(text))
    for sym, tex in _LATEX_SYMBOLS.items():
        out = out.replace(sym, tex)
    return out


def latex(table: Table) -> str:
    """A ``table`` float: pandas Styler tabular (needs jinja2) plus caption and notes."""
    df = table.frame().map(latex_escape)
    df.columns = [latex_escape(c) for c in df.columns]
    tabular = df.style.hide(axis="index").to_latex(hrules=True, column_format="l" * len(df.columns))
    notes = "\\\\\n".join(latex_escape(n) for n in table.notes)
    return ("% Generated by python -m common.tables; do not edit.\n\\begin{table}[t]\n\\centering\\scriptsize\n"
            f"\\caption{{{latex_escape(table.title)}}}\n\\label{{tab:{table.name}}}\n{tabular}"
            f"\\par\\smallskip\\raggedright\\tiny {notes}\n\\end{{table}}\n")


def write(table: Table, out: Path, meta: dict[str, Any]) -> list[Path]:
    out.mkdir(parents=True, exist_ok=True)
    paths = [out / f"{table.name}.{ext}" for ext in ("md", "csv", "tex")]
    paths[0].write_text(markdown(table), encoding="utf-8")
    table.frame().to_csv(paths[1], index=False)
    paths[2].write_text(latex(table), encoding="utf-8")
    sidecar = out / f"{table.name}.sources.json"
    sidecar.write_text(json.dumps({"table": table.name, "title": table.title, **meta, "cells": table.cells,
                                   "published_rows": table.published, "notes": table.notes},
                                  ensure_ascii=False, indent=2) + "\n", encoding="utf-8")
    return [*paths, sidecar]


# ----------------------------------------------------------------------------- CLI
def add_common_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--results", default="results", help="results directory holding <benchmark>/<run>/")
    parser.add_argument("--experiments", default=exp_mod.DEFAULT_PATH, help="the list of runs")
    parser.add_argument("--published", default=DEFAULT_PUBLISHED, help="the paper's transcribed rows")
    parser.add_argument("--subset", default=None, help="ablation subset file, or 'all' (default: the configured one)")


def context(args: argparse.Namespace) -> Context:
    return Context(resolve_path(args.results), exp_mod.load(args.experiments), load_published(args.published), args.subset)


def cli(argv: Optional[list[str]], *, prog: str, doc: str, kind: str, default_out: str,
        builders: dict[str, Callable[[Context, Path, dict[str, Any]], list[Path]]]) -> int:
    """Shared CLI of ``common.tables`` and ``common.figures``: build each wanted item, write what can be
    written, report every failure on its own line, exit 1 if any failed (2 for a bad config)."""
    parser = argparse.ArgumentParser(prog=prog, description=doc.split("\n\n")[0])
    add_common_args(parser)
    parser.add_argument("--out", default=default_out, help=f"where the {kind} files go")
    parser.add_argument("--only", default=",".join(builders), help=f"comma-separated {kind} numbers ({','.join(builders)})")
    args = parser.parse_args(argv)
    wanted = [t.strip() for t in args.only.split(",") if t.strip()]
    unknown = [t for t in wanted if t not in builders]
    if unknown:
        parser.error(f"--only: unknown {kind}(s) {unknown}; known: {', '.join(builders)}")
    try:
        ctx = context(args)
    except ConfigError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    out = resolve_path(args.out)
    meta = {"generated_by": prog, "results": str(ctx.results), "experiments": str(ctx.exp.source),
            "published": str(ctx.published.path)}
    failed = 0
    for t in wanted:
        try:
            paths = builders[t](ctx, out, meta)
        except (TableError, ConfigError) as exc:
            failed += 1
            print(f"{kind} {t}: error: {exc}", file=sys.stderr)
            continue
        print(f"{kind} {t}: " + ", ".join(str(p) for p in paths))
    return 1 if failed else 0


def main(argv: Optional[list[str]] = None) -> int:
    return cli(argv, prog="python -m common.tables", doc=__doc__ or "", kind="table", default_out=DEFAULT_OUT,
               builders={t: (lambda ctx, out, meta, b=b: write(b(ctx), out, meta)) for t, b in BUILDERS.items()})


if __name__ == "__main__":
    sys.exit(main())
