"""The pipeline stages, written once for every benchmark (the functions of ``common.pipeline.graph``).

Each function reads its input artifacts from the run directory, calls the concern module of
``common.method`` or ``common.evaluation`` and writes its JSONL (resumably, through
``common.pipeline.engine.run_rows``) plus a manifest. Stages 02-07 read sessions and questions,
never the gold file: only ``judge`` and ``aggregate`` open it (and 06 for the labelled oracle).
"""
from __future__ import annotations

import contextlib
import dataclasses
import json
import shutil
import threading
import time
from collections import defaultdict
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Optional

from common.benchmarks import checksums, sampling
from common.benchmarks.base import FIRST_N
from common.benchmarks.registry import adapter
from common.benchmarks.subset import load_selected
from common.core import artifacts, fingerprint, long_texts, progress, sources
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
from common.evaluation import audited, scoring
from common.evaluation.registry import evaluator
from common.method import answer as answer_mod
from common.method import episodes as episodes_mod
from common.method import extract as extract_mod
from common.method import plan as plan_mod
from common.method.dedup import rebase_partition, rebase_records, representatives
from common.method.index import CHUNK_FORMAT, build_index, index_fingerprint
from common.method.render import MemoryView, render_buffer
from common.method.routes import Routes
from common.pipeline import export, ledger
from common.pipeline.engine import (
    Run,
    by_qid,
    check_protocol,
    dataset_sha256,
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
)
from common.pipeline.graph import IDS as ID  # manifest and summary names: declared in the graph only
from common.pipeline.graph import by_name
from common.systems import cards, failures, identity, outcomes
from common.systems.base import Context, MemorySystem, Spent, cap_buffer
from common.systems.gateway import Gateway
from common.systems.registry import native_answer_prompt, system_class, uses_stage


# ----------------------------------------------------------------------------- 01
def preprocess(run: Run) -> None:
    started = time.time()
    system_class(run.cfg.method.name)  # an unusable method.name stops here, before the fingerprint is written
    src, data, subset = load_selected(run.cfg)
    run_fp = check_protocol(run, reread=True)
    run.dir.mkdir(parents=True, exist_ok=True)
    outs = [run.path("sessions"), run.path("questions"), run.path("gold"), run.path("session_sources")]
    # Official session ids (LongMemEval's mark evidence sessions) go to the gold side only.
    opaque, source_rows = sources.split(data.sessions)
    write_jsonl(outs[0], (to_dict(s) for s in opaque))
    write_jsonl(outs[1], (to_dict(q) for q in data.questions))
    write_jsonl(outs[2], (to_dict(g) for g in data.gold))
    write_jsonl(outs[3], source_rows)
    (run.dir / "config.resolved.yaml").write_text(to_yaml(run.cfg), encoding="utf-8")
    n_turns = sum(len(s.turns) for s in data.sessions)
    selection = _selection(run, data.gold)
    # What the adapter says about the data it built, recorded and printed: named notes (LoCoMo-Plus: the
    # stitching's counts; REALTALK: its data quirks), each a sentence or a mapping of counts.
    describe = getattr(adapter(run.cfg.benchmark), "notes", None)
    notes: dict[str, Any] = describe(data) if describe is not None else {}
    manifest(run, ID["preprocess"], inputs=[src], outputs=outs, rows=len(data.questions),
                   started=started, extra={"source": str(src), "fingerprint": run_fp,
                                           "subset": str(subset.path) if subset else None,
                                           "memories": len({s.memory_id for s in data.sessions}),
                                           "sessions": len(data.sessions), "turns": n_turns,
                                           **({"selection": selection} if selection else {}), **notes})
    print(f"{ID['preprocess']}: {len({s.memory_id for s in data.sessions})} memories, {len(data.sessions)} sessions, "
          f"{n_turns} turns, {len(data.questions)} questions -> {run.dir}", flush=True)
    if selection:
        print(f"{ID['preprocess']}: LIMIT={selection['question_limit']}: {selection['rule']}; by category: "
              + ", ".join(f"{c} {n}" for c, n in selection["by_category"].items()), flush=True)
    for name, note in notes.items():
        text = ", ".join(f"{k} {v}" for k, v in note.items()) if isinstance(note, dict) else str(note)
        print(f"{ID['preprocess']}: {name}: {text}", flush=True)


