"""Reading the runs a table or figure needs: ``metrics.json``, per-question artifacts, judge labels.

``open_run`` finds a run of ``configs/experiments.yaml`` under the results directory (else
``MissingRun`` naming the path and the ``make`` command that creates it); ``measured`` returns a
``metrics.json`` accuracy only after recounting it from the gold and judge files. Every file a
run serves is hashed, so each printed number names the exact bytes it came from. Files are found
through ``common.core.artifacts``, which also resolves the names older runs used.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, Optional, Sequence

from common.benchmarks.registry import adapter
from common.core import artifacts
from common.core.config import ConfigError, load_config
from common.core.io import ArtifactError, read_json, read_jsonl, sha256_file
from common.core.schema import Gold, from_dict
from common.evaluation.coverage import Coverage, of_metrics, question_set_id, question_sets_differ
from common.evaluation.labels import RunLabels, load_labels
from common.evaluation.metrics import accuracy
from common.pipeline import experiments as exp_mod
from common.pipeline import ledger
from common.report.tables.published import NOT_STATED, Identity, Published

GROUP_KEY = {"locomo": "by_category", "longmemeval": "by_type", "realtalk": "by_category"}
# The commands that create each kind of run (error messages name them).
MAKE_MAIN = {"locomo": "make locomo", "longmemeval": "make longmemeval", "beam": "make beam",
             "realtalk": "make realtalk", "locomo_plus": "make locomo-plus"}
MAKE_JUDGE2 = {"locomo": "make judge2", "longmemeval": "make judge2-longmemeval"}
MAKE_BASELINES = {"locomo": "make baselines", "longmemeval": "make baselines-longmemeval",
                  "beam": "make baselines-beam", "realtalk": "make baselines-realtalk",
                  "locomo_plus": "make baselines-locomo-plus"}
MAKE_ABLATIONS = {"locomo": "make ablations", "longmemeval": "make ablations-longmemeval",
                  "beam": "make ablations-beam", "realtalk": "make ablations-realtalk",
                  "locomo_plus": "make ablations-locomo-plus"}


class TableError(RuntimeError):
    """A table cannot be built; the message is one line naming the file and what to run."""


class MissingRun(TableError):
    """A run, or a judge of a run, that a table needs does not exist yet."""


class InconsistentRun(TableError):
    """``metrics.json`` disagrees with the per-question files it was aggregated from."""


@dataclass
class RunData:
    """One run directory, read lazily; every file it serves is hashed for provenance."""

    benchmark: str
    name: str
    dir: Path
    metrics: dict[str, Any]

    @property
    def metrics_path(self) -> Path:
        return artifacts.path(self.dir, "metrics")

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
    def coverage(self) -> Coverage:
        """What the run covers (``common.evaluation.coverage``, as 09_aggregate recorded it)."""
        return of_metrics(self.metrics, self.benchmark)

    @property
    def question_set(self) -> tuple[str, int]:
        """(question-set id, number of questions) of the run's scored questions, recounted from
        ``01_gold.jsonl`` (``common.evaluation.coverage.question_set_id``); ``InconsistentRun`` when
        metrics.json recorded another."""
        data = adapter(self.benchmark)
        qids = [g["qid"] for g in self.rows("gold") if data.is_scored(from_dict(Gold, g))]
        qs = question_set_id(qids)
        stored = ((self.metrics.get("coverage") or {}).get("question_set") or {}).get("id")
        if stored and stored != qs:
            raise InconsistentRun(f"{self.metrics_path}: coverage.question_set.id: {stored} but "
                                  f"{self.path('gold').name} gives {qs}; rerun 09_aggregate")
        return qs, len(set(qids))

    @property
    def question_set_text(self) -> str:
        """``qs-3f2a9c1b0d (20)``: the id and its number of questions, as the tables print it."""
        qs, n = self.question_set
        return f"{qs} ({n:,})"

    @property
    def coverage_warning(self) -> str:
        """09_aggregate's PARTIAL warning when the run covers fewer questions than the benchmark."""
        cov = self.metrics.get("coverage")
        return str(cov.get("warning") or "") if isinstance(cov, dict) else ""

    @property
    def dataset_warning(self) -> str:
        """09_aggregate's MODIFIED DATASET warning when the benchmark file is not the official release."""
        ds = self.metrics.get("dataset")
        return str(ds.get("warning") or "") if isinstance(ds, dict) else ""

    _sha: dict[Path, str] = field(default_factory=dict, repr=False)
    _rows: dict[Path, list[dict[str, Any]]] = field(default_factory=dict, repr=False)
    _labels: dict[str, RunLabels] = field(default_factory=dict, repr=False)

    def path(self, name: str) -> Path:
        """The file of artifact ``name`` (``gold``, ``plans``, ``answers``, ``metrics`` ...)."""
        return artifacts.path(self.dir, name)

    def judge_path(self, judge: str) -> Path:
        return artifacts.judge_path(self.dir, judge)

    def files(self, *names: str, judges: Sequence[str] = ()) -> dict[str, str]:
        """sha256 of artifacts ``names`` and of the files of ``judges``, keyed by file name as on disk."""
        paths = [self.path(n) for n in names] + [self.judge_path(j) for j in judges]
        return {p.name: self._sha256(p) for p in paths}

    def rows(self, name: str) -> list[dict[str, Any]]:
        return self._read(self.path(name))

    def judge_rows(self, judge: str) -> list[dict[str, Any]]:
        return self._read(self.judge_path(judge))

    def _sha256(self, path: Path) -> str:
        if path not in self._sha:
            self._sha[path] = sha256_file(path)
        return self._sha[path]

    def _read(self, path: Path) -> list[dict[str, Any]]:
        if path not in self._rows:
            try:
                self._rows[path] = read_jsonl(path)
            except ArtifactError as exc:
                raise TableError(str(exc)) from None
        return self._rows[path]

    def labels(self, judge: str) -> RunLabels:
        """The scored questions joined with one judge's labels."""
        if judge not in self._labels:
            try:
                self._labels[judge] = load_labels(self.dir, judge)
            except ArtifactError as exc:
                raise TableError(str(exc)) from None
        return self._labels[judge]

    def efficiency(self, qids: set[str]) -> dict[str, Any]:
        """``common.pipeline.ledger.efficiency`` of ``qids``: the harness's one definition of the Table 3 quantities."""
        return ledger.efficiency(self.dir, qids=qids)

    def judge_names(self) -> list[str]:
        return list(self.metrics.get("judges") or {})

    def answer_model(self) -> str:
        models = sorted({str(r.get("model")) for r in self.rows("answers") if r.get("model")})
        return " + ".join(models) or NOT_STATED

    def identity(self, judge: str, published: Published) -> Identity:
        prompts = {str(r.get("prompt_id", "")) for r in self.judge_rows(judge)}
        return Identity(self.answer_model(), self.judge_model(judge), published.protocol_of(prompts),
                        self.coverage.mark if self.coverage.partial else "")

    def judge_model(self, judge: str) -> str:
        return str(self.metrics["judges"][judge].get("judge_model") or judge)


