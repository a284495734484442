"""What every score reports beside its number, the same way for every benchmark.

* Strict accuracy (the headline): a scored question whose answer or judgment failed counts
  wrong. Clean accuracy excludes failures. Both carry k/n and a bootstrap 95% CI.
* Failures by cause, in one vocabulary (``CAUSES``), recovered from the judge rows' ``error``
  prefixes written by ``common.evaluation.judge.run_judge`` (``no_answer: <answer error>``,
  ``judge_parse_error: ...``, ``<llm cause>: ...``).
* Coverage: how many questions a number covers against the benchmark's full count, so a
  partial run can never pass for a full one.
"""
from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any, Iterable, Mapping, Optional, Sequence

from common.evaluation.coverage import coverage as coverage_of
from common.evaluation.coverage import of_benchmark, of_metrics, question_set_id
from common.evaluation.stats import accuracy_with_ci, degenerate

# Question-level failure causes (strict accuracy counts each as wrong).
CAUSES = {
    "retrieval_failed": "the memory system failed on the question (its ingestion or search raised; 06's row says why)",
    "answer_api_error": "the answer call failed after retries (HTTP error, timeout, connection)",
    "empty_answer": "the answer model returned nothing",
    "judge_api_error": "the judge call failed after retries",
    "judge_parse_error": "the judge reply was not a valid label (invalid JSON or no label)",
    "missing_answer": "no answer row (the answer stage did not finish)",
    "missing_judgment": "no judge row (the judge stage did not finish)",
    "no_label_in_file": "an imported file's row carries no label (null): the file's authors gave none",
    "unknown": "no label and no recorded cause (a row written by hand or an older harness)",
}

# How a table row, the report and the run summary name the memory system that ran (method.name);
# a user's own class (package.module:Class) is named by its import path.
METHOD_NAMES = {
    "ensimem": "EnSIMem", "mem0": "mem0", "amem": "A-MEM", "full_context": "full context",
    "rag_turns": "RAG over turns", "no_memory": "no memory", "oracle": "oracle (gold evidence)",
}


POLICIES = {
    "locomo": "LoCoMo categories 1-4 scored (5 adversarial excluded); judge label CORRECT/WRONG "
              "(strict parse); failures count wrong in strict accuracy, excluded in clean",
    "longmemeval": "LongMemEval all 500 items scored (abstention by _abs in the id); official "
                   "templates, label = 'yes' in reply; failures count wrong in strict accuracy, "
                   "excluded in clean",
    "realtalk": "REALTALK all 728 questions scored; official token F1 and GPT score (0-1, failures count 0) "
                "per category, the LoCoMo judge's CORRECT/WRONG label beside them, never averaged; failures "
                "count wrong in strict accuracy, excluded in clean",
    "beam": "BEAM all probing questions scored; official rubric judge (one call per item, event ordering "
            "by LLM alignment and tau_norm), mean over chats per ability; failures count 0",
    "locomo_plus": "LoCoMo-Plus all six categories scored (adversarial and Cognitive without a gold answer); "
                   "official judge prompts per category, correct 1 / partial 0.5 / wrong 0, mean over questions; "
                   "failures count 0",
}


def failure_cause(judge_row: Optional[Mapping[str, Any]]) -> str:
    """The cause of a failed judgment, '' for a valid label."""
    if judge_row is None:
        return "missing_judgment"
    if judge_row.get("label") is not None:
        return ""
    error = judge_row.get("error") or ""
    if not error.strip():
        return "unknown"
    head, _, rest = error.partition(":")
    if head == "no_answer":
        inner = rest.strip().split(":")[0].strip()
        if inner == "empty_answer":
            return "empty_answer"
        if inner in ("missing_answer", "answer stage failed"):
            return "missing_answer"
        if inner == "retrieval_failed":
            return "retrieval_failed"
        return "answer_api_error"
    if head in ("judge_parse_error", "no_label_in_file"):
        return head
    return "judge_api_error"


def summarize(labels: Iterable[Optional[int]], clusters: Optional[Iterable[Any]] = None) -> dict[str, Any]:
    """Strict and clean accuracy with k/n and a bootstrap CI (``common.evaluation.stats``).

    ``clusters`` (one memory id per label: the LoCoMo conversation, the LongMemEval haystack)
    adds the cluster bootstrap CIs and the power note.
    """
    return accuracy_with_ci(list(labels), clusters=None if clusters is None else list(clusters))