def _selection(run: Run, gold: list[Gold]) -> dict[str, Any]:
    """What ``data.question_limit`` kept, for the manifest and the user: the benchmark's rule and
    the questions per category (read from the gold side here, for the record only)."""
    limit = run.cfg.data.question_limit
    if limit is None:
        return {}
    data = adapter(run.cfg.benchmark)
    counts: dict[str, int] = defaultdict(int)
    for g in gold:
        counts[data.category(g)] += 1
    rule = FIRST_N if run.cfg.data.limit_rule == "first" else getattr(data, "limit_rule", FIRST_N)
    return {"question_limit": limit, "limit_rule": run.cfg.data.limit_rule, "rule": rule,
            "seed": None if rule == FIRST_N else sampling.SEED, "by_category": {c: counts[c] for c in sorted(counts)}}


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
    g, imgs, pset = run.cfg.extract.granularity, run.cfg.episodes.include_images, run.cfg.prompts.set
    ext = run.cfg.extract  # the rule enters the tuple (and the row digest) only when it is the authors'
    proj = (ext.speaker_event_projection, ext.object_creator_projection) + \
        ((ext.speaker_event_rule,) if ext.speaker_event_rule != "harness" else ())
    run_rows_deduplicated(run, ID["extract"], run.path("records"), "episode_id", eps, lambda e: e.episode_id, rep_of,
              lambda e: extract_mod.extract_episode(run.llm, views[e.memory_id], e, g, imgs, pset, proj),
              rebase_records, "extract", [run.path("episodes")], lambda r: r["fallback_used"],
              digest_fn=lambda e: digest([to_dict(e), proj] if any(proj) else to_dict(e)))


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
                "include_images": run.cfg.episodes.include_images, "chunk_format": CHUNK_FORMAT}
    rows, reused = [], 0
    for mid in progress.bar(list(views), desc=ID["index"], unit="memory", enabled=run.progress):
        fp = index_fingerprint(eps_by[mid], recs_by[mid], settings)
        directory = run.dir / ID["index"] / mid
        if old.get(mid, {}).get("fingerprint") == fp and (directory / "embeddings.npz").exists():
            rows.append(old[mid])
            reused += 1
            continue
        with long_texts.tallying(long_texts.Tally()) as over:  # texts over the model's limit, counted
            idx = build_index(views[mid], eps_by[mid], recs_by[mid], emb, run.cfg.index.chunk_turns,
                              run.cfg.index.chunk_stride, run.cfg.episodes.include_images)
        idx.save(directory)
        write_json(directory / "vocabulary.json", idx.vocabulary)
        rows.append({"memory_id": mid, "fingerprint": fp, "path": str(directory.relative_to(run.dir)),
                     "episodes": len(idx.episodes), "records": len(idx.records), "chunks": len(idx.chunk_episode),
                     "properties": len(idx.vocabulary), "embedding_model": idx.embedding_model,
                     **({"long_texts": over.count} if over.count else {})})
    write_jsonl(out, rows)
    manifest(run, ID["index"], inputs=[run.path("episodes"), run.path("records")], outputs=[out],
                   rows=len(rows), started=started,
                   extra={"embedding_model": emb.model_id, "embedding": emb.stats.as_dict()})
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
    g, vmax, vtok = run.cfg.extract.granularity, run.cfg.plan.vocabulary_max, run.cfg.plan.vocabulary_tokens
    pc, pset = run.cfg.plan, run.cfg.prompts.set
    if pc.audit:
        run.client(("plan", "plan_audit"))  # both endpoints checked before any row
    # The code_rules switches enter the row digest only when on: paper rows keep their digests.
    switches = [s for s in (pset if pset != "paper" else "", pc.validation if pc.validation != "schema" else "",
                            "audit" if pc.audit else "", "repair_code" if pc.repair == "code" else "",
                            "fallback_code" if pc.fallback == "code" else "") if s]
    run_rows(run, ID["plan"], run.path("plans"), "qid", questions, lambda q: q.qid,
               lambda q: plan_mod.plan_question(run.llm, q, vocab.get(q.memory_id, {}), granularity=g,
                                                vocabulary_max=vmax, vocabulary_tokens=vtok, prompt_set=pset,
                                                validation=pc.validation, audit=pc.audit, repair=pc.repair,
                                                fallback=pc.fallback),
               "plan", [run.path("questions"), run.path("index")], lambda r: r["fallback_used"],
               digest_fn=lambda q: digest([q.question, q.question_date, vocab.get(q.memory_id, {})]
                                          + ([switches] if switches else [])))


