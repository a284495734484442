"""The pipeline stages, written once for every benchmark (the functions of ``common.pipeline.graph``).

Each function reads its input artifacts from the run directory, calls the concern module of
``common.method`` or ``common.evaluation`` and writes its JSONL (resumably, through
``common.pipeline.engine.run_rows``) plus a manifest. Stages 02-07 read sessions and questions,
never the gold file: only ``judge`` and ``aggregate`` open it (and 06 for the labelled oracle).
"""
from __future__ import annotations

import dataclasses
import json
import threading
import time
from collections import defaultdict
from pathlib import Path
from typing import Any, Callable

from common.benchmarks.registry import adapter
from common.benchmarks.subset import load_selected
from common.core import artifacts, fingerprint
from common.core.config import to_yaml
from common.core.io import read_jsonl, write_json, write_jsonl
from common.core.llm import LLMClient
from common.core.schema import (
    AnswerRow,
    Episode,
    ExtractRow,
    Gold,
    PartitionRow,
    PlanRow,
    Question,
    RetrievalRow,
    from_dict,
    to_dict,
)
from common.evaluation import scoring
from common.evaluation.registry import evaluator
from common.method import answer as answer_mod
from common.method import baselines
from common.method import bridge as bridge_mod
from common.method import episodes as episodes_mod
from common.method import extract as extract_mod
from common.method import plan as plan_mod
from common.method.dedup import rebase_partition, rebase_records, representatives
from common.method.index import MemoryIndex, build_index, index_fingerprint
from common.method.render import MemoryView
from common.method.retrieve import Retriever
from common.pipeline import ledger
from common.pipeline.engine import (
    Run,
    by_qid,
    check_protocol,
    digest,
    load_episodes,
    load_questions,
    load_sessions,
    load_views,
    manifest,
    run_rows,
    run_rows_deduplicated,
    skipped,
    summary_line,
    uses_memory_index,
)
from common.pipeline.graph import IDS as ID  # manifest and summary names: declared in the graph only
from common.pipeline.graph import by_name


# ----------------------------------------------------------------------------- 01
def preprocess(run: Run) -> None:
    started = time.time()
    src, data, subset = load_selected(run.cfg)
    run_fp = check_protocol(run, reread=True)
    run.dir.mkdir(parents=True, exist_ok=True)
    outs = [run.path("sessions"), run.path("questions"), run.path("gold")]
    write_jsonl(outs[0], (to_dict(s) for s in data.sessions))
    write_jsonl(outs[1], (to_dict(q) for q in data.questions))
    write_jsonl(outs[2], (to_dict(g) for g in data.gold))
    (run.dir / "config.resolved.yaml").write_text(to_yaml(run.cfg), encoding="utf-8")
    n_turns = sum(len(s.turns) for s in data.sessions)
    manifest(run, ID["preprocess"], inputs=[src], outputs=outs, rows=len(data.questions),
                   started=started, extra={"source": str(src), "fingerprint": run_fp,
                                           "subset": str(subset.path) if subset else None,
                                           "memories": len({s.memory_id for s in data.sessions}),
                                           "sessions": len(data.sessions), "turns": n_turns})
    print(f"{ID['preprocess']}: {len({s.memory_id for s in data.sessions})} memories, {len(data.sessions)} sessions, "
          f"{n_turns} turns, {len(data.questions)} questions -> {run.dir}", flush=True)


# ----------------------------------------------------------------------------- 02
def episodes(run: Run) -> None:
    check_protocol(run)
    if skipped(run, ID["episodes"]):
        return
    sessions = load_sessions(run)
    cfg = run.cfg.episodes
    rep_of = representatives(sessions)
    run_rows_deduplicated(run, ID["episodes"], run.path("episodes"), "session_key", sessions, lambda s: s.key, rep_of,
              lambda s: episodes_mod.partition_session(run.llm, s, cfg.mode, cfg.include_images),
              rebase_partition, "partition", [run.path("sessions")], lambda r: r["fallback_used"])


