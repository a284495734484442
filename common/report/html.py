"""make report: one static, self-contained HTML page per run, question by question.

    python -m common.report.html RUN_DIR [--b OTHER_RUN_DIR] [--judge NAME] [--out PATH]
    python -m common.report.html --run paper [--benchmark locomo] [--b baseline_full_context]

Writes ``<run dir>/report/index.html`` from the run's artifacts only (no LLM call, no network):
the overview (the Table 1/2 row with k/n and CI, failures by cause, fingerprints, ledger totals,
the loss decomposition of ``common.evaluation.loss`` as a table and a chart), the question list
(filters and sorting) and, when a question is opened, its detail in pipeline order: question,
plan, per-hop matched records and episodes, the evidence buffer with the gold evidence turns
highlighted, answer, gold, every judge's raw reply and label, the official F1, and the file and
line of every JSONL row shown. With ``--b``: the flipped questions of two runs and the paired
McNemar line of ``common.report.compare``.

The page carries its data as one JSON block and builds a question's detail only when it is
opened, so 1,986 questions stay responsive. Buffers are stored once per distinct episode block
(``\\n\\n### ...``): many questions share episodes, and a full-context baseline repeats one
conversation per question.
"""
from __future__ import annotations

import argparse
import html
import json
import re
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

from common.benchmarks.registry import adapter
from common.core import artifacts
from common.core.io import ArtifactError, numbered_rows, read_json
from common.core.schema import Gold, from_dict
from common.evaluation.coverage import of_metrics
from common.evaluation.labels import load_labels, run_benchmark, run_judges
from common.evaluation.loss import CLASSES, as_row, decompose, question_losses
from common.evaluation.metrics import locomo_f1
from common.pipeline.experiments import MAIN_CONFIGS, resolve_run
from common.pipeline.importer import SOURCE_FILE
from common.report.compare import _pick_judge, compare_runs
from common.systems import identity

Corrected = Mapping[str, Sequence[str]]  # qid -> corrected evidence dia ids (errata)
TEMPLATES = Path(__file__).resolve().parent / "templates"
TEMPLATE = "report.html.j2"
# A buffer is a sequence of "### ..." blocks separated by a blank line (common.method.render).
BLOCK_SPLIT = re.compile(r"\n\n(?=### )")
CHART_COLORS = {"ok": "#2e7d32", "lucky": "#9ccc65", "partial": "#ffb300", "reading_error": "#e53935",
                "retrieval_miss": "#8e24aa", "no_gold_evidence": "#90a4ae", "no_buffer": "#cfd8dc",
                "failed": "#424242"}


# ----------------------------------------------------------------------------- reading a run
@dataclass
class Rows:
    """The rows of one JSONL artifact keyed by ``key``, with the line each came from (the last wins)."""

    file: str
    rows: dict[str, dict[str, Any]] = field(default_factory=dict)
    lines: dict[str, int] = field(default_factory=dict)

    def get(self, key: str) -> Optional[dict[str, Any]]:
        return self.rows.get(key)

    def where(self, key: str) -> Optional[str]:
        return f"{self.file}:{self.lines[key]}" if key in self.lines else None


def read_rows(path: Path, key: str = "qid") -> Rows:
    """Rows of ``path`` by ``key`` with 1-based line numbers; a missing file gives no rows."""
    out = Rows(path.name)
    if not path.exists():
        return out
    for lineno, row in numbered_rows(path):
        if isinstance(row, dict) and isinstance(row.get(key), str):
            out.rows[row[key]] = row
            out.lines[row[key]] = lineno
    return out


def _json(path: Path) -> dict[str, Any]:
    if not path.exists():
        return {}
    data = read_json(path)
    return data if isinstance(data, dict) else {}


class Blocks:
    """Distinct buffer blocks, each stored once; a buffer becomes a list of block numbers."""

    def __init__(self) -> None:
        self.texts: list[str] = []
        self._index: dict[str, int] = {}

    def add(self, buffer: str) -> list[int]:
        parts = BLOCK_SPLIT.split(buffer) if buffer else []
        ids = []
        for p in parts:
            if p not in self._index:
                self._index[p] = len(self.texts)
                self.texts.append(p)
            ids.append(self._index[p])
        return ids