def judge_block(joined: Sequence[Mapping[str, Any]], group_key: str) -> dict[str, Any]:
    """``overall`` and per-group summaries plus failure counts by cause.

    ``joined`` rows carry ``label``, ``cause`` and the group value under ``group_key``, and may
    carry ``cluster`` (the question's memory id), which adds the clustered CIs and the power note.
    """
    clustered = all("cluster" in r for r in joined)
    groups: dict[Any, list[Mapping[str, Any]]] = {}
    for r in joined:
        groups.setdefault(r[group_key], []).append(r)

    def summary(rows: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
        return summarize([r["label"] for r in rows], [r["cluster"] for r in rows] if clustered else None)

    causes = Counter(r["cause"] for r in joined if r["cause"])
    return {
        "overall": summary(joined),
        "by_group": {g: summary(groups[g]) for g in sorted(groups)},
        "failures": {c: causes.get(c, 0) for c in CAUSES if causes.get(c)},
        "failures_total": sum(causes.values()),
    }


def coverage(benchmark: str, n_scored: int, selection: Mapping[str, Any], missing: int = 0,
             question_ids: Optional[Sequence[str]] = None) -> dict[str, Any]:
    """Whether a number covers the whole benchmark; ``selection`` is the config's data section.

    ``missing``: scored questions without a judge row (an import of 20 rows over the 1,540 questions
    of the benchmark file has 1,520); they are not covered. The count and its mark come from
    ``common.evaluation.coverage``, the one definition every table uses. ``question_ids``: the
    scored questions, named by their question-set id (``question_set``). A bundled sample
    (``data.sample``, the demo's conversation) is no part of the benchmark: it is never counted
    against the benchmark's size, only cut or not by the selection.
    """
    partial_by_config = bool(selection.get("subset") or selection.get("question_limit")
                             or selection.get("memories"))
    sample = selection.get("sample")
    # BEAM's size depends on the tier (20 questions per chat): complete unless the selection cut it.
    cov = (coverage_of(n_scored - missing, None, selection_cut=partial_by_config) if sample else
           of_benchmark(benchmark, n_scored - missing, selection_cut=partial_by_config))
    out: dict[str, Any] = {"expected": cov.expected, "scored": n_scored, "covered": cov.covered,
                           "complete": cov.complete, "text": cov.text, "mark": cov.mark,
                           "selection": {k: selection.get(k) for k in ("subset", "question_limit", "memories")}}
    if question_ids is not None:
        out["question_set"] = {"id": question_set_id(question_ids), "n": len(set(question_ids))}
    if not cov.complete:
        why = ("a subset/limit/conversation selection" if partial_by_config else
               "questions without a judge row" if missing else "the data file as given")
        of = f"the {cov.expected}" if cov.expected is not None else "all the"
        what = f"questions of {sample}" if sample else f"{benchmark} questions"
        out["warning"] = f"PARTIAL: this number covers {cov.covered} of {of} scored {what} ({why})"
    return out


def partial_mark(metrics: Mapping[str, Any], benchmark: str = "") -> str:
    """``PARTIAL 20 / 1,540: `` before the title of a run's score table when the run is partial, else ''."""
    if not isinstance(metrics.get("coverage"), Mapping):
        return ""
    cov = of_metrics(metrics, benchmark)
    return f"{cov.mark}: " if cov.partial else ""


def score_note(metrics: Mapping[str, Any], judge: str) -> str:
    """The line printed under every score table: CI, clean accuracy, failures, fingerprint, coverage."""
    m = metrics["judges"][judge]
    o = m["overall"]
    ci = o.get("ci") or {}
    clean = "n/a" if o.get("accuracy_clean") is None else f"{100 * o['accuracy_clean']:.1f}"
    lo_hi = (f"[{100 * ci['low']:.1f}, {100 * ci['high']:.1f}]" if ci.get("low") is not None else "n/a")
    failures = ", ".join(f"{k} {v}" for k, v in m.get("failures", {}).items()) or "none"
    system = system_outcomes(metrics.get("memory_system"))
    if system:  # what the memory system did wrong is counted, never a silent "none"
        failures = (f"{failures}; memory system: {system}" if failures != "none" else f"memory system: {system}")
    fp = metrics.get("fingerprint", {})
    cov = metrics.get("coverage", {})
    cl = o.get("ci_cluster") or {}
    if cl.get("low") is not None:  # questions of one conversation / haystack are not independent
        lo_hi += f", clustered by memory ({cl['n_clusters']} clusters) [{100 * cl['low']:.1f}, {100 * cl['high']:.1f}]"
    exact = o.get("ci_exact") or {}
    if degenerate(ci) and exact.get("low") is not None:  # 0/n or n/n: the bootstrap is one point
        lo_hi += f" (one point: every label equal), exact Clopper-Pearson [{100 * exact['low']:.1f}, " \
                 f"{100 * exact['high']:.1f}]"
    power = o.get("power") or {}
    if power.get("mdd") is not None:
        lo_hi += (f"; smallest separable difference {100 * power['mdd']:.1f} pp "
                  f"(alpha 0.05, power 0.8, design effect {power['design_effect']:.2f})")
    line = (f"Overall strict {100 * (o['accuracy'] or 0):.1f} ({o['k']}/{o['n']}), 95% bootstrap CI {lo_hi}; "
            f"clean {clean}; failures: {failures}. Protocol fingerprint: run {fp.get('run', '?')}, "
            f"judge {fp.get('judges', {}).get(judge, '?')}" + _question_set(cov) + ".")
    ran = metrics.get("system") or {}
    if ran.get("outside") and ran.get("line"):  # an outside system: what ran (protocol, version, departures)
        line += f" Memory system: {ran['line']}."
    if cov.get("warning"):
        line += f" {cov['warning']}."
    dataset = metrics.get("dataset") or {}
    if dataset.get("warning"):  # a benchmark file other than the official release
        line += f" {dataset['warning']}."
    elif dataset.get("status") == "sample":  # a bundled sample (data.sample), named as one
        line += f" Data: {dataset.get('note')}."
    return line


def score_cell(summary: Optional[Mapping[str, Any]], key: str = "score") -> str:
    """``52.3 [44.1, 60.2] (sum 36.6/70)``: a fractional score (``common.evaluation.stats.score_with_ci``;
    ``key`` names its value) in %, its 95% CI clustered by memory, and the sum of the question scores / n."""
    if not summary or summary.get(key) is None:
        return "n/a"
    ci = summary.get("ci_cluster") or {}
    band = f" [{100 * ci['low']:.1f}, {100 * ci['high']:.1f}]" if ci.get("low") is not None else ""
    return f"{100 * summary[key]:.1f}{band} (sum {summary['sum']:g}/{summary['n']})"


def _question_set(cov: Mapping[str, Any]) -> str:
    """``; question set qs-... (20 questions)`` beside the fingerprint, when 09 recorded it."""
    qs = cov.get("question_set") or {}
    return f"; question set {qs['id']} ({qs.get('n', '?')} questions)" if qs.get("id") else ""


def system_outcomes(block: Optional[Mapping[str, Any]]) -> str:
    """The memory system's counted outcomes (``metrics.memory_system``, written by 09 from 06's rows
    and the memories' markers): empty memories (reported, or inferred from searches that all came
    back empty) and buffers, errors logged or reported while ingesting and while searching, memories
    whose ingestion failed and questions whose search failed, the fallbacks taken, texts over the
    embedding model's limit, and what the memories hold; '' when there is none."""
    if not block:
        return ""
    memories, questions = block.get("memories_counted") or block.get("memories") or 0, block.get("questions") or 0
    parts = []
    for name, v in (block.get("outcomes") or {}).items():
        of = memories if name == "empty_memory" else questions
        inferred = block.get("empty_memory_inferred") if name == "empty_memory" else 0
        parts.append(f"{name} {v}" + (f" of {of}" if of else "") + (f" ({inferred} inferred)" if inferred else ""))
    parts += [f"ingest {k} {v}" for k, v in (block.get("ingest_errors") or {}).items()]
    parts += [f"ingest failed ({k}) {v}" for k, v in (block.get("ingest_failed") or {}).items()]
    if block.get("failed_memory_questions"):
        parts.append(f"questions of failed memories {block['failed_memory_questions']}")
    parts += [f"search {k} {v}" for k, v in (block.get("search_errors") or {}).items()]
    parts += [f"search failed ({k}) {v}" for k, v in (block.get("search_failed") or {}).items()]
    parts += [f"fallback {k} {v}" + (f" of {questions}" if questions else "")
              for k, v in (block.get("search_fallbacks") or {}).items()]
    long = block.get("long_texts") or {}
    if long:
        parts.append("texts over the embedding limit " + ", ".join(f"{k} {v}" for k, v in long.items()))
    built = block.get("built") or {}
    if built:  # not a failure: what the system built, so that "0 triples" is seen beside the score
        parts.append(f"built ({block.get('built_memories', 0)} memories): "
                     + ", ".join(f"{k} {v:g}" for k, v in built.items()))
    return ", ".join(parts)


def method_label(cfg: Any, metrics: Optional[Mapping[str, Any]] = None) -> str:
    """The row label of a run's tables: the method that ran and the run, e.g. "mem0 (this harness,
    run m0)"; an imported run (``metrics["imported"]``) names its source file instead. Every
    benchmark's evaluator calls this one helper."""
    src = (metrics or {}).get("imported")
    if src:
        return (f"Imported {Path(src['file']).name} (sha256 {src['sha256'][:12]}; answers {src['answer_model']}), "
                f"run {cfg.run.name}")
    name = cfg.method.name
    return f"{METHOD_NAMES.get(name, name)} (this harness, run {cfg.run.name})"
