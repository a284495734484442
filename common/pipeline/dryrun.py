"""Estimate a run's LLM calls, tokens and dollars before making any call (``--dry-run``).

    python -m common.pipeline.dryrun --config configs/locomo.yaml [--set ...]   (make locomo DRY_RUN=1)

Counts that are known before the run are exact: sessions to partition (after de-duplication),
questions to plan and answer, questions to judge, and the rows already present in the run
directory (a resumed run pays only for the rest). Token counts are exact where the prompt can be
rendered up front (partition prompts, judge and plan templates) and otherwise come from the
stated assumptions in ``ASSUME``, which are printed with the estimate. Dollars are shown at both
prices: live (standard rate) and through the Batch API (``llm.batch``, offline roles only: the
online roles' latency is the paper's Table 3), with the total as configured. Nothing is written
and no endpoint is contacted.
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from collections import defaultdict
from pathlib import Path
from typing import Any, Optional

from common.benchmarks.registry import adapter
from common.benchmarks.subset import load_selected
from common.core import artifacts, prompts
from common.core.config import ONLINE_ROLES, ROLE_PARENT, ROLES, Config, ConfigError, load_config
from common.core.io import read_jsonl
from common.core.schema import Plan
from common.core.tokens import count_tokens
from common.evaluation import audited, beam, locomo_plus, realtalk
from common.evaluation.judge import judge_messages
from common.evaluation.judge_lme import judge_messages as lme_messages
from common.evaluation.judge_lme import judge_template
from common.method import official_context
from common.method.answer import RERANK_PROMPT_IDS, VERIFY_PROMPT_IDS
from common.method.dedup import representatives
from common.method.episodes import partition_messages
from common.method.plan import AUDIT_PROMPT_IDS, plan_messages
from common.method.render import MemoryView, render_turn
from common.method.routes import (
    COUNT_IDS,
    MERGE_IDS,
    ORDER_IDS,
    REFERENCE_IDS,
    TEMPORAL_IDS,
    Routes,
    reference_wanted,
    route_of,
)
from common.pipeline.graph import IDS, by_name, llm_stages
from common.pipeline.ledger import cost, load_prices
from common.systems.registry import system_class, uses_stage

# Assumptions for what cannot be known before the calls (all in o200k tokens).
ASSUME = {
    "turns_per_theme_episode": 8,    # theme-coherent partition: mean turns per episode
    "partition_out_per_turn": 12,    # segment JSON per turn (ids, themes, reasons)
    "extract_out_per_turn": 70,      # about 1.5 records of ~45 tokens per turn
    "plan_out": 350,                 # one hop plan with anchors
    "bridges_per_question": 0.1,     # hops declaring a bridge, before 05 has run (then counted)
    "bridge_out": 40,
    "ensimem_buffer": 7470,          # the paper's Table 3 mean context tokens, measured on LoCoMo
    "locomo_turn_tokens": 48.2,      # LoCoMo's mean rendered turn (locomo10.json: 5,882 turns)
    "plan_text_in_answer": 150,
    "plan_vocabulary": 600,          # properties shown to the planner when plan.vocabulary_max is unset (full list)
    "answer_out": 20,
    "answer_text": 12,               # the answer the judge reads
    "judge_out": 25,
    "oracle_turns": 3,
    "rerank_out": 150,               # answer.rerank: slots and up to 20 episode ids
    "verify_out": 60,                # answer.verify: verdict and final answer
    "system_items": 20,              # an outside system's evidence items per question (mem0: 10 per speaker)
    "count_out": 400,                # answer.routes.count: scan rows and items of one batch
    "temporal_out": 300,             # answer.routes.temporal/relative_age: dated facts of one batch
    "order_out": 300,                # answer.routes.order: dated rows of the audit
}


def _tok(messages: list[dict[str, str]]) -> int:
    return sum(count_tokens(m["content"]) for m in messages) + 4 * len(messages)


def _existing(run_dir: Path, name: str) -> int:
    """Rows already written to artifact ``name`` (a resumed run pays only for the rest)."""
    path = artifacts.path(run_dir, name)
    if not path.exists():
        return 0
    with path.open(encoding="utf-8") as f:
        return sum(1 for line in f if line.strip())


def _ingested(run_dir: Path, views: dict[str, MemoryView]) -> int:
    """Ingestion calls already made: memories whose marker 06 wrote (a killed run resumes there)."""
    calls = 0
    for mid in views:
        marker = run_dir / IDS["retrieve"] / "memory" / mid / "ingested.json"
        if marker.exists():
            calls += json.loads(marker.read_text(encoding="utf-8")).get("spent", {}).get("calls", 0)
    return calls


def _bridges(run_dir: Path, qids: set[str]) -> tuple[int, str]:
    """Bridge calls: counted from the plans when 05 has planned every question, else assumed."""
    plans = {r["qid"]: r for r in read_jsonl(artifacts.path(run_dir, "plans"), missing_ok=True)}
    if qids and qids <= set(plans):
        n = sum(1 for q in qids for h in plans[q]["plan"]["hops"] if h.get("bridge_request"))
        return n, f"counted from {artifacts.path(run_dir, 'plans').name}"
    return round(ASSUME["bridges_per_question"] * len(qids)), "bridges per question assumed (plans not made yet)"


def _bridges_done(run_dir: Path) -> int:
    return sum(len(r.get("bridges", [])) for r in read_jsonl(artifacts.path(run_dir, "retrievals"), missing_ok=True))


def ensimem_buffer(cfg: Config, data: Any, turn_tokens: dict[str, list[int]], rep: dict[str, Any],
                   mean_turn: float) -> tuple[float, str]:
    """(episode tokens in one answer's buffer, how they were estimated) from THIS run's data and config.

    The paper's one measurement (Table 3: 7,470 tokens on LoCoMo) is a number of episodes: about
    7,470 / (8 turns x 48.2 tokens) = 19 theme episodes of LoCoMo's short turns. The same number of
    episodes is sized here with this data's own mean turn and the configured episode size
    (``episodes.mode``: 8 turns assumed per theme episode, one turn, or a whole session), then
    capped by the memory a question is asked about and by ``retrieve.max_buffer_tokens``. On
    LoCoMo that is the paper's mean; a benchmark of long turns (BEAM's ~456-token messages) gets a
    buffer as many times larger, as the run will spend.
    """
    episodes = ASSUME["ensimem_buffer"] / (ASSUME["turns_per_theme_episode"] * ASSUME["locomo_turn_tokens"])
    sessions = list(rep.values())
    turns_per_episode = {"theme": ASSUME["turns_per_theme_episode"], "turn": 1,
                         "session": (sum(len(turn_tokens[s.key]) for s in sessions) / len(sessions)
                                     if sessions else 0)}[cfg.episodes.mode]
    wanted = episodes * turns_per_episode * mean_turn
    memory: dict[str, int] = defaultdict(int)
    for s in data.sessions:
        memory[s.memory_id] += sum(turn_tokens[rep[s.key].key])
    cap = cfg.retrieve.max_buffer_tokens
    per_question = [min(wanted, memory[q.memory_id], cap if cap is not None else wanted) for q in data.questions]
    mean = sum(per_question) / len(per_question) if per_question else wanted
    return mean, (f"{episodes:.0f} episodes (the paper's 7,470-token LoCoMo mean) of {turns_per_episode:.0f} turns "
                  f"x {mean_turn:.0f} tokens per turn of this data, capped by the memory"
                  + (f" and max_buffer_tokens {cap}" if cap is not None else ""))


def estimate(cfg: Config) -> dict[str, Any]:
    data_adapter = adapter(cfg.benchmark)
    _, data, _ = load_selected(cfg)
    imgs = cfg.episodes.include_images
    rep = representatives(data.sessions)
    unique = [s for s in data.sessions if rep[s.key] is s]
    turn_tokens = {s.key: [count_tokens(render_turn(t, imgs)) for t in s.turns] for s in unique}
    n_turns = sum(len(v) for v in turn_tokens.values())
    session_tokens = sum(sum(v) for v in turn_tokens.values())
    mean_turn = session_tokens / n_turns if n_turns else 0.0
    scored = [g for g in data.gold if data_adapter.is_scored(g)]
    nq = len(data.questions)
    system = system_class(cfg.method.name)
    ensimem = system.stages >= {"episodes", "extract", "index", "plan"}
    stages: list[dict[str, Any]] = []

    def add(stage: str, role: str, calls: int, tin: float, tout: float, done: int, note: str) -> None:
        todo = max(0, calls - done)
        frac = todo / calls if calls else 0.0
        stages.append({"stage": stage, "role": role, "model": cfg.role(role).model, "calls": calls,
                       "already_done": min(done, calls), "to_make": todo,
                       "prompt_tokens": int(tin * frac), "completion_tokens": int(tout * frac), "basis": note})

    run_dir = cfg.run_dir
    tin: float  # input tokens of the stage being estimated
    buffer_basis = ""
    if ensimem:
        if cfg.episodes.mode == "theme":
            tin = sum(_tok(partition_messages(s, imgs)) for s in unique)
            add(IDS["episodes"], "partition", len(unique), tin, ASSUME["partition_out_per_turn"] * n_turns,
                _existing(run_dir, "episodes"), "exact prompts; output assumed")
        n_eps = {"theme": max(len(unique), round(n_turns / ASSUME["turns_per_theme_episode"])),
                 "turn": n_turns, "session": len(unique)}[cfg.episodes.mode]
        overhead = sum(count_tokens(prompts.load(prompts.pick(i, cfg.prompts.set)))
                       for i in ("extract_system", "extract_user")) + 60
        add(IDS["extract"], "extract", n_eps, n_eps * overhead + session_tokens,
            ASSUME["extract_out_per_turn"] * n_turns, _existing(run_dir, "records"),
            "episodes assumed for theme mode; episode text exact in total")
        n_vocab = int(cfg.plan.vocabulary_max or ASSUME["plan_vocabulary"])
        vocab = ", ".join(["property"] * n_vocab)
        tin = sum(_tok(plan_messages(q, vocab, cfg.extract.granularity, cfg.prompts.set)) for q in data.questions)
        add(IDS["plan"], "plan", nq, tin, ASSUME["plan_out"] * nq, _existing(run_dir, "plans"),
            f"exact templates; vocabulary of {n_vocab} properties assumed")
        if cfg.plan.audit:  # one audit call per planned question (none after a fallback plan)
            audit_in = (sum(count_tokens(prompts.load(i)) for i in AUDIT_PROMPT_IDS)
                        + count_tokens(vocab) + ASSUME["plan_out"] + 20)
            add(IDS["plan"], "plan_audit", nq, sum(audit_in + count_tokens(q.question) for q in data.questions),
                ASSUME["plan_out"] * nq, _existing(run_dir, "plans"),
                "one per question (plan.audit); template exact, candidate plan assumed")
        episodes_text, buffer_basis = ensimem_buffer(cfg, data, turn_tokens, rep, mean_turn)
        buffer = episodes_text + ASSUME["plan_text_in_answer"]
        if cfg.retrieve.bridges and cfg.retrieve.mode != "dense_only":
            n_bridges, basis = _bridges(run_dir, {q.qid for q in data.questions})
            overhead = count_tokens(prompts.load("bridge_system")) + count_tokens(prompts.load("bridge_user")) + 60
            add(IDS["retrieve"], "bridge", n_bridges, n_bridges * (overhead + episodes_text),
                ASSUME["bridge_out"] * n_bridges, _bridges_done(run_dir),
                f"{basis}; context assumed the mean buffer ({buffer_basis})")
        answer_prompt = prompts.pick("answer_system", cfg.prompts.set)
    else:
        by_memory: dict[str, int] = {}
        for s in data.sessions:
            by_memory[s.memory_id] = by_memory.get(s.memory_id, 0) + sum(turn_tokens[rep[s.key].key])
        if cfg.method.name == "full_context" and cfg.method.context_builder != "harness":
            # REALTALK's official context (each session twice) or its chronological one: the exact text.
            by_memory = {m: count_tokens(official_context.build(
                MemoryView(m, [s for s in data.sessions if s.memory_id == m]), cfg.method.context_builder,
                cfg.method.context_hash_seed, cfg.method.context_tokens)[0]) for m in by_memory}
        conv = sum(by_memory.get(q.memory_id, 0) for q in data.questions) / nq if nq else 0
        buffer = {"full_context": min(conv, cfg.method.context_tokens), "rag_turns": cfg.method.rag_k * mean_turn,
                  "no_memory": 0, "oracle": ASSUME["oracle_turns"] * mean_turn}.get(
            cfg.method.name, ASSUME["system_items"] * mean_turn)
        answer_prompt = "answer_closed_book_system" if cfg.method.name == "no_memory" else "answer_baseline_system"
        if cfg.answer.prompt == "realtalk":
            answer_prompt = "answer_realtalk_user"
        if system.role:  # an outside system's own LLM calls while it ingests, when it says how many
            views = {m: MemoryView(m, [s for s in data.sessions if s.memory_id == m])
                     for m in dict.fromkeys(s.memory_id for s in data.sessions)}
            guesses = [system.estimate_ingest(v, cfg) for v in views.values()]
            known = [g for g in guesses if g is not None]
            if known:
                add(IDS["retrieve"], system.role, sum(g.calls for g in known), sum(g.prompt_tokens for g in known),
                    sum(g.completion_tokens for g in known), _ingested(run_dir, views),
                    f"ingestion as estimated by {cfg.method.name} ({len(known)}/{len(views)} memories)")
            else:  # listed, never silently left out
                add(IDS["retrieve"], system.role, 0, 0, 0, 0,
                    f"ingestion calls unknown: {cfg.method.name} declares no estimate_ingest")
            search = getattr(system, "estimate_search", None)  # a system whose search itself calls the LLM
            if search is not None:
                searches = [search(q, cfg) for q in data.questions]
                calls = sum(x.calls for x in searches)
                rows_done = _existing(run_dir, "retrievals")
                add(IDS["retrieve"], system.role, calls, sum(x.prompt_tokens for x in searches),
                    sum(x.completion_tokens for x in searches), round(calls * rows_done / nq) if nq else 0,
                    f"search calls as estimated by {cfg.method.name} (upper bound per question)")
    per_answer = count_tokens(prompts.load(answer_prompt)) + 40 + buffer
    tin = sum(per_answer + count_tokens(q.question) for q in data.questions)
    # answer.draft: json makes the answer call the JSON draft of role answer_draft (EnSIMem's buffer only).
    answer_role = "answer_draft" if ensimem and cfg.answer.draft == "json" else "answer"
    add(IDS["answer"], answer_role, nq, tin, ASSUME["answer_out"] * nq, _existing(run_dir, "answers"),
        f"buffer {buffer:.0f} tokens per question ({buffer_basis if ensimem else cfg.method.name})")
    # answer.rerank / answer.verify (EnSIMem's episode buffer only): one call each per question,
    # over the whole buffer (an upper bound: verify reads the reranked episodes, and a plan that
    # needs every candidate is not reranked).
    for role, on, ids, out in (("answer_rerank", cfg.answer.rerank, RERANK_PROMPT_IDS, "rerank_out"),
                               ("answer_verify", cfg.answer.verify, VERIFY_PROMPT_IDS, "verify_out")):
        if on and ensimem:
            per = sum(count_tokens(prompts.load(i)) for i in ids) + buffer
            add(IDS["answer"], role, nq, sum(per + count_tokens(q.question) for q in data.questions),
                ASSUME[out] * nq, _existing(run_dir, "answers"), f"one per question (answer.{role.split('_')[1]}); "
                f"buffer {buffer:.0f} tokens assumed")
    # answer.routes: the questions whose wording picks a ledger (a plan's count target cannot be
    # known before 05 ran); one batch per question assumed (a scan and a consolidation for counts).
    routes = Routes(**dataclasses.asdict(cfg.answer.routes))
    if ensimem and routes.any_call():
        blank = Plan(answer_target={"type": "value"}, reasoning_type="direct", retrieval_scope="point",
                     required_properties=[], hops=[])
        picked = [(q, route_of(q.question, blank, routes)) for q in data.questions]
        route_ids: tuple[tuple[str, tuple[str, ...], tuple[str, ...], str], ...] = (
            ("answer_count", ("count",), COUNT_IDS + MERGE_IDS, "count_out"),
            ("answer_temporal", ("temporal", "relative_age"), TEMPORAL_IDS, "temporal_out"),
            ("answer_order", ("order",), ORDER_IDS, "order_out"))
        for role, names, route_prompts, out in route_ids:
            qs = [q for q, r in picked if r in names]
            if qs:
                calls = 2 if role == "answer_count" else 1
                per = sum(count_tokens(prompts.load(i)) for i in route_prompts) + buffer * calls
                n = len(qs) * calls
                route_in = sum(per + count_tokens(q.question) for q in qs)
                # answer.routes.count_reference_event: one more call for a count bounded by a named event.
                refs = [q for q in qs if role == "answer_count" and routes.count_reference_event
                        and reference_wanted(q, since=routes.count_reference != "shown")]
                if refs:
                    n += len(refs)
                    route_in += sum(buffer + count_tokens(q.question) + sum(count_tokens(prompts.load(i))
                                                                             for i in REFERENCE_IDS) for q in refs)
                add(IDS["answer"], role, n, route_in, ASSUME[out] * n,
                    _existing(run_dir, "answers"), f"{len(qs)} questions worded for the route (answer.routes); "
                    f"one batch each, buffer {buffer:.0f} tokens assumed")
    q_by = {q.qid: q for q in data.questions}
    answer_text = "a " * int(ASSUME["answer_text"])  # an assumed answer of that many tokens
    beam_calls: dict[str, int] = {}
    gpt_in = 0  # REALTALK: the official GPT score, one more call per question (role gpt_score)
    if cfg.benchmark in ("locomo", "realtalk"):
        if cfg.benchmark == "realtalk":
            gpt_in = sum(_tok(realtalk.gpt_messages(q_by[g.qid].question, g.answer, answer_text)) for g in scored)
        tin = sum(_tok(judge_messages(cfg.judge.prompt, q_by[g.qid].question, g.answer, answer_text)) for g in scored)
    elif str(cfg.benchmark) == "locomo_plus":  # one call per question, its category's prompt and evidence
        tin = locomo_plus.judge_prompt_tokens(scored, answer_text, count_tokens)
    elif str(cfg.benchmark) == "beam":  # one call per rubric item plus the event-ordering alignment calls
        opts = beam.options(cfg)
        beam_calls = beam.judge_calls(scored, opts.fill_question)
        tin = beam.judge_prompt_tokens(scored, {q.qid: q.question for q in data.questions}, answer_text,
                                       opts.fill_question, count_tokens)
    else:
        tin = sum(_tok(lme_messages(judge_template(cfg.judge.prompt, g.question_type, g.qid), q_by[g.qid].question,
                                    g.answer, answer_text)) for g in scored)
    runs = cfg.judge.runs  # judge.runs: every answer is judged that many times (distinct calls)
    errata = audited.run_errata(cfg)  # data.errata: corrected golden answers are judged once more
    again = len(set(errata.corrected_answers()) & {g.qid for g in scored}) if errata else 0
    tin = tin * (len(scored) + again) / len(scored) if scored else 0
    if beam_calls:
        n_calls = (beam_calls["rubric"] + beam_calls["align_max"]) * runs
        done = _existing(run_dir, artifacts.judge_path(run_dir, cfg.judge.name).name)
        add(by_name("judge").instance(cfg.judge.name), "judge", n_calls, tin * runs, ASSUME["judge_out"] * n_calls,
            round(n_calls * done / len(scored)) if scored else 0,
            f"BEAM: {beam_calls['rubric']} rubric-item calls + at most {beam_calls['align_max']} event-ordering "
            "alignment calls (R*R per question); exact rubric prompts, answer length assumed")
    else:
        add(by_name("judge").instance(cfg.judge.name), "judge", (len(scored) + again) * runs, tin * runs,
            ASSUME["judge_out"] * (len(scored) + again) * runs,
            _existing(run_dir, artifacts.judge_path(run_dir, cfg.judge.name).name) * runs,
            "exact judge prompts; answer length assumed" + (f"; {runs} judge runs per answer" if runs > 1 else "")
            + (f"; {again} corrected answers judged again (data.errata)" if again else ""))
    if gpt_in:
        n_gpt = len(scored) * runs
        add(by_name("judge").instance(cfg.judge.name), realtalk.GPT_ROLE, n_gpt, gpt_in * runs,
            ASSUME["judge_out"] * n_gpt,
            _existing(run_dir, artifacts.judge_path(run_dir, cfg.judge.name).name) * runs,
            "REALTALK's GPT score, one per answer (the model of role gpt_score); exact prompt, answer length "
            "assumed; a reply that is not JSON is asked again up to 3 times (not counted)")
    # A stage added to the graph without an estimator here is listed, never silently left out.
    estimated = {s["stage"].split("_")[0] for s in stages}
    for node in llm_stages():  # every one has a role
        if (node.role and f"{node.number:02d}" not in estimated and uses_stage(cfg.method.name, node.name)
                and node.role_required):
            stages.append({"stage": node.id, "role": node.role, "model": cfg.role(node.role).model, "calls": 0,
                           "already_done": 0, "to_make": 0, "prompt_tokens": 0, "completion_tokens": 0,
                           "basis": "no estimator for this stage in common.pipeline.dryrun"})
    prices = load_prices()
    unpriced = set()
    batched = set(cfg.llm.batch_roles(ROLES))
    for row in stages:
        c = cost(row["model"], row["prompt_tokens"], row["completion_tokens"], prices)
        row["cost_usd"] = round(c, 4) if c is not None else None  # live, at the standard rate
        b = cost(row["model"], row["prompt_tokens"], row["completion_tokens"], prices, batch=True)
        # At the batch rate; None for an online role, which is never batched.
        row["cost_batch_usd"] = round(b, 4) if b is not None and row["role"] not in ONLINE_ROLES else None
        row["batch"] = row["role"] in batched
        if c is None:
            unpriced.add(row["model"])
    total = {k: sum(s[k] for s in stages) for k in ("calls", "to_make", "prompt_tokens", "completion_tokens")}
    total["cost_usd"] = round(sum(s["cost_usd"] or 0 for s in stages), 2)
    best = [s["cost_batch_usd"] if s["cost_batch_usd"] is not None else s["cost_usd"] for s in stages]
    total["cost_batch_usd"] = round(sum(v or 0 for v in best), 2)  # every offline stage batched
    total["cost_configured_usd"] = round(sum((s["cost_batch_usd"] if s["batch"] else s["cost_usd"]) or 0
                                             for s in stages), 2)
    return {"benchmark": cfg.benchmark, "run_dir": str(run_dir), "method": cfg.method.name,
            "memories": len({s.memory_id for s in data.sessions}), "sessions": len(data.sessions),
            "unique_sessions": len(unique), "turns": n_turns, "questions": nq, "scored": len(scored),
            "stages": stages, "total": total, "unpriced_models": sorted(unpriced), "assumptions": ASSUME,
            # the batched roles this run calls (llm.batch: true names every offline role, REALTALK's
            # gpt_score too, which a LoCoMo run never calls)
            "batch_roles": sorted(batched & {s["role"] for s in stages}),
            "prices": {"date": prices.get("date"), "file": "configs/prices.yaml"},
            "note": "upper bound: calls already in the LLM cache are not subtracted (only rows present in the run dir)"}


def format_estimate(est: dict[str, Any]) -> str:
    """The estimate as a Markdown table with totals and the stated assumptions."""
    lines = [f"Dry run ({est['benchmark']}, method {est['method']}): {est['memories']} memories, "
             f"{est['unique_sessions']} unique sessions of {est['sessions']}, {est['turns']} turns, "
             f"{est['questions']} questions ({est['scored']} judged) -> {est['run_dir']}", "",
             "| stage | model | calls | already done | to make | input tokens | output tokens | est. $ live | "
             "est. $ batch | basis |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for s in est["stages"]:
        usd = "unpriced" if s["cost_usd"] is None else f"{s['cost_usd']:.2f}"
        b = s.get("cost_batch_usd")
        busd = ("unpriced" if s["cost_usd"] is None else "online") if b is None else f"{b:.2f}"
        mark = " (batch)" if s.get("batch") else ""
        mark += f" [{s['role']}]" if s["role"] in ROLE_PARENT else ""  # a stage's call for another role
        lines.append(f"| {s['stage']}{mark} | {s['model']} | {s['calls']} | {s['already_done']} | {s['to_make']} | "
                     f"{s['prompt_tokens']:,} | {s['completion_tokens']:,} | {usd} | {busd} | {s['basis']} |")
    t = est["total"]
    lines.append(f"| total | | {t['calls']} | | {t['to_make']} | {t['prompt_tokens']:,} | {t['completion_tokens']:,} | "
                 f"{t['cost_usd']:.2f} | {t['cost_batch_usd']:.2f} | prices dated {est['prices']['date']} |")
    offline = sorted({s["role"] for s in est["stages"] if s.get("cost_batch_usd") is not None})
    lines.append(f"\nAs configured (llm.batch: {', '.join(est.get('batch_roles', [])) or 'off'}): "
                 f"${t['cost_configured_usd']:.2f}; all live ${t['cost_usd']:.2f}; offline roles "
                 f"({', '.join(offline)}) through the Batch API ${t['cost_batch_usd']:.2f}.")
    lines.append(f"\n{est['note']}. Assumptions: " + ", ".join(f"{k}={v}" for k, v in est["assumptions"].items()))
    return "\n".join(lines)


def main(argv: Optional[list[str]] = None) -> int:
    p = argparse.ArgumentParser(prog="python -m common.pipeline.dryrun", description=__doc__.split("\n\n")[0])
    p.add_argument("--config", action="append", default=None)
    p.add_argument("--benchmark", default=None, help="default: from the config")
    p.add_argument("--set", action="append", default=[])
    p.add_argument("--limit", type=int, default=None)
    p.add_argument("--memories", "--conversations", dest="memories", default=None)
    p.add_argument("--run", default=None)
    p.add_argument("--json", default=None, help="also write the estimate here")
    a = p.parse_args(argv)
    overrides = list(a.set) + ([f"data.question_limit={a.limit}"] if a.limit is not None else []) \
        + ([f"data.memories=[{a.memories}]"] if a.memories else []) + ([f"run.name={a.run}"] if a.run else [])
    try:
        cfg = load_config(a.config or ["configs/locomo.yaml"], overrides)
        est = estimate(cfg)
    except (ConfigError, ValueError, FileNotFoundError) as exc:
        print(f"error: {' '.join(str(exc).split())}", file=sys.stderr)
        return 2
    print(format_estimate(est))
    if a.json:
        Path(a.json).write_text(json.dumps(est, indent=2), encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
