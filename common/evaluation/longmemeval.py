"""LongMemEval judging and aggregation (Table 2 format, official retrieval metrics).

Accuracy per question type (the six official types; `_abs` items count inside their own type
too), task-averaged accuracy (unweighted mean of the six), overall accuracy and abstention
accuracy, each with k/n; the official ``"yes" in reply`` label is the reported one and a strict
exact yes/no parse is reported beside it. Retrieval metrics map the episodes the method
selected, in rank order, to their source sessions and user turns, with the official corpus
rules and skips.
"""
from __future__ import annotations

from collections import defaultdict
from pathlib import Path
from typing import Any

from common.benchmarks.longmemeval import QUESTION_TYPES, SHORT_NAMES, official_session_id, retrieval_gold
from common.core import sources
from common.core.io import read_jsonl
from common.core.schema import Gold, Session, from_dict
from common.core.tabular import describe, format_accuracy, write_table
from common.evaluation.judge_lme import AUTHORS, judge_answer_authors, judge_answer_lme, strict_label
from common.evaluation.loss import decompose as loss_decomposition
from common.evaluation.metrics import (
    buffer_contribution_stats,
    longmemeval_retrieval_metrics,
    retrieval_skip_reason,
    unit_session_metrics,
)
from common.evaluation.repeats import describe_runs, n_runs, row_labels, runs_block
from common.evaluation.scoring import failure_cause, judge_block, method_label, partial_mark, score_note, summarize


def judge(client: Any, name: str, prompt_id: str, answer: Any, gold: Gold, repeat: int = 0) -> Any:
    """The official LongMemEval checker (``common.evaluation.judge_lme``), its template chosen per item;
    ``judge.prompt: authors``: the authors' judge instead."""
    if prompt_id == AUTHORS:
        return judge_answer_authors(client, name, answer, gold, repeat=repeat)
    return judge_answer_lme(client, name, answer, gold, repeat=repeat)


def retrieval_rows(run: Any) -> dict[str, dict[str, Any]]:
    """Per question: official retrieval metrics, or the reason it is skipped."""

    sessions: dict[str, list[Session]] = defaultdict(list)
    # The official session ids live on the gold side (01_session_sources.jsonl): put back here.
    for session in sources.restore((from_dict(Session, s) for s in read_jsonl(run.path("sessions"))),
                                   run.path("session_sources")):
        sessions[session.memory_id].append(session)
    # Baselines build no episodes: their ranking is the buffer's turns (see below).
    episodes = {e["episode_id"]: e for r in read_jsonl(run.path("episodes"), missing_ok=True) for e in r["episodes"]}
    rets = {r["qid"]: r for r in read_jsonl(run.path("retrievals"), missing_ok=True)}  # none when imported
    out: dict[str, dict[str, Any]] = {}
    for g in read_jsonl(run.path("gold")):
        gold = Gold(**g)
        rg = retrieval_gold(sessions[gold.memory_id], gold)
        reason = retrieval_skip_reason(gold.abstention, rg.user_has_answer_count)
        if reason or gold.qid not in rets:
            out[gold.qid] = {"skipped": reason or "no retrieval row"}
            continue
        # The method's ranking: selected episodes in rank order, mapped to sessions and user turns.
        ret = rets[gold.qid]
        ranked = [episodes[sel["episode_id"]] for sel in ret["selected"]]
        if not ret["selected"] and ret["dia_ids"]:
            # A baseline: its units are single turns, in its own rank order when it has one.
            order = ret.get("method_info", {}).get("ranked_dia_ids") or ret["dia_ids"]
            session_of = {t.dia_id: x.session_id for x in sessions[gold.memory_id] for t in x.turns}
            ranked = [{"session_id": session_of[d], "dia_ids": [d]} for d in order if d in session_of]
        source = {x.session_id: x.source_id or x.session_id for x in sessions[gold.memory_id]}
        unit_sessions = [official_session_id(source[e["session_id"]]) for e in ranked]
        ranked_turns = [rg.turn_id_of[d] for e in ranked for d in e["dia_ids"] if d in rg.turn_id_of]
        # The harness's own variant: distinct sessions in first-seen order ("session_dedup").
        metrics = longmemeval_retrieval_metrics(
            list(dict.fromkeys(unit_sessions)), ranked_turns, rg.corpus_session_ids, set(rg.relevant_sessions),
            rg.corpus_turn_ids, set(rg.relevant_turns))
        metrics["session_dedup"] = metrics.pop("session")
        # Official: one entry per retrieved unit, repeated sessions counted (metrics.unit_session_metrics);
        # the corpus is every episode of the memory.
        if ret["selected"]:
            corpus_units = [official_session_id(source[e["session_id"]]) for e in episodes.values()
                            if e["memory_id"] == gold.memory_id]
            metrics["session"] = unit_session_metrics(unit_sessions, corpus_units, set(rg.relevant_sessions))
        else:
            # A baseline ranks turns: the official rule for a turn ranking is upstream's turn->session
            # evaluation (user turns only, unflagged turns of an answer session relabelled noans),
            # i.e. ``turn_as_session``. The earlier figure (every turn, assistant turns included, and
            # every turn of an answer session relevant) is kept as ``session_all_turns``.
            corpus_units = [official_session_id(source[x.session_id]) for x in sessions[gold.memory_id]
                            for _ in x.turns]
            metrics["session_all_turns"] = unit_session_metrics(unit_sessions, corpus_units,
                                                                set(rg.relevant_sessions))
            metrics["session"] = dict(metrics["turn_as_session"])
        out[gold.qid] = metrics
    return out


