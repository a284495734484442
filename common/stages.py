"""The pipeline stages, written once for every benchmark.

Each function reads its input artifacts from the run directory, calls the concern module in
``common/`` and writes its JSONL (resumably for LLM stages) plus a manifest. The numbered
scripts of ``LoCoMo/`` and ``LongMemEval/`` only name the stage. Stages 02-07 read sessions and
questions, never the gold file: only ``judge`` and ``aggregate`` open it.
"""
from __future__ import annotations

import dataclasses
import json
import logging
import os
import sys
import threading
import time
from collections import defaultdict
from pathlib import Path
from typing import Any, Callable

from common import answer as answer_mod
from common import bridge as bridge_mod
from common import fingerprint, scoring
from common import episodes as episodes_mod
from common import extract as extract_mod
from common import plan as plan_mod
from common.benchmarks import registry
from common.dedup import rebase_partition, rebase_records, representatives
from common.config import ROLES, Config, resolve_path, to_yaml
from common.index import MemoryIndex, build_index, index_fingerprint
from common.io import StageWriter, read_jsonl, sha256_file, write_json, write_jsonl, write_manifest
from common.llm import EndpointNotConfigured, LLMClient, ResponseCache, RetryPolicy
from common.render import MemoryView
from common.retrieve import Retriever
from common.subset import load_selected
from common.schema import (AnswerRow, Episode, ExtractRow, Gold, PartitionRow, PlanRow, Question,
                           RetrievalRow, Session, from_dict, to_dict)

log = logging.getLogger("harness")

FILES = {
    "sessions": "01_sessions.jsonl", "questions": "01_questions.jsonl", "gold": "01_gold.jsonl",
    "episodes": "02_episodes.jsonl", "records": "03_records.jsonl", "index": "04_index.jsonl",
    "plans": "05_plans.jsonl", "retrievals": "06_retrievals.jsonl", "answers": "07_answers.jsonl",
}


class StageFailed(RuntimeError):
    """A stage finished but too many of its rows failed (``run.max_error_rate``)."""


@dataclasses.dataclass
class Run:
    cfg: Config
    force: bool = False
    progress: bool = True
    _client: LLMClient | None = None

    @property
    def dir(self) -> Path:
        return self.cfg.run_dir

    def path(self, name: str) -> Path:
        return self.dir / FILES.get(name, name)

    def client(self, roles: tuple[str, ...]) -> LLMClient:
        """The shared LLM client; fails at once, in one line, when a role has no endpoint."""
        if self._client is None:
            c = self.cfg.llm
            self._client = LLMClient(
                {r: self.cfg.role(r) for r in ROLES},
                cache=ResponseCache(str(resolve_path(c.cache_path)), c.cache_mode),
                retry=RetryPolicy(c.max_attempts, c.initial_wait, c.max_wait),
                concurrency=c.concurrency,
            )
        self._client.check_endpoints(roles)
        return self._client

    def embedder(self) -> Any:
        from common.embeddings import Embedder

        emb = self.cfg.embedding
        cache = str(resolve_path(emb.cache_path)) if emb.cache_path else ""
        return Embedder.from_config(dataclasses.replace(emb, cache_path=cache))


# ----------------------------------------------------------------------------- loading
def load_sessions(run: Run) -> list[Session]:
    return [from_dict(Session, r) for r in read_jsonl(run.path("sessions"))]


def load_questions(run: Run) -> list[Question]:
    return [from_dict(Question, r) for r in read_jsonl(run.path("questions"))]


def load_views(run: Run) -> dict[str, MemoryView]:
    by_memory: dict[str, list[Session]] = defaultdict(list)
    for s in load_sessions(run):
        by_memory[s.memory_id].append(s)
    return {m: MemoryView(m, ss) for m, ss in by_memory.items()}


def load_episodes(run: Run) -> list[Episode]:
    return [e for r in read_jsonl(run.path("episodes")) for e in from_dict(PartitionRow, r).episodes]


def _by_qid(rows: list[dict[str, Any]], cls: type) -> dict[str, Any]:
    return {r["qid"]: from_dict(cls, r) for r in rows}