# ----------------------------------------------------------------------------- 06
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


def _system(run: Run) -> MemorySystem:
    """The configured memory system (``method.name``) with the harness's tools in its context."""
    cls = system_class(run.cfg.method.name)
    loaded: dict[str, Any] = {}
    guard = threading.Lock()  # memories ingest on several threads: one embedder for all of them

    def embedder() -> Any:  # loaded only when some row or memory is (re)done
        with guard:
            if "embedder" not in loaded:
                loaded["embedder"] = run.embedder()
            return loaded["embedder"]

    # Only a system that declares it (the labelled oracle) gets a way to open the gold file.
    read_gold = (lambda: {g["qid"]: from_dict(Gold, g) for g in read_jsonl(run.path("gold"))}) \
        if cls.reads_gold else None
    system = cls(Context(run.cfg, run.dir, run.dir / ID["retrieve"] / "memory", embedder, None, read_gold))
    system.name = system.name or run.cfg.method.name  # an import-path system is named by its path
    return system


def _ingest(run: Run, system: MemorySystem, views: dict[str, MemoryView], memory_ids: list[str]) -> dict[str, Any]:
    """Ingest each memory once; a memory whose marker is present and current is not redone.

    Up to ``systems.ingest_concurrency`` memories are ingested at the same time (a memory's own
    calls stay in its system's order). A killed run continues at the memories without a marker;
    such a memory's partial state is wiped and built again (its finished LLM calls come from the
    cache). An outside system's failure on one memory is that memory's (``failed.json``, returned
    under ``failed``: its questions become failed rows) and the others go on
    (``common.systems.failures``); an interrupt or an error of the harness's own starts no further
    memory, lets those running finish and keep their markers, then is raised.
    """
    if not system.ingests():
        return {}
    started, done, resumed, spent = time.time(), {}, 0, Spent()
    settings = system.settings()
    todo: list[tuple[str, str]] = []
    for mid in memory_ids:
        d = digest([system.name, settings, [to_dict(s) for s in views[mid].sessions]])
        marker = system.ctx.state_dir / mid / "ingested.json"
        if not run.force and marker.exists() and json.loads(marker.read_text(encoding="utf-8")).get("digest") == d:
            done[mid], resumed = d, resumed + 1
        else:
            todo.append((mid, d))
    failed = threading.Event()
    lost: dict[str, dict[str, Any]] = {}  # memories whose ingestion failed this time (the system's failure)

    def one(mid: str, d: str) -> Optional[Spent]:
        if failed.is_set():  # left for the rerun, like every memory after an interrupt
            return None
        state = system.ctx.state_dir / mid
        account = outcomes.Account()
        try:
            shutil.rmtree(state, ignore_errors=True)
            state.mkdir(parents=True)
            # Every call through ctx.llm and every error the system logs lands in this memory's
            # account, whatever the system itself reports.
            with outcomes.active(account):
                used = system.ingest(views[mid], state)
            _count_recorded(used, account)
            write_json(state / "ingested.json", {"memory_id": mid, "digest": d, "spent": dataclasses.asdict(used),
                                                 "outcome": account.outcome()})
        except BaseException as exc:
            own = not (system.outside and failures.contained(exc))
            # Counted with its cause (system_error, a process system's child_crash, ...); the next
            # run wipes the memory's state, this file with it, and ingests it again.
            record = {"memory_id": mid, "digest": d, "error": failures.message(exc),
                      "cause": getattr(exc, "cause", type(exc).__name__) if own else failures.cause_of(exc),
                      "outcome": account.outcome(), **({} if own else {"traceback": failures.trace(exc)})}
            write_json(state / "failed.json", record)
            if own:
                failed.set()
                raise
            lost[mid] = record
            print(f"{ID['retrieve']}: ingestion of {mid} failed ({failures.message(exc, 200)}); its questions are "
                  f"counted failures and the next run ingests it again", flush=True)
            return None
        print(f"{ID['retrieve']}: ingested {mid} ({used.calls} calls, {used.seconds:.1f}s)", flush=True)
        return used

    first_error: Optional[BaseException] = None
    sessions = sum(len(views[mid].sessions) for mid, _ in todo)
    ticks = progress.bar(total=sessions, desc=f"{ID['retrieve']} ingest {system.name}", unit="session",
                         enabled=run.progress)
    system.ctx.advance = ticks.update
    with ticks, outcomes.capture_logged_errors(), \
            ThreadPoolExecutor(max_workers=max(1, min(run.cfg.systems.ingest_concurrency, len(todo)))) as pool:
        futures = [(mid, d, pool.submit(one, mid, d)) for mid, d in todo]
        for mid, d, future in futures:
            try:
                used = future.result()
            except BaseException as exc:  # KeyboardInterrupt too: the others finish first
                first_error = first_error or exc
                failed.set()  # a Ctrl-C here (the main thread): no memory not yet started starts
                continue
            if used is not None:
                spent.add(used)
                done[mid] = d
    if first_error is not None:
        raise first_error
    return {"digests": done, "failed": lost, "memories": len(memory_ids), "resumed": resumed,
            "new": len(memory_ids) - resumed, "concurrency": run.cfg.systems.ingest_concurrency,
            "spent_this_time": spent.totals(), "wall_seconds": round(time.time() - started, 2)}


