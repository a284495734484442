"""The cost and latency ledger of a run, and its online efficiency (the paper's Table 3).

Everything is read back from the per-row call records the stages wrote (``llm_calls`` in 02,
03, 05 and 06 rows, the latter for bridge calls; ``usage``/``latency``/``cached`` in 07 and 08
rows), so the ledger describes the artifacts as they are, whatever number of processes, resumes
and reruns made them.

    python -m common.pipeline.ledger results/locomo/paper

* Per stage and role: a stage's calls made for another role (``plan_audit`` in 05,
  ``answer_rerank``/``answer_verify`` in 07: the call record's ``role``) are a row of their own.
  Calls, how many were paid in this run and how many came from the cache (a reply paid for
  just before a Ctrl-C, whose row the resume wrote from the cache, is paid once all the same:
  ``paid_unwritten.jsonl``),
  how many went through the Batch API (``llm.batch``: the cache keys the run's batch records in
  ``<run>/batches`` answered, or a call record flagged ``batch``), failed rows by cause, input and
  output tokens, latency mean/p50/p95 of paid live calls (a batch reply's wait is not a latency),
  and the estimated cost from ``configs/prices.yaml`` (paid calls; and what the same calls cost
  uncached), batch calls at the batch rate.
* Per question (Table 3): planning seconds (the 05 calls), retrieval seconds (06, including its
  bridge calls), generation seconds (07), their sum, and the evidence buffer's tokens (o200k,
  counted offline).
"""
from __future__ import annotations

import argparse
import json
import sys
from collections import defaultdict
from pathlib import Path
from typing import Any, Iterable, Optional

import numpy as np

from common.core import artifacts
from common.core.batch import batch_keys
from common.core.config import resolve_path
from common.core.io import read_jsonl, write_json
from common.core.yamlio import load_yaml
from common.evaluation.metrics import buffer_contribution_stats
from common.evaluation.scoring import failure_cause
from common.pipeline.graph import IDS, llm_stages

PRICES = "configs/prices.yaml"


def load_prices(path: str = PRICES) -> dict[str, Any]:
    p = resolve_path(path)
    return load_yaml(p.read_text(encoding="utf-8")) if p.exists() else {"models": {}}


def _calls(row: dict[str, Any]) -> list[dict[str, Any]]:
    """Normalise a row's call records: multi-call rows keep a list, single-call rows inline fields."""
    if "llm_calls" in row:
        return list(row["llm_calls"])
    if row.get("cache_key"):
        return [{"model": row.get("model") or row.get("judge_model"), "usage": row.get("usage") or {},
                 "latency": row.get("latency", 0.0), "cached": bool(row.get("cached", False)),
                 "cache_key": row["cache_key"], "batch": bool(row.get("batch", False))}]
    return []


def row_failure(row: dict[str, Any]) -> str:
    """The failure cause of a row, '' if it did not fail.

    Judge rows use the causes of ``metrics.json`` (``common.evaluation.scoring``) so both files count the same
    failures the same way; other rows use the ``<cause>`` head of their ``<cause>: <detail>`` error
    (02/03/05 rows that fell back, 07 rows without an answer).
    """
    if "label" in row:
        return failure_cause(row)
    if row.get("fallback_used"):
        return _head(row.get("error") or row.get("fallback_error") or "")
    if "answer" in row and (row["answer"] is None or row.get("error")):
        return _head(row.get("error") or "")
    return ""


def _head(error: str) -> str:
    return error.split(":")[0].strip() or "unknown"


def _percentile(values: list[float], q: float) -> Optional[float]:
    return round(float(np.percentile(values, q)), 4) if values else None


BATCH_DISCOUNT = 0.5  # OpenAI Batch API: half the standard rate, when prices.yaml does not say


def cost(model: str, prompt_tokens: int, completion_tokens: int, prices: dict[str, Any],
         batch: bool = False) -> Optional[float]:
    """Dollars for the tokens of ``model``; ``batch``: at the Batch API rate (the model's
    ``batch_input``/``batch_output``, else its standard rate times ``batch_discount``)."""
    p = prices.get("models", {}).get(model)
    if p is None:
        return None
    factor = float(prices.get("batch_discount", BATCH_DISCOUNT)) if batch else 1.0
    rate_in = p.get("batch_input", p.get("input", 0.0) * factor) if batch else p.get("input", 0.0)
    rate_out = p.get("batch_output", p.get("output", 0.0) * factor) if batch else p.get("output", 0.0)
    return (prompt_tokens * rate_in + completion_tokens * rate_out) / 1e6