def _turn_lines(run_dir: Path, wanted: dict[str, set[str]]) -> dict[str, dict[str, str]]:
    """memory id -> dia id -> '[dia] speaker: text' for the gold turns of each memory."""
    out: dict[str, dict[str, str]] = {}
    path = artifacts.path(run_dir, "sessions")
    if not path.exists() or not wanted:
        return out
    with path.open(encoding="utf-8") as fh:
        for line in fh:
            if not line.strip():
                continue
            s = json.loads(line)
            need = wanted.get(s.get("memory_id", ""))
            if not need:
                continue
            for t in s.get("turns", []):
                if t.get("dia_id") in need:
                    out.setdefault(s["memory_id"], {})[t["dia_id"]] = (
                        f"[{t['dia_id']}] {t.get('speaker', '')}: {t.get('text', '')} "
                        f"({s.get('session_id', '')}, {s.get('date_time', '')})")
    return out


def _records(run_dir: Path, wanted: set[str]) -> dict[str, dict[str, Any]]:
    """The extracted records named by retrieval rows (only those), by record id."""
    out: dict[str, dict[str, Any]] = {}
    path = artifacts.path(run_dir, "records")
    if not path.exists() or not wanted:
        return out
    with path.open(encoding="utf-8") as fh:
        for lineno, line in enumerate(fh, 1):
            if not line.strip():
                continue
            for rec in json.loads(line).get("records", []):
                if rec.get("record_id") in wanted:
                    out[rec["record_id"]] = {**rec, "_where": f"{path.name}:{lineno}"}
    return out


# ----------------------------------------------------------------------------- the page's data
def _strict(label: Optional[int]) -> int:
    return 1 if label == 1 else 0


def _judge_view(rows: Rows, qid: str) -> Optional[dict[str, Any]]:
    row = rows.get(qid)
    if row is None:
        return None
    return {**{k: row.get(k) for k in ("label", "raw", "parse_ok", "judge_model", "prompt_id", "error")},
            "where": rows.where(qid), "rubric": _rubric_view(row.get("scores"))}


def _rubric_view(scores: Any) -> Optional[dict[str, Any]]:
    """A rubric judge's per-item verdicts (BEAM, ``common.evaluation.beam``): each item with its
    score under the official ``int`` rule and the float one, the reason, the question's scores of
    every variant computed and the event-ordering ``tau_norm``; None for a label-only judge."""
    if not isinstance(scores, dict) or not isinstance(scores.get("items"), list):
        return None

    def items(key: str) -> Optional[list[dict[str, Any]]]:
        rows = scores.get(key)
        return None if not isinstance(rows, list) else [
            {k: i.get(k) for k in ("item", "score", "int", "float", "reason")} for i in rows if isinstance(i, dict)]

    ordering = scores.get("ordering") if isinstance(scores.get("ordering"), dict) else None
    return {"items": items("items"), "filled_items": items("filled_items"), "headline": scores.get("headline"),
            "variants": {v: scores.get(v) for v in ("official", "float", "filled", "corrected")
                         if scores.get(v) is not None},
            "ordering": None if ordering is None else {k: ordering.get(k) for k in (
                "tau_norm", "tau_undefined", "precision", "recall", "f1")}}