def _count_recorded(spent: Spent, account: outcomes.Account) -> None:
    """The calls the harness recorded under ``ctx.llm`` join those the system listed itself
    (each once), and its counts cover them: a system that fills nothing in is still counted."""
    spent.llm_calls = outcomes.merge_calls(spent.llm_calls, account.calls)
    spent.calls = max(spent.calls, len(spent.llm_calls))
    spent.prompt_tokens = max(spent.prompt_tokens,
                              sum((c.get("usage") or {}).get("prompt_tokens", 0) for c in spent.llm_calls))
    spent.completion_tokens = max(spent.completion_tokens,
                                  sum((c.get("usage") or {}).get("completion_tokens", 0) for c in spent.llm_calls))


def retrieve(run: Run) -> None:
    check_protocol(run)
    questions = load_questions(run)
    views = load_views(run)
    system = _system(run)
    if system.role:
        run.client((system.role,))
        system.ctx.llm = outcomes.Recorder(run.llm)
    with contextlib.ExitStack() as stack:
        if system.uses_gateway:  # its own OpenAI client reaches the harness's through this endpoint
            system.ctx.gateway = stack.enter_context(Gateway(run.llm, system.ctx.embedder, system=system.name,
                                                             role=system.role or "memory"))
        stack.callback(system.close)  # a process system's children are reaped, whatever happened
        _retrieve_rows(run, system, questions, views)
        if system.ctx.gateway is not None:
            print(f"{ID['retrieve']}: gateway {system.ctx.gateway.summary()}", flush=True)
            loose = system.ctx.gateway.spent.llm_calls  # calls made with the gateway's own key, no session
            if loose:  # the ledger counts them too (06_retrieve_gateway)
                write_jsonl(run.dir / ID["retrieve"] / "gateway_calls.jsonl", loose)


