"""`make bench-embeddings`: texts/s of the index build per runtime and batch size, and whether
ONNX Runtime changes what retrieval selects.

    python -m bench.embedding_speed [--conversations conv-26] [--runtimes torch,onnx,onnx-int8]
                                    [--batch-sizes 16,32,64,128] [--sample 400] [--out results/bench]

1. Pipeline: for every runtime, LoCoMo 01-06 on the REAL conversations against the fake endpoint
   (latency 0; the LLM cache is shared, so only the first runtime pays for 02/03/05), each with
   its own empty embedding cache: stage 04's manifest gives the index build's texts, encode
   calls and texts/s; 04 and 06 are measured as processes (wall, CPU, peak RSS).
2. Equality: 06's selected episodes of every question under each runtime against torch
   (same ids in the same order), and the cosine between the torch and the runtime vectors of
   every chunk and record field of the index.
3. Batch sizes: the first ``--sample`` distinct index texts of the torch run, encoded in this
   process by each runtime at each batch size, no cache (one warm-up batch first).

Decision rule: a runtime becomes the default only if it is >= 1.5x torch's texts/s
in the index build AND every question's selected episodes are unchanged.
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

from bench.machine import load_average, machine_info
from bench.pipeline import LOCOMO_STAGES, PipelineRun, bench_overrides, run_stages
from bench.run import fresh_workdir
from common.core.config import resolve_path
from common.core.io import read_jsonl

ADOPT_SPEEDUP = 1.5


def index_texts_of(run: PipelineRun) -> list[str]:
    """Every distinct text stage 04 embedded for the run's memories, in build order."""
    from common.core.schema import Session, from_dict
    from common.method.index import MemoryIndex, index_texts
    from common.method.render import MemoryView

    cfg = run.cfg()
    by_memory: dict[str, list[Session]] = {}
    for r in read_jsonl(run.run_dir / "01_sessions.jsonl"):
        by_memory.setdefault(r["memory_id"], []).append(from_dict(Session, r))
    out: dict[str, None] = {}
    for row in read_jsonl(run.run_dir / "04_index.jsonl"):
        idx = MemoryIndex.load(run.run_dir / row["path"])
        view = MemoryView(row["memory_id"], by_memory[row["memory_id"]])
        _, chunks, _, fields = index_texts(view, idx.episodes, idx.records, cfg.index.chunk_turns,
                                           cfg.index.chunk_stride, cfg.episodes.include_images)
        for t in [*chunks, *(t for f in fields.values() for t in f)]:
            if t:
                out[t] = None
    return list(out)


def selected(run: PipelineRun) -> dict[str, tuple[list[str], str]]:
    """qid -> (selected episode ids in selection order, the evidence buffer the answer model reads)."""
    rows = read_jsonl(run.run_dir / "06_retrieve.jsonl")
    return {r["qid"]: ([s["episode_id"] for s in r.get("selected", [])], r.get("buffer_text", "")) for r in rows}


def index_cosines(a: PipelineRun, b: PipelineRun) -> dict[str, Any]:
    """Cosine between the two runs' vectors of the same chunk / record field (non-empty rows)."""
    cos: list[np.ndarray] = []
    for row in read_jsonl(a.run_dir / "04_index.jsonl"):
        with np.load(a.run_dir / row["path"] / "embeddings.npz") as za, \
                np.load(b.run_dir / row["path"] / "embeddings.npz") as zb:
            for k in za.files:
                x, y = za[k], zb[k]
                keep = (np.linalg.norm(x, axis=1) > 0) & (np.linalg.norm(y, axis=1) > 0)
                cos.append(np.sum(x[keep] * y[keep], axis=1))
    c = np.concatenate(cos) if cos else np.zeros(0)
    return {"vectors": int(c.size), "min": round(float(c.min()), 6) if c.size else None,
            "mean": round(float(c.mean()), 6) if c.size else None,
            "p01": round(float(np.quantile(c, 0.01)), 6) if c.size else None}


def _backend(runtime: str, batch_size: int, export_dir: Path) -> Any:
    from common.core.embeddings import OnnxBackend, SentenceTransformerBackend

    if runtime == "torch":
        return SentenceTransformerBackend("all-MiniLM-L6-v2", batch_size=batch_size)
    return OnnxBackend("all-MiniLM-L6-v2", export_dir, quantized=runtime == "onnx-int8", batch_size=batch_size)


