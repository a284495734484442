"""The answering and scoring sections of the config schema: the answer step and its generic routes,
the judge, and the benchmarks' scoring switches.

Part of the one schema (``common.core.config``, which loads, merges and validates it and re-exports
these classes): frozen dataclasses whose fields are the YAML keys, ``Literal`` fields their choices.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal, Optional


@dataclass(frozen=True)
class RoutesConfig:
    """``answer.routes``: the generic answer routes of the authors' LongMemEval answer step
    (common.method.routes), each chosen by the question's wording or the plan, never by a label."""

    date_window: bool = False  # buffer episodes dated after the question date are dropped
    user_overlap: bool = False  # counting/temporal questions: add episodes whose user turns overlap it
    user_overlap_max: int = 48  # at most this many added (the authors' 48)
    relative_age: bool = False  # "how many <unit> ago": date from the temporal ledger, then arithmetic
    temporal: bool = False  # interval questions: the user-turn temporal ledger (role answer_temporal)
    temporal_batch: int = 24  # episodes per temporal ledger call (the authors' 24)
    count: bool = False  # counting questions: the counting ledger (role answer_count)
    count_batch: int = 10  # episodes per scan call (the authors' 10)
    order: bool = False  # first/latest/previous/sequence wording: one operator audit (role answer_order)
    # The authors' versions of the guards and ledgers (each off here, on in configs/longmemeval_code.yaml):
    # date_window_dates: add every memory episode observed on the dates the question names relative to
    # its date (today, yesterday, a week ago, last weekend, last <weekday>), at most date_window_max.
    date_window_dates: bool = False
    date_window_max: int = 48  # the authors': max(48, 4 x dense_top_k)
    user_overlap_temporal_max: int = 48  # temporal wording: at most this many added (the authors' 96)
    user_overlap_below: int = 0  # counting wording: only while the buffer has fewer episodes (the authors' 32)
    # name_quantity: items with the same name stems and quantity are one (the harness's rule);
    # duplicate_of: only a consolidation row's high-confidence duplicate_of merges (the authors').
    count_dedup: Literal["name_quantity", "duplicate_of"] = "name_quantity"
    count_complete_gate: bool = False  # a ledger with unaccounted episodes or failed calls does not answer
    count_cumulative: bool = False  # a user's own cumulative total ("N different ones") overrides the sum
    count_reference_event: bool = False  # before/after counts: one call dates the reference event, then scope
    temporal_answer_call: bool = False  # no deterministic answer: ledger-answer call, evidence gate, repair
    temporal_completed_upgrade: bool = False  # explicit completed-action wording upgrades a fact to completed
    age_chain: bool = False  # "how many <unit> ago": anchor age +/- offset chain call when no unique date
    order_move_rows: bool = False  # where/which + move questions: "moved to X" user turns become rows
    order_bare_last: bool = False  # a bare "last" ("my last trip") asks for the latest
    order_previous_earliest: bool = False  # previous/before wording picks the earliest state (the authors')
    tenure_duration: bool = False  # "how long ... current role/job/position": a duration, temporal ledger
    # The counting ledger as the authors' (their consolidation and _normalize_audit); each off here:
    count_sessions: bool = False  # consolidation sees each item's session; repeats within one session are one
    count_item_dates: bool = False  # items carry their own event_date and are scoped by it, not by their episode's
    count_scan_context: bool = False  # scan and consolidation are shown the question's window and the plan
    # filter: the reference event's date is a Python window (before/after/since); shown: the reference call's
    # reply is shown to the scan and consolidation, which decide (before/after only; the authors').
    count_reference: Literal["filter", "shown"] = "filter"
    count_merge_tokens: Optional[int] = None  # the consolidation's budget (None: answer_count's; the authors' 4200)
    # turns: a cumulative total from any in-window user turn; items: from the ledger's grounded items, not for
    # "how many times" (the authors' explicit totals)
    count_cumulative_from: Literal["turns", "items"] = "turns"
    count_inactive: bool = False  # items given away, sold, ... do not count for current-inventory wording
    # answer: the date_window_dates and user_overlap guards act on the answer step's buffer (the harness's);
    # retrieval: per hop in 06, before its bridge, as the authors' (top N overall, "< 32" per hop)
    guard_stage: Literal["answer", "retrieval"] = "answer"
    age_chain_checks: bool = False  # the chain's anchor path also needs same_anchor_event and evidence_complete
    # Each route call its own max_tokens as theirs (count retry 2200, reference 900, ledger answer 1200, citation
    # repair 1000, age chain 1600); false: the role's budget for every call of the role.
    call_budgets: bool = False


