"""`make bench-scale PRESET=s|m [LIMIT=N]`: LongMemEval-sized runs, stage by stage, vs the targets.

    python -m bench.scale --preset s [--limit 20] [--latency 0.2] [--concurrency 16] [--pool 2000] [--set k=v]
    python -m bench.scale --preset m [--limit 3] [--fit-sessions 10,20,40]
    python -m bench.scale --preset m --limit 2 --executor ray   # stages 02-07 as Ray tasks

Data: ``bench.scale_data`` (seeded; the first N questions of a preset are the same whatever N, so
LIMIT=N runs a prefix of the preset's 500). LongMemEval 01-09 then runs against the fake endpoint
answering each call after L seconds, one measured process per stage (each numbered script on its
own, so that every stage has its own CPU seconds and peak RSS), from empty caches in
``<out>/work-scale``, and again (the rerun must make 0 calls). Per stage: process and stage wall,
calls, calls saved by session reuse (the stage's dedup: rows done once for sessions or episodes
shared between haystacks), the ratio of the stage wall to calls x L / concurrency, CPU seconds (user
+ system of the process), peak RSS, texts/s of the index build; disk used by the run directory and
the two caches.

Targets (preset s, 2 cores): CPU side (04 + 06 CPU seconds) under 20 minutes for the
500 questions, peak RSS under 4 GiB, every LLM stage within 1.2 x its bound, rerun 0 calls.
With LIMIT < 500 the CPU figure is extrapolated and says so: 04's embedding CPU by the number of
distinct sessions of the full preset (shared sessions are embedded once), everything else
linearly per question.

Preset m (S = 500) is too long for a small machine: it runs preset-m haystacks cut to several
smaller S, fits each CPU stage's CPU seconds and peak RSS against S (least squares, a + b S)
and writes the value at S = 500 (and x 500 / LIMIT questions), labelled as extrapolated.
"""
from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
import threading
import time
from pathlib import Path
from typing import Any, Iterator, Optional

import numpy as np

from bench.machine import load_average, machine_info
from bench.memory import GIB
from bench.pipeline import (
    LLM_STAGE_KINDS,
    LOCOMO_STAGES,
    BenchError,
    PipelineRun,
    StageResult,
    bench_overrides,
    run_stages,
)
from bench.run import fresh_workdir
from bench.scale_data import PRESETS, generate, stats, write
from bench.throughput import llm_stage_figures
from common.core.config import resolve_path

CONFIG = "configs/longmemeval.yaml"
CPU_STAGES = ("04_index", "06_retrieve")
FULL_QUESTIONS = 500
TARGETS = {"cpu_seconds": 20 * 60, "peak_rss_bytes": 4 * GIB, "ratio": 1.2, "rerun_calls": 0}


def disk_bytes(path: Path) -> int:
    """Bytes of a file, or of every file under a directory (sqlite WAL files included)."""
    if path.is_file():
        return sum(p.stat().st_size for p in path.parent.glob(path.name + "*") if p.is_file())
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file()) if path.is_dir() else 0


def stage_rows(results: list[StageResult], latency: float, concurrency: int) -> list[dict[str, Any]]:
    bounds = {r["stage"]: r for r in llm_stage_figures(results, latency, concurrency, TARGETS["ratio"])}
    rows = []
    for r in results:
        dedup = r.manifest.get("dedup") or {}
        b = bounds.get(r.stage, {})
        emb = r.manifest.get("embedding") or {}
        rows.append({"stage": r.stage, "process_wall_seconds": r.process.wall_seconds,
                     "stage_wall_seconds": r.manifest.get("wall_seconds"),
                     "calls": sum(r.requests.values()), "calls_saved_by_reuse": dedup.get("calls_saved_by_reuse"),
                     "bound_seconds": b.get("ideal_seconds"), "ratio": b.get("ratio"),
                     "ratio_passed": b.get("passed") if r.stage in LLM_STAGE_KINDS else None,
                     "cpu_seconds": round(r.process.user_seconds + r.process.system_seconds, 2),
                     "peak_rss_bytes": r.process.peak_rss_bytes,
                     "texts_per_second": emb.get("texts_per_second"), "texts_embedded": emb.get("encoded"),
                     "encode_cpu_seconds": emb.get("encode_cpu_seconds"),
                     "rows": r.manifest.get("rows"), "failed_rows": r.manifest.get("failed_rows"),
                     "load_after": r.load_after})
    return rows


