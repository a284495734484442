"""A run's judge labels joined with its gold: the input of every comparison and table recount.

``load_labels`` reads ``01_gold.jsonl`` and one ``08_judge_<judge>.jsonl`` of a run directory and
returns one record per scored question, failures kept (label None, with their cause).
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional

import yaml

from common.benchmarks.registry import ADAPTERS, adapter
from common.core import artifacts
from common.core.io import ArtifactError, read_jsonl
from common.core.schema import Gold, from_dict
from common.core.yamlio import load_yaml
from common.evaluation.scoring import failure_cause
from common.evaluation.stats import accuracy_with_ci

# Cause recorded for a scored question that has no row in the judge file.
MISSING = "missing_judgment"


@dataclass(frozen=True)
class LabelRecord:
    """One scored question of a run under one judge."""

    qid: str
    category: str  # LoCoMo category name (multi-hop ...), LongMemEval question_type
    label: Optional[int]  # 1 correct, 0 wrong, None failed
    cause: str = ""  # "" when judged; else the error prefix (judge_parse_error ...) or MISSING
    cluster: str = ""  # the memory the question is asked of (LoCoMo conversation, LongMemEval haystack)


@dataclass(frozen=True)
class RunLabels:
    """The scored questions of one run under one judge, in gold order."""

    run_dir: str
    benchmark: str
    judge: str
    judge_models: tuple[str, ...]  # distinct judge_model values in the file (normally one)
    records: tuple[LabelRecord, ...]
    n_unknown_rows: int = 0  # judge rows whose qid is not in 01_gold.jsonl (stale file?)

    def by_qid(self) -> dict[str, Optional[int]]:
        return {r.qid: r.label for r in self.records}

    def categories(self) -> dict[str, str]:
        return {r.qid: r.category for r in self.records}

    def clusters(self) -> dict[str, str]:
        """qid -> the memory it is asked of: the unit of the cluster bootstrap."""
        return {r.qid: r.cluster for r in self.records}


def clustered_accuracy(run: RunLabels, category: Optional[str] = None, **bootstrap: Any) -> dict[str, Any]:
    """Accuracy of a run (or of one category) with the question and the cluster bootstrap CIs and the power note.

    ``common.evaluation.stats.accuracy_with_ci`` with each question's memory as its cluster (LoCoMo:
    the conversation; LongMemEval: the haystack, one per question). ``bootstrap`` passes
    ``n_resamples``, ``seed`` or ``confidence`` through.
    """
    records = [r for r in run.records if category is None or r.category == category]
    return accuracy_with_ci([r.label for r in records], clusters=[r.cluster for r in records], **bootstrap)


def run_benchmark(run_dir: str | Path) -> str:
    """The ``benchmark:`` key of ``<run_dir>/config.resolved.yaml``."""
    path = Path(run_dir) / "config.resolved.yaml"
    if not path.exists():
        raise ArtifactError(f"{path}: not found; is {run_dir} a run directory (results/<benchmark>/<run>/)?")
    try:
        cfg = load_yaml(path.read_text(encoding="utf-8"))
    except yaml.YAMLError as exc:
        raise ArtifactError(f"{path}: invalid YAML ({exc.__class__.__name__})") from None
    benchmark = cfg.get("benchmark") if isinstance(cfg, dict) else None
    if benchmark not in ADAPTERS:
        raise ArtifactError(f"{path}: benchmark: expected one of {', '.join(ADAPTERS)}, got {benchmark!r}")
    return benchmark


def run_judges(run_dir: str | Path) -> list[str]:
    """Names of the judges with an ``08_judge_<name>.jsonl`` in the run, sorted."""
    return artifacts.judges(Path(run_dir))


def category_order(benchmark: str) -> list[str]:
    """Category names in the column order of the paper's Table 1 / Table 2."""
    return list(adapter(benchmark).categories)


def load_labels(run_dir: str | Path, judge: str) -> RunLabels:
    """Join a run's scored gold questions with one judge's labels.

    Args:
        run_dir: ``results/<benchmark>/<run>/`` holding ``config.resolved.yaml``,
            ``01_gold.jsonl`` and ``08_judge_<judge>.jsonl``.
        judge: The judge name (file suffix).

    Returns:
        One record per scored question (``adapter(benchmark).is_scored``), in gold order. A
        scored question without a judge row gets label None and cause ``missing_judgment``.

    Raises:
        ArtifactError: A file is missing (the message names it and the judges that exist), or
            a row is malformed (the message names the file, the row and the field).
    """
    run_dir = Path(run_dir)
    benchmark = run_benchmark(run_dir)
    judge_path = artifacts.judge_path(run_dir, judge)
    if not judge_path.exists():
        have = ", ".join(run_judges(run_dir)) or "none"
        raise ArtifactError(f"{judge_path}: not found (judges in this run: {have}); run 08_judge first")
    gold_path = artifacts.path(run_dir, "gold")
    golds = []
    for i, row in enumerate(read_jsonl(gold_path), 1):
        try:
            golds.append(from_dict(Gold, row))
        except (TypeError, ValueError) as exc:
            raise ArtifactError(f"{gold_path}: row {i}: {exc}") from None
    judged = _judge_rows(judge_path)
    data = adapter(benchmark)
    # One cause vocabulary for metrics.json and comparisons (common.evaluation.scoring.CAUSES).
    records = tuple(
        LabelRecord(qid=g.qid, category=data.category(g),
                    label=judged[g.qid]["label"] if g.qid in judged else None,
                    cause=failure_cause(judged.get(g.qid)), cluster=g.memory_id)
        for g in golds if data.is_scored(g)
    )
    gold_qids = {g.qid for g in golds}
    models = tuple(sorted({str(r.get("judge_model", "")) for r in judged.values()}))
    return RunLabels(run_dir=str(run_dir), benchmark=benchmark, judge=judge, judge_models=models,
                     records=records, n_unknown_rows=sum(q not in gold_qids for q in judged))


def _judge_rows(path: Path) -> dict[str, dict[str, Any]]:
    rows: dict[str, dict[str, Any]] = {}
    for i, row in enumerate(read_jsonl(path), 1):
        qid, label = row.get("qid"), row.get("label", "absent")
        if not isinstance(qid, str):
            raise ArtifactError(f"{path}: row {i}: qid: expected a string, got {qid!r}")
        if label is not None and (isinstance(label, bool) or label not in (0, 1)):
            raise ArtifactError(f"{path}: row {i} ({qid}): label: expected 1, 0 or null, got {label!r}")
        if qid in rows:
            raise ArtifactError(f"{path}: row {i}: qid: {qid!r} is judged twice")
        rows[qid] = row
    return rows
