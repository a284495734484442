"""``make audit-judge``: the configured judge over the locomo-audit stress sets.

Each set becomes a run directory ``results/audit/<judge>/<benchmark>/<set>/`` (imported with
``common.pipeline.importer``: the set's answers, its published labels as judge ``published``),
then the ordinary 08_judge stage runs the CONFIGURED judge on it (same prompt, decoding, cache
and resume as the main run; any endpoint), and ``common.evaluation.judge_audit`` writes
``results/audit/<judge>/audit.json`` and ``audit.md``. A second judge is one config away
(``--config configs/judge_qwen3_32b.yaml`` or ``SET="models.judge.model=... judge.name=..."``),
and ``make compare A=<set dir> JUDGE=<judge> JUDGE_B=published`` contrasts two judges on a set.

Sets: ``ap-v1``, ``ap-v2``, ``gold`` and ``fc-<run>`` for every ``fc-baseline/<run>``; LongMemEval
has only ``gold`` (its golden answers judged by the official checker).
"""
from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import Any, Optional

from common.benchmarks.registry import adapter
from common.core import progress
from common.core.config import ConfigError, load_config, resolve_path
from common.core.io import read_jsonl, write_json
from common.evaluation import judge_audit
from common.evaluation.labels import load_labels
from common.pipeline import importer
from common.pipeline.engine import EndpointNotConfigured, Run, StageFailed, run_stage

PUBLISHED_JUDGE = "published"  # the judge name of the published labels in every set directory
DEFAULT_AUDIT_DIR = "../shared/data/locomo-audit"


def audit_dir() -> Path:
    return resolve_path(os.environ.get("LOCOMO_AUDIT") or DEFAULT_AUDIT_DIR)


def available_sets(benchmark: str, root: Path) -> dict[str, Optional[Path]]:
    """Set name -> its source file (None: made from the benchmark file itself)."""
    if benchmark != "locomo":
        return {"gold": None}
    sets: dict[str, Optional[Path]] = {
        "ap-v1": root / "ap-baseline" / "v1" / "ap_eval_results_scored.json",
        "ap-v2": root / "ap-baseline" / "v2" / "ap_eval_results_scored.json",
        "gold": None}
    for run in sorted((root / "fc-baseline").glob("*/eval_results.json")):
        sets[f"fc-{run.parent.name}"] = run
    return sets


def gold_source(cfg: Any, where: Path) -> Path:
    """A result file whose answers are the golden answers (no published labels), in the benchmark's
    import format, written to ``where`` (beside the audit results, never in the data folder)."""
    data = adapter(cfg.benchmark).load(adapter(cfg.benchmark).data_path(cfg))
    where.mkdir(parents=True, exist_ok=True)
    if cfg.benchmark == "longmemeval":
        path = where / "gold_answers.jsonl"
        path.write_text("".join(json.dumps({"question_id": g.qid, "hypothesis": g.answer}) + "\n"
                                for g in data.gold), encoding="utf-8")
        return path
    memories = list(dict.fromkeys(s.memory_id for s in data.sessions))
    text = {q.qid: q.question for q in data.questions}
    rows = []
    for g in data.gold:
        if not adapter(cfg.benchmark).is_scored(g):
            continue
        memory, _, number = g.qid.partition(":q")
        rows.append({"question_id": f"locomo_{memories.index(memory)}_qa{int(number) - 1}",
                     "question": text[g.qid], "golden_answer": g.answer, "generated_answer": g.answer,
                     "llm_judgments": {}, "category": str(g.category)})
    path = where / "gold_answers.json"
    path.write_text(json.dumps({"detailed_results": {"gold": rows}}), encoding="utf-8")
    return path


def _config(config: list[str], overrides: list[str], name: str, results: Path) -> Any:
    return load_config(config, [*overrides, f"run.name={name}", f"run.results_dir={results}"])