def one_run(opts: argparse.Namespace, server: Any, work: Path, sessions: int, limit: int) -> dict[str, Any]:
    """Generate the set (the preset's first ``limit`` questions at ``sessions`` per haystack), run
    01-09 cold, then again; return the per-stage figures."""
    name = f"{opts.preset}-S{sessions}-Q{limit}"
    t0 = time.perf_counter()
    items = generate(limit, sessions, opts.pool, opts.seed)
    data = write(items, work / "data" / f"{name}-P{opts.pool}-seed{opts.seed}.json")
    gen = {"path": str(data), "seconds": round(time.perf_counter() - t0, 2), "bytes": data.stat().st_size,
           **stats(items)}
    sets = bench_overrides(workdir=work, name=name, concurrency=opts.concurrency, base_url=server.base_url,
                           conversations=[], llm_cache=work / f"llm-{name}.sqlite",
                           embedding_cache=work / f"emb-{name}.sqlite")
    executor = [f"run.executor={opts.executor}"] if opts.executor != "local" else []
    run = PipelineRun(name=name, config=CONFIG, overrides=sets + [f"data.path={data}"] + executor + list(opts.sets),
                      package="LongMemEval")
    print(f"bench-scale: {name}: {gen['haystack_slots']} haystack sessions ({gen['distinct_sessions']} distinct), "
          f"L={opts.latency}s, concurrency {opts.concurrency}", flush=True)
    t0 = time.perf_counter()
    cold = run_stages(run, server, LOCOMO_STAGES, work / "logs")
    wall = time.perf_counter() - t0
    print(f"bench-scale: {name}: rerun", flush=True)
    again = run_stages(run, server, LOCOMO_STAGES, work / "logs-rerun")
    rows = stage_rows(cold, opts.latency, opts.concurrency)
    cfg = run.cfg()
    return {"name": name, "sessions": sessions, "questions": limit, "data": gen, "wall_seconds": round(wall, 2),
            "stages": rows, "rerun_calls": sum(r.request_count for r in again),
            "rerun_wall_seconds": round(sum(r.process.wall_seconds for r in again), 2),
            "cpu_side_seconds": round(sum(r["cpu_seconds"] for r in rows if r["stage"] in CPU_STAGES), 2),
            "peak_rss_bytes": max(r["peak_rss_bytes"] for r in rows),
            "disk_bytes": {"run_dir": disk_bytes(cfg.run_dir), "llm_cache": disk_bytes(Path(cfg.llm.cache_path)),
                           "embedding_cache": disk_bytes(Path(cfg.embedding.cache_path)),
                           "data_file": gen["bytes"]}}


def extrapolate_cpu_side(r: dict[str, Any], questions_full: int, distinct_full: int) -> dict[str, Any]:
    """The CPU side (04 + 06) of the full preset from a run of its first questions.

    The model's encode time grows with the texts it has not seen, i.e. with the distinct sessions
    (a session shared by many haystacks gives byte-identical chunk and field texts, served by the
    embedding cache), so it scales by distinct sessions full / measured; a linear scaling per
    question would charge every shared session again. Everything else (imports, model load,
    BM25 tokens, saving the index, retrieval) scales per question, which over-counts the fixed
    costs: an upper bound.
    """
    limit, distinct = r["questions"], r["data"]["distinct_sessions"]
    if limit >= questions_full:
        return {"seconds": r["cpu_side_seconds"], "measured_questions": limit, "label": "measured"}
    encode = next((s.get("encode_cpu_seconds") or 0.0 for s in r["stages"] if s["stage"] == "04_index"), 0.0)
    rest = r["cpu_side_seconds"] - encode
    by_sessions, by_questions = distinct_full / distinct, questions_full / limit
    return {"seconds": round(encode * by_sessions + rest * by_questions, 1), "measured_questions": limit,
            "encode_cpu_seconds": encode, "other_cpu_seconds": round(rest, 2),
            "distinct_sessions": {"measured": distinct, "full": distinct_full},
            "label": f"EXTRAPOLATED from {limit} questions: encoding x {by_sessions:.2f} (distinct sessions "
                     f"{distinct_full}/{distinct}), the rest x {by_questions:.1f} (questions)"}


def verdicts(r: dict[str, Any], extrapolated_cpu: float) -> dict[str, bool]:
    return {"cpu_side": extrapolated_cpu < TARGETS["cpu_seconds"],
            "peak_rss": r["peak_rss_bytes"] < TARGETS["peak_rss_bytes"],
            "llm_ratio": all(s["ratio_passed"] for s in r["stages"] if s["ratio_passed"] is not None),
            "rerun_calls": r["rerun_calls"] == TARGETS["rerun_calls"]}