# ----------------------------------------------------------------------------- helpers
def _manifest(run: Run, stage: str, *, extra: dict | None = None, **kw: Any) -> None:
    """Stage manifest with the resolved config, so each artifact names the settings it came from."""
    write_manifest(run.dir, stage, extra={**(extra or {}), "config": dataclasses.asdict(run.cfg)}, **kw)


def digest(obj: Any) -> str:
    """Short content hash of an upstream row: a row whose input changed since it was made is stale."""
    import hashlib

    return hashlib.sha256(json.dumps(obj, sort_keys=True, ensure_ascii=False, default=str).encode()).hexdigest()[:16]


def _stale(row: dict, key: str, current: dict[str, str]) -> bool:
    # Rows from before digests were kept (no field) are trusted; others must match their input.
    return bool(row.get("input_digest")) and row["input_digest"] != current.get(row[key], row["input_digest"])


def _llm_stage(run: Run, name: str, out: Path, key: str, items: list[Any], key_fn: Callable[[Any], str],
               work: Callable[[Any], Any], role: str | None, inputs: list[Path], failed: Callable[[Any], bool],
               redo_failed: bool = True, digest_fn: Callable[[Any], str] | None = None,
               extra: dict[str, Any] | None = None) -> list[dict]:
    """Shared loop of the row stages: resume, map concurrently, write as completed, manifest.

    Rows that failed in an earlier invocation are done again (their successful calls come from
    the cache, so only the failed calls are paid for); ``redo_failed=False`` keeps them. With
    ``digest_fn``, each row records the digest of its input and a row whose input has changed
    since (an upstream row was redone) is done again too. ``role=None``: a stage that makes no
    LLM call this time (06 without bridges) runs its items one after the other.
    """
    from tqdm import tqdm

    started = time.time()
    client = run.client((role,)) if role else None
    current = {key_fn(i): digest_fn(i) for i in items} if digest_fn else {}
    redo = (lambda r: (redo_failed and failed(r)) or _stale(r, key, current)) if (redo_failed or digest_fn) else None
    writer = StageWriter(out, key, force=run.force, redo=redo)
    todo = writer.pending(items, key_fn)
    if digest_fn:
        inner = work

        def work(item: Any) -> Any:  # noqa: F811 - stamp each new row with its input digest
            row = inner(item)
            row.input_digest = current[key_fn(item)]
            return row
    done = client.map(work, todo, desc=name, progress=run.progress) if client else (
        (i, work(i)) for i in tqdm(todo, desc=name, disable=not run.progress or len(todo) < 2, leave=False))
    try:
        for _, row in done:
            writer.write(to_dict(row))
    finally:
        rows = writer.close(order=[key_fn(i) for i in items])
    n_failed = sum(1 for r in rows if failed(r))
    llm = client.summary().get(role, {}) if client and role else {}
    _manifest(run, name, inputs=inputs, outputs=[out], rows=len(rows), started=started,
                   extra={**(extra or {}), "resumed_rows": writer.resumed, "redone_rows": writer.redone,
                          "new_rows": len(todo), "failed_rows": n_failed, "llm": llm})
    _summary(name, rows, writer.resumed, len(todo), n_failed, out, started, llm)
    if rows and n_failed / len(rows) > run.cfg.run.max_error_rate:
        raise StageFailed(f"{name}: {n_failed}/{len(rows)} rows failed (> run.max_error_rate "
                          f"{run.cfg.run.max_error_rate}); rerun to retry only the failed rows' calls")
    return rows


def _summary(name: str, rows: list, resumed: int, new: int, failed: int, out: Path, started: float,
             llm: dict | None = None) -> None:
    calls = f"; llm: {llm.get('calls', 0)} calls, {llm.get('cached', 0)} cached, {llm.get('failed', 0)} failed" if llm else ""
    print(f"{name}: {len(rows)} rows ({resumed} resumed, {new} new, {failed} failed) -> "
          f"{out} ({time.time() - started:.1f}s){calls}", flush=True)