def _retrieve_rows(run: Run, system: MemorySystem, questions: list[Question], views: dict[str, MemoryView]) -> None:
    if system.outside:
        cards.load(system.name)  # a broken protocol card stops here, in one line naming its file and field
    ingested = _ingest(run, system, views, list(dict.fromkeys(q.memory_id for q in questions)))
    lost = ingested.get("failed", {})  # memories whose ingestion failed now: their questions fail
    by_memory = {**ingested.get("digests", {}), **{m: r["digest"] for m, r in lost.items()}}
    lock = threading.Lock()
    if system.role:
        system.ctx.llm = outcomes.Recorder(_CallsOutsideLock(run.llm, lock))
    budget = run.cfg.systems.buffer_tokens

    def work(q: Question) -> RetrievalRow:
        if q.memory_id in lost:
            return failures.ingest_failed_row(q, system.name, lost[q.memory_id])
        with lock, outcomes.active(outcomes.Account()) as account:
            row = failures.search_row(system, q, views[q.memory_id])  # an outside system's exception: a failed row
        row.llm_calls = outcomes.merge_calls(list(row.llm_calls), account.calls)
        if searched := account.search_outcome():  # errors met and fallbacks taken while searching
            row.method_info = {**row.method_info, "outcome": searched}
        return cap_buffer(row, budget) if budget else row

    def row_digest(q: Question) -> str:
        own = system.digest(q) + (f"|parity{budget}" if budget else "")
        return digest([own, q.question, q.question_date, by_memory[q.memory_id]]) if by_memory else own

    extra = system.extra()
    extra["system_role"] = system.role
    if ingested:
        extra["ingest"] = {k: v for k, v in ingested.items() if k not in ("digests", "failed")}
        extra["ingest"]["failed"] = {m: r["cause"] for m, r in lost.items()}
    previous = identity.recorded(run.dir)
    # The errors an outside system logs while it searches count in that question's account, as
    # those it logs while ingesting count in the memory's.
    try:
        with outcomes.capture_logged_errors() if system.outside else contextlib.nullcontext():
            run_rows(run, ID["retrieve"], run.path("retrievals"), "qid", questions, lambda q: q.qid, work,
                     system.role, system.inputs(), lambda r: r.get("fallback_used", False),
                     digest_fn=row_digest, extra=extra)
    finally:  # what ran (protocol, version, card, departures), said even when the stage stops
        identity.record(run.dir, system, run.cfg, previous)


# ----------------------------------------------------------------------------- 07
def answer(run: Run) -> None:
    check_protocol(run)
    questions = load_questions(run)
    # Systems without a planner: the answer stage then uses the plan-free prompt (answer.prompt).
    plans = by_qid(read_jsonl(run.path("plans")), PlanRow) if uses_stage(run.cfg.method.name, "plan") else {}
    rets = by_qid(read_jsonl(run.path("retrievals")), RetrievalRow)
    ac = run.cfg.answer
    style: str = ac.prompt
    # systems.protocol: native: the system's reference answer prompt replaces the harness's, and a
    # system whose own agent answered in 06 keeps that answer (answer_mod.native_answer).
    native = run.cfg.systems.protocol == "native"
    own_prompt = native_answer_prompt(run.cfg.method.name) if native else None
    style = own_prompt or style
    memory_model = run.cfg.role("memory").model
    steps = answer_mod.AnswerSteps(prompt_set=run.cfg.prompts.set, rerank=ac.rerank, rerank_max=ac.rerank_max,
                                   verify=ac.verify, style=style, rerank_keep_all=ac.rerank_keep_all,
                                   draft=ac.draft, verify_personal=ac.verify_personal,
                                   routes=Routes(**dataclasses.asdict(ac.routes)), draft_prompt=ac.draft_prompt,
                                   keep_whole_point=ac.keep_whole_point, strip=ac.strip,
                                   rerank_pad_operators=ac.rerank_pad_operators, draft_audit=ac.draft_audit,
                                   draft_rules=ac.draft_rules,
                                   verify_checklist=ac.verify_checklist, verify_short=ac.verify_short)
    extra_roles = tuple(r for r, on in (("answer_rerank", ac.rerank), ("answer_verify", ac.verify),
                                        ("answer_draft", ac.draft == "json"),
                                        ("answer_count", ac.routes.count),
                                        ("answer_temporal", ac.routes.temporal or ac.routes.relative_age),
                                        ("answer_order", ac.routes.order)) if on)
    pools = _episode_pools(run) if plans and (ac.routes.user_overlap or ac.routes.date_window_dates) else {}
    if extra_roles:
        run.client(("answer", *extra_roles))  # every endpoint checked before any row
    # The code_rules switches enter the row digest only when on: paper rows keep their digests.
    switches = [s for s in (steps.prompt_set if steps.prompt_set != "paper" else "",
                            f"rerank{ac.rerank_max}{'_keep_all' if ac.rerank_keep_all else ''}" if ac.rerank else "",
                            "verify" if ac.verify else "",
                            "draft_json" if ac.draft == "json" else "",
                            "verify_short" if ac.verify and not ac.verify_personal else "",
                            "draft_lme" if ac.draft == "json" and ac.draft_prompt == "longmemeval" else "",
                            "draft_rules" if ac.draft == "json" and ac.draft_rules else "",
                            "rerank_pad" if ac.rerank and ac.rerank_pad_operators else "",
                            "draft_audit" if ac.draft == "json" and ac.draft_audit else "",
                            "verify_checklist" if ac.verify and ac.verify_checklist else "",
                            "verify_long" if ac.verify and not ac.verify_short else "",
                            "keep_whole_point" if ac.rerank and ac.keep_whole_point else "",
                            "raw" if not ac.strip else "",
                            json.dumps(dataclasses.asdict(ac.routes), sort_keys=True)
                            if steps.routes != Routes() else "") if s]
    run_rows(run, ID["answer"], run.path("answers"), "qid", questions, lambda q: q.qid,
               lambda q: answer_mod.retrieval_failed(q, rets[q.qid], run.cfg.role("answer").model)
               or (native and answer_mod.native_answer(q, rets[q.qid], memory_model, run.cfg.method.name))
               or answer_mod.answer_question(run.llm, q, plans[q.qid].plan if plans else None,
                                             rets[q.qid], style, steps, pools.get(q.memory_id)),
               "answer", [run.path("retrievals")], lambda r: r["answer"] is None or bool(r["error"]),
               digest_fn=lambda q: digest([q.question, rets[q.qid].mode, rets[q.qid].buffer_text,
                                           to_dict(plans[q.qid].plan) if plans else None]
                                          + ([to_dict(rets[q.qid].bridges)] if rets[q.qid].bridges else [])
                                          + ([style, rets[q.qid].method_info.get("evidence")]
                                             if style != "harness" else [])
                                          + ([switches] if switches else [])
                                          + ([rets[q.qid].method_info["native_answer"]]
                                             if native and "native_answer" in rets[q.qid].method_info else [])
                                          # the slots a system's search rendered for its own answer prompt
                                          + ([rets[q.qid].method_info["answer_slots"]]
                                             if own_prompt and "answer_slots" in rets[q.qid].method_info else [])))