def fit(runs: list[dict[str, Any]], target_s: int, questions: int) -> dict[str, Any]:
    """Per CPU stage: CPU seconds and peak RSS = a + b x S over the runs, evaluated at ``target_s``."""
    out: dict[str, Any] = {"target_sessions": target_s, "label": "EXTRAPOLATED (linear fit, not measured)"}
    s = np.array([r["sessions"] for r in runs], dtype=float)
    for stage in CPU_STAGES:
        per: dict[str, Any] = {}
        for key in ("cpu_seconds", "process_wall_seconds", "peak_rss_bytes"):
            y = np.array([next(x[key] for x in r["stages"] if x["stage"] == stage) for r in runs], dtype=float)
            b, a = np.polyfit(s, y, 1) if len(set(s)) > 1 else (0.0, float(y.mean()))
            pred = a + b * target_s
            resid = y - (a + b * s)
            r2 = 1 - float(resid @ resid) / float(((y - y.mean()) @ (y - y.mean())) or 1.0)
            per[key] = {"measured": dict(zip([int(v) for v in s], [round(float(v), 2) for v in y])),
                        "a": round(float(a), 4), "b_per_session": round(float(b), 4), "r2": round(r2, 4),
                        f"at_S{target_s}": round(float(pred), 2),
                        # a slope <= 0 is noise (load) or no growth: its extrapolation means nothing
                        "growth_measured": bool(b > 0)}
            if key != "peak_rss_bytes":
                # a (imports, model load) is paid once per process; b S is the work of the
                # `questions` haystacks measured, which grows with the number of questions.
                per[key][f"at_S{target_s}_Q{FULL_QUESTIONS}"] = round(float(a + b * target_s * FULL_QUESTIONS
                                                                            / questions), 1)
        out[stage] = per
    return out


class WorkerSampler:
    """Peak RSS and CPU seconds of the Ray worker processes under a head we started.

    A stage process measures only itself (the driver); the memory stages' work runs in the
    cluster's worker processes, children of the head's raylet, so they are sampled here."""

    def __init__(self, head_pid: int, every: float = 0.5):
        self.head_pid, self.every = head_pid, every
        self.peak_rss: dict[int, int] = {}
        self.cpu: dict[int, float] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)

    def _sample(self) -> None:
        import psutil

        try:
            procs = psutil.Process(self.head_pid).children(recursive=True)
        except psutil.Error:
            return
        for p in procs:
            try:
                if not p.name().startswith("ray::") and "default_worker" not in " ".join(p.cmdline()):
                    continue
                self.peak_rss[p.pid] = max(self.peak_rss.get(p.pid, 0), p.memory_info().rss)
                t = p.cpu_times()
                self.cpu[p.pid] = t.user + t.system  # cumulative: the last sample is the process's total
            except psutil.Error:
                continue

    def _loop(self) -> None:
        while not self._stop.wait(self.every):
            self._sample()

    def __enter__(self) -> "WorkerSampler":
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=10)

    def figures(self) -> dict[str, Any]:
        return {"workers": len(self.peak_rss), "peak_rss_bytes_per_worker": max(self.peak_rss.values(), default=0),
                "cpu_seconds": round(sum(self.cpu.values()), 2)}


@contextlib.contextmanager
def ray_cluster(opts: argparse.Namespace, work: Path) -> Iterator[Optional[WorkerSampler]]:
    """With ``--executor ray``: join RAY_ADDRESS, else start a loopback head for the bench (each
    stage process then joins it instead of starting a cluster of its own) and sample its workers."""
    if opts.executor != "ray" or os.environ.get("RAY_ADDRESS"):
        yield None
        return
    from bench.ray_bench import LOOPBACK, cluster

    saved = {k: os.environ.get(k) for k in ("RAY_ADDRESS", *LOOPBACK)}
    with cluster(opts.ray_cpus, work / "logs") as (address, seconds):
        print(f"bench-scale: Ray head on {address} ({seconds} s to start)", flush=True)
        os.environ.update({"RAY_ADDRESS": address, **LOOPBACK})  # the stage processes inherit it
        try:
            with WorkerSampler(_head_pid()) as sampler:
                yield sampler
        finally:
            for k, v in saved.items():
                if v is None:
                    os.environ.pop(k, None)
                else:
                    os.environ[k] = v


