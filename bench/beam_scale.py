"""`make bench-beam-10m`: one generated BEAM chat of 10M tokens through stages 01-06, per stage CPU and peak RSS.

    python -m bench.beam_scale [--tokens 10000000] [--data ../shared/data/beam/100K] [--questions 4]
                               [--latency 0] [--concurrency 16] [--embedding fake|model] [--out results/bench]

No 10M chat of the BEAM release is reachable here, so the chat is built from the real 100K chats
(as ``bench-scale`` builds LongMemEval haystacks from real sessions): their batches in order, chat
after chat, pass after pass, until the chat holds ``--tokens`` tokens (o200k_base, counted on the
messages). Message ids and batch numbers are renumbered over the whole chat; every message of pass
two and later ends with `` [pass <k>]``, so that no text repeats and the embedding cache saves
nothing (the encoding cost is that of a chat of this size). The questions are the first chat's
probing questions (only their text reaches 01-06; ``--questions`` of them are planned and retrieved).

Each stage runs as its own measured process (``bench.pipeline``) against the fake OpenAI server:
wall, CPU seconds (user + system), peak RSS, calls. ``--embedding fake`` takes the vectors from the
fake server's /v1/embeddings (fast, but 32-d: the float32 bytes the index would hold at the
model's 384 dimensions are computed from the texts embedded and reported beside), ``model``
encodes with the configured MiniLM model on this CPU. Written to
``<out>/beam_<size>.{json,md}`` with the machine and its load.
"""
from __future__ import annotations

import argparse
import json
import shutil
import sys
import time
from pathlib import Path
from typing import Any, Iterator, Optional

from bench.machine import load_average, machine_info
from bench.pipeline import BenchError, PipelineRun, StageResult, bench_overrides, run_stages
from common.benchmarks import beam
from common.core.config import resolve_path
from common.method.index import EMBEDDED_FIELDS, ENCODE_CHUNK
from common.pipeline.graph import STAGES as GRAPH
from common.pipeline.graph import by_name

CONFIG = "configs/beam.yaml"
# 01 and the memory stages up to retrieval (the graph's order): the index side, no answer or judge.
STAGES = tuple(s.id for s in GRAPH[: GRAPH.index(by_name("retrieve")) + 1])
DEFAULT_DATA = "../shared/data/beam/100K"
MODEL_DIM = 384  # all-MiniLM-L6-v2: the fake server's vectors are 32-d, so the index at the model's width is computed


def size_label(tokens: int) -> str:
    """``10M`` for 10,000,000 tokens, ``250K`` for 250,000 (the file names of the figures)."""
    if tokens >= 1_000_000 and tokens % 1_000_000 == 0:
        return f"{tokens // 1_000_000}M"
    return f"{tokens // 1000}K" if tokens % 1000 == 0 else str(tokens)


def _source_batches(src: Path) -> list[dict[str, Any]]:
    """Every batch of the source tier, chat after chat."""
    out = [batch for d in beam.chat_dirs(src) for batch in json.loads(beam.chat_file(d).read_text(encoding="utf-8"))]
    if not out:
        raise BenchError(f"{src}: no batches to build a chat from")
    return out


def _messages(batch: dict[str, Any]) -> Iterator[dict[str, Any]]:
    return (m for group in batch.get("turns", []) for m in group if isinstance(m, dict))


def _batches(source: list[dict[str, Any]], tokens: int) -> Iterator[dict[str, Any]]:
    """Renumbered copies of the source batches until ``tokens`` tokens (the last batch completes);
    a source batch's tokens are counted once, when first used."""
    from common.core.tokens import count_tokens

    counted: dict[int, int] = {}
    total, number, msg_id, k = 0, 0, 0, 0
    while total < tokens:
        j, p = k % len(source), k // len(source) + 1
        batch = source[j]
        if j not in counted:
            counted[j] = sum(count_tokens(str(m.get("content", ""))) for m in _messages(batch))
        number += 1
        groups = []
        for group in batch.get("turns", []):
            copied = []
            for m in group:
                m = dict(m)
                m["id"] = msg_id
                msg_id += 1
                if p > 1:
                    m["content"] = f"{m.get('content', '')} [pass {p}]"
                copied.append(m)
            groups.append(copied)
        marker = count_tokens(f"x [pass {p}]") - count_tokens("x") if p > 1 else 0  # the suffix's tokens
        total += counted[j] + marker * sum(len(g) for g in groups)
        k += 1
        yield {**batch, "batch_number": number, "turns": groups}