def _episode_pools(run: Run) -> dict[str, list[str]]:
    """Every episode block of each memory, as the buffer renders it (answer.routes.user_overlap)."""
    views = load_views(run)
    pools: dict[str, list[str]] = defaultdict(list)
    for e in load_episodes(run):
        if e.memory_id in views:
            pools[e.memory_id].append(render_buffer(views[e.memory_id], [e], run.cfg.episodes.include_images))
    return pools


# ----------------------------------------------------------------------------- 08
def judge(run: Run) -> None:
    check_protocol(run, judge=run.cfg.judge.name)
    data, scorer = adapter(run.cfg.benchmark), evaluator(run.cfg.benchmark, run.cfg)
    gold = {g["qid"]: from_dict(Gold, g) for g in read_jsonl(run.path("gold"))}
    answers = [from_dict(AnswerRow, r) for r in read_jsonl(run.path("answers"))]
    scored = [a for a in answers if data.is_scored(gold[a.qid])]
    name, prompt_id, runs = run.cfg.judge.name, run.cfg.judge.prompt, run.cfg.judge.runs
    errata = audited.run_errata(run.cfg)  # data.errata: corrected golden answers are judged a second time
    fixed = errata.corrected_answers() if errata else {}
    extra = tuple(getattr(scorer, "roles", ()))  # REALTALK's GPT score: a role of its own
    if extra:
        run.client(("judge", *extra))  # every endpoint checked before any row
    part_failed = getattr(scorer, "row_failed", lambda r: False)  # a failed part of a row is redone too
    run_rows(run, by_name("judge").instance(name), run.judge_path(), "qid", scored, lambda a: a.qid,
             lambda a: audited.judge_row(lambda g, i: scorer.judge(run.llm, name, prompt_id, a, g, repeat=i),
                                         gold[a.qid], runs, fixed.get(a.qid)),
             "judge", [run.path("answers"), run.path("gold")],
             lambda r: r["label"] is None or audited.corrected_failed(r) or part_failed(r),
             digest_fn=lambda a: digest([a.question, a.answer, gold[a.qid].answer] + ([runs] if runs > 1 else [])
                                        + ([fixed[a.qid]] if a.qid in fixed else [])
                                        # BEAM: the rubric and the scoring switches enter every judgment
                                        + ([gold[a.qid].rubric, repr(getattr(scorer, "opts", None))]
                                           if gold[a.qid].rubric else [])
                                        # a scorer whose judgment reads more of the gold (LoCoMo-Plus's evidence)
                                        + (scorer.digest(gold[a.qid]) if hasattr(scorer, "digest") else [])))