# Where a row records the failure of a step made for another role (the step is kept out, never the row).
STEP_OF_ROLE = {"plan_audit": ("audit",), "answer_rerank": ("steps", "rerank"), "answer_verify": ("steps", "verify"),
                "answer_count": ("steps", "count"), "answer_temporal": ("steps", "temporal"),
                "answer_order": ("steps", "order")}


def step_failure(row: dict[str, Any], role: str) -> str:
    """The failure cause of the step ``role`` of a row ('' if it did not fail or did not run)."""
    step: Any = row
    for key in STEP_OF_ROLE.get(role, ()):
        step = step.get(key) if isinstance(step, dict) else None
    return _head(step["error"]) if isinstance(step, dict) and step.get("error") else ""


def call_roles(rows: list[dict[str, Any]], role: str) -> list[str]:
    """Roles other than the stage's own that calls of these rows were made for (sorted)."""
    return sorted({str(c["role"]) for r in rows for c in _calls(r) if c.get("role") and c["role"] != role}
                  | {r for r in STEP_OF_ROLE for row in rows if step_failure(row, r)})


# Replies a run paid for that no row recorded when it stopped (Ctrl-C: the calls in flight were
# answered and cached after the last row was written). The resume reads them from the cache; the
# ledger counts the first row that does as paid, so a reply this run paid for is paid once.
UNWRITTEN = "paid_unwritten.jsonl"


def recorded_keys(run_dir: Path) -> set[str]:
    """The cache keys of every call record in the run's LLM stage files."""
    keys: set[str] = set()
    for node in llm_stages():
        paths = [node.output(run_dir, j) for j in artifacts.judges(run_dir)] if "judge" in node.writes \
            else [node.output(run_dir, "")]
        for path in paths:
            for row in read_jsonl(path, missing_ok=True):
                keys.update(str(c["cache_key"]) for c in _calls(row) if c.get("cache_key"))
    return keys


def keep_unwritten(run_dir: Path, stage: str, paid: dict[str, dict[str, Any]]) -> int:
    """Add the replies in ``paid`` (cache key -> model, usage, latency) that no row records to the
    run's ``paid_unwritten.jsonl``; returns how many."""
    if not run_dir.is_dir():
        return 0
    path = run_dir / UNWRITTEN
    known = recorded_keys(run_dir) | {str(r["cache_key"]) for r in read_jsonl(path, missing_ok=True)}
    new = [{"cache_key": k, "stage": stage, **v} for k, v in paid.items() if k not in known]
    if new:
        with path.open("a", encoding="utf-8") as f:
            f.writelines(json.dumps(r, ensure_ascii=False) + "\n" for r in new)
    return len(new)