def batch_sweep(texts: list[str], runtimes: list[str], batch_sizes: list[int], export_dir: Path,
                rounds: int = 2) -> list[dict]:
    """Each (runtime, batch size) ``rounds`` times, interleaved, so that a neighbour's burst of
    load falls on every runtime alike; wall and CPU texts/s, the best round of each."""
    backends = {(rt, bs): _backend(rt, bs, export_dir) for rt in runtimes for bs in batch_sizes}
    for b in backends.values():
        b.encode(texts[:8])  # warm-up: load, first-run allocations
    got: dict[tuple[str, int], list[tuple[float, float]]] = {k: [] for k in backends}
    for _ in range(rounds):
        for key, b in backends.items():
            cpu0, t0 = time.process_time(), time.perf_counter()
            b.encode(texts)
            got[key].append((time.perf_counter() - t0, time.process_time() - cpu0))
    rows = []
    for (rt, bs), m in got.items():
        wall, cpu = min(w for w, _ in m), min(c for _, c in m)
        rows.append({"runtime": rt, "batch_size": bs, "texts": len(texts), "rounds": rounds,
                     "wall_seconds": [round(w, 2) for w, _ in m], "cpu_seconds": [round(c, 2) for _, c in m],
                     "texts_per_second": round(len(texts) / wall, 1),
                     "texts_per_cpu_second": round(len(texts) / cpu, 1)})
        print(f"  sweep {rt} batch {bs}: {len(texts) / wall:.1f} texts/s, {len(texts) / cpu:.1f} per CPU-s", flush=True)
    return rows


def pre_export(runtimes: list[str], export_dir: Path) -> dict[str, float]:
    """Export the ONNX graphs before the pipeline runs, so 04's encode time is inference only."""
    out = {}
    for rt in runtimes:
        if rt != "torch":
            t0 = time.perf_counter()
            _backend(rt, 8, export_dir).encoder()
            out[rt] = round(time.perf_counter() - t0, 2)
    return out


def speedups(torch_build: dict[str, Any], other_build: dict[str, Any]) -> dict[str, float | None]:
    """Index-build texts/s (wall) and texts per CPU-second of a runtime over torch's."""
    return {k: (round(other_build[k] / torch_build[k], 2) if other_build.get(k) and torch_build.get(k) else None)
            for k in ("texts_per_second", "texts_per_cpu_second")}


def adopt(speed: dict[str, float | None], same: int, questions: int) -> bool:
    """The issue's rule: >= 1.5x faster (wall AND CPU, so a quiet moment cannot decide it) and the
    same selected episodes for every question."""
    return all(v is not None and v >= ADOPT_SPEEDUP for v in speed.values()) and same == questions