# ----------------------------------------------------------------------------- protocol
def dataset_sha256(run: Run, *, reread: bool = False) -> str:
    """The sha256 of the source file: read at 01, remembered in the run's fingerprint after."""
    stored = json.loads((run.dir / fingerprint.FILE).read_text(encoding="utf-8")) \
        if (run.dir / fingerprint.FILE).exists() else {}
    if stored.get("run") and not reread:
        return stored["run"]["components"]["dataset_sha256"]
    return sha256_file(registry(run.cfg.benchmark).data_path(run.cfg))


def check_protocol(run: Run, *, judge: str | None = None, reread: bool = False) -> str:
    """Refuse to add rows to a run made under another protocol; return the fingerprint."""
    comps = fingerprint.run_components(run.cfg, dataset_sha256(run, reread=reread))
    fp = fingerprint.check_and_store(run.dir, comps, key="run", force=run.force)
    if judge is None:
        return fp
    jc = fingerprint.judge_components(run.cfg, fp, scoring.POLICIES[run.cfg.benchmark])
    return fingerprint.check_and_store(run.dir, jc, key=f"judge:{judge}", force=run.force)


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
    _manifest(run, "01_preprocess", inputs=[src], outputs=outs, rows=len(data.questions),
                   started=started, extra={"source": str(src), "fingerprint": run_fp,
                                           "subset": str(subset.path) if subset else None, "memories": len({s.memory_id for s in data.sessions}),
                                           "sessions": len(data.sessions), "turns": n_turns})
    print(f"01_preprocess: {len({s.memory_id for s in data.sessions})} memories, {len(data.sessions)} sessions, "
          f"{n_turns} turns, {len(data.questions)} questions -> {run.dir}", flush=True)


# ----------------------------------------------------------------------------- 02-05 (EnSIMem only)
def uses_memory_index(cfg: Config) -> bool:
    """Only EnSIMem builds episodes, records, an index and plans; baselines start at 06."""
    return cfg.method.name == "ensimem"


def _skipped(run: Run, stage: str) -> bool:
    if uses_memory_index(run.cfg):
        return False
    print(f"{stage}: skipped (method {run.cfg.method.name} builds its buffer in 06_retrieve)", flush=True)
    _manifest(run, stage, inputs=[], outputs=[], rows=0, started=time.time(),
              extra={"skipped": f"method={run.cfg.method.name}"})
    return True


# ----------------------------------------------------------------------------- 02
def _two_pass(run: Run, name: str, out: Path, key: str, items: list[Any], key_fn: Callable[[Any], str],
              rep_of: dict[str, Any], work: Callable[[Any], Any], rebase: Callable[[Any, Any], Any],
              role: str, inputs: list[Path], failed: Callable[[Any], bool],
              digest_fn: Callable[[Any], str] | None = None) -> None:
    """Process distinct items first, then serve duplicates from the cache and rebase them.

    Running representatives to completion before any duplicate means two copies of one session
    never race for the same uncached request, so a duplicate costs no call at all.
    """
    reps = [i for i in items if rep_of[key_fn(i)] is i]
    _llm_stage(run, name, out, key, reps, key_fn, work, role, inputs, failed, digest_fn=digest_fn)
    if len(reps) < len(items):
        # The first pass already retried failed representatives; do not pay for them twice.
        _llm_stage(run, name, out, key, items, key_fn, lambda i: rebase(work(rep_of[key_fn(i)]), i),
                   role, inputs, failed, redo_failed=False, digest_fn=digest_fn)
    manifest = run.dir / f"{name}.manifest.json"
    import json

    data = json.loads(manifest.read_text(encoding="utf-8"))
    data["dedup"] = {"instances": len(items), "unique": len(reps), "calls_saved_by_reuse": len(items) - len(reps)}
    write_json(manifest, data)
    if len(reps) < len(items):
        print(f"{name}: {len(reps)} unique of {len(items)} instances; {len(items) - len(reps)} reused", flush=True)


def episodes(run: Run) -> None:
    check_protocol(run)
    if _skipped(run, "02_episodes"):
        return
    sessions = load_sessions(run)
    cfg = run.cfg.episodes
    rep_of = representatives(sessions)
    _two_pass(run, "02_episodes", run.path("episodes"), "session_key", sessions, lambda s: s.key, rep_of,
              lambda s: episodes_mod.partition_session(run._client, s, cfg.mode, cfg.include_images),
              rebase_partition, "partition", [run.path("sessions")], lambda r: r["fallback_used"])