def generate(src: Path, out: Path, tokens: int) -> dict[str, Any]:
    """Write ``out/<n>/chat.json`` (one chat of ``tokens`` tokens, batch by batch, never the whole
    chat in memory as one object) and its probing questions; return its size."""
    source = _source_batches(src)
    chat_dir = out / "1"
    (chat_dir / "probing_questions").mkdir(parents=True, exist_ok=True)
    first = beam.chat_dirs(src)[0]
    shutil.copy(first / beam.QUESTIONS_FILE, chat_dir / beam.QUESTIONS_FILE)
    batches = messages = 0
    with (chat_dir / "chat.json").open("w", encoding="utf-8") as fh:
        fh.write("[")
        for batch in _batches(source, tokens):
            fh.write(("," if batches else "") + json.dumps(batch, ensure_ascii=False))
            batches += 1
            messages += sum(len(g) for g in batch["turns"])
        fh.write("]")
    passes = -(-batches // len(source))
    return {"path": str(chat_dir / "chat.json"), "bytes": (chat_dir / "chat.json").stat().st_size,
            "tokens_target": tokens, "batches": batches, "messages": messages, "passes": passes,
            "source": str(src), "source_batches": len(source)}


def overrides(work: Path, name: str, data: Path, base_url: str, opts: argparse.Namespace) -> list[str]:
    sets = bench_overrides(workdir=work, name=name, concurrency=opts.concurrency, base_url=base_url,
                           conversations=[], llm_cache=work / "llm.sqlite", embedding_cache=work / "emb.sqlite")
    sets += [f"data.path={data}", f"data.tier={data.name}" if data.name in beam.TIERS else "data.tier=10M",
             f"data.question_limit={opts.questions}", "llm.initial_wait=0.01", "llm.max_wait=0.05"]
    if opts.embedding == "fake":
        sets += ["embedding.backend=openai", "embedding.model=fake-embed", f"embedding.base_url={base_url}"]
    return sets + list(opts.sets)


def index_rows(chunks: int, records: int) -> int:
    """Rows of the index's float32 output: one per chunk and one per record and embedded field
    (a zero row for an empty field)."""
    return chunks + len(EMBEDDED_FIELDS) * records


def stage_row(r: StageResult) -> dict[str, Any]:
    emb = r.manifest.get("embedding") or {}
    return {"stage": r.stage, "wall_seconds": r.process.wall_seconds,
            "cpu_seconds": round(r.process.user_seconds + r.process.system_seconds, 2),
            "peak_rss_bytes": r.process.peak_rss_bytes, "calls": r.request_count,
            "rows": r.manifest.get("rows"), "texts_embedded": emb.get("encoded"), "load_after": r.load_after}


def run(opts: argparse.Namespace) -> dict[str, Any]:
    from tests.fake_openai import FakeOpenAI

    label = size_label(opts.tokens)
    work = resolve_path(opts.out) / f"work-beam-{label}"
    if work.exists():
        shutil.rmtree(work)
    data = work / "data" / "10M"
    load0 = load_average()
    t0 = time.perf_counter()
    gen = generate(resolve_path(opts.data), data, opts.tokens)
    gen["seconds"] = round(time.perf_counter() - t0, 1)
    print(f"bench-beam: {label}: {gen['batches']} batches, {gen['messages']} messages, "
          f"{gen['bytes'] / 2**20:.0f} MiB ({gen['seconds']} s)", flush=True)
    with FakeOpenAI(latency=opts.latency) as server:
        pr = PipelineRun(name=f"beam-{label}", config=CONFIG, package="BEAM",
                         overrides=overrides(work, f"beam-{label}", data, server.base_url, opts))
        results = run_stages(pr, server, STAGES, work / "logs")
    rows = [stage_row(r) for r in results]
    index = next((r for r in rows if r["stage"] == "04_index"), {})
    texts = index.get("texts_embedded") or 0
    built = json.loads((pr.run_dir / "04_index.jsonl").read_text(encoding="utf-8").splitlines()[0])
    vectors = index_rows(built["chunks"], built["records"])
    return {"benchmark": f"BEAM generated {label}-token chat, stages 01-06", "size": label, "chat": gen,
            "questions": opts.questions, "latency": opts.latency, "concurrency": opts.concurrency,
            "embedding": opts.embedding, "stages": rows, "index_texts": texts,
            "index": {k: built[k] for k in ("episodes", "records", "chunks")}, "index_vectors": vectors,
            "index_bytes_at_384d": vectors * MODEL_DIM * 4,
            "cpu_seconds": round(sum(r["cpu_seconds"] for r in rows), 1),
            "peak_rss_bytes": max(r["peak_rss_bytes"] for r in rows),
            "wall_seconds": round(time.perf_counter() - t0, 1), "load_average_before": load0,
            "load_average_after": load_average(), "machine": machine_info(),
            "command": "python -m bench.beam_scale " + " ".join(sys.argv[1:])}


def render(r: dict[str, Any]) -> str:
    c = r["chat"]
    lines = [f"# BEAM: a generated {r['size']}-token chat, stages 01-06", "",
             f"Chat: {c['batches']} batches, {c['messages']} messages, {c['bytes'] / 2**20:.0f} MiB of JSON, built "
             f"from the {c['source_batches']} batches of {c['source']} in "
             f"{c['passes']} pass(es). Embedding: {r['embedding']}; fake endpoint latency {r['latency']} s, "
             f"concurrency {r['concurrency']}; {r['questions']} questions planned and retrieved.", "",
             "| stage | wall s | CPU s | peak RSS MiB | calls | rows | texts embedded |",
             "|---|---|---|---|---|---|---|"]
    for s in r["stages"]:
        texts = s["texts_embedded"] if s["texts_embedded"] is not None else ""
        lines.append(f"| {s['stage']} | {s['wall_seconds']} | {s['cpu_seconds']} | {s['peak_rss_bytes'] / 2**20:.0f} "
                     f"| {s['calls']} | {s['rows']} | {texts} |")
    mib, ix = r["index_bytes_at_384d"] / 2**20, r["index"]
    lines += ["", f"Index: {ix['episodes']:,} episodes, {ix['chunks']:,} chunks, {ix['records']:,} records; stage 04 "
                  f"embedded {r['index_texts']:,} distinct texts. Its output is {r['index_vectors']:,} float32 rows "
                  f"(chunks + {len(EMBEDDED_FIELDS)} fields per record): {mib:.0f} MiB at the model's {MODEL_DIM} "
                  f"dimensions, held once plus one slice of {ENCODE_CHUNK:,} texts.",
              "", f"Total CPU {r['cpu_seconds']} s, peak RSS {r['peak_rss_bytes'] / 2**20:.0f} MiB, wall "
                  f"{r['wall_seconds']} s; load average before {r['load_average_before']}, after "
                  f"{r['load_average_after']}; {r['machine'].get('cpu_count', '?')} CPUs.", "",
              f"Command: `{r['command']}`", ""]
    return "\n".join(lines)


def main(argv: Optional[list[str]] = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.beam_scale", description=(__doc__ or "").split("\n")[0])
    p.add_argument("--tokens", type=int, default=10_000_000)
    p.add_argument("--data", default=DEFAULT_DATA, help="the real tier folder the chat is built from")
    p.add_argument("--questions", type=int, default=4, help="questions planned and retrieved (05, 06)")
    p.add_argument("--latency", type=float, default=0.0, help="seconds the fake endpoint waits per call")
    p.add_argument("--concurrency", type=int, default=16)
    p.add_argument("--embedding", choices=("fake", "model"), default="fake")
    p.add_argument("--out", default="results/bench")
    p.add_argument("--set", dest="sets", action="append", default=[], help="a config override k=v")
    a = p.parse_args(argv)
    try:
        r = run(a)
    except (BenchError, OSError, ValueError) as exc:
        print(f"bench-beam: {' '.join(str(exc).split())}", file=sys.stderr)
        return 2
    out = resolve_path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / f"beam_{r['size']}.json").write_text(json.dumps(r, indent=1), encoding="utf-8")
    (out / f"beam_{r['size']}.md").write_text(render(r), encoding="utf-8")
    print(render(r))
    return 0


if __name__ == "__main__":
    sys.exit(main())
