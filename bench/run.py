"""`make bench`: run the four benchmark items side by side and write results/bench/.

    python -m bench.run [--latency 0.2] [--concurrency 16] [--conversations conv-26,conv-30]
                        [--skip speedup,retrieval,warm,...] [--out results/bench] [--strict]

The data file comes from the config or $LOCOMO_JSON (as for `make locomo`). Every bench run
starts from an empty work directory (``<out>/work``: fresh LLM and embedding caches, fresh
results), so the cold figures are cold; the warm rerun then reuses exactly those.
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import os
import resource
import shutil
import sys
import time
from pathlib import Path
from typing import Any

from bench.machine import load_average, machine_info
from bench.memory import GIB, model_weight_bytes, peak_memory
from bench.pipeline import (
    LOCOMO_STAGES,
    BenchError,
    PipelineRun,
    bench_overrides,
    endpoint_env,
    rerun_with_make,
    run_stages,
    run_whole,
)
from bench.report import render_markdown
from bench.retrieval import retrieval_latency, snapshot_cache
from bench.throughput import llm_stage_figures, speedup
from common.core import artifacts
from common.core.config import ConfigError, load_config, resolve_path

ITEMS = ("throughput", "speedup", "retrieval", "warm", "memory", "gateway")
MARKER = ".bench-workdir"  # only a directory carrying this file is ever wiped
TARGETS = {"ratio": 1.10, "pipeline_speedup": 10.0, "retrieval_p50": 0.020, "retrieval_p95": 0.060, "warm_calls": 0,
           "peak_rss": 2 * GIB}


@dataclasses.dataclass
class Options:
    config: str
    latency: float
    concurrency: int
    conversations: list[str]
    skip: set[str]
    out: Path
    workdir: Path
    speedup_conversation: str | None
    retrieval_conversation: str | None
    strict: bool
    sets: list[str]


def parse_args(argv: list[str] | None = None) -> Options:
    p = argparse.ArgumentParser(prog="python -m bench.run", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--config", default="configs/locomo.yaml", help="pipeline config (default: %(default)s)")
    p.add_argument("--latency", type=float, default=0.2, help="seconds the fake endpoint waits per call (L)")
    p.add_argument("--concurrency", type=int, default=16, help="llm.concurrency of the full run")
    p.add_argument("--conversations", default="", help="comma-separated conversation ids (default: all)")
    p.add_argument("--skip", default="", help=f"comma-separated items to skip: {', '.join(ITEMS)}")
    p.add_argument("--out", default="results/bench", help="where bench.json and bench.md go")
    p.add_argument("--workdir", default=None, help="scratch runs and caches (default: <out>/work, emptied first)")
    p.add_argument("--speedup-conversation", default=None, help="conversation of the concurrency 1 vs N runs "
                   "(default: the first one of the run)")
    p.add_argument("--retrieval-conversation", default=None, help="conversation of the retrieval latency item "
                   "(default: the first one of the run)")
    p.add_argument("--strict", action="store_true", help="exit 1 when a target is missed")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                   help="extra config override for every bench run (no spaces), e.g. --set retrieve.mode=dense_only")
    a = p.parse_args(argv)
    skip = {s.strip() for s in a.skip.split(",") if s.strip()}
    if skip - set(ITEMS):
        p.error(f"--skip: unknown item(s) {sorted(skip - set(ITEMS))} (known: {', '.join(ITEMS)})")
    if a.latency <= 0 or a.concurrency < 1:
        p.error("--latency must be > 0 and --concurrency >= 1")
    out = resolve_path(a.out)
    return Options(config=a.config, latency=a.latency, concurrency=a.concurrency,
                   conversations=[c.strip() for c in a.conversations.split(",") if c.strip()], skip=skip,
                   out=out, workdir=resolve_path(a.workdir) if a.workdir else out / "work",
                   speedup_conversation=a.speedup_conversation, retrieval_conversation=a.retrieval_conversation,
                   strict=a.strict, sets=list(a.set))


def fresh_workdir(path: Path) -> None:
    """Empty the bench's scratch directory; refuse to touch one the bench did not make."""
    if path.exists() and any(path.iterdir()) and not (path / MARKER).exists():
        raise BenchError(f"{path}: not empty and not a bench work directory (no {MARKER}); pass another --workdir")
    if path.exists():
        shutil.rmtree(path)
    path.mkdir(parents=True)
    (path / MARKER).write_text("scratch of python -m bench.run; emptied at every bench run\n", encoding="utf-8")