def stage_entry(stage: str, role: str, rows: list[dict[str, Any]], prices: dict[str, Any],
                batched: frozenset[str] | set[str] = frozenset(), stage_role: Optional[str] = None,
                owed: Optional[set[str]] = None) -> dict[str, Any]:
    """One stage's entry; ``batched``: cache keys the run's batches answered (batch-rate calls).

    ``stage_role``: the stage's own role when this entry is for another ``role`` whose calls the
    stage made (its calls carry that role); the stage's own entry then leaves them out.
    ``owed``: cache keys this run paid for that no paid call record holds (``UNWRITTEN``); the
    first cached call of each is counted paid, and its key taken out of the set.
    """
    own = stage_role is None
    calls = [c for r in rows for c in _calls(r) if ((c.get("role") or role) if own else c.get("role")) == role]
    is_batch = lambda c: bool(c.get("batch")) or c.get("cache_key") in batched  # noqa: E731
    paid_ids: set[int] = set()
    for c in calls:
        if not c.get("cached"):
            paid_ids.add(id(c))
        elif owed and c.get("cache_key") in owed:
            owed.discard(str(c["cache_key"]))
            paid_ids.add(id(c))
    paid = [c for c in calls if id(c) in paid_ids]
    failures: dict[str, int] = defaultdict(int)
    for r in rows:
        cause = row_failure(r) if own else step_failure(r, role)
        if cause:
            failures[cause] += 1
    if not own:
        rows = [r for r in rows if step_failure(r, role) or any(c.get("role") == role for c in _calls(r))]

    def tokens(cs: Iterable[dict[str, Any]], key: str) -> int:
        return int(sum((c.get("usage") or {}).get(key, 0) for c in cs))

    lat = [float(c.get("latency") or 0.0) for c in paid if not is_batch(c)]
    models = sorted({str(c.get("model")) for c in calls if c.get("model")})
    entry: dict[str, Any] = {
        "stage": stage, "role": role, "models": models, "rows": len(rows), "calls": len(calls),
        "paid": len(paid), "cached": len(calls) - len(paid), "batch": sum(1 for c in calls if is_batch(c)),
        "failed_rows": dict(failures),
        "prompt_tokens": tokens(calls, "prompt_tokens"), "completion_tokens": tokens(calls, "completion_tokens"),
        "paid_prompt_tokens": tokens(paid, "prompt_tokens"),
        "paid_completion_tokens": tokens(paid, "completion_tokens"),
        "latency_mean": round(float(np.mean(lat)), 4) if lat else None,
        "latency_p50": _percentile(lat, 50), "latency_p95": _percentile(lat, 95),
    }
    paid_cost = total_cost = 0.0
    unpriced = set()
    for c in calls:
        u = c.get("usage") or {}
        v = cost(str(c.get("model")), u.get("prompt_tokens", 0), u.get("completion_tokens", 0), prices,
                 batch=is_batch(c))
        if v is None:
            unpriced.add(str(c.get("model")))
            continue
        total_cost += v
        if id(c) in paid_ids:
            paid_cost += v
    entry.update(cost_paid_usd=round(paid_cost, 6), cost_uncached_usd=round(total_cost, 6),
                 unpriced_models=sorted(unpriced))
    return entry


def _system_role(run_dir: Path) -> Optional[str]:
    """The LLM role of the memory system that made 06 (its manifest's ``system_role``), None for
    systems without a role and for runs made before the manifest said (EnSIMem's is ``bridge``)."""
    path = artifacts.manifest_path(run_dir, IDS["retrieve"])
    if not path.exists():
        return None
    info = json.loads(path.read_text(encoding="utf-8"))
    role = info.get("system_role")
    return str(role) if role else None


def ledger(run_dir: Path, prices: Optional[dict[str, Any]] = None) -> dict[str, Any]:
    """Every LLM stage's entry plus totals; missing stage files are listed, not guessed."""
    prices = prices if prices is not None else load_prices()
    entries, missing = [], []
    # (stage, file, role) for every LLM stage of the graph; a judge stage has one file per judge.
    judges = artifacts.judges(run_dir)
    batched = batch_keys(run_dir / "batches")
    files = [(node.instance(j), node.output(run_dir, j), str(node.role))
             for node in llm_stages() for j in (judges if "judge" in node.writes else [""])]
    system_role = _system_role(run_dir)
    read = {path: read_jsonl(path) for _, path, _ in files if path.exists()}
    unwritten = {str(r["cache_key"]) for r in read_jsonl(run_dir / UNWRITTEN, missing_ok=True)}
    owed = unwritten - {str(c.get("cache_key")) for rows in read.values() for r in rows for c in _calls(r)
                        if not c.get("cached")}
    for stage, path, role in files:
        if stage == IDS["retrieve"] and system_role:
            role = system_role  # a memory system's searches: its own role, not EnSIMem's bridge
        if path not in read:
            missing.append(path.name)
            continue
        rows = read[path]
        entries.append(stage_entry(stage, role, rows, prices, batched, owed=owed))
        entries += [stage_entry(stage, other, rows, prices, batched, stage_role=role, owed=owed)
                    for other in call_roles(rows, role)]
    # A memory system's ingestion (06, common.systems): its calls are in each memory's marker.
    markers = sorted((run_dir / IDS["retrieve"] / "memory").glob("*/ingested.json"))
    if markers:
        spent = [json.loads(m.read_text(encoding="utf-8")).get("spent", {}) for m in markers]
        entries.append(stage_entry(f"{IDS['retrieve']}_ingest", system_role or "memory",
                                   [{"llm_calls": s.get("llm_calls", [])} for s in spent], prices, batched))
    # Calls an outside system made through the gateway with its run-wide key (outside any memory's
    # or question's session): still counted, under the system's role.
    loose = run_dir / IDS["retrieve"] / "gateway_calls.jsonl"
    if loose.exists():
        entries.append(stage_entry(f"{IDS['retrieve']}_gateway", system_role or "memory",
                                   [{"llm_calls": read_jsonl(loose)}], prices, batched))
    total = {k: sum(e[k] for e in entries) for k in ("calls", "paid", "cached", "batch", "prompt_tokens",
                                                      "completion_tokens",
                                                      "paid_prompt_tokens", "paid_completion_tokens")}
    total["cost_paid_usd"] = round(sum(e["cost_paid_usd"] for e in entries), 6)
    total["cost_uncached_usd"] = round(sum(e["cost_uncached_usd"] for e in entries), 6)
    return {"stages": entries, "total": total, "missing_files": missing,
            "prices": {"file": PRICES, "date": prices.get("date"), "source": prices.get("source")}}