# ----------------------------------------------------------------------------- 03
def extract(run: Run) -> None:
    check_protocol(run)
    if skipped(run, ID["extract"]):
        return
    views = load_views(run)
    rows = [from_dict(PartitionRow, r) for r in read_jsonl(run.path("episodes"))]
    eps = [e for r in rows for e in r.episodes]
    # An episode's representative is the same-numbered episode of its session's representative.
    by_session = {r.session_key: r.episodes for r in rows}
    rep_session = representatives(load_sessions(run))
    rep_of = {e.episode_id: by_session[rep_session[f"{e.memory_id}::{e.session_id}"].key][i]
              for r in rows for i, e in enumerate(r.episodes)}
    g, imgs = run.cfg.extract.granularity, run.cfg.episodes.include_images
    run_rows_deduplicated(run, ID["extract"], run.path("records"), "episode_id", eps, lambda e: e.episode_id, rep_of,
              lambda e: extract_mod.extract_episode(run.llm, views[e.memory_id], e, g, imgs),
              rebase_records, "extract", [run.path("episodes")], lambda r: r["fallback_used"],
              digest_fn=lambda e: digest(to_dict(e)))


# ----------------------------------------------------------------------------- 04
def index(run: Run) -> None:
    check_protocol(run)
    if skipped(run, ID["index"]):
        return
    started = time.time()
    views = load_views(run)
    eps_by: dict[str, list[Episode]] = defaultdict(list)
    for e in load_episodes(run):
        eps_by[e.memory_id].append(e)
    recs_by: dict[str, list] = defaultdict(list)
    for r in read_jsonl(run.path("records")):
        recs_by[r["memory_id"]].extend(from_dict(ExtractRow, r).records)
    out = run.path("index")
    old = {r["memory_id"]: r for r in read_jsonl(out)} if out.exists() and not run.force else {}
    emb = run.embedder()
    settings = {"model": emb.model_id, **dataclasses.asdict(run.cfg.index),
                "include_images": run.cfg.episodes.include_images}
    rows, reused = [], 0
    for mid in views:
        fp = index_fingerprint(eps_by[mid], recs_by[mid], settings)
        directory = run.dir / ID["index"] / mid
        if old.get(mid, {}).get("fingerprint") == fp and (directory / "embeddings.npz").exists():
            rows.append(old[mid])
            reused += 1
            continue
        idx = build_index(views[mid], eps_by[mid], recs_by[mid], emb, run.cfg.index.chunk_turns,
                          run.cfg.index.chunk_stride, run.cfg.episodes.include_images)
        idx.save(directory)
        write_json(directory / "vocabulary.json", idx.vocabulary)
        rows.append({"memory_id": mid, "fingerprint": fp, "path": str(directory.relative_to(run.dir)),
                     "episodes": len(idx.episodes), "records": len(idx.records), "chunks": len(idx.chunk_episode),
                     "properties": len(idx.vocabulary), "embedding_model": idx.embedding_model})
    write_jsonl(out, rows)
    manifest(run, ID["index"], inputs=[run.path("episodes"), run.path("records")], outputs=[out],
                   rows=len(rows), started=started, extra={"embedding_model": emb.model_id})
    summary_line(ID["index"], rows, reused, len(rows) - reused, 0, out, started)


# ----------------------------------------------------------------------------- 05
def plan(run: Run) -> None:
    check_protocol(run)
    if skipped(run, ID["plan"]):
        return
    questions = load_questions(run)
    vocab = {}
    for r in read_jsonl(run.path("index")):
        vocab[r["memory_id"]] = json.loads((run.dir / r["path"] / "vocabulary.json").read_text(encoding="utf-8"))
    g, vmax = run.cfg.extract.granularity, run.cfg.plan.vocabulary_max
    run_rows(run, ID["plan"], run.path("plans"), "qid", questions, lambda q: q.qid,
               lambda q: plan_mod.plan_question(run.llm, q, vocab.get(q.memory_id, {}),
                                                granularity=g, vocabulary_max=vmax),
               "plan", [run.path("questions"), run.path("index")], lambda r: r["fallback_used"],
               digest_fn=lambda q: digest([q.question, q.question_date, vocab.get(q.memory_id, {})]))