@dataclass(frozen=True)
class AnswerConfig:
    # harness: the common answer prompt of every system without a plan (one protocol);
    # mem0: mem0's own LoCoMo answer prompt, to show how much the prompt alone moves a number.
    # beam: the official BEAM runner's answer prompt (its RAG template), for rows comparable to BEAM's.
    # realtalk: REALTALK's official QA prompt after the buffer (evaluate_memory.py's one user message).
    prompt: Literal["harness", "mem0", "beam", "realtalk"] = "harness"
    # The generic parts of the authors' LongMemEval answer step, never routed on a label:
    # rerank: one call (role answer_rerank) picks up to rerank_max buffer episodes that fill the
    # question's evidence slots; the answer call then reads only those. verify: the answer is a
    # draft that an independent call (role answer_verify) checks against the same episodes and
    # keeps or rewrites.
    rerank: bool = False
    rerank_max: int = 20
    # A plan that needs every candidate (retrieval scope all_matching, or an answer target of type
    # count, list or time) is not reranked: all its episodes are read, as the authors keep every
    # candidate for their aggregate and interval operators. false: every plan is reranked.
    rerank_keep_all: bool = True
    verify: bool = False
    # plain: the answer is one plain-text call (role answer). json: the authors' LongMemEval draft,
    # a JSON object {answer, evidence_episode_ids, reasoning} from role answer_draft (own budget,
    # 1200 tokens), whose answer field is the answer.
    draft: Literal["plain", "json"] = "plain"
    # verify: a question asking for a suggestion fitted to the user (recommend, suggest, tips,
    # advice, ideas, in its own wording) keeps the draft's personal details instead of being cut
    # down to the shortest form. false: every verify asks for the shortest sufficient answer.
    verify_personal: bool = True
    # The draft's system prompt: answer_system (the prompt set's, LoCoMo's safeguards under
    # code_rules) or longmemeval (the authors' LongMemEval draft prompt, code_rules.answer_draft_system).
    draft_prompt: Literal["answer_system", "longmemeval"] = "answer_system"
    # With draft_prompt: longmemeval, the draft's system prompt carries the rules of the authors'
    # FINAL_ANSWER_SYSTEM (order, elapsed time, first/latest, the state at the question date, counts,
    # recommendations): code_rules.answer_draft_rules_system instead of the fourth pass's shorter prompt.
    draft_rules: bool = False
    # Rerank and verify keep every candidate for the plans the authors keep whole: point lookups
    # about the user, latest/previous-state wording and temporal point plans (plan and wording only).
    keep_whole_point: bool = False
    # The authors' rerank pads an ordering, first/latest, previous-state or elapsed-time question's
    # selection to its limit (20), not to 2 (chosen here by the wording).
    rerank_pad_operators: bool = False
    # The answer routes' checked lines go to the JSON draft's and verify's user messages as an evidence
    # audit beside the plan (the authors'), instead of before the episodes.
    draft_audit: bool = False
    # verify: the authors' checks (date arithmetic, order, previous/current, counting, avoidances) as rewrite
    # conditions; verify_short: false drops the harness's "shortest sufficient answer" rewrite (theirs has none).
    verify_checklist: bool = False
    verify_short: bool = True
    routes: RoutesConfig = field(default_factory=lambda: RoutesConfig())
    # The answer is the reply with its surrounding whitespace stripped. false (configs/beam.yaml):
    # the raw reply, as BEAM's official runner stores and scores it (an event-ordering answer's
    # trailing newline is one more line to align).
    strip: bool = True


@dataclass(frozen=True)
class JudgeConfig:
    name: str = "gpt-4o-mini"  # file suffix of 08_judge_<name>.jsonl; judges are never averaged
    prompt: str = "judge_locomo_mem0"
    # Ask the judge N times per answer (run i: seed 42+i, its own cache entry); metrics report
    # per-run accuracy, mean +- std, majority vote and the fraction of labels that flip.
    runs: int = 1


@dataclass(frozen=True)
class ScoreConfig:
    # LoCoMo category 5: score the answers by the abstention rule (common.evaluation.adversarial)
    # and report them as their own column, never in the overall.
    adversarial: bool = False
    # BEAM: the official scorer's two defects are reproduced by default; each switch corrects one.
    # beam_float_scores: score a rubric item float(score) (officially int(score): every 0.5 -> 0);
    # the same judge replies, no new call. beam_fill_question: fill the judge prompt's <question>
    # placeholder (officially never filled): one more call per rubric item.
    beam_float_scores: bool = False
    beam_fill_question: bool = False
    # BEAM: an empty answer and a failed answer call. zero (the harness's rule): no judge call, the
    # question scores 0 and is counted (no_answer). official: as BEAM's own runner, the empty
    # answer is judged as it is, and a failed call's error text ("Error in <ability> question type
    # and <question> and for <answers file>") is judged as the answer.
    beam_empty_answers: Literal["zero", "official"] = "zero"
    # BEAM: the judge request carries seed 42 (models.default.seed, every role's); the official
    # client (langchain's ChatOpenAI in src/llm.py) sends no seed: false drops it for the judge role
    # of a BEAM run (a new cache entry per call).
    beam_judge_seed: bool = True
    # REALTALK (common.evaluation.realtalk): the official GPT score is asked of the judge role's model
    # (role gpt_score); answer: of the answer model, as evaluate_memory.py does (the model judges its
    # own answers). official sampling: the answer and GPT-score requests carry no temperature and no
    # seed, as the official client sends them (harness: temperature 0, seed 42).
    realtalk_gpt_score_model: Literal["judge", "answer"] = "judge"
    realtalk_sampling: Literal["harness", "official"] = "harness"
    # LoCoMo-Plus (common.evaluation.locomo_plus): the headline reading of the judge's reply. official:
    # llm_as_judge._parse_judge_response, whose fallback for a reply that is not JSON looks for
    # "correct" before "wrong" (so "incorrect" is correct); strict: JSON only, anything else a
    # counted failure. Both are read from the same replies and reported.
    locomo_plus_parser: Literal["official", "strict"] = "official"
    # LoCoMo-Plus: a failed answer call. zero (the harness's rule): no judge call, the question scores 0
    # and is counted (no_answer). official: as utils.call_llm, its error text "[API Error: ...]" (and
    # "(empty)" for an empty reply) is judged as the answer.
    locomo_plus_error_answers: Literal["zero", "official"] = "zero"