def pipeline_run(opts: Options, server: Any, name: str, concurrency: int, conversations: list[str],
                 llm_cache: str) -> PipelineRun:
    sets = bench_overrides(workdir=opts.workdir, name=name, concurrency=concurrency, base_url=server.base_url,
                           conversations=conversations, llm_cache=opts.workdir / llm_cache,
                           embedding_cache=opts.workdir / "embeddings.sqlite")
    return PipelineRun(name=name, config=opts.config, overrides=sets + opts.sets)


def snapshot_embeddings(run: PipelineRun, dst: Path) -> Path | None:
    """The embedding cache as stage 04 left it (what 06 meets in `make locomo`), if there is one."""
    path = run.cfg().embedding.cache_path
    if not path or not resolve_path(path).is_file():
        return None
    snapshot_cache(resolve_path(path), dst)
    return dst


def memories_of(run: PipelineRun) -> list[str]:
    from common.core.io import read_jsonl

    return list(dict.fromkeys(r["memory_id"] for r in read_jsonl(artifacts.path(run.run_dir, "sessions"))))


def data_source(opts: Options) -> dict[str, Any]:
    """The benchmark file the pipeline will read (config, else $LOCOMO_JSON, else data/)."""
    from common.benchmarks.registry import adapter as registry
    from common.core.io import sha256_file

    cfg = load_config([opts.config], opts.sets)
    path = registry(cfg.benchmark).data_path(cfg)
    return {"path": str(path), "sha256": sha256_file(path), "benchmark": cfg.benchmark}


def run_bench(opts: Options) -> dict[str, Any]:
    from tests.fake_openai import FakeOpenAI

    started = time.time()
    result: dict[str, Any] = {
        "bench": {"started_utc": _utc(started), "targets": TARGETS,
                  "options": {**dataclasses.asdict(opts), "skip": sorted(opts.skip), "out": str(opts.out),
                              "workdir": str(opts.workdir)}},
        "machine": machine_info(), "data": data_source(opts), "items": {},
    }
    fresh_workdir(opts.workdir)
    items = result["items"]
    with FakeOpenAI(latency=opts.latency) as server:
        full = pipeline_run(opts, server, "full", opts.concurrency, opts.conversations, "llm.sqlite")
        cold, cache_after_04 = cold_run(opts, server, full, result["bench"])
        memories = memories_of(full)
        if "throughput" not in opts.skip:
            rows = llm_stage_figures(cold, opts.latency, opts.concurrency, TARGETS["ratio"])
            items["throughput"] = {"latency": opts.latency, "concurrency": opts.concurrency,
                                   "memories": len(memories), "stages": rows, "passed": all(r["passed"] for r in rows)}
        if "warm" not in opts.skip:
            items["warm"] = warm_item(opts, server, full, result["bench"]["full_run"]["wall_seconds"])
        if "speedup" not in opts.skip:
            items["speedup"] = speedup_item(opts, server, opts.speedup_conversation or memories[0])
        if "retrieval" not in opts.skip:
            conv = opts.retrieval_conversation or memories[0]
            print(f"bench: 06_retrieve latency on {conv}", flush=True)
            with endpoint_env(server.base_url):  # an HTTP embedding backend calls the fake server too
                items["retrieval"] = retrieval_latency(full, conv, cache_after_04, opts.workdir,
                                                       p50_target=TARGETS["retrieval_p50"],
                                                       p95_target=TARGETS["retrieval_p95"])
        if "gateway" not in opts.skip:  # an outside system's calls through the gateway (common/systems/gateway.py)
            print("bench: gateway overhead per call and LangMem's ingestion ratio", flush=True)
            from bench import gateway

            items["gateway"] = {"overhead": gateway.overhead(server.base_url, opts.workdir,
                                                             concurrency=opts.concurrency),
                                "ingestion": gateway.ingestion_ratio(
                                    server.base_url, opts.workdir, opts.config,
                                    [o for o in full.overrides if o.startswith("data.")], opts.latency)}
    if "memory" not in opts.skip:
        weights = model_weight_bytes(full.cfg().embedding)
        items["memory"] = {**peak_memory(cold, weights["bytes"], TARGETS["peak_rss"]), "model": weights}
    finished = time.time()
    result["bench"].update(finished_utc=_utc(finished), wall_seconds=round(finished - started, 1),
                           load_average_end=load_average(),
                           # the fake server keeps every request it answered: not part of item 4
                           bench_process_peak_rss_bytes=resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024)
    return result