# ----------------------------------------------------------------------------- 06
@dataclasses.dataclass
class _Retrieval:
    """How 06 builds one question's row for the configured method."""

    make: Callable[[Question, Any, Any], RetrievalRow]  # (question, embedder, bridge client) -> row
    needs_embedder: bool
    inputs: list[Path]
    current: dict[str, str]  # qid -> digest of the row's inputs (stale rows are redone)
    extra: dict[str, Any]
    bridge_role: str | None = None  # "bridge" when some plan declares a bridge and bridges are on


class _CallsOutsideLock:
    """The LLM client as the retrieval code sees it from inside 06's lock.

    Retrieval compute runs one question at a time (one embedder, shared per-memory retrievers),
    but a bridge call releases the lock while it waits for the endpoint, so other questions'
    retrieval and bridge calls proceed: 06 is as concurrent as the other LLM stages.
    """

    def __init__(self, client: LLMClient, lock: Any):
        self._client, self._lock = client, lock

    def settings(self, role: str) -> Any:
        return self._client.settings(role)

    def complete(self, *args: Any, **kwargs: Any) -> Any:
        self._lock.release()
        try:
            return self._client.complete(*args, **kwargs)
        finally:
            self._lock.acquire()


def _ensimem_retrieval(run: Run, questions: list[Question], views: dict[str, MemoryView]) -> _Retrieval:
    plans = by_qid(read_jsonl(run.path("plans")), PlanRow)
    index_rows = read_jsonl(run.path("index"))
    paths = {r["memory_id"]: run.dir / r["path"] for r in index_rows}
    index_fp = {r["memory_id"]: r["fingerprint"] for r in index_rows}
    retrievers: dict[str, Retriever] = {}
    rcfg = run.cfg.retrieve
    bridges = rcfg.bridges and rcfg.mode != "dense_only" and any(
        h.bridge_request for p in plans.values() for h in p.plan.hops)

    def make(q: Question, emb: Any, client: Any) -> RetrievalRow:
        if q.memory_id not in retrievers:
            retrievers[q.memory_id] = Retriever(MemoryIndex.load(paths[q.memory_id]), views[q.memory_id],
                                                emb, rcfg, run.cfg.episodes.include_images)
        return retrievers[q.memory_id].retrieve(q, plans[q.qid].plan, bridge_mod.make_resolver(client, q.question))

    current = {q.qid: digest([q.question, q.question_date, to_dict(plans[q.qid].plan), index_fp.get(q.memory_id)])
               for q in questions}
    return _Retrieval(make, True, [run.path("plans"), run.path("index")], current,
                      {"mode": rcfg.mode, "bridges": bridges}, "bridge" if bridges else None)


def _baseline_retrieval(run: Run, views: dict[str, MemoryView]) -> _Retrieval:
    """The harness's own baselines (``common.method.baselines``): a buffer without 02-05."""
    method, mcfg, imgs = run.cfg.method.name, run.cfg.method, run.cfg.episodes.include_images
    inputs = [run.path("sessions"), run.path("questions")]
    gold: dict[str, Gold] = {}
    if method in baselines.READS_GOLD:  # the labelled upper bound; no other method opens gold here
        gold = {g["qid"]: from_dict(Gold, g) for g in read_jsonl(run.path("gold"))}
        inputs.append(run.path("gold"))
    rag: dict[str, Any] = {}

    def make(q: Question, emb: Any, client: Any) -> RetrievalRow:
        view = views[q.memory_id]
        if method == "full_context":
            return baselines.full_context(q, view, mcfg.context_tokens, imgs)
        if method == "rag_turns":
            if q.memory_id not in rag:
                rag[q.memory_id] = baselines.TurnRetriever(view, emb, imgs)
            return rag[q.memory_id].retrieve(q, mcfg.rag_k, imgs)
        if method == "no_memory":
            return baselines.no_memory(q, view)
        return baselines.oracle(q, view, gold.get(q.qid), imgs)

    return _Retrieval(make, method == "rag_turns", inputs, {},
                      {"mode": method, "reads_gold": method in baselines.READS_GOLD})


