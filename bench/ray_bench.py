"""`make bench-ray`: the Ray executor against the local engine -> results/bench/ray.{json,md}.

    python -m bench.ray_bench [--latency 0.05] [--concurrency 4] [--limit 10] [--skip overhead,throughput,cpu]

Three figures, each from empty caches in ``<out>/work-ray/`` through the fake endpoint
(``tests/fake_openai``, answering each request after ``--latency`` seconds):

* overhead: LoCoMo conv-26 (``--limit`` questions) by ``make locomo``'s process
  (``common.pipeline.run_all``) with the local engine and with ``EXECUTOR=ray`` joining a running
  local cluster; the ratio of the walls of stages 02-07 (target <= 1.15) and of the processes;
* throughput: ``--workers`` conversations (``--throughput-limit`` questions each) on the cluster,
  LLM-bound (vectors from the fake endpoint); the wall of stages 02-07 against the bound
  calls x L / c of one endpoint with bound c (target <= 1.2: the executor never starves it);
* cpu: stage 04 (the MiniLM index build, CPU-bound) over ``--cpu-memories`` with the local
  engine and with clusters of 1 and 2 worker processes; the encode CPU seconds per memory that the
  projection in docs/scale.md scales to LongMemEval_M and BEAM 10M.

Every cluster is started here (``ray start --head --block`` on 127.0.0.1, ended by its process
id) and its start time is reported on its own: a run joins a running cluster.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator

from bench.machine import load_average, machine_info
from bench.pipeline import bench_overrides, child_env
from bench.procs import REPO_ROOT, run_measured, tail
from common.pipeline.graph import STAGES, by_name, memory_stages

MARKER = ".bench-workdir"  # only a directory carrying this file is ever wiped
MEMORY_STAGES = tuple(s.id for s in memory_stages())  # the stages the executor runs per memory
TARGETS = {"overhead_ratio": 1.15, "throughput_ratio": 1.2}
# A private loopback cluster: Ray would otherwise name the machine's address (and bind it), and a
# token another cluster left in ~/.ray would lock the drivers out.
LOOPBACK = {"RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0", "RAY_AUTH_MODE": "disabled"}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextmanager
def cluster(cpus: int, logs: Path) -> Iterator[tuple[str, float]]:
    """A Ray head with ``cpus`` CPUs on 127.0.0.1: (address, seconds until it answered)."""
    port, started = _free_port(), time.time()
    ray_bin = str(Path(sys.executable).with_name("ray"))
    logs.mkdir(parents=True, exist_ok=True)
    with (logs / f"ray-head-{cpus}cpu.log").open("w") as fh:
        head = subprocess.Popen([ray_bin, "start", "--head", "--block", f"--port={port}", f"--num-cpus={cpus}",
                                 "--node-ip-address=127.0.0.1", "--include-dashboard=false",
                                 "--disable-usage-stats"], stdout=fh, stderr=subprocess.STDOUT,
                                start_new_session=True, env={**os.environ, **LOOPBACK})
    try:
        address = f"127.0.0.1:{port}"
        deadline = time.time() + 180
        while time.time() < deadline:
            with socket.socket() as s:
                if s.connect_ex(("127.0.0.1", port)) == 0:
                    break
            time.sleep(0.5)
        else:
            raise RuntimeError(f"the Ray head did not answer on {address} within 180 s")
        time.sleep(3)  # its raylet registers after the GCS port opens
        yield address, round(time.time() - started, 1)
    finally:
        try:
            os.killpg(head.pid, signal.SIGTERM)
            head.wait(timeout=60)
        except (ProcessLookupError, subprocess.TimeoutExpired):
            os.killpg(head.pid, signal.SIGKILL)


def manifests(run_dir: Path) -> dict[str, dict[str, Any]]:
    return {s: json.loads((run_dir / f"{s}.manifest.json").read_text(encoding="utf-8"))
            for s in MEMORY_STAGES if (run_dir / f"{s}.manifest.json").exists()}


def memory_wall(run_dir: Path) -> float:
    """Stages 02-07's wall: their summed walls (local engine), or the group's (the Ray executor
    writes every memory stage's manifest after one group of tasks, each stamped with the group's wall)."""
    return memory_wall_of(manifests(run_dir))


def memory_wall_of(ms: dict[str, dict[str, Any]]) -> float:
    if any("executor" in m for m in ms.values()):
        return max(float(m["wall_seconds"]) for m in ms.values())
    return sum(float(m["wall_seconds"]) for m in ms.values())


def pipeline(work: Path, name: str, server: Any, *, conversations: list[str], limit: int, concurrency: int,
             address: str = "", stages: str = "", extra: list[str] | None = None,
             vectors: bool = True) -> dict[str, Any]:
    """One measured run of ``common.pipeline.run_all`` (or of one stage script)."""
    sets = bench_overrides(workdir=work, name=name, concurrency=concurrency, base_url=server.base_url,
                           conversations=conversations, llm_cache=work / f"{name}.llm.sqlite",
                           embedding_cache=work / f"{name}.emb.sqlite") + (extra or [])
    if vectors:
        sets += ["embedding.backend=openai", "embedding.model=fake-embed", f"embedding.base_url={server.base_url}"]
    if address:
        sets.append("run.executor=ray")
    module = ["-m", f"LoCoMo.{stages}"] if stages else ["-m", "common.pipeline.run_all", "locomo"]
    cmd = [sys.executable, *module, "--config", "configs/locomo.yaml", "--limit", str(limit)]
    for s in sets:
        cmd += ["--set", s]
    env = child_env(server.base_url)
    if address:
        env.update({"RAY_ADDRESS": address, **LOOPBACK})
    before = server.counts_by_kind()
    measured = run_measured(cmd, env=env, log=work / "logs" / f"{name}.log")
    if measured.returncode != 0:
        raise RuntimeError(f"{name} failed ({measured.returncode}): {tail(measured.log, 8)}")
    after = server.counts_by_kind()
    run_dir = work / "results" / "locomo" / name
    calls = {k: after.get(k, 0) - before.get(k, 0) for k in after if after.get(k, 0) != before.get(k, 0)}
    return {"name": name, "process_wall_seconds": measured.wall_seconds, "memory_stages_wall_seconds":
            round(memory_wall(run_dir), 3), "driver_cpu_seconds": round(measured.user_seconds +
                                                                        measured.system_seconds, 2),
            "requests": calls, "run_dir": str(run_dir), "manifests": manifests(run_dir)}


def chat_calls(requests: dict[str, int], *, judge: bool = False) -> int:
    return sum(n for k, n in requests.items() if k != "embeddings" and (judge or not k.startswith("judge")))


def overhead(work: Path, server: Any, opts: argparse.Namespace, address: str) -> dict[str, Any]:
    local = pipeline(work, "overhead-local", server, conversations=["conv-26"], limit=opts.limit,
                     concurrency=opts.concurrency)
    ray = pipeline(work, "overhead-ray", server, conversations=["conv-26"], limit=opts.limit,
                   concurrency=opts.concurrency, address=address)
    same = [json.loads(line) for line in (Path(local["run_dir"]) / "07_answer.jsonl").read_text().splitlines()]
    other = [json.loads(line) for line in (Path(ray["run_dir"]) / "07_answer.jsonl").read_text().splitlines()]
    ratio = ray["memory_stages_wall_seconds"] / local["memory_stages_wall_seconds"]
    return {"conversation": "conv-26", "limit": opts.limit, "latency": opts.latency, "concurrency": opts.concurrency,
            "local": _short(local), "ray": _short(ray), "ratio_memory_stages": round(ratio, 3),
            "ratio_process": round(ray["process_wall_seconds"] / local["process_wall_seconds"], 3),
            "same_answers": [a["answer"] for a in same] == [a["answer"] for a in other],
            "ray_split": ray_split(ray["manifests"]),
            "target": TARGETS["overhead_ratio"], "passed": ratio <= TARGETS["overhead_ratio"]}


def ray_split(ms: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """The Ray group's wall by the tasks' own clocks (the memory stages' manifests share one entry):
    before the first task body ran, the longest task body, and after the last one (writing back)."""
    ex = next((m["executor"] for m in ms.values() if "first_task_started_after_seconds" in m.get("executor", {})), None)
    if ex is None:
        return {}
    group = memory_wall_of(ms)
    return {"before_first_task_seconds": ex["first_task_started_after_seconds"],
            "longest_task_seconds": ex["longest_task_seconds"],
            "after_last_task_seconds": round(group - ex["last_task_finished_after_seconds"], 3),
            "group_seconds": group}


def throughput(work: Path, server: Any, opts: argparse.Namespace, address: str) -> dict[str, Any]:
    convs = opts.throughput_memories.split(",")[:opts.workers]
    # The local engine on the same work first: how far from the bound the stages' own work keeps
    # one process, against which the workers' figure is read.
    local = pipeline(work, "throughput-local", server, conversations=convs, limit=opts.throughput_limit,
                     concurrency=opts.concurrency)
    server.peak_in_flight_total = 0
    ray = pipeline(work, "throughput-ray", server, conversations=convs, limit=opts.throughput_limit,
                   concurrency=opts.concurrency, address=address)
    calls = chat_calls(ray["requests"])
    bound = calls * opts.latency / opts.concurrency
    ratio = ray["memory_stages_wall_seconds"] / bound if bound else None
    return {"workers": len(convs), "memories": convs, "limit": opts.throughput_limit, "latency": opts.latency,
            "endpoint_bound": opts.concurrency, "calls_02_07": calls, "bound_seconds": round(bound, 3),
            "local": _short(local), "local_ratio": round(local["memory_stages_wall_seconds"] / bound, 3)
            if bound else None,
            "ray": _short(ray), "ratio": round(ratio, 3) if ratio else None,
            "peak_in_flight": server.peak_in_flight_total,
            "target": TARGETS["throughput_ratio"], "passed": ratio is not None and ratio <= TARGETS["throughput_ratio"]}


def cpu_bound(work: Path, server: Any, opts: argparse.Namespace, logs: Path) -> dict[str, Any]:
    """Stage 04 with the CPU model: prepared once (01-03), then built three times from empty
    embedding caches: local engine, Ray with 1 and with 2 worker processes."""
    convs = opts.cpu_memories.split(",")
    out: dict[str, Any] = {"memories": convs, "variants": {}}
    for stage in (s.id for s in STAGES if s.number < by_name("index").number):  # 01-03
        pipeline(work, "cpu-prep", server, conversations=convs, limit=1, concurrency=opts.concurrency,
                 vectors=False, stages=stage)
    prep = work / "results" / "locomo" / "cpu-prep"
    variants: list[tuple[str, int]] = [("local", 0), ("ray-1-worker", 1), ("ray-2-workers", 2)]
    for name, cpus in variants:
        target = work / "results" / "locomo" / f"cpu-{name}"
        shutil.rmtree(target, ignore_errors=True)
        shutil.copytree(prep, target)
        (work / f"cpu-{name}.emb.sqlite").unlink(missing_ok=True)
        if cpus:
            with cluster(cpus, logs) as (address, start):
                r = pipeline(work, f"cpu-{name}", server, conversations=convs, limit=1,
                             concurrency=opts.concurrency, address=address, vectors=False, stages="04_index")
            r["cluster_start_seconds"] = start
        else:
            r = pipeline(work, f"cpu-{name}", server, conversations=convs, limit=1, concurrency=opts.concurrency,
                         vectors=False, stages="04_index")
        m = r["manifests"].get("04_index", {})
        emb = m.get("embedding", {})
        out["variants"][name] = {"stage_wall_seconds": m.get("wall_seconds"),
                                 "process_wall_seconds": r["process_wall_seconds"],
                                 "cluster_start_seconds": r.get("cluster_start_seconds"),
                                 "texts_encoded": emb.get("encoded") or emb.get("texts_encoded"),
                                 "embedding": emb}
    local = out["variants"]["local"]
    for v in out["variants"].values():
        v["speedup_vs_local"] = round(local["stage_wall_seconds"] / v["stage_wall_seconds"], 3) \
            if v.get("stage_wall_seconds") else None
    out["stage_04_wall_per_memory_local"] = round(local["stage_wall_seconds"] / len(convs), 2)
    return out


def _short(r: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in r.items() if k not in ("manifests", "run_dir")}


def render(result: dict[str, Any]) -> str:
    lines = ["# make bench-ray", "",
             f"Machine: {result['machine'].get('cpu', '?')}, {result['machine'].get('cpu_count', '?')} CPUs; "
             f"load average before {result['load_before']}, after {result['load_after']}.", ""]
    o = result.get("overhead")
    if o:
        lines += ["## Overhead: the Ray executor against the local engine (same work)", "",
                  f"LoCoMo {o['conversation']}, LIMIT {o['limit']}, fake latency {o['latency']} s, bound "
                  f"{o['concurrency']}: stages 02-07 {o['local']['memory_stages_wall_seconds']} s local, "
                  f"{o['ray']['memory_stages_wall_seconds']} s Ray: ratio **{o['ratio_memory_stages']}** (target <= "
                  f"{o['target']}: {'pass' if o['passed'] else 'FAIL'}); whole process {o['ratio_process']}; "
                  f"same answers: {o['same_answers']}. Cluster start (not in the ratio): "
                  f"{result.get('cluster_start_seconds')} s.", ""]
        split = o.get("ray_split")
        if split:
            lines += [f"The Ray group's {split['group_seconds']} s by the task's own clock: "
                      f"{split['before_first_task_seconds']} s before its body ran (joining the cluster, the "
                      f"actors, a worker's start and imports), {split['longest_task_seconds']} s in it (the local "
                      f"engine's stages: {o['local']['memory_stages_wall_seconds']} s), "
                      f"{split['after_last_task_seconds']} s writing back.", ""]
    t = result.get("throughput")
    if t:
        lines += ["## Throughput: K workers on LLM-bound work", "",
                  f"{t['workers']} workers ({', '.join(t['memories'])}, LIMIT {t['limit']}), fake latency "
                  f"{t['latency']} s, one endpoint bound {t['endpoint_bound']}: {t['calls_02_07']} calls in "
                  f"stages 02-07, bound calls x L / c = {t['bound_seconds']} s, measured "
                  f"{t['ray']['memory_stages_wall_seconds']} s: ratio **{t['ratio']}** (target <= {t['target']}: "
                  f"{'pass' if t['passed'] else 'FAIL'}); the local engine on the same work: "
                  f"{t['local']['memory_stages_wall_seconds']} s, ratio {t['local_ratio']}; most requests in flight "
                  "at the endpoint during the Ray run: "
                  f"{t['peak_in_flight']} (its bound {t['endpoint_bound']}).", ""]
    c = result.get("cpu")
    if c:
        lines += ["## CPU-bound: stage 04 (MiniLM index build)", "",
                  f"Memories {', '.join(c['memories'])}, from empty embedding caches.", "",
                  "| Variant | Stage 04 wall (s) | Process wall (s) | Cluster start (s) | Speed-up vs local |",
                  "|---|---|---|---|---|"]
        for name, v in c["variants"].items():
            lines.append(f"| {name} | {v['stage_wall_seconds']} | {v['process_wall_seconds']} | "
                         f"{v['cluster_start_seconds'] or '-'} | {v['speedup_vs_local']} |")
        lines += ["", f"Local stage-04 wall per memory: {c['stage_04_wall_per_memory_local']} s "
                  "(the projection in docs/scale.md scales the measured encode CPU seconds).", ""]
    return "\n".join(lines) + "\n"


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m bench.ray_bench", description=__doc__.split("\n\n")[0])
    p.add_argument("--latency", type=float, default=0.05)
    p.add_argument("--concurrency", type=int, default=4, help="the endpoint's bound (llm.concurrency)")
    p.add_argument("--limit", type=int, default=10, help="questions of conv-26 in the overhead figure")
    p.add_argument("--workers", type=int, default=4)
    p.add_argument("--throughput-memories", default="conv-26,conv-30,conv-41,conv-42")
    p.add_argument("--throughput-limit", type=int, default=3)
    p.add_argument("--cpu-memories", default="conv-26,conv-30")
    p.add_argument("--skip", default="", help="comma-separated: overhead, throughput, cpu")
    p.add_argument("--out", default="results/bench")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    opts = parse_args(argv)
    from tests.fake_openai import FakeOpenAI

    out = (REPO_ROOT / opts.out).resolve() if not Path(opts.out).is_absolute() else Path(opts.out)
    work = out / "work-ray"
    if work.exists():
        if not (work / MARKER).exists():
            sys.exit(f"error: {work} exists and is not a bench work directory ({MARKER} missing); move it away")
        shutil.rmtree(work)
    work.mkdir(parents=True)
    (work / MARKER).write_text("scratch of python -m bench.ray_bench; emptied at every run\n", encoding="utf-8")
    skip = set(filter(None, opts.skip.split(",")))
    started = time.time()
    result: dict[str, Any] = {"machine": machine_info(), "load_before": load_average(),
                              "options": vars(opts), "targets": TARGETS}
    with FakeOpenAI(latency=opts.latency) as server:
        if not {"overhead", "throughput"} <= skip:
            with cluster(opts.workers, work / "logs") as (address, start):
                result["cluster_start_seconds"] = start
                if "overhead" not in skip:
                    result["overhead"] = overhead(work, server, opts, address)
                if "throughput" not in skip:
                    server.peak_in_flight_total = 0
                    result["throughput"] = throughput(work, server, opts, address)
        if "cpu" not in skip:
            server.latency = 0.0  # 01-03 only prepare the index build's input
            result["cpu"] = cpu_bound(work, server, opts, work / "logs")
    result["load_after"] = load_average()
    result["wall_seconds"] = round(time.time() - started, 1)
    out.mkdir(parents=True, exist_ok=True)
    (out / "ray.json").write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
    (out / "ray.md").write_text(render(result), encoding="utf-8")
    print(render(result))
    print(f"bench-ray: {out / 'ray.json'} and ray.md ({result['wall_seconds']:.0f}s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