def audit(config: list[str], overrides: list[str], sets: Optional[list[str]], out: str = "results/audit",
          dry_run: bool = False) -> Optional[Path]:
    """Run the audit; returns the audit directory (None for a dry run)."""
    base = load_config(config, overrides)
    judge = base.judge.name
    if judge == PUBLISHED_JUDGE:
        raise ValueError(f"judge.name: {PUBLISHED_JUDGE!r} is reserved for the published labels")
    root = audit_dir()
    known = available_sets(base.benchmark, root)
    chosen = sets or list(known)
    unknown = [s for s in chosen if s not in known]
    if unknown:
        raise ValueError(f"unknown audit set(s) {unknown}; known: {', '.join(known)} (from {root})")
    results = resolve_path(out) / judge
    reports, calls = [], 0
    for name in chosen:
        cfg = _config(config, overrides, name, results)
        source = known[name]
        reads_gold = True if source is None or name.startswith("ap-") else False
        if dry_run:
            n = _count(source, cfg)
            done = _done(cfg.run_dir, judge)
            calls += max(0, n - done) * cfg.judge.runs
            print(f"audit {name}: {n} answers, {done} already judged by {judge}: "
                  f"{max(0, n - done) * cfg.judge.runs} judge calls", flush=True)
            continue
        if source is None:
            source = gold_source(cfg, results / "sources")
        # The import reads the base config for the data and its selection only.
        importer.import_run(source, name, benchmark=cfg.benchmark, judge=PUBLISHED_JUDGE, config=config[0],
                            overrides=(*overrides, f"run.results_dir={results}"),
                            reuse=True, aggregate=False, reads_gold=reads_gold)
        run = Run(cfg, progress=progress.interactive())
        run_stage(run, "judge")
        published = (load_labels(cfg.run_dir, PUBLISHED_JUDGE)
                     if (cfg.run_dir / f"08_judge_{PUBLISHED_JUDGE}.jsonl").exists() else None)
        reports.append(judge_audit.set_report(name, load_labels(cfg.run_dir, judge), published))
    if dry_run:
        print(f"audit-judge {judge}: {calls} judge calls in total (none made)")
        return None
    write_json(results / "audit.json", {"judge": judge, "judge_model": base.role("judge").model,
                                        "judge_prompt": base.judge.prompt, "source": str(root),
                                        "attribution": judge_audit.ATTRIBUTION, "sets": reports})
    md = judge_audit.markdown(judge, reports)
    (results / "audit.md").write_text(md, encoding="utf-8")
    print(md, flush=True)
    return results


def _count(source: Optional[Path], cfg: Any) -> int:
    """Answers a set holds within the configured selection (the gold set: the scored questions)."""
    data = adapter(cfg.benchmark).select(adapter(cfg.benchmark).load(adapter(cfg.benchmark).data_path(cfg)), cfg)
    selected = {g.qid for g in data.gold if adapter(cfg.benchmark).is_scored(g)}
    if source is None:
        return len(selected)
    doc = json.loads(source.read_text(encoding="utf-8"))
    return min(len(selected), sum(len(v) for v in doc.get("detailed_results", {}).values()))


def _done(run_dir: Path, judge: str) -> int:
    path = run_dir / f"08_judge_{judge}.jsonl"
    return sum(1 for r in read_jsonl(path) if r.get("label") is not None) if path.exists() else 0


def main(argv: Optional[list[str]] = None) -> int:
    p = argparse.ArgumentParser(prog="python -m common.pipeline.audit", description=(__doc__ or "").split("\n\n")[0])
    p.add_argument("--config", action="append", default=None, help="default configs/locomo.yaml")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="config override")
    p.add_argument("--sets", default=None, help="comma-separated: ap-v1,ap-v2,gold,fc-<run> (default: all)")
    p.add_argument("--out", default="results/audit")
    p.add_argument("--dry-run", action="store_true", help="count the judge calls, make none, write nothing")
    a = p.parse_args(argv)
    try:
        audit(a.config or ["configs/locomo.yaml"], list(a.set), a.sets.split(",") if a.sets else None, a.out,
              a.dry_run)
    except (ConfigError, EndpointNotConfigured, StageFailed, ValueError, FileNotFoundError, RuntimeError) as exc:
        print(f"error: {' '.join(str(exc).split())}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