def cold_run(opts: Options, server: Any, full: PipelineRun, record: dict[str, Any]) -> tuple[list, Path | None]:
    """Stages 01-09 from empty caches, one measured process each (the base of every item)."""
    print(f"bench: full run, concurrency {opts.concurrency}, latency {opts.latency}s -> {full.run_dir}", flush=True)
    logs = opts.workdir / "logs"
    t0 = time.time()
    cold = run_stages(full, server, LOCOMO_STAGES[:4], logs)  # 01-04
    cache_after_04 = snapshot_embeddings(full, opts.workdir / "embeddings.after_04.sqlite")
    cold += run_stages(full, server, LOCOMO_STAGES[4:], logs)
    record["full_run"] = {"config": opts.config, "overrides": full.overrides, "run_dir": str(full.run_dir),
                          "wall_seconds": round(time.time() - t0, 3), "stages": [stage_record(r) for r in cold],
                          "requests_by_kind": server.counts_by_kind()}
    return cold, cache_after_04


def warm_item(opts: Options, server: Any, full: PipelineRun, cold_wall: float) -> dict[str, Any]:
    """Item 3: `make locomo` again on the finished run: requests the server saw, wall, RSS."""
    print("bench: warm rerun (make locomo, same config)", flush=True)
    proc, requests, via = rerun_with_make(full, server, opts.workdir / "logs")
    return {"via": via, "command": proc.cmd, "llm_calls": sum(requests.values()), "requests_by_kind": requests,
            "wall_seconds": proc.wall_seconds, "peak_rss_bytes": proc.peak_rss_bytes,
            "stage_wall_seconds": {s: full.manifest(s).get("wall_seconds") for s in LOCOMO_STAGES},
            "cold_wall_seconds": cold_wall, "target_llm_calls": TARGETS["warm_calls"],
            "passed": sum(requests.values()) == TARGETS["warm_calls"]}


def speedup_item(opts: Options, server: Any, conv: str) -> dict[str, Any]:
    """Item 1b: one conversation at concurrency 1 and at --concurrency, each from its own empty LLM
    cache, each the whole pipeline 01-09 in one process as `make locomo` runs it."""
    runs, walls = {}, {}
    for c in sorted({1, opts.concurrency}):
        print(f"bench: {conv} at concurrency {c}", flush=True)
        run = pipeline_run(opts, server, f"{conv}-c{c}", c, [conv], f"llm-{conv}-c{c}.sqlite")
        proc, runs[c] = run_whole(run, server, opts.workdir / "logs")
        walls[c] = proc.wall_seconds
    figures = speedup(runs[1], runs[opts.concurrency], 1, opts.concurrency, opts.latency,
                      whole=(walls[1], walls[opts.concurrency]))
    target = TARGETS["pipeline_speedup"]
    return {"memory_id": conv, **figures, "target_pipeline_speedup": target,
            "passed": figures["pipeline_speedup"] is not None and figures["pipeline_speedup"] >= target}


def _utc(t: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(t))


def stage_record(r: Any) -> dict[str, Any]:
    return {"stage": r.stage, "process": dataclasses.asdict(r.process), "requests": r.requests,
            "manifest": r.manifest, "load_after": r.load_after}


def all_passed(result: dict[str, Any]) -> bool:
    for item in result["items"].values():
        passed = item.get("passed", True)
        if passed is False or (isinstance(passed, dict) and not all(passed.values())):
            return False
    return True


def main(argv: list[str] | None = None) -> int:
    opts = parse_args(argv)
    # Model-loading progress bars would garble the bench's own output (as in common.pipeline.cli).
    for var, value in (("TOKENIZERS_PARALLELISM", "false"), ("TRANSFORMERS_VERBOSITY", "error"),
                       ("HF_HUB_DISABLE_PROGRESS_BARS", "1")):
        os.environ.setdefault(var, value)
    try:
        result = run_bench(opts)
    except (BenchError, ConfigError, ValueError, FileNotFoundError) as exc:
        print(f"bench error: {' '.join(str(exc).split())}", file=sys.stderr)
        return 2
    opts.out.mkdir(parents=True, exist_ok=True)
    (opts.out / "bench.json").write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
    md = render_markdown(result)
    (opts.out / "bench.md").write_text(md, encoding="utf-8")
    print(md)
    print(f"bench: {opts.out / 'bench.json'} and bench.md ({result['bench']['wall_seconds']:.0f}s)")
    return 1 if opts.strict and not all_passed(result) else 0


if __name__ == "__main__":
    sys.exit(main())