def _head_pid() -> int:
    """The newest ``ray start --head`` child of this process (bench.ray_bench.cluster's)."""
    import psutil

    heads = [p for p in psutil.Process().children() if "--head" in " ".join(p.cmdline())]
    return heads[-1].pid if heads else 0


def run_scale(opts: argparse.Namespace) -> dict[str, Any]:
    from tests.fake_openai import FakeOpenAI

    q_full, s_full, _ = PRESETS[opts.preset]
    limit = opts.limit or (3 if opts.preset == "m" else q_full)
    sizes = [int(x) for x in opts.fit_sessions.split(",")] if opts.preset == "m" else [opts.sessions or s_full]
    work = resolve_path(opts.out) / "work-scale"
    fresh_workdir(work)
    result: dict[str, Any] = {"preset": opts.preset, "preset_full": {"questions": q_full, "sessions": s_full},
                              "pool": opts.pool, "seed": opts.seed, "limit": limit, "latency": opts.latency,
                              "concurrency": opts.concurrency, "executor": opts.executor, "machine": machine_info(),
                              "load_start": load_average(), "targets": TARGETS, "runs": []}
    started = time.time()
    with ray_cluster(opts, work) as sampler, FakeOpenAI(latency=opts.latency) as server:
        for s in sizes:
            result["runs"].append(one_run(opts, server, work, s, limit))
        if sampler is not None:
            sampler._sample()
            result["ray_workers"] = sampler.figures()
    result["wall_seconds"] = round(time.time() - started, 1)
    result["load_end"] = load_average()
    if opts.preset == "s":
        r = result["runs"][0]
        distinct_full = stats(generate(q_full, sizes[0], opts.pool, opts.seed))["distinct_sessions"]
        result["cpu_side_500"] = extrapolate_cpu_side(r, q_full, distinct_full)
        result["passed"] = verdicts(r, result["cpu_side_500"]["seconds"])
    else:
        result["fit"] = fit(result["runs"], s_full, limit)
        result["passed"] = {f"{r['name']}_{k}": v for r in result["runs"]
                            for k, v in verdicts(r, 0.0).items() if k in ("llm_ratio", "rerun_calls")}
    return result


