"""The driver's side of the Ray executor's seam: each memory's slice of the run directory out, and
the memories' rows, manifests and call counts merged back in the local engine's order.

The driver, the only writer of the real run directory, writes each stage's artifact (the
memories' rows in the order the local engine writes them), its files and its manifest (counts
summed, the LLM summary from the driver's client), in stage order, so resume, the ledger, the
dry run, fingerprints and reports cannot tell which executor ran. A memory whose task failed
(``MemoryResult.failed``) keeps the rows the run had for it, is named in the manifests
(``failed_memories``) and, at the answer stage, gets a failed answer row per question
(``memory_failed: ...``): a counted failure that the next run redoes, as a failed row.
"""
from __future__ import annotations

import json
import time
from collections import defaultdict
from typing import Any, Optional

from common.core import artifacts
from common.core.io import read_jsonl, write_json, write_jsonl
from common.core.llm import CallStats, LLMClient
from common.core.schema import AnswerRow, Session, from_dict, to_dict
from common.method.dedup import session_content_key
from common.pipeline import engine
from common.pipeline.graph import Stage
from common.pipeline.ray_worker import MEMORY_DIRS, MemoryResult
from common.systems import identity

# Manifest fields the driver sets itself rather than summing the memories'.
_OWN_FIELDS = {"stage", "finished_at", "wall_seconds", "code", "inputs", "outputs", "rows", "config", "llm"}
MEMORY_FAILED = "memory_failed"  # the cause of a memory whose task raised


def _session_of(row: dict[str, Any]) -> str:
    """``memory::session`` of a 02 row (its session key) or a 03 row (its episode id's prefix)."""
    if "session_key" in row:
        return str(row["session_key"])
    return "::".join(str(row.get("episode_id", "")).split("::")[:2])