def aggregate(run: Any, judges: list[str]) -> dict[str, Any]:

    gold = [Gold(**g) for g in read_jsonl(run.path("gold"))]
    rets = {r["qid"]: r for r in read_jsonl(run.path("retrievals"), missing_ok=True)}
    out: dict[str, Any] = {"benchmark": "longmemeval", "run": run.cfg.run.name, "config": "config.resolved.yaml",
                           "questions": {"total": len(gold), "abstention": sum(g.abstention for g in gold),
                                         "by_type": {t: sum(g.question_type == t for g in gold)
                                                     for t in QUESTION_TYPES}},
                           "judges": {}}
    for j in judges:
        rows = {r["qid"]: r for r in read_jsonl(run.judge_path(j))}
        joined: list[dict[str, Any]] = [
            {"type": g.question_type, "abs": g.abstention, "label": rows.get(g.qid, {}).get("label"),
             "cause": failure_cause(rows.get(g.qid)), "cluster": g.memory_id,
             "strict": strict_label(rows[g.qid]["raw"]) if rows.get(g.qid, {}).get("raw") else None}
            for g in gold]
        block = judge_block(joined, "type")
        by_type = block["by_group"]
        per_type = [by_type[t]["accuracy"] for t in QUESTION_TYPES
                    if t in by_type and by_type[t]["accuracy"] is not None]
        any_row = next(iter(rows.values()), {})
        out["judges"][j] = {
            "judge_model": any_row.get("judge_model"), "prompt_id": "official", "overall": block["overall"],
            "overall_strict_parse": summarize((r["strict"] for r in joined), (r["cluster"] for r in joined)),
            "task_averaged": sum(per_type) / len(per_type) if len(per_type) == len(QUESTION_TYPES) else None,
            "task_averaged_over": len(per_type),
            "abstention": summarize((r["label"] for r in joined if r["abs"]),
                                    (r["cluster"] for r in joined if r["abs"])),
            "by_type": by_type,
            "failures": block["failures"], "failures_total": block["failures_total"],
        }
        runs = n_runs(list(rows.values()))
        if runs > 1:  # judge.runs > 1 or an imported run with several published labels per answer
            rb = runs_block([{"type": g.question_type, "labels": row_labels(rows.get(g.qid), runs)} for g in gold],
                            "type", runs)
            out["judges"][j]["runs"] = {"n_runs": runs, "std_kind": rb["std_kind"], "overall": rb["overall"],
                                        "by_type": rb["by_group"],
                                        "label": "the row label is the majority vote of the runs"}
    per_q = retrieval_rows(run)
    scored = [m for m in per_q.values() if "skipped" not in m]
    summary: dict[str, Any] = {"n": len(scored), "skipped": defaultdict(int)}
    for m in per_q.values():
        if "skipped" in m:
            summary["skipped"][m["skipped"]] += 1
    summary["skipped"] = dict(summary["skipped"])
    for level in ("session", "session_dedup", "turn", "turn_as_session", "session_all_turns"):
        if level == "session_all_turns" and not (scored and all(level in m for m in scored)):
            continue  # baselines only (a turn ranking)
        keys = scored[0][level].keys() if scored else []
        summary[level] = {k: round(sum(m[level][k] for m in scored) / len(scored), 4) for k in keys}
    out["retrieval"] = summary
    out["buffer_tokens"] = describe([float(r["buffer_tokens"]) for r in rets.values()])
    out["buffer"] = buffer_contribution_stats(rets.values())
    out["loss"] = loss_decomposition(run.dir, judges)  # where the points went (common.evaluation.loss)
    return out


def write_tables(run: Any, metrics: dict[str, Any]) -> list[Path]:
    """Table 2 format, one Markdown+CSV pair per judge (never averaged across judges)."""

    paths: list[Path] = []
    for j, m in metrics["judges"].items():
        row = {"Method": f"{method_label(run.cfg, metrics)}, judge {m['judge_model']}"}
        for t in QUESTION_TYPES:
            row[SHORT_NAMES[t]] = format_accuracy(m["by_type"].get(t, {"accuracy": None}))
        row["Task-avg"] = f"{100 * m['task_averaged']:.1f}" if m["task_averaged"] is not None else "n/a"
        row["Overall"] = format_accuracy(m["overall"])
        row["Abstention"] = format_accuracy(m["abstention"])
        row["Overall (strict yes/no)"] = format_accuracy(m["overall_strict_parse"])
        title = (f"{partial_mark(metrics)}LongMemEval accuracy (official checker, judge {m['judge_model']}; "
                 "label = 'yes' in reply, "
                 f"strict parse beside; failed judgments count as wrong)\n\n{score_note(metrics, j)}")
        if "runs" in m:
            title += f"\n\n{describe_runs(m['runs'])}"
        paths += write_table([row], run.dir / f"table_{j}.md", title)
    return paths