def context_tokens(ret: dict[str, Any], ans: dict[str, Any]) -> int:
    """Table 3's context tokens: what the answer model read, i.e. the episodes a rerank kept when
    ``answer.rerank`` selected some (its step records their tokens), else the whole buffer."""
    rerank = (ans.get("steps") or {}).get("rerank") or {}
    if isinstance(rerank, dict) and rerank.get("selected") and "tokens" in rerank:
        return int(rerank["tokens"])
    return int(ret.get("buffer_tokens") or 0)


def efficiency(run_dir: Path, qids: Optional[set[str]] = None) -> dict[str, Any]:
    """Table 3 per question and its means: plan, retrieval and generation seconds, context tokens.

    Latencies of calls served from the cache are the ORIGINAL call's latency when the cache kept
    it, else 0; ``cached_calls`` says how many calls that concerns.
    """
    plans = {r["qid"]: r for r in read_jsonl(artifacts.path(run_dir, "plans"), missing_ok=True)}
    rets = {r["qid"]: r for r in read_jsonl(artifacts.path(run_dir, "retrievals"))}
    answers = {r["qid"]: r for r in read_jsonl(artifacts.path(run_dir, "answers"))}
    per_q, cached = [], 0
    for qid, ret in rets.items():
        if qids is not None and qid not in qids:
            continue
        plan_calls = plans.get(qid, {}).get("llm_calls", [])
        ans = answers.get(qid, {})
        cached += sum(bool(c.get("cached")) for c in plan_calls + ret.get("llm_calls", [])) + bool(ans.get("cached"))
        plan_s = float(sum(c.get("latency") or 0.0 for c in plan_calls))
        gen_s = float(ans.get("latency") or 0.0)
        ret_s = float(ret.get("seconds") or 0.0)
        per_q.append({"qid": qid, "plan_s": round(plan_s, 4), "retrieval_s": round(ret_s, 4),
                      "generation_s": round(gen_s, 4), "end_to_end_s": round(plan_s + ret_s + gen_s, 4),
                      "context_tokens": context_tokens(ret, ans)})
    keys = ("plan_s", "retrieval_s", "generation_s", "end_to_end_s", "context_tokens")
    means = {k: round(float(np.mean([q[k] for q in per_q])), 4) if per_q else None for k in keys}
    return {"n": len(per_q), "mean": means, "cached_calls": cached,
            "p50": {k: _percentile([q[k] for q in per_q], 50) for k in keys},
            "p95": {k: _percentile([q[k] for q in per_q], 95) for k in keys}, "per_question": per_q}


def markdown(led: dict[str, Any], eff: Optional[dict[str, Any]] = None) -> str:
    head = ("| stage | role | models | calls | paid | cached | batch | failed rows | in tok | out tok | "
            "lat mean | p50 | p95 | cost paid $ | cost uncached $ |")
    lines = [f"LLM ledger (prices: {led['prices']['file']}, dated {led['prices']['date']}; batch calls at the "
             "batch rate, latencies of live calls only)", "", head, "|" + "---|" * 15]
    for e in led["stages"] + [{"stage": "total", "role": "", "models": [], "rows": 0, "failed_rows": {},
                                "latency_mean": None, "latency_p50": None, "latency_p95": None, **led["total"]}]:
        fails = ", ".join(f"{k} {v}" for k, v in e["failed_rows"].items()) or "0"
        f = lambda v: "" if v is None else f"{v:.3f}"  # noqa: E731
        lines.append(f"| {e['stage']} | {e['role']} | {', '.join(e['models'])} | {e['calls']} | {e['paid']} | "
                     f"{e['cached']} | {e.get('batch', 0)} | {fails} | {e['prompt_tokens']} | "
                     f"{e['completion_tokens']} | "
                     f"{f(e['latency_mean'])} | {f(e['latency_p50'])} | {f(e['latency_p95'])} | "
                     f"{e['cost_paid_usd']:.4f} | {e['cost_uncached_usd']:.4f} |")
    if led["missing_files"]:
        lines.append(f"\nNot in this run: {', '.join(led['missing_files'])}")
    if eff and eff["n"]:
        m = eff["mean"]
        lines += ["", f"Online efficiency per question (means over {eff['n']} questions; "
                      f"{eff['cached_calls']} calls served from the cache)", "",
                  "| plan s | retrieval s | generation s | end-to-end s | context tokens |", "|---|---|---|---|---|",
                  f"| {m['plan_s']:.3f} | {m['retrieval_s']:.3f} | {m['generation_s']:.3f} | "
                  f"{m['end_to_end_s']:.3f} | {m['context_tokens']:.0f} |"]
    return "\n".join(lines) + "\n"