# ----------------------------------------------------------------------------- 09
def aggregate(run: Run) -> None:
    started = time.time()
    scorer = evaluator(run.cfg.benchmark, run.cfg)
    judges = artifacts.judges(run.dir)
    if not judges:
        raise FileNotFoundError(f"no 08_judge_*.jsonl in {run.dir}: run the judge stage first")
    metrics = scorer.aggregate(run, judges)
    metrics["method"] = {"name": run.cfg.method.name, "label": scoring.method_label(run.cfg, metrics)}
    run_fp = check_protocol(run)
    metrics["fingerprint"] = {"run": run_fp, "judges": {j: fingerprint.stored(run.dir, f"judge:{j}") for j in judges},
                              "file": fingerprint.FILE}
    first = next(iter(metrics["judges"].values()))
    data = adapter(run.cfg.benchmark)
    scored = [g["qid"] for g in read_jsonl(run.path("gold")) if data.is_scored(from_dict(Gold, g))]
    metrics["coverage"] = scoring.coverage(run.cfg.benchmark, first["overall"]["n"], dataclasses.asdict(run.cfg.data),
                                           missing=(first.get("failures") or {}).get("missing_judgment", 0),
                                           question_ids=scored)
    metrics["dataset"] = checksums.run_dataset(adapter(run.cfg.benchmark), run.cfg, dataset_sha256(run))
    # What ran as the memory system (protocol, version, card and departures, embedding model) and
    # its outcomes (empty memories and buffers, errors, failures, fallbacks, what it built), counted.
    ran = identity.of_run(run.dir)
    metrics["system"] = {**ran, "line": identity.label(ran)}  # the line under every score table says it too
    metrics["memory_system"] = outcomes.summary(run.dir)
    metrics["embedding"] = identity.embedding_block(run.dir, run.cfg)
    led, ledger_files = ledger.write(run.dir)
    metrics["ledger"] = {"total": led["total"], "efficiency": led["efficiency"], "file": "ledger.json"}
    note = run.cfg.run.note
    if note:
        metrics["note"] = note
    write_json(run.path("metrics"), metrics)
    outs = scorer.write_tables(run, metrics) + ledger_files
    for path in outs if note else []:  # run.note heads every table of the run (the demo's caveat)
        if path.suffix == ".md":
            path.write_text(f"> NOTE: {note}\n\n" + path.read_text(encoding="utf-8"), encoding="utf-8")
    manifest(run, ID["aggregate"], inputs=[run.judge_path(j) for j in judges] + [run.path("answers")],
             outputs=[run.path("metrics"), *outs], rows=len(judges), started=started)
    for path in outs:  # the tables; the ledger stays in its file (the invocation summary says what was paid)
        if path.suffix == ".md" and path.name != "ledger.md":
            print(path.read_text(encoding="utf-8"))
    if metrics["coverage"].get("warning"):
        print(f"WARNING: {metrics['coverage']['warning']}", flush=True)
    if metrics["dataset"].get("warning"):
        print(f"WARNING: {metrics['dataset']['warning']}", flush=True)
    print(f"{ID['aggregate']}: metrics.json and {len(outs)} tables -> {run.dir}", flush=True)
    if run.cfg.run.export:  # the portable per-question file (common.pipeline.export)
        exported = export.export_run(run.dir)
        print(f"{ID['aggregate']}: per-question export -> {exported['questions']} (and .csv, manifest.json)",
              flush=True)