def question_data(run_dir: Path, judge: str, corrected: Optional[Corrected] = None) -> dict[str, Any]:
    """Everything the list and the details show, built from the run's files.

    ``corrected`` (qid -> dia ids, e.g. errata) replaces the gold evidence of the questions it names
    in the loss classes and the highlighted turns, as in ``common.evaluation.loss.decompose``.
    """
    benchmark = run_benchmark(run_dir)
    data = adapter(benchmark)
    gold_rows = read_rows(artifacts.path(run_dir, "gold"))
    if not gold_rows.rows:
        raise ArtifactError(f"{artifacts.path(run_dir, 'gold')}: missing or empty; run 01_preprocess first")
    questions = read_rows(artifacts.path(run_dir, "questions"))
    plans = read_rows(artifacts.path(run_dir, "plans"))
    rets = read_rows(artifacts.path(run_dir, "retrievals"))
    answers = read_rows(artifacts.path(run_dir, "answers"))
    judges = run_judges(run_dir)
    judged = {j: read_rows(artifacts.judge_path(run_dir, j)) for j in judges}
    losses = {q.qid: q for q in question_losses(run_dir, judge, corrected)}
    others = {j: {q.qid: q.label for q in question_losses(run_dir, j)} for j in judges if j != judge}
    golds = {qid: from_dict(Gold, g) for qid, g in gold_rows.rows.items()}
    wanted_turns: dict[str, set[str]] = {}
    for qid, g in golds.items():
        ids = losses[qid].coverage.gold_ids if qid in losses else tuple(g.evidence or g.has_answer)
        wanted_turns.setdefault(g.memory_id, set()).update(ids)
    turns = _turn_lines(run_dir, wanted_turns)
    records = _records(run_dir, {s.get("record_id", "") for r in rets.rows.values()
                                 for s in r.get("selected", []) if s.get("record_id")})
    blocks = Blocks()
    listed: list[dict[str, Any]] = []
    details: dict[str, Any] = {}
    for qid, g in golds.items():
        q = questions.get(qid) or {}
        ret, ans, plan = rets.get(qid), answers.get(qid), plans.get(qid)
        loss = losses.get(qid)
        scored = data.is_scored(g)
        answer = (ans or {}).get("answer")
        f1 = (round(locomo_f1(answer or "", g.answer, g.category), 4)
              if benchmark == "locomo" and scored and ans is not None else None)
        label = loss.label if loss else None
        listed.append({
            "qid": qid, "cat": data.category(g), "q": q.get("question", (ret or ans or {}).get("question", "")),
            "answer": answer, "gold": g.answer or g.adversarial_answer, "scored": scored,
            "label": (None if not scored else label), "cause": loss.cause if loss else "",
            "cls": loss.loss_class if loss else "", "tokens": (ret or {}).get("buffer_tokens"),
            "seconds": (ret or {}).get("seconds"), "f1": f1,
            "disagree": bool(loss and any(o.get(qid) is not None and label is not None and o[qid] != label
                                          for o in others.values())),
        })
        selected = (ret or {}).get("selected", [])
        details[qid] = {
            "question": {"text": q.get("question"), "date": q.get("question_date"), "memory": g.memory_id},
            "plan": (plan or {}).get("plan"), "plan_meta": {k: (plan or {}).get(k) for k in
                                                           ("repaired", "fallback_used", "error")} if plan else None,
            "retrieval": None if ret is None else {
                "mode": ret.get("mode"), "scope": ret.get("scope"), "reasoning_type": ret.get("reasoning_type"),
                "selected": [{**s, "record": records.get(s.get("record_id", ""))} for s in selected],
                "coverage": ret.get("coverage", {}), "resolved_anchors": ret.get("resolved_anchors", {}),
                "bridges": ret.get("bridges", []), "episode_ids": ret.get("episode_ids", []),
                "dia_ids": ret.get("dia_ids", []), "method_info": ret.get("method_info", {}),
                "tokens": ret.get("buffer_tokens"), "seconds": ret.get("seconds"),
                "error": ret.get("error", ""), "buffer": blocks.add(ret.get("buffer_text") or "")},
            "answer": None if ans is None else {"text": answer, "error": ans.get("error", ""),
                                                "model": ans.get("model"), "usage": ans.get("usage")},
            "gold": {"answer": g.answer, "adversarial_answer": g.adversarial_answer, "evidence": g.evidence,
                     "raw_evidence": g.raw_evidence, "has_answer": g.has_answer,
                     "answer_session_ids": g.answer_session_ids, "category": data.category(g),
                     "abstention": g.abstention,
                     "turns": [turns.get(g.memory_id, {}).get(d, f"[{d}] (not in 01_sessions.jsonl)")
                               for d in (loss.coverage.gold_ids if loss and loss.coverage.source != "answer_sessions"
                                         else g.evidence or g.has_answer)]},
            "judges": {j: _judge_view(rows, qid) for j, rows in judged.items()},
            "loss": as_row(loss) if loss else None,
            "where": {name: rows.where(qid) for name, rows in
                      (("gold", gold_rows), ("questions", questions), ("plan", plans), ("retrieval", rets),
                       ("answer", answers))},
        }
    return {"benchmark": benchmark, "questions": listed, "details": details, "blocks": blocks.texts}


def _score_cell(name: str, score: Any, summary: dict[str, Any]) -> dict[str, Any]:
    """A rubric-scored group (BEAM) in the accuracy table's shape: score, sum/n, cluster CI."""
    return {"name": name, "accuracy": score, "k": summary.get("sum"), "n": summary.get("n"),
            "ci": summary.get("ci_cluster") or summary.get("ci"), "n_failed": summary.get("n_failed"),
            "accuracy_clean": None}