def differing_question_sets(rows: Sequence[tuple[str, RunData]]) -> list[str]:
    """One warning per benchmark whose rows (label, run) are over different questions, else none."""
    out = []
    for benchmark in dict.fromkeys(r.benchmark for _, r in rows):
        line = question_sets_differ({label: r.question_set for label, r in rows if r.benchmark == benchmark})
        if line:
            out.append(f"{benchmark}: {line}")
    return out


def open_run(results: Path, benchmark: str, run: str, make_hint: str) -> RunData:
    """A run with a ``metrics.json``, or ``MissingRun`` naming the path and the command."""
    run_dir = exp_mod.Experiments.run_dir(results, benchmark, run)
    path = artifacts.path(run_dir, "metrics")
    if not path.exists():
        what = "run directory not found" if not run_dir.exists() else "no metrics.json (run not finished)"
        raise MissingRun(f"{path}: {what}; create it with `{make_hint}`")
    metrics = read_json(path, TableError)
    if not isinstance(metrics.get("judges"), dict):
        raise TableError(f"{path}: judges: expected a mapping of judge name -> accuracies")
    return RunData(benchmark, run, run_dir, metrics)


@dataclass(frozen=True)
class Measured:
    """One verified accuracy: the metrics.json summary and where it came from."""

    summary: dict[str, Any]
    source: dict[str, Any]


