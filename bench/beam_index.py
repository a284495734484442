"""`make bench-beam-index`: the index build (stage 04's work) over BEAM's 500K tier, on this machine.

    python -m bench.beam_index [--repo MIRROR.git | --data DIR] [--size 500K] [--chats 35]
                               [--embedding-backend sentence-transformers] [--out results/bench]

Data: the tier's chats in the pinned BEAM repository (``--repo``, a git directory, read with
``git show``; or ``--data``, a folder of ``<n>/chat.json``), the file the official runner reads
(``chat_trunecated.json`` where present, else ``chat.json``). Each batch is one session and one
episode (``episodes.mode: session``); every message is a turn. Records need the LLM extraction
(02-03), which is not run here: each user message gets one synthetic record (entity ``user``, its
first content word as property, its first twelve words as value), so the four embedded record
fields are there in about the count a real index has per user turn; say so beside the numbers.
Without the tier (neither source present) the 100K tier is used, each chat repeated five times
with distinct message text, and the report says it.

Measured in this process, from an empty embedding cache: CPU seconds (user + system) and wall of
the build, texts embedded and texts/s (wall and CPU), peak RSS (``ru_maxrss``). The machine is
shared: the wall figures include the neighbours' load (reported with the load average).
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Optional

from tqdm import tqdm

from bench.machine import load_average, machine_info
from common.core.embeddings import Embedder
from common.core.schema import Episode, Record, Session, Turn
from common.method.index import build_index
from common.method.render import MemoryView

DEFAULT_REPO = "/work/.mirror/mohammadtavakoli78+BEAM/repo"
SHARED_100K = Path(__file__).resolve().parents[2] / "shared" / "data" / "beam" / "100K"


def _git_json(repo: str, path: str) -> Optional[Any]:
    r = subprocess.run(["git", "-C", repo, "show", f"HEAD:{path}"], capture_output=True)
    return json.loads(r.stdout) if r.returncode == 0 else None


def load_chats(repo: Optional[str], data: Optional[Path], size: str, chats: int) -> tuple[list[Any], str]:
    """(chat batches per chat, where they came from)."""
    out: list[Any] = []
    if data is not None and data.is_dir():
        for n in range(1, chats + 1):
            f = next((p for p in (data / str(n) / "chat_trunecated.json", data / str(n) / "chat.json")
                      if p.exists()), None)
            if f is None:
                raise FileNotFoundError(f"{data / str(n)}: no chat.json")
            out.append(json.loads(f.read_text(encoding="utf-8")))
        return out, f"{data} ({size}, {chats} chats)"
    if repo and Path(repo).exists():
        for n in range(1, chats + 1):
            chat = (_git_json(repo, f"chats/{size}/{n}/chat_trunecated.json")
                    or _git_json(repo, f"chats/{size}/{n}/chat.json"))
            if chat is None:
                raise FileNotFoundError(f"{repo}: no chats/{size}/{n}/chat.json")
            out.append(chat)
        return out, f"{repo} at HEAD, chats/{size} ({chats} chats)"
    base = [json.loads((SHARED_100K / str(n) / "chat.json").read_text(encoding="utf-8")) for n in range(1, 21)]
    for i in range(chats):
        merged = []
        for k in range(5):  # five 100K chats, message text marked so that every text is distinct
            for b in base[(i + k) % 20]:
                merged.append({**b, "turns": [[{**m, "content": f"(part {k + 1}) {m.get('content', '')}"}
                                               for m in g] for g in b["turns"]]})
        out.append(merged)
    return out, f"GENERATED: {SHARED_100K} scaled x5 per chat (the {size} tier was not found)"


def memory_of(memory_id: str, batches: list[Any]) -> tuple[MemoryView, list[Episode], list[Record]]:
    sessions, episodes, records = [], [], []
    for si, b in enumerate(batches, start=1):
        sid = f"session_{si}"
        turns: list[Turn] = []
        for g in b.get("turns") or []:
            for m in g:
                dia = f"{memory_id}:{si}:{m.get('id', len(turns))}:{len(turns)}"
                turns.append(Turn(dia_id=dia, speaker=str(m.get("role", "user")), text=str(m.get("content", "")),
                                  role=str(m.get("role", "user"))))
        if not turns:
            continue
        sessions.append(Session(memory_id, sid, si, str(b.get("time_anchor", "")), turns))
        eid = f"{memory_id}::{sid}::episode_001"
        episodes.append(Episode(eid, memory_id, sid, si, str(b.get("time_anchor", "")), [t.dia_id for t in turns],
                                theme=f"batch {si}", theme_type="topic", mode="session"))
        for k, t in enumerate(x for x in turns if x.role == "user"):
            words = t.text.split()
            records.append(Record(f"{eid}::index_{k:03d}", eid, memory_id, "user", "person",
                                  (words[0] if words else "says").lower(), " ".join(words[:12]),
                                  evidence_dia_ids=[t.dia_id]))
    return MemoryView(memory_id, sessions), episodes, records


def run(opts: argparse.Namespace) -> dict[str, Any]:
    chats, source = load_chats(opts.repo, Path(opts.data) if opts.data else None, opts.size, opts.chats)
    with tempfile.TemporaryDirectory() as tmp:
        cfg = argparse.Namespace(backend=opts.embedding_backend, model=opts.model, batch_size=64, max_length=256,
                                 cache_path=str(Path(tmp) / "emb.sqlite"), runtime="torch", device="cpu")
        embedder = Embedder.from_config(cfg)
        memories = [memory_of(f"beam-{opts.size}-{i + 1}", c) for i, c in enumerate(chats)]
        turns = sum(len(s.turns) for v, _, _ in memories for s in v.sessions)
        chars = sum(len(t.text) for v, _, _ in memories for s in v.sessions for t in s.turns)
        load0 = load_average()
        t0, c0 = time.perf_counter(), os.times()
        built = 0
        for view, eps, recs in tqdm(memories, desc="index build", disable=not sys.stderr.isatty()):
            build_index(view, eps, recs, embedder)
            built += 1
        c1, wall = os.times(), time.perf_counter() - t0
    cpu = (c1.user - c0.user) + (c1.system - c0.system)
    stats = embedder.stats.as_dict()
    return {"benchmark": "beam index build", "source": source, "size": opts.size, "chats": len(chats),
            "memories_built": built, "sessions": sum(len(v.sessions) for v, _, _ in memories), "turns": turns,
            "characters": chars, "approx_tokens": chars // 4,
            "records": sum(len(r) for _, _, r in memories), "records_note": "synthetic: one per user message",
            "embedding": {"backend": opts.embedding_backend, "model": embedder.model_id},
            "cpu_seconds": round(cpu, 1), "wall_seconds": round(wall, 1), "texts_embedded": stats["encoded"],
            "texts_per_second": round(stats["encoded"] / wall, 1) if wall else None,
            "texts_per_cpu_second": round(stats["encoded"] / cpu, 1) if cpu else None,
            "peak_rss_bytes": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,
            "load_average_before": load0, "machine": machine_info(),
            "command": "python -m bench.beam_index " + " ".join(sys.argv[1:])}


def render(r: dict[str, Any]) -> str:
    return "\n".join([
        f"# BEAM {r['size']} index build", "",
        f"Data: {r['source']}; {r['chats']} chats, {r['sessions']} sessions, {r['turns']} messages, "
        f"~{r['approx_tokens']:,} tokens (chars/4); {r['records']} records ({r['records_note']}).",
        f"Embedding: {r['embedding']['backend']} {r['embedding']['model']}, empty cache.", "",
        "| CPU s | wall s | texts embedded | texts/s (wall) | texts/CPU-s | peak RSS MiB | load avg before |",
        "|---|---|---|---|---|---|---|",
        f"| {r['cpu_seconds']} | {r['wall_seconds']} | {r['texts_embedded']} | {r['texts_per_second']} | "
        f"{r['texts_per_cpu_second']} | {r['peak_rss_bytes'] / 2**20:.0f} | {r['load_average_before']} |", "",
        f"Command: `{r['command']}`", ""])


def main(argv: Optional[list[str]] = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.beam_index", description=(__doc__ or "").split("\n")[0])
    p.add_argument("--repo", default=os.environ.get("BEAM_REPO", DEFAULT_REPO), help="the BEAM git directory")
    p.add_argument("--data", default=None, help="a folder of <n>/chat.json (instead of --repo)")
    p.add_argument("--size", default="500K")
    p.add_argument("--chats", type=int, default=35)
    p.add_argument("--embedding-backend", default="sentence-transformers")
    p.add_argument("--model", default=None)
    p.add_argument("--out", default="results/bench")
    a = p.parse_args(argv)
    try:
        r = run(a)
    except (FileNotFoundError, ValueError) as exc:
        print(f"error: {' '.join(str(exc).split())}", file=sys.stderr)
        return 2
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / f"beam_index_{a.size}.json").write_text(json.dumps(r, indent=1), encoding="utf-8")
    (out / f"beam_index_{a.size}.md").write_text(render(r), encoding="utf-8")
    print(render(r))
    return 0


if __name__ == "__main__":
    sys.exit(main())