def run(opts: argparse.Namespace) -> dict[str, Any]:
    from tests.fake_openai import FakeOpenAI

    out, work = resolve_path(opts.out), resolve_path(opts.out) / "work-embeddings"
    fresh_workdir(work)
    runtimes = [r.strip() for r in opts.runtimes.split(",") if r.strip()]
    if runtimes[0] != "torch":
        runtimes.insert(0, "torch")
    convs = [c.strip() for c in opts.conversations.split(",") if c.strip()]
    result: dict[str, Any] = {"machine": machine_info(), "load_start": load_average(), "conversations": convs,
                              "runtimes": {}, "options": vars(opts)}
    runs: dict[str, PipelineRun] = {}
    result["export_seconds"] = pre_export(runtimes, work / "onnx")  # where emb-<rt>.sqlite's runtime looks
    with FakeOpenAI(latency=0.0) as server:
        for rt in runtimes:
            sets = bench_overrides(workdir=work, name=rt, concurrency=8, base_url=server.base_url, conversations=convs,
                                   llm_cache=work / "llm.sqlite", embedding_cache=work / f"emb-{rt}.sqlite")
            runs[rt] = PipelineRun(name=rt, config=opts.config, overrides=sets + [f"embedding.runtime={rt}"])
            print(f"bench-embeddings: {rt}: 01-06 on {','.join(convs)}", flush=True)
            stages = run_stages(runs[rt], server, LOCOMO_STAGES[:6], work / "logs")
            by = {s.stage: s for s in stages}
            emb = runs[rt].manifest("04_index").get("embedding", {})
            result["runtimes"][rt] = {
                "index_build": emb,
                "04_index": {"wall_seconds": by["04_index"].process.wall_seconds,
                             "cpu_seconds": round(by["04_index"].process.user_seconds
                                                  + by["04_index"].process.system_seconds, 2),
                             "peak_rss_bytes": by["04_index"].process.peak_rss_bytes},
                "06_retrieve": {"wall_seconds": by["06_retrieve"].process.wall_seconds,
                                "cpu_seconds": round(by["06_retrieve"].process.user_seconds
                                                     + by["06_retrieve"].process.system_seconds, 2),
                                "peak_rss_bytes": by["06_retrieve"].process.peak_rss_bytes},
                "load_after_04": by["04_index"].load_after}
    base = selected(runs["torch"])
    torch_emb = result["runtimes"]["torch"]["index_build"]
    for rt in runtimes[1:]:
        other = selected(runs[rt])
        # The same episodes (as a set: the buffer renders them in conversation order); the order
        # of selection and the buffer text itself are reported beside it.
        same = [q for q in base if q in other and set(other[q][0]) == set(base[q][0])]
        same_order = [q for q in base if q in other and other[q][0] == base[q][0]]
        same_buffer = [q for q in base if q in other and other[q][1] == base[q][1]]
        r = result["runtimes"][rt]
        speed = speedups(torch_emb, r["index_build"])
        r["vs_torch"] = {"questions": len(base), "same_selected_episodes": len(same),
                         "same_selection_order": len(same_order), "same_buffer_text": len(same_buffer),
                         "changed_qids": sorted(set(base) - set(same))[:20],
                         "cosine": index_cosines(runs["torch"], runs[rt]),
                         "speedup_wall": speed["texts_per_second"], "speedup_cpu": speed["texts_per_cpu_second"]}
        r["adopt"] = adopt(speed, len(same), len(base))
    if opts.sample > 0:
        texts = index_texts_of(runs["torch"])[:opts.sample]
        sizes = [int(b) for b in opts.batch_sizes.split(",") if b.strip()]
        result["batch_sweep"] = batch_sweep(texts, runtimes, sizes, work / "onnx")
    result["load_end"] = load_average()
    result["peak_rss_bytes_bench_process"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    out.mkdir(parents=True, exist_ok=True)
    (out / "embeddings.json").write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
    (out / "embeddings.md").write_text(render(result), encoding="utf-8")
    if not opts.keep_work:
        shutil.rmtree(work, ignore_errors=True)
    return result


def render(r: dict[str, Any]) -> str:
    lines = [f"# Embedding throughput ({', '.join(r['conversations'])}; load {r['load_start']} -> {r['load_end']})", "",
             "Index build = stage 04 on the conversation from an empty cache (ONNX export done before, "
             f"seconds: {r.get('export_seconds')}).", "",
             "| runtime | texts embedded | encode calls | texts/s | texts per CPU-s | 04 wall s | 04 CPU s "
             "| 06 wall s | 06 CPU s | 06 peak RSS MiB | same episodes / same order / same buffer "
             "| cosine min / mean vs torch | speed-up wall / CPU | default? |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for rt, v in r["runtimes"].items():
        e, vs = v["index_build"], v.get("vs_torch", {})
        cos = vs.get("cosine", {})
        same = (f"{vs['same_selected_episodes']} / {vs['same_selection_order']} / {vs['same_buffer_text']} "
                f"of {vs['questions']}") if vs else "-"
        lines.append(f"| {rt} | {e.get('encoded')} | {e.get('encode_calls')} | {e.get('texts_per_second')} "
                     f"| {e.get('texts_per_cpu_second')} | {v['04_index']['wall_seconds']} "
                     f"| {v['04_index']['cpu_seconds']} | {v['06_retrieve']['wall_seconds']} "
                     f"| {v['06_retrieve']['cpu_seconds']} | {v['06_retrieve']['peak_rss_bytes'] / 2**20:.0f} | {same} "
                     f"| {cos.get('min', '-')} / {cos.get('mean', '-')} "
                     f"| {vs.get('speedup_wall', '-')} / {vs.get('speedup_cpu', '-')} "
                     f"| {'yes' if v.get('adopt') else ('baseline' if rt == 'torch' else 'no')} |")
    if r.get("batch_sweep"):
        lines += ["", "Batch sizes (in-process, no cache, rounds interleaved; best round):", "",
                  "| runtime | batch size | texts | texts/s | texts per CPU-s | wall s per round |",
                  "|---|---|---|---|---|---|"]
        lines += [f"| {b['runtime']} | {b['batch_size']} | {b['texts']} | {b['texts_per_second']} "
                  f"| {b['texts_per_cpu_second']} | {b['wall_seconds']} |" for b in r["batch_sweep"]]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.embedding_speed", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--config", default="configs/locomo.yaml")
    p.add_argument("--conversations", default="conv-26")
    p.add_argument("--runtimes", default="torch,onnx,onnx-int8")
    p.add_argument("--batch-sizes", default="16,32,64,128")
    p.add_argument("--sample", type=int, default=400, help="texts of the batch-size sweep (0: skip it)")
    p.add_argument("--out", default="results/bench")
    p.add_argument("--keep-work", action="store_true", help="keep <out>/work-embeddings (run dirs, logs)")
    opts = p.parse_args(argv)
    for var, value in (("TOKENIZERS_PARALLELISM", "false"), ("HF_HUB_DISABLE_PROGRESS_BARS", "1")):
        os.environ.setdefault(var, value)
    result = run(opts)
    print(render(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