def same_number(a: Any, b: Any) -> bool:
    """Equal as stored in JSON: both None, or equal to 1e-9 (a float may round-trip through JSON)."""
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
        raise MissingRun(f"{run.judge_path(judge)}: judge {judge!r} not in {run.metrics_path}{hint}")
    key = "overall" if group is None else f"{GROUP_KEY[run.benchmark]}.{group}"
    summary = jm.get("overall") if group is None else (jm.get(GROUP_KEY[run.benchmark]) or {}).get(group)
    labels = [r.label for r in run.labels(judge).records if group is None or r.category == group]
    expect = accuracy(labels)
    gold_file, judge_file = run.path("gold").name, run.judge_path(judge).name
    if summary is None:
        if expect["n"]:
            raise InconsistentRun(f"{run.metrics_path}: judges.{judge}.{key}: absent, but {gold_file} + "
                                  f"{judge_file} hold {expect['n']} such questions; rerun 09_aggregate")
        summary = dict(expect)
    bad: list[Literal["k", "n", "n_failed"]] = [f for f in ("k", "n", "n_failed") if summary.get(f) != expect[f]]
    if bad or not same_number(summary.get("accuracy"), expect["accuracy"]):
        field_: Literal["k", "n", "n_failed", "accuracy"] = bad[0] if bad else "accuracy"
        raise InconsistentRun(
            f"{run.metrics_path}: judges.{judge}.{key}.{field_}: {summary.get(field_)!r} but {gold_file} + "
            f"{judge_file} give {expect[field_]!r}; rerun 09_aggregate (or the run is corrupt)")
    source = {
        "run_dir": str(run.dir), "metric": f"judges.{judge}.{key}",
        "files": run.files("metrics", "gold", judges=[judge]),
        "recounted_from": [gold_file, judge_file],
        "k": summary["k"], "n": summary["n"], "accuracy": summary["accuracy"], "n_failed": summary["n_failed"],
        "judge_model": jm.get("judge_model"), "ci": summary.get("ci"), "ci_cluster": summary.get("ci_cluster"),
        "ci_exact": summary.get("ci_exact"), "power": summary.get("power"), "fingerprint": run.fingerprint_for(judge),
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
        for run in runs.values():
            qids = {g["qid"] for g in run.rows("gold")}
            extra = sorted(qids - set(subset.question_ids))
            if extra:
                raise InconsistentRun(f"{run.path('gold')}: question {extra[0]} is not in subset {subset.path}; "
                                      f"the run was made with another subset, rerun `{MAKE_ABLATIONS[benchmark]}`")
    return runs, subset


def subset_note(subset: Any, runs: dict[str, RunData]) -> str:
    sizes = sorted({len(r.rows("gold")) for r in runs.values()})
    if subset is None:
        return f"Ablation runs on every question of the main config ({'/'.join(map(str, sizes))} questions)."
    return (f"Measured on subset {subset.name} ({subset.path.name}, {len(subset.question_ids)} question ids; runs hold "
            f"{'/'.join(map(str, sizes))}). The paper's ablation subset is unpublished (88 questions inferred), "
            "so its questions differ.")


def benchmark_runs(results: Path, benchmark: str) -> list[RunData]:
    """Every finished run of ``benchmark`` under ``results/<benchmark>/`` (a ``metrics.json`` of that
    benchmark with judges), sorted by name: the runs of BEAM's and REALTALK's own tables."""
    out = []
    for metrics in sorted((results / benchmark).glob("*/metrics.json")):
        data = read_json(metrics, TableError)
        if data.get("benchmark") == benchmark and isinstance(data.get("judges"), dict):
            out.append(RunData(benchmark, metrics.parent.name, metrics.parent, data))
    return out


@dataclass
class Context:
    """What every table and figure builder reads: the results directory, the list of runs, the paper's rows.

    ``run``: the main run a user named (``RUN=``, a name or a run directory); without it the main run
    of each benchmark is ``configs/experiments.yaml``'s (``paper``) when it exists, else the newest
    complete run of the paper's config, else the newest such run (PARTIAL, and said so).
    """

    results: Path
    exp: exp_mod.Experiments
    published: Published
    subset_choice: Optional[str] = None
    run: Optional[str] = None
    _runs: dict[tuple[str, str], RunData] = field(default_factory=dict, repr=False)
    chosen: dict[str, str] = field(default_factory=dict)  # benchmark -> why its main run is the one shown
    # benchmark -> the warning every table and figure of it prints when no one named its main run
    # (neither RUN= nor configs/experiments.yaml's run exists) and the newest run was taken.
    unnamed: dict[str, str] = field(default_factory=dict)

    def main_run(self, benchmark: str) -> RunData:
        key = (benchmark, "")
        if key not in self._runs:
            self._runs[key] = self._choose(benchmark)
        return self._runs[key]

    def _choose(self, benchmark: str) -> RunData:
        if self.run:
            path = Path(self.run)
            if path.is_dir() and (path / "metrics.json").exists():  # a run directory: its own benchmark only
                if path.resolve().parent.name != benchmark:
                    raise MissingRun(f"RUN={self.run} is a {path.resolve().parent.name} run; no {benchmark} run "
                                     f"named; create one with `{MAKE_MAIN[benchmark]} RUN={path.name}`")
                run = open_run(path.resolve().parent.parent, benchmark, path.name, MAKE_MAIN[benchmark])
            else:
                run = open_run(self.results, benchmark, self.run, f"{MAKE_MAIN[benchmark]} RUN={self.run}")
            self.chosen[benchmark] = f"main {benchmark} run {run.name} (RUN={self.run})"
            return run
        hint = f"{MAKE_MAIN[benchmark]} RUN={self.exp.main_run}"
        try:
            run = open_run(self.results, benchmark, self.exp.main_run, hint)
            self.chosen[benchmark] = f"main {benchmark} run {run.name} (configs/experiments.yaml main.run)"
            return run
        except MissingRun as missing:
            candidates = paper_config_runs(self.results, benchmark, self.exp)
            if not candidates:
                raise missing from None
        complete = [r for r in candidates if r.coverage.complete]
        if complete:
            run = complete[0]
            self.chosen[benchmark] = (f"main {benchmark} run {run.name}: the newest complete run of the paper's "
                                      f"config (no run {self.exp.main_run}; RUN= names another)")
        else:
            run = candidates[0]
            self.chosen[benchmark] = (f"main {benchmark} run {run.name}: {run.coverage.mark}, the newest run of the "
                                      f"paper's config (no complete one; RUN= names another)")
        others = [r.name for r in candidates if r is not run]
        self.unnamed[benchmark] = (
            f"main run chosen, not named: {run.name} ({run.coverage.mark}, question set {run.question_set_text}) is "
            f"the newest {'complete ' if complete else ''}run of the paper's config, since neither RUN= nor "
            f"configs/experiments.yaml's run {self.exp.main_run} names one"
            + (f"; other candidates: {', '.join(others)}" if others else "") + f"; name it with RUN={run.name}")
        return run


def paper_method(benchmark: str) -> str:
    """``method.name`` of the paper's config (``configs/<benchmark>.yaml``)."""
    try:
        return str(load_config([f"configs/{benchmark}.yaml"]).method.name)
    except (ConfigError, FileNotFoundError):
        return "ensimem"


def paper_config_runs(results: Path, benchmark: str, exp: exp_mod.Experiments) -> list[RunData]:
    """Finished harness runs of the paper's method (no import, baseline or ablation), newest first."""
    root = results / benchmark
    if not root.is_dir():
        return []
    method = paper_method(benchmark)
    baselines = {exp.baseline_run(b.name) for b in exp.baselines}
    out = []
    for d in root.iterdir():
        metrics_path = d / "metrics.json"
        if (not metrics_path.is_file() or (d / "source.json").exists() or d.name in baselines
                or d.name.startswith("ablation_")):
            continue
        metrics = read_json(metrics_path, TableError)
        name = (metrics.get("method") or {}).get("name") if isinstance(metrics.get("method"), dict) else None
        if name not in (None, method) or not isinstance(metrics.get("judges"), dict):
            continue
        out.append((metrics_path.stat().st_mtime, d.name, RunData(benchmark, d.name, d, metrics)))
    return [r for _, _, r in sorted(out, key=lambda t: (t[0], t[1]), reverse=True)]