def retrieve(run: Run) -> None:
    check_protocol(run)
    questions = load_questions(run)
    views = load_views(run)
    how = _ensimem_retrieval(run, questions, views) if uses_memory_index(run.cfg) else _baseline_retrieval(run, views)
    lock = threading.Lock()
    loaded: dict[str, Any] = {}

    def work(q: Question) -> RetrievalRow:
        with lock:
            if "embedder" not in loaded:  # only when some row is (re)done
                loaded["embedder"] = run.embedder() if how.needs_embedder else None
            client = _CallsOutsideLock(run.llm, lock) if how.bridge_role else None
            return how.make(q, loaded["embedder"], client)

    run_rows(run, ID["retrieve"], run.path("retrievals"), "qid", questions, lambda q: q.qid, work,
               how.bridge_role, how.inputs, lambda r: r.get("fallback_used", False),
               digest_fn=lambda q: how.current.get(q.qid, ""), extra=how.extra)


# ----------------------------------------------------------------------------- 07
def answer(run: Run) -> None:
    check_protocol(run)
    questions = load_questions(run)
    # Baselines have no plan: the answer stage then uses the plan-free prompt.
    plans = by_qid(read_jsonl(run.path("plans")), PlanRow) if uses_memory_index(run.cfg) else {}
    rets = by_qid(read_jsonl(run.path("retrievals")), RetrievalRow)
    run_rows(run, ID["answer"], run.path("answers"), "qid", questions, lambda q: q.qid,
               lambda q: answer_mod.answer_question(run.llm, q, plans[q.qid].plan if plans else None,
                                                    rets[q.qid]),
               "answer", [run.path("retrievals")], lambda r: r["answer"] is None or bool(r["error"]),
               digest_fn=lambda q: digest([q.question, rets[q.qid].mode, rets[q.qid].buffer_text,
                                           to_dict(plans[q.qid].plan) if plans else None]
                                          + ([to_dict(rets[q.qid].bridges)] if rets[q.qid].bridges else [])))


# ----------------------------------------------------------------------------- 08
def judge(run: Run) -> None:
    check_protocol(run, judge=run.cfg.judge.name)
    data, scorer = adapter(run.cfg.benchmark), evaluator(run.cfg.benchmark)
    gold = {g["qid"]: from_dict(Gold, g) for g in read_jsonl(run.path("gold"))}
    answers = [from_dict(AnswerRow, r) for r in read_jsonl(run.path("answers"))]
    scored = [a for a in answers if data.is_scored(gold[a.qid])]
    name, prompt_id = run.cfg.judge.name, run.cfg.judge.prompt
    run_rows(run, by_name("judge").instance(name), run.judge_path(), "qid", scored, lambda a: a.qid,
             lambda a: scorer.judge(run.llm, name, prompt_id, a, gold[a.qid]),
             "judge", [run.path("answers"), run.path("gold")], lambda r: r["label"] is None,
             digest_fn=lambda a: digest([a.question, a.answer, gold[a.qid].answer]))


# ----------------------------------------------------------------------------- 09
def aggregate(run: Run) -> None:
    started = time.time()
    scorer = evaluator(run.cfg.benchmark)
    judges = artifacts.judges(run.dir)
    if not judges:
        raise FileNotFoundError(f"no 08_judge_*.jsonl in {run.dir}: run the judge stage first")
    metrics = scorer.aggregate(run, judges)
    run_fp = check_protocol(run)
    metrics["fingerprint"] = {"run": run_fp, "judges": {j: fingerprint.stored(run.dir, f"judge:{j}") for j in judges},
                              "file": fingerprint.FILE}
    first = next(iter(metrics["judges"].values()))
    metrics["coverage"] = scoring.coverage(run.cfg.benchmark, first["overall"]["n"], dataclasses.asdict(run.cfg.data))
    led, ledger_files = ledger.write(run.dir)
    metrics["ledger"] = {"total": led["total"], "efficiency": led["efficiency"], "file": "ledger.json"}
    write_json(run.path("metrics"), metrics)
    outs = scorer.write_tables(run, metrics) + ledger_files
    manifest(run, ID["aggregate"], inputs=[run.judge_path(j) for j in judges] + [run.path("answers")],
             outputs=[run.path("metrics"), *outs], rows=len(judges), started=started)
    for path in outs:
        if path.suffix == ".md":
            print(path.read_text(encoding="utf-8"))
    if metrics["coverage"].get("warning"):
        print(f"WARNING: {metrics['coverage']['warning']}", flush=True)
    print(f"{ID['aggregate']}: metrics.json and {len(outs)} tables -> {run.dir}", flush=True)