def _accuracy_cells(metrics: dict[str, Any], judge: str, benchmark: str) -> list[dict[str, Any]]:
    block = metrics.get("judges", {}).get(judge, {})
    if "variants" in block:  # BEAM, LoCoMo-Plus: the headline scoring variant, per ability or category
        head = block["variants"].get(block.get("headline") or "official") or {}
        groups = head.get("by_ability") or head.get("by_category") or {}
        cells = [_score_cell(a, groups[a].get("score"), groups[a])
                 for a in adapter(benchmark).categories if a in groups]
        if isinstance(head.get("overall"), dict):  # LoCoMo-Plus: the official mean over all questions
            cells.append(_score_cell("overall", head["overall"].get("score"), head["overall"]))
        elif head.get("questions"):
            cells.append(_score_cell("overall", head.get("overall"), head["questions"]))
        return cells
    groups = block.get("by_category") or block.get("by_type") or {}
    cells = [{"name": c, **groups[c]} for c in adapter(benchmark).categories if c in groups]
    if block.get("overall"):
        cells.append({"name": "overall", **block["overall"]})
    return cells


def _chart(loss: dict[str, Any]) -> list[dict[str, Any]]:
    """One stacked bar per category (and overall): the classes as fractions of its questions."""
    bars = []
    groups = [("overall", loss.get("overall", {}))] + list(loss.get("by_category", {}).items())
    for name, block in groups:
        n = block.get("n") or 0
        x = 0.0
        segs = []
        for c in CLASSES:
            k = block.get("counts", {}).get(c, 0)
            if n and k:
                w = 100.0 * k / n
                segs.append({"cls": c, "x": round(x, 3), "w": round(w, 3), "k": k, "color": CHART_COLORS[c]})
                x += w
        bars.append({"name": name, "n": n, "segs": segs})
    return bars


def _diff(run_dir: Path, judge: str, other: Path, judge_b: Optional[str]) -> dict[str, Any]:
    """Two runs: flipped questions (right->wrong first, then wrong->right), the unchanged ones, McNemar.

    Failed judgments count as wrong (strict), as in the McNemar line above the list.
    """
    jb = _pick_judge(other, judge_b or (judge if judge in run_judges(other) else None))
    a, b = load_labels(run_dir, judge), load_labels(other, jb)
    report = compare_runs(a, b)
    overall = report["rows"][-1]
    la, lb = a.by_qid(), b.by_qid()
    answers_b = read_rows(artifacts.path(other, "answers"))
    rets_b = read_rows(artifacts.path(other, "retrievals"))
    judged_b = read_rows(artifacts.judge_path(other, jb))
    classes_b = {q.qid: q.loss_class for q in question_losses(other, jb)}
    side_b: dict[str, dict[str, Any]] = {}
    for qid in la:
        if qid in lb:
            jrow, arow = judged_b.get(qid) or {}, answers_b.get(qid) or {}
            side_b[qid] = {"label": lb[qid], "cls": classes_b.get(qid, ""), "answer": arow.get("answer"),
                           "tokens": (rets_b.get(qid) or {}).get("buffer_tokens"),
                           "raw": jrow.get("raw"), "error": jrow.get("error") or arow.get("error"),
                           "where_answer": answers_b.where(qid), "where_judge": judged_b.where(qid)}
    groups: dict[str, list[dict[str, Any]]] = {"right->wrong": [], "wrong->right": [], "both right": [],
                                               "both wrong": []}
    names = {(1, 0): "right->wrong", (0, 1): "wrong->right", (1, 1): "both right", (0, 0): "both wrong"}
    for qid in side_b:
        direction = names[(_strict(la[qid]), _strict(lb[qid]))]
        groups[direction].append({"qid": qid, "direction": direction, "label_a": la[qid], "label_b": lb[qid],
                                  "answer_b": side_b[qid]["answer"], "cls_b": side_b[qid]["cls"]})
    return {"run_b": str(other), "judge_b": jb, "questions": report["questions"], "warnings": report["warnings"],
            "mcnemar": overall["mcnemar"], "difference_ci": overall["difference_ci"],
            "acc_a": overall["a"], "acc_b": overall["b"],
            "flipped": groups["right->wrong"] + groups["wrong->right"],
            "unchanged_rows": groups["both right"] + groups["both wrong"],
            "unchanged": len(groups["both right"]) + len(groups["both wrong"]), "b": side_b}