def render(r: dict[str, Any]) -> str:
    def v(ok: bool | None) -> str:
        return "n/a" if ok is None else ("pass" if ok else "FAIL")

    mib = 2**20
    lines = [f"# bench-scale preset {r['preset']} (pool {r['pool']}, seed {r['seed']}, first {r['limit']} questions, "
             f"L = {r['latency']} s, concurrency {r['concurrency']})", "",
             f"Machine: {r['machine'].get('cpu_count')} CPUs; load average {r['load_start']} at start, "
             f"{r['load_end']} at end; bench wall {r['wall_seconds']} s; executor {r.get('executor', 'local')}.", ""]
    if r.get("ray_workers"):
        w = r["ray_workers"]
        lines += [f"Ray workers (stages 02-07 ran there; the stage rows' CPU and RSS are the driver's): "
                  f"{w['workers']} processes, {w['cpu_seconds']} CPU s in all, peak RSS "
                  f"{w['peak_rss_bytes_per_worker'] / 2**20:.0f} MiB per worker.", ""]
    for run in r["runs"]:
        d = run["data"]
        lines += [f"## {run['name']}: {run['questions']} questions x {run['sessions']} sessions "
                  f"({d['distinct_sessions']} distinct of {d['haystack_slots']}, {d['turns']} turns)", "",
                  "| stage | process wall s | stage wall s | calls | saved by reuse | bound s | ratio | CPU s "
                  "| peak RSS MiB | texts/s | result |", "|---|---|---|---|---|---|---|---|---|---|---|"]
        for s in run["stages"]:
            lines.append(f"| {s['stage']} | {s['process_wall_seconds']} | {s['stage_wall_seconds']} | {s['calls']} "
                         f"| {s['calls_saved_by_reuse'] if s['calls_saved_by_reuse'] is not None else '-'} "
                         f"| {s['bound_seconds'] if s['bound_seconds'] is not None else '-'} "
                         f"| {s['ratio'] if s['ratio'] is not None else '-'} | {s['cpu_seconds']} "
                         f"| {s['peak_rss_bytes'] / mib:.0f} | {s['texts_per_second'] or '-'} "
                         f"| {v(s['ratio_passed'])} |")
        disk = ", ".join(f"{k} {b / mib:.1f} MiB" for k, b in run["disk_bytes"].items())
        lines += ["", f"Rerun: {run['rerun_calls']} calls in {run['rerun_wall_seconds']} s. Disk: {disk}.", ""]
    if r["preset"] == "s":
        run, p, cpu = r["runs"][0], r["passed"], r["cpu_side_500"]
        lines += ["## Targets (preset s)", "", "| target | measured | result |", "|---|---|---|",
                  f"| CPU side (04 + 06) < 20 min for 500 questions | {cpu['seconds']} s ({cpu['label']}) "
                  f"| {v(p['cpu_side'])} |",
                  f"| peak RSS < 4 GiB | {run['peak_rss_bytes'] / mib:.0f} MiB | {v(p['peak_rss'])} |",
                  f"| every LLM stage <= 1.2 x bound | see the table | {v(p['llm_ratio'])} |",
                  f"| rerun 0 calls | {run['rerun_calls']} | {v(p['rerun_calls'])} |", ""]
    else:
        f = r["fit"]
        lines += [f"## Fit against sessions per haystack -> S = {f['target_sessions']} ({f['label']})", "",
                  "| stage | quantity | measured (S: value) | a + b S | r2 | at S=500 | at S=500, 500 questions |",
                  "|---|---|---|---|---|---|---|"]
        for stage in CPU_STAGES:
            for key, x in f[stage].items():
                unit = mib if key == "peak_rss_bytes" else 1
                measured = ", ".join(f"S={k}: {val / unit:.1f}" for k, val in x["measured"].items())
                flag = "" if x["growth_measured"] else " (no growth measured: slope <= 0)"
                lines.append(f"| {stage} | {key.replace('_bytes', '_MiB')} | {measured} | {x['a'] / unit:.1f} + "
                             f"{x['b_per_session'] / unit:.3f} S | {x['r2']} | {x['at_S500'] / unit:.1f}{flag} "
                             f"| {x.get('at_S500_Q500', '- (per process)')} |")
        checks = ", ".join(f"{k} {v(ok)}" for k, ok in r["passed"].items())
        lines += ["", f"LLM stages and reruns of the fit runs: {checks}", ""]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.scale", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--preset", choices=sorted(PRESETS), default="s")
    p.add_argument("--limit", type=int, default=None, help="first N questions (default: s all 500, m 3)")
    p.add_argument("--sessions", type=int, default=None, help="preset s: sessions per haystack (default 50)")
    p.add_argument("--fit-sessions", default="10,20,40", help="preset m: the S values of the fit")
    p.add_argument("--pool", type=int, default=None, help="distinct sessions in the pool (default: the preset's)")
    p.add_argument("--seed", type=int, default=42)
    p.add_argument("--latency", type=float, default=0.2, help="seconds the fake endpoint waits per call (L)")
    p.add_argument("--concurrency", type=int, default=16)
    p.add_argument("--executor", choices=("local", "ray"), default="local",
                   help="ray: stages 02-07 as Ray tasks (run.executor=ray) on RAY_ADDRESS, else a head started here")
    p.add_argument("--ray-cpus", type=int, default=2, help="CPUs of the head started here (--executor ray)")
    p.add_argument("--out", default="results/bench")
    p.add_argument("--strict", action="store_true", help="exit 1 when a target is missed")
    p.add_argument("--set", dest="sets", action="append", default=[], metavar="KEY=VALUE",
                   help="extra config override for every stage (no spaces), e.g. --set embedding.runtime=onnx")
    opts = p.parse_args(argv)
    opts.pool = opts.pool or PRESETS[opts.preset][2]
    for var, value in (("TOKENIZERS_PARALLELISM", "false"), ("TRANSFORMERS_VERBOSITY", "error"),
                       ("HF_HUB_DISABLE_PROGRESS_BARS", "1")):
        os.environ.setdefault(var, value)
    try:
        result = run_scale(opts)
    except (BenchError, ValueError, FileNotFoundError) as exc:
        print(f"bench-scale error: {' '.join(str(exc).split())}", file=sys.stderr)
        return 2
    out = resolve_path(opts.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / f"scale_{opts.preset}.json").write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
    md = render(result)
    (out / f"scale_{opts.preset}.md").write_text(md, encoding="utf-8")
    print(md)
    return 1 if opts.strict and not all(result["passed"].values()) else 0


if __name__ == "__main__":
    sys.exit(main())