def write(run_dir: Path) -> tuple[dict[str, Any], list[Path]]:
    """ledger.json (with per-question efficiency) and ledger.md in the run directory."""
    led = ledger(run_dir)
    have_inputs = artifacts.path(run_dir, "retrievals").exists() and artifacts.path(run_dir, "answers").exists()
    eff = efficiency(run_dir) if have_inputs else None
    buf = buffer_stats(run_dir)
    write_json(run_dir / "ledger.json", {**led, "efficiency": eff, "buffer": buf})
    (run_dir / "ledger.md").write_text(markdown(led, eff) + buffer_markdown(buf), encoding="utf-8")
    return {**led, "efficiency": {k: v for k, v in (eff or {}).items() if k != "per_question"}, "buffer": buf}, \
        [run_dir / "ledger.json", run_dir / "ledger.md"]


def buffer_stats(run_dir: Path) -> Optional[dict[str, Any]]:
    """The evidence buffer per scope and route (``metrics.buffer_contribution_stats``), or None without 06."""
    path = artifacts.path(run_dir, "retrievals")
    return buffer_contribution_stats(read_jsonl(path)) if path.exists() else None


def buffer_markdown(buf: Optional[dict[str, Any]]) -> str:
    if not buf:
        return ""
    paper = buf["paper_mean_context_tokens"]
    lines = ["", f"Evidence buffer per plan scope (o200k tokens; the paper's mean: {paper:,})", "",
             "| scope | n | tokens mean | p50 | p95 | max | episodes mean | dropped by caps "
             "| questions capped | route episodes/tokens (mean) |", "|---|---|---|---|---|---|---|---|---|---|"]
    f = lambda v: "" if v is None else f"{v:.0f}"  # noqa: E731
    for scope, b in buf["by_scope"].items():
        t, e = b["buffer_tokens"], b["episodes"]
        routes = "; ".join(f"{r} {v['episodes']['mean']:.1f}/{v['tokens']['mean']:.0f}" for r, v in b["routes"].items())
        lines.append(f"| {scope} | {t['n']} | {f(t['mean'])} | {f(t['p50'])} | {f(t['p95'])} | {f(t['max'])} | "
                     f"{'' if e['mean'] is None else format(e['mean'], '.1f')} | "
                     f"{b['dropped_by_caps']} | {_capped(b.get('caps_fired'))} | {routes} |")
    return "\n".join(lines) + "\n"


def _capped(fired: Optional[dict[str, Any]]) -> str:
    """"k of n" questions where a cap dropped episodes, with the episodes dropped per route."""
    if not fired:
        return ""
    routes = ", ".join(f"{r} {n}" for r, n in fired["dropped_by_route"].items())
    return f"{fired['questions']} of {fired['of']}" + (f" ({routes})" if routes else "")


def main(argv: Optional[list[str]] = None) -> int:
    p = argparse.ArgumentParser(prog="python -m common.pipeline.ledger", description=__doc__.split("\n\n")[0])
    p.add_argument("run_dir")
    a = p.parse_args(argv)
    run_dir = Path(a.run_dir)
    if not run_dir.is_dir():
        print(f"error: {run_dir}: not a run directory", file=sys.stderr)
        return 2
    led = ledger(run_dir)
    eff = efficiency(run_dir) if (artifacts.path(run_dir, "answers")).exists() else None
    print(markdown(led, eff), end="")
    return 0


if __name__ == "__main__":
    sys.exit(main())