def build(run_dir: str | Path, other: Optional[str | Path] = None, judge: Optional[str] = None,
          judge_b: Optional[str] = None, out: Optional[str | Path] = None,
          corrected: Optional[Corrected] = None) -> Path:
    """Write the report of ``run_dir`` (and the diff against ``other``); return the page's path.

    ``corrected``: optional corrected evidence (qid -> dia ids) for the loss decomposition.
    """
    import jinja2

    run_dir = Path(run_dir)
    if not run_dir.is_dir():
        raise ArtifactError(f"{run_dir}: not a run directory")
    benchmark = run_benchmark(run_dir)
    judges = run_judges(run_dir)
    chosen = _pick_judge(run_dir, judge) if judges else ""
    metrics = _json(artifacts.path(run_dir, "metrics"))
    empty: dict[str, Any] = {"benchmark": benchmark, "questions": [], "details": {}, "blocks": []}
    data = question_data(run_dir, chosen, corrected) if chosen else empty
    # The same function 09_aggregate calls, so the page and metrics.json cannot disagree.
    loss = decompose(run_dir, [chosen], corrected)["judges"][chosen] if chosen else {}
    diff = _diff(run_dir, chosen, Path(other), judge_b) if other else None
    judge_block = metrics.get("judges", {}).get(chosen, {})
    source = _json(run_dir / SOURCE_FILE)  # an imported run: the file, its claim, its unmapped rows
    page = {
        "run": metrics.get("run") or run_dir.name, "run_dir": str(run_dir), "benchmark": benchmark,
        "method": (metrics.get("method") or {}).get("label") or "method not recorded (aggregate the run again)",
        "judge": chosen, "judges": judges, "judge_model": judge_block.get("judge_model"),
        "category_label": {"locomo": "Category", "beam": "Ability", "realtalk": "Category",
                           "locomo_plus": "Category"}.get(benchmark, "Question type"),
        # no_buffer (no retrieval row: an imported run) only where some question has it: a 0 beside a
        # memory system's empty_buffer count read as a contradiction (an empty buffer is a retrieval row).
        "classes": [c for c in CLASSES if c != "no_buffer" or (loss.get("overall") or {}).get("counts", {}).get(c)],
        "colors": CHART_COLORS,
        # PARTIAL k / n in the header when the run covers fewer questions than the benchmark.
        "coverage": of_metrics(metrics, benchmark).to_dict() if metrics.get("coverage") else None,
        "accuracy_heading": ("Score (ability; headline scoring {}; k = sum of question scores; failures count 0)"
                             .format(judge_block.get("headline")) if "variants" in judge_block else
                             "Accuracy ({}; failed judgments count as wrong)".format(
                                 {"locomo": "category", "realtalk": "category"}.get(benchmark, "question type"))),
    }
    env = jinja2.Environment(loader=jinja2.FileSystemLoader(str(TEMPLATES)), autoescape=True,
                             undefined=jinja2.StrictUndefined, trim_blocks=True, lstrip_blocks=True)
    payload = {"page": page, **data, "diff": diff}
    # JSON inside <script>: escape "<" so no string can close the element.
    blob = json.dumps(payload, ensure_ascii=False, separators=(",", ":")).replace("<", "\\u003c")
    text = env.get_template(TEMPLATE).render(
        page=page, metrics=metrics, cells=_accuracy_cells(metrics, chosen, benchmark), judge_block=judge_block,
        loss=loss, chart=_chart(loss), diff=diff, data_json=blob, n_questions=len(data["questions"]), source=source,
        system_problems=identity.problems(metrics.get("system") or {}),
        fmt_pct=lambda x: "n/a" if x is None else f"{100 * x:.1f}", esc=html.escape)
    target = Path(out) if out else run_dir / "report" / "index.html"
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_suffix(".tmp")
    tmp.write_text(text, encoding="utf-8")
    tmp.replace(target)
    return target


# ----------------------------------------------------------------------------- CLI
def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m common.report.html", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("run_dir", nargs="?", default=None, help="the run directory (or use --run NAME)")
    p.add_argument("--run", default=None, help="run name under results/<benchmark>/")
    p.add_argument("--benchmark", choices=tuple(MAIN_CONFIGS), default=None)
    p.add_argument("--results", default="results", help="results root for --run and --b names (default results)")
    p.add_argument("--b", default=None, help="a second run (directory or name) for the diff view")
    p.add_argument("--judge", default=None, help="judge of the run (default: its only judge)")
    p.add_argument("--judge-b", default=None, help="judge of the second run (default: the same name)")
    p.add_argument("--out", default=None, help="output file (default <run dir>/report/index.html)")
    return p


def main(argv: Optional[Sequence[str]] = None) -> int:
    args = _parser().parse_args(argv)
    try:
        if not (args.run_dir or args.run):
            raise ValueError("give a run directory, or RUN=<name> [BENCH=locomo|longmemeval]")
        results = Path(args.results)
        run_dir = resolve_run(args.run_dir or args.run, args.benchmark, results)
        other = resolve_run(args.b, run_benchmark(run_dir), results) if args.b else None
        path = build(run_dir, other, args.judge, args.judge_b, args.out)
    except (ArtifactError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(f"report: {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