def _by_memory(rows: list[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    out: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for r in rows:
        if "memory_id" in r:
            out[r["memory_id"]].append(r)
    return out


def foreign_representatives(session_rows: list[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    """Per memory, the sessions of OTHER memories that represent some of its own (the run-wide
    first occurrence of the same content, as ``common.method.dedup.representatives`` picks it), in
    the run's order.

    The local engine partitions a shared session once, through its representative, and serves
    every copy from that call (whose prompt names the representative's memory). A task that saw
    only its own memory would send its own, different request for each copy: a call paid once
    per haystack and rows unlike the local engine's. Given these sessions first, the task's own
    dedup picks the same representatives, so its requests are the local engine's, byte for byte
    (a cache hit once another task has merged them)."""
    first: dict[str, dict[str, Any]] = {}
    out: dict[str, list[dict[str, Any]]] = defaultdict(list)
    seen: set[tuple[str, str]] = set()
    for row in session_rows:
        rep = first.setdefault(session_content_key(from_dict(Session, row)), row)
        mid, rep_key = row["memory_id"], f"{rep['memory_id']}::{rep['session_id']}"
        if rep["memory_id"] != mid and (mid, rep_key) not in seen:
            seen.add((mid, rep_key))
            out[mid].append(rep)
    return out


def memory_slices(run: engine.Run, memory_ids: list[str]) -> dict[str, dict[str, bytes]]:
    """Each memory's part of the run directory: its rows of every artifact (its sessions preceded
    by the representatives other memories hold, ``foreign_representatives``), its directories,
    and the run-wide files the stages check (the fingerprint, the resolved config)."""
    shared = {name: (run.dir / name).read_bytes() for name in ("fingerprint.json", "config.resolved.yaml")
              if (run.dir / name).exists()}
    out: dict[str, dict[str, bytes]] = {m: dict(shared) for m in memory_ids}
    lent_keys: dict[str, set[str]] = {}
    for name in ("sessions", "questions", "gold", "session_sources", "episodes", "records", "index", "plans",
                 "retrievals", "answers"):
        path = run.path(name)
        if not path.exists():
            continue
        all_rows = list(read_jsonl(path))
        rows = _by_memory(all_rows)
        if name == "sessions":
            lent = foreign_representatives(all_rows)
            lent_keys = {mid: {f"{r['memory_id']}::{r['session_id']}" for r in rs} for mid, rs in lent.items()}
            foreign: dict[str, list[dict[str, Any]]] = lent
        elif name in ("episodes", "records"):
            # the lent sessions' rows of the shared stages, for a task that starts past 02 (one
            # stage per process) or resumes: its dedup reads the representative's rows
            foreign = {mid: [r for r in all_rows if _session_of(r) in keys] for mid, keys in lent_keys.items()}
        else:
            foreign = {}
        for mid in memory_ids:
            out[mid][path.name] = "".join(json.dumps(r, ensure_ascii=False) + "\n"
                                          for r in foreign.get(mid, []) + rows.get(mid, [])).encode("utf-8")
    for mid in memory_ids:
        for pattern in MEMORY_DIRS:
            base = run.dir / pattern.format(mid=mid)
            if base.is_dir():
                out[mid].update({str(p.relative_to(run.dir)): p.read_bytes() for p in sorted(base.rglob("*"))
                                 if p.is_file()})
    return out


def _order(run: engine.Run, key: str, memory_ids: list[str], rows: list[dict[str, Any]]) -> list[str]:
    """The local engine's row order of an artifact: its input items' order (``run_rows``)."""
    if key == "qid":
        return [q["qid"] for q in read_jsonl(run.path("questions"))]
    if key == "session_key":
        return [f"{s['memory_id']}::{s['session_id']}" for s in read_jsonl(run.path("sessions"))]
    if key == "episode_id":
        return [e["episode_id"] for r in read_jsonl(run.path("episodes")) for e in r.get("episodes", [])]
    if key == "memory_id":
        return memory_ids
    return [r[key] for r in rows]


_KEYS = {"episodes": "session_key", "records": "episode_id", "index": "memory_id", "plans": "qid",
         "retrievals": "qid", "answers": "qid"}


def _merge_extra(manifests: list[dict[str, Any]]) -> dict[str, Any]:
    """The memories' manifest fields added up (counts summed; anything else: the first memory's)."""
    def merge(values: list[Any]) -> Any:
        first = values[0]
        if isinstance(first, bool) or first is None or isinstance(first, str):
            return first
        if isinstance(first, (int, float)):
            return sum(v for v in values if isinstance(v, (int, float)) and not isinstance(v, bool))
        if isinstance(first, dict):
            keys = list(dict.fromkeys(k for v in values if isinstance(v, dict) for k in v))
            return {k: merge([v[k] for v in values if isinstance(v, dict) and k in v]) for k in keys}
        return first

    fields = list(dict.fromkeys(k for m in manifests for k in m if k not in _OWN_FIELDS))
    out = {k: merge([m[k] for m in manifests if k in m]) for k in fields}
    emb = out.get("embedding")
    if isinstance(emb, dict):  # rates are not summed: recomputed from the summed counts
        for rate, over in (("texts_per_second", "encode_seconds"), ("texts_per_cpu_second", "encode_cpu_seconds")):
            if rate in emb:
                emb[rate] = round(emb.get("encoded", 0) / emb[over], 1) if emb.get(over) else None
    for settings in (out.get("ingest"),):  # a setting, not a count
        if isinstance(settings, dict) and "concurrency" in settings:
            settings["concurrency"] = next(m["ingest"]["concurrency"] for m in manifests if "ingest" in m)
    if identity.MANIFEST_KEY in out:  # what ran is one system for every memory: not a sum of departures
        out[identity.MANIFEST_KEY] = next(m[identity.MANIFEST_KEY] for m in manifests if identity.MANIFEST_KEY in m)
    return out


def _add_stats(client: LLMClient, calls: dict[str, dict[str, Any]]) -> None:
    """Count a stage's worker calls in the driver's client, which manifests and the invocation read."""
    for role, d in calls.items():
        stat: CallStats = client._stat(role)
        for k, v in d.items():
            if k == "latencies":
                stat.latencies.extend(v)
            elif k == "failures":
                for cause, n in v.items():
                    stat.failures[cause] = stat.failures.get(cause, 0) + n
            else:
                setattr(stat, k, getattr(stat, k) + v)


def _failed_rows(run: engine.Run, node: Stage, failed: dict[str, str]) -> list[dict[str, Any]]:
    """The rows the run already had for the failed memories (nothing paid is dropped), and at the
    answer stage a failed answer per question that has none: the failure counted as rows are."""
    out = node.output(run.dir, run.cfg.judge.name)
    kept = [r for r in read_jsonl(out) if r.get("memory_id") in failed] if out.exists() else []
    if node.writes[0] != "answers":
        return kept
    have = {r["qid"] for r in kept}
    model = run.cfg.role("answer").model
    return kept + [to_dict(AnswerRow(q["qid"], q["memory_id"], q["question"], None, model, "",
                                     error=failed[q["memory_id"]]))
                   for q in read_jsonl(run.path("questions")) if q["memory_id"] in failed and q["qid"] not in have]


def task_times(results: dict[str, MemoryResult], started: float) -> dict[str, Any]:
    """Where the group's wall went, from the tasks' own clocks: seconds from the group's start until
    the first task body ran (joining the cluster, the actors, a worker's start and imports), the
    longest task body, and the group's start to the last task's end (the rest is writing back)."""
    times = [(r.started_at, r.finished_at) for r in results.values() if r.started_at and r.finished_at]
    if not times:
        return {}
    return {"first_task_started_after_seconds": round(min(a for a, _ in times) - started, 3),
            "longest_task_seconds": round(max(b - a for a, b in times), 3),
            "last_task_finished_after_seconds": round(max(b for _, b in times) - started, 3)}


def write_stage(run: engine.Run, client: LLMClient, node: Stage, memory_ids: list[str],
                results: dict[str, MemoryResult], started: float) -> Optional[str]:
    """One stage's artifact, manifest and summary line from the memories' outputs; returns the
    line the stage fails with (too many rows or memories failed), which the caller raises once
    every stage is written, or None."""
    outs = [results[m].stages[node.id] for m in memory_ids if node.id in results[m].stages]
    failed = {m: failure(results[m]) for m in memory_ids if node.id not in results[m].stages}
    for mid, why in failed.items():
        where = results[mid].failed
        if where is not None and where[0] == node.id:
            print(f"{node.id}: memory {mid} failed ({why}); the other memories' rows are written, "
                  f"the next run redoes it", flush=True)
    manifests = [o.manifest for o in outs]
    calls: dict[str, dict[str, Any]] = {}
    for o in outs:
        _add_stats(client, o.calls)
        for used in o.calls:
            calls.setdefault(used, {})
    if all("skipped" in m for m in manifests) and manifests:
        print(f"{node.id}: skipped ({manifests[0]['skipped']})", flush=True)
        engine.manifest(run, node.id, inputs=[], outputs=[], rows=0, started=started,
                        extra={"skipped": manifests[0]["skipped"]})
        return None
    artifact = node.writes[0]
    out = node.output(run.dir, run.cfg.judge.name)
    extra_rows = _failed_rows(run, node, failed) if failed else []
    rows = [r for o in outs for r in (o.rows or [])] + extra_rows
    key = _KEYS[artifact]
    position = {k: i for i, k in enumerate(_order(run, key, memory_ids, rows))}
    rows.sort(key=lambda r: position.get(r[key], len(position)))
    write_jsonl(out, rows)
    extra = _merge_extra(manifests)
    if failed:
        extra["failed_memories"] = failed
        if artifact == "answers":  # the failed answers written here are failed rows like any other
            extra["failed_rows"] = int(extra.get("failed_rows", 0) or 0) + sum(
                1 for r in extra_rows if str(r.get("error", "")).startswith(MEMORY_FAILED))
    role: Optional[str] = next(iter(calls), node.role)
    llm = client.summary().get(role, {}) if any(m.get("llm") for m in manifests) and role else {}
    inputs = [run.dir / p for p in dict.fromkeys(p for m in manifests for p in m.get("inputs", {}))]
    engine.manifest(run, node.id, inputs=inputs, outputs=[out], rows=len(rows), started=started,
                    extra={**extra, "llm": llm, "executor": {"name": "ray", "memories": len(memory_ids),
                                                             **task_times(results, started)}})
    if "dedup" in extra:  # the local engine times both passes; here: the whole group's wall
        path = artifacts.manifest_path(run.dir, node.id)
        data = json.loads(path.read_text(encoding="utf-8"))
        data["wall_seconds"] = round(time.time() - started, 3)
        write_json(path, data)
    n_failed = int(extra.get("failed_rows", 0) or 0)
    resumed = int(extra.get("resumed_rows", 0) or 0)
    engine.summary_line(node.id, rows, resumed, int(extra.get("new_rows", len(rows) - resumed) or 0), n_failed, out,
                        started, llm)
    rate = run.cfg.run.max_error_rate
    if failed and len(failed) / len(memory_ids) > rate:
        mid = next(iter(failed))
        return (f"{node.id}: {len(failed)} of {len(memory_ids)} memories failed (> run.max_error_rate {rate}); "
                f"the first: memory {mid}: {failed[mid]}; the other memories' rows are written, rerun to redo "
                "the failed ones")
    if rows and n_failed / len(rows) > rate:
        return (f"{node.id}: {n_failed}/{len(rows)} rows failed (> run.max_error_rate {rate}); rerun to retry "
                "only the failed rows' calls")
    return None


def failure(result: MemoryResult) -> str:
    """``memory_failed: <stage>: <exception>: <message>`` of a memory whose task failed."""
    stage, cause = result.failed or ("", "no result")
    return f"{MEMORY_FAILED}: {stage}: {cause}" if stage else f"{MEMORY_FAILED}: {cause}"