# ----------------------------------------------------------------------------- 03
def extract(run: Run) -> None:
    check_protocol(run)
    if _skipped(run, "03_extract"):
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
    _two_pass(run, "03_extract", run.path("records"), "episode_id", eps, lambda e: e.episode_id, rep_of,
              lambda e: extract_mod.extract_episode(run._client, views[e.memory_id], e, g, imgs),
              rebase_records, "extract", [run.path("episodes")], lambda r: r["fallback_used"],
              digest_fn=lambda e: digest(to_dict(e)))


# ----------------------------------------------------------------------------- 04
def index(run: Run) -> None:
    check_protocol(run)
    if _skipped(run, "04_index"):
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
        directory = run.dir / "04_index" / mid
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
    _manifest(run, "04_index", inputs=[run.path("episodes"), run.path("records")], outputs=[out],
                   rows=len(rows), started=started, extra={"embedding_model": emb.model_id})
    _summary("04_index", rows, reused, len(rows) - reused, 0, out, started)


# ----------------------------------------------------------------------------- 05
def plan(run: Run) -> None:
    check_protocol(run)
    if _skipped(run, "05_plan"):
        return
    import json

    questions = load_questions(run)
    vocab = {}
    for r in read_jsonl(run.path("index")):
        vocab[r["memory_id"]] = json.loads((run.dir / r["path"] / "vocabulary.json").read_text(encoding="utf-8"))
    g, vmax = run.cfg.extract.granularity, run.cfg.plan.vocabulary_max
    _llm_stage(run, "05_plan", run.path("plans"), "qid", questions, lambda q: q.qid,
               lambda q: plan_mod.plan_question(run._client, q, vocab.get(q.memory_id, {}),
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
    plans = _by_qid(read_jsonl(run.path("plans")), PlanRow)
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
    """The harness's own baselines (``common.baselines``): a buffer without 02-05."""
    from common import baselines

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
            client = _CallsOutsideLock(run._client, lock) if how.bridge_role else None
            return how.make(q, loaded["embedder"], client)

    _llm_stage(run, "06_retrieve", run.path("retrievals"), "qid", questions, lambda q: q.qid, work,
               how.bridge_role, how.inputs, lambda r: r.get("fallback_used", False),
               digest_fn=lambda q: how.current.get(q.qid, ""), extra=how.extra)


# ----------------------------------------------------------------------------- 07
def answer(run: Run) -> None:
    check_protocol(run)
    questions = load_questions(run)
    # Baselines have no plan: the answer stage then uses the plan-free prompt.
    plans = _by_qid(read_jsonl(run.path("plans")), PlanRow) if uses_memory_index(run.cfg) else {}
    rets = _by_qid(read_jsonl(run.path("retrievals")), RetrievalRow)
    _llm_stage(run, "07_answer", run.path("answers"), "qid", questions, lambda q: q.qid,
               lambda q: answer_mod.answer_question(run._client, q, plans[q.qid].plan if plans else None,
                                                    rets[q.qid]),
               "answer", [run.path("retrievals")], lambda r: r["answer"] is None or bool(r["error"]),
               digest_fn=lambda q: digest([q.question, rets[q.qid].mode, rets[q.qid].buffer_text,
                                           to_dict(plans[q.qid].plan) if plans else None]
                                          + ([to_dict(rets[q.qid].bridges)] if rets[q.qid].bridges else [])))


# ----------------------------------------------------------------------------- 08
def judge_path(run: Run, name: str | None = None) -> Path:
    return run.dir / f"08_judge_{name or run.cfg.judge.name}.jsonl"


def judge(run: Run) -> None:
    check_protocol(run, judge=run.cfg.judge.name)
    adapter = registry(run.cfg.benchmark)
    gold = {g["qid"]: from_dict(Gold, g) for g in read_jsonl(run.path("gold"))}
    answers = [from_dict(AnswerRow, r) for r in read_jsonl(run.path("answers"))]
    scored = [a for a in answers if adapter.is_scored(gold[a.qid])]
    name, prompt_id = run.cfg.judge.name, run.cfg.judge.prompt
    _llm_stage(run, f"08_judge_{name}", judge_path(run), "qid", scored, lambda a: a.qid,
               lambda a: adapter.judge(run._client, name, prompt_id, a, gold[a.qid]),
               "judge", [run.path("answers"), run.path("gold")], lambda r: r["label"] is None,
               digest_fn=lambda a: digest([a.question, a.answer, gold[a.qid].answer]))


# ----------------------------------------------------------------------------- 09
def aggregate(run: Run) -> None:
    started = time.time()
    adapter = registry(run.cfg.benchmark)
    judges = sorted(p.name[len("08_judge_"):-len(".jsonl")] for p in run.dir.glob("08_judge_*.jsonl"))
    if not judges:
        raise FileNotFoundError(f"no 08_judge_*.jsonl in {run.dir}: run the judge stage first")
    metrics = adapter.aggregate(run, judges)
    run_fp = check_protocol(run)
    metrics["fingerprint"] = {"run": run_fp, "judges": {j: fingerprint.stored(run.dir, f"judge:{j}") for j in judges},
                              "file": fingerprint.FILE}
    first = next(iter(metrics["judges"].values()))
    metrics["coverage"] = scoring.coverage(run.cfg.benchmark, first["overall"]["n"], dataclasses.asdict(run.cfg.data))
    from common import ledger

    led, ledger_files = ledger.write(run.dir)
    metrics["ledger"] = {"total": led["total"], "efficiency": led["efficiency"], "file": "ledger.json"}
    write_json(run.dir / "metrics.json", metrics)
    outs = adapter.write_tables(run, metrics) + ledger_files
    _manifest(run, "09_aggregate", inputs=[judge_path(run, j) for j in judges] + [run.path("answers")],
                   outputs=[run.dir / "metrics.json", *outs], rows=len(judges), started=started)
    for path in outs:
        if path.suffix == ".md":
            print(path.read_text(encoding="utf-8"))
    if metrics["coverage"].get("warning"):
        print(f"WARNING: {metrics['coverage']['warning']}", flush=True)
    print(f"09_aggregate: metrics.json and {len(outs)} tables -> {run.dir}", flush=True)


STAGES: dict[str, Callable[[Run], None]] = {
    "preprocess": preprocess, "episodes": episodes, "extract": extract, "index": index, "plan": plan,
    "retrieve": retrieve, "answer": answer, "judge": judge, "aggregate": aggregate,
}


# LLM roles each stage calls; their endpoints are checked before any input is read.
STAGE_ROLES = {"episodes": ("partition",), "extract": ("extract",), "plan": ("plan",),
               "answer": ("answer",), "judge": ("judge",)}


def check_endpoint(run: Run, stage: str) -> None:
    """Fail at once, in one line, when a stage that will call an LLM has no endpoint."""
    cfg = run.cfg
    skip = (stage == "episodes" and cfg.episodes.mode != "theme") or (
        stage in ("episodes", "extract", "plan") and not uses_memory_index(cfg))
    if stage in STAGE_ROLES and not skip:
        run.client(STAGE_ROLES[stage])


def run_pipeline(run: Run, stages: tuple[str, ...] | None = None) -> None:
    """Stages 01-09 in order in this process (runners, the demo), each endpoint checked first."""
    for stage in stages or tuple(STAGES):
        check_endpoint(run, stage)
        STAGES[stage](run)


def main(stage: str, benchmark: str, doc: str | None = None) -> None:
    """Entry point of every numbered script: parse, run one stage, one-line errors."""
    from common.cli import parse

    cfg, args = parse(doc or "", benchmark)
    run = Run(cfg, force=args.force, progress=sys.stderr.isatty() and not os.environ.get("CI"))
    try:
        check_endpoint(run, stage)
        STAGES[stage](run)
    except EndpointNotConfigured as exc:
        sys.exit(f"error: {exc}")
    except (StageFailed, FileNotFoundError, ValueError, RuntimeError) as exc:
        log.debug("stage failed", exc_info=True)
        sys.exit(f"error: {' '.join(str(exc).split())}")
