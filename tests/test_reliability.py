"""Reliability of whole runs against the local fake server: injected faults, kills, reruns.

Expectations are derived from the fake server's own log (which request got which fault, what each
reply said), never from the harness's bookkeeping, so the artifacts are checked against an
independent account of what happened on the wire.

Failure vocabulary recorded per row (what the aggregate step can count):

* 02/03/05 rows: ``fallback_used`` with ``fallback_error`` (02) / ``error`` (03, 05) =
  ``<cause>: ...``; a reply still invalid after the repair call has cause ``invalid_reply``.
* 07 rows: ``error`` = ``<cause>: ...`` with ``answer`` None, or ``empty_answer`` with answer "".
* 08 rows: ``label`` None and ``error`` = ``<cause>: ...``, ``judge_parse_error: ...`` or
  ``no_answer: <the answer row's error>`` (failed or empty answer; no judge call is made).
* ``<cause>`` is the client's: ``http_<status>``, ``timeout``, ``connection``, ``bad_response``
  (a 200 without a usable completion) or ``cache_miss``; manifests count them under ``llm.failures``.
"""
from __future__ import annotations

import json
import os
import random
import sqlite3
import subprocess
import sys
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Optional

import numpy as np
import pytest

from common.core.io import StageWriter
from common.core.llm import LLMCallError, RetryPolicy, cache_key, embed_texts
from tests.conftest import REPO, STAGE_ORDER, TINY_LOCOMO, make_client, rows, run_overrides, run_stages
from tests.fake_openai import CHAT_KINDS, FakeOpenAI, FaultPlan

CONFIG = "configs/locomo.yaml"
TINY_LME = REPO / "tests" / "fixtures" / "lme_tiny.json"
JUDGE_FILE = "08_judge_gpt-4o-mini.jsonl"
CLIENT_TIMEOUT = 2.0  # models.default.timeout here: far above a normal fake reply, even on a loaded machine
STALL = 5.0  # how long a "timeout" fault stalls its reply
# The client's cause for a call whose every attempt got this fault (common.core.llm._failure_cause).
API_CAUSE = {"429": "http_429", "500": "http_500", "503": "http_503", "timeout": "timeout",
             "truncated_body": "bad_response", "html_body": "bad_response", "no_choices": "bad_response"}
# The mix: 429, 500, time-outs, malformed JSON, JSON cut off in the message and in the body.
MIX = ["429", "500", "timeout", "malformed", "truncated", "truncated_body"]


def fast_sets(tmp_path: Path, server: FakeOpenAI, data: Path = TINY_LOCOMO, **extra: object) -> list[str]:
    """Run overrides for a quick run: embeddings from the fake server too (no model load)."""
    return run_overrides(tmp_path, data, **{
        "embedding.backend": "openai", "embedding.model": "fake-model", "embedding.base_url": server.base_url,
        "models.default.timeout": CLIENT_TIMEOUT, **extra})


# ----------------------------------------------------------------------------- the server's account
@dataclass
class Call:
    """One LLM call as the server saw it: its attempts, until a reply or the client's last try."""

    kind: str
    key: str  # the harness's cache key of this request
    faults: list[Optional[str]] = field(default_factory=list)  # per attempt; None = answered normally
    content: Optional[str] = None  # message content of the final reply, when there was one

    @property
    def cause(self) -> Optional[str]:
        """The API failure the client must report, or None when a reply came back."""
        return API_CAUSE.get(self.faults[-1] or "")

    @property
    def retries(self) -> int:
        return len(self.faults) - 1


def server_calls(server: FakeOpenAI, max_attempts: int) -> list[Call]:
    """Group the server's chat requests into calls, in order of first arrival."""
    faults = {i: f for i, _, f in server.faults_injected}
    open_calls: dict[str, Call] = {}
    calls: list[Call] = []
    for i, (body, kind) in enumerate(zip(server.requests, server.request_kinds)):
        if kind not in CHAT_KINDS:
            continue
        key = cache_key({"base_url": server.base_url, **body, "extra_body": {}})
        call = open_calls.get(key)
        if call is None:
            call = open_calls[key] = Call(kind, key)
            calls.append(call)
        call.faults.append(faults.get(i))
        if call.cause is None:
            call.content = server.replies[i][1]
        if call.cause is None or len(call.faults) == max_attempts:
            del open_calls[key]  # the client stops: it got a reply, or it has no attempts left
    return calls


def recorded_cause(text: str) -> Optional[str]:
    """Failure class of a 02/03/05 row's error text: ``<cause>: ...``."""
    return text.split(":")[0] if text else None


def judge_label(content: str) -> Optional[int]:
    """The LoCoMo judge's label, parsed here independently of common.evaluation.judge."""
    try:
        obj = json.loads(content)
    except json.JSONDecodeError:
        return None
    return {"CORRECT": 1, "WRONG": 0}.get(obj.get("label")) if isinstance(obj, dict) else None


def manifest(run_dir: Path, stage: str) -> dict[str, Any]:
    return json.loads((run_dir / f"{stage}.manifest.json").read_text(encoding="utf-8"))


def check_manifest(run_dir: Path, stage: str, kinds: tuple[str, ...], calls: list[Call]) -> None:
    """The stage's manifest counts the API failures (by cause) and retries the server saw."""
    mine = [c for c in calls if c.kind in kinds]
    llm = manifest(run_dir, stage)["llm"]
    assert llm["failures"] == dict(Counter(c.cause for c in mine if c.cause)), stage
    assert llm["retries"] == sum(c.retries for c in mine), stage


def check_json_stage(run_dir: Path, stage: str, out: str, error_field: str, first_kind: str,
                     calls: list[Call]) -> Counter:
    """02/03/05: each row's call, repair call and fallback agree with what the server did."""
    rs = rows(run_dir / out)
    first = [c for c in calls if c.kind == first_kind]
    repair = [c for c in calls if c.kind == f"{first_kind}_repair"]
    invalid = {"malformed", "truncated", "empty"}
    # Every reply that came back broken got exactly one repair call; a good reply got none.
    assert len(repair) == sum(c.cause is None and c.faults[-1] in invalid for c in first)
    want = Counter(c.cause for c in first + repair if c.cause)
    want.update(["invalid_reply"] * sum(c.cause is None and c.faults[-1] in invalid for c in repair))
    got = Counter(recorded_cause(r[error_field]) for r in rs if r["fallback_used"])
    assert got == want, f"{stage}: failures by cause {dict(got)} != server's {dict(want)}"
    assert all(bool(r[error_field]) == r["fallback_used"] for r in rs)
    assert sum(r["repaired"] for r in rs) == sum(c.cause is None for c in repair)
    by_key = {c.key: c for c in calls}
    for r in rs:  # every recorded call is one the server answered
        assert all(by_key[e["cache_key"]].cause is None for e in r["llm_calls"])
    check_manifest(run_dir, stage, (first_kind, f"{first_kind}_repair"), calls)
    return got


def check_answers(run_dir: Path, calls: list[Call]) -> Counter:
    answers = rows(run_dir / "07_answer.jsonl")
    assert [a["qid"] for a in answers] == [q["qid"] for q in rows(run_dir / "01_questions.jsonl")]
    mine = [c for c in calls if c.kind == "answer"]
    by_key = {c.key: c for c in mine}
    want = Counter(c.cause for c in mine if c.cause)
    want.update(["empty_answer"] * sum(c.cause is None and not c.content.strip() for c in mine))
    got = Counter(a["error"].split(":")[0] for a in answers if a["error"])
    assert got == want, f"07: failures by cause {dict(got)} != server's {dict(want)}"
    for a in answers:
        if a["answer"] is None:
            assert a["error"] and not a["cache_key"]
        else:
            assert a["answer"] == by_key[a["cache_key"]].content.strip()
    check_manifest(run_dir, "07_answer", ("answer",), calls)
    return got


def lme_label(content: str) -> int:
    """The official LongMemEval rule, written out here: 'yes' anywhere in the lower-cased reply."""
    return int("yes" in content.lower())


def check_judgments(run_dir: Path, calls: list[Call], benchmark: str = "locomo") -> Counter:
    gold = rows(run_dir / "01_gold.jsonl")
    answers = {a["qid"]: a for a in rows(run_dir / "07_answer.jsonl")}
    # LoCoMo judges categories 1-4; LongMemEval judges every question.
    scored = [g["qid"] for g in gold if benchmark == "longmemeval" or g["category"] != 5]
    judged = rows(run_dir / JUDGE_FILE)
    assert [j["qid"] for j in judged] == scored  # every scored question has exactly one judgment
    kind, label_of = ("judge_locomo", judge_label) if benchmark == "locomo" else ("judge_lme", lme_label)
    mine = [c for c in calls if c.kind == kind]
    by_key = {c.key: c for c in mine}
    want = Counter(c.cause for c in mine if c.cause)
    want.update(["judge_parse_error"] * sum(c.cause is None and label_of(c.content) is None for c in mine))
    # A failed or empty answer is not sent to the judge: it is a counted failure of its own.
    want.update(["no_answer"] * sum(not answers[q]["answer"] for q in scored))
    got = Counter(j["error"].split(":")[0] for j in judged if j["error"])
    assert got == want, f"08: failures by cause {dict(got)} != server's {dict(want)}"
    for j in judged:
        assert (j["label"] is None) == bool(j["error"])
        if j["cache_key"]:
            assert j["label"] == label_of(by_key[j["cache_key"]].content)
    check_manifest(run_dir, JUDGE_FILE.removesuffix(".jsonl"), (kind,), calls)
    metrics = json.loads((run_dir / "metrics.json").read_text(encoding="utf-8"))
    overall = metrics["judges"]["gpt-4o-mini"]["overall"]
    assert overall["n"] == len(scored)  # failures stay in the denominator
    assert overall["k"] == sum(j["label"] == 1 for j in judged)
    return got


def check_run(run_dir: Path, server: FakeOpenAI, max_attempts: int) -> dict[str, Counter]:
    calls = server_calls(server, max_attempts)
    return {
        "02": check_json_stage(run_dir, "02_episodes", "02_episodes.jsonl", "fallback_error", "partition", calls),
        "03": check_json_stage(run_dir, "03_extract", "03_extract.jsonl", "error", "extract", calls),
        "05": check_json_stage(run_dir, "05_plan", "05_plan.jsonl", "error", "plan", calls),
        "07": check_answers(run_dir, calls),
        "08": check_judgments(run_dir, calls),
    }


# ----------------------------------------------------------------------------- fault injection
def test_fault_mix_run_completes_and_every_failure_is_accounted_for(tmp_path, monkeypatch):
    """20% of chat requests faulted (keyed, so reproducible under concurrency); run 01-09.

    The script makes sure each transient fault kind occurs at least once; pinned content faults
    make sure the repair path and a judge parse failure occur. The run must complete, every
    question must have an answer row and every scored one a judgment, and every failure must be
    recorded with the cause the server's log implies.
    """
    plan = FaultPlan(rate=0.2, keyed=True, seed=11, types=MIX, timeout_seconds=STALL,
                     script=["429", "500", "timeout", "truncated_body", "html_body", "no_choices"],
                     pinned={"plan": ["malformed"], "extract": ["truncated"], "judge_locomo": ["malformed"]})
    with FakeOpenAI(faults=plan) as server:
        monkeypatch.setenv("OPENAI_BASE_URL", server.base_url)
        # The tiny fixture has 4 sessions and 9 judged questions, so one failed row is already
        # 11-25% of a stage: the default max_error_rate (0.2) is sized for real runs.
        run = run_stages(CONFIG, fast_sets(tmp_path, server, **{"run.max_error_rate": 0.5}))
        chat = sum(k in CHAT_KINDS for k in server.request_kinds)
        forced = len(plan.script) + sum(len(v) for v in plan.pinned.values())  # content faults: one arrival each
        assert len(server.faults_injected) - forced >= 0.1 * (chat - forced)  # the random mix really ran
        assert set(MIX) <= {f for _, _, f in server.faults_injected}
        by_stage = check_run(run.dir, server, max_attempts=6)
    # With six attempts no transient fault survives; the pinned content faults do, by design.
    assert by_stage["08"]["judge_parse_error"] >= 1
    assert not any(c.startswith(("http_", "timeout", "bad_response")) for s in by_stage.values() for c in s)


def test_fault_mix_on_longmemeval_with_shared_sessions(tmp_path, monkeypatch):
    """The same mix on LongMemEval, whose fixture shares one session between two haystacks
    (the partition and extraction of duplicates come from the cache) and whose judge is yes/no."""
    plan = FaultPlan(rate=0.2, keyed=True, seed=5, types=MIX, timeout_seconds=STALL,
                     script=["500", "truncated_body"], pinned={"answer": ["empty"]})
    with FakeOpenAI(faults=plan) as server:
        monkeypatch.setenv("OPENAI_BASE_URL", server.base_url)
        run = run_stages("configs/longmemeval.yaml",
                         fast_sets(tmp_path, server, TINY_LME, **{"run.max_error_rate": 0.5}))
        calls = server_calls(server, max_attempts=6)
        for stage, kinds in (("02_episodes", ("partition", "partition_repair")),
                             ("03_extract", ("extract", "extract_repair")), ("05_plan", ("plan", "plan_repair"))):
            check_manifest(run.dir, stage, kinds, calls)
        assert manifest(run.dir, "02_episodes")["dedup"]["calls_saved_by_reuse"] >= 1
        answers = check_answers(run.dir, calls)
        judged = check_judgments(run.dir, calls, "longmemeval")
    assert answers["empty_answer"] == 1 and judged["no_answer"] == 1


def test_each_failure_cause_is_recorded_in_the_rows_and_manifests(tmp_path, monkeypatch):
    """Pinned faults (every retry of that request faults too) force one failure of each kind."""
    plan = FaultPlan(timeout_seconds=STALL, pinned={
        "partition": ["malformed"], "partition_repair": ["truncated"],  # invalid after repair
        "extract": ["500"], "plan": ["timeout"],  # API errors -> fallbacks
        "answer": ["429", "empty", "no_choices"],  # API error, empty answer, broken 200
        "judge_locomo": ["truncated"],  # judge parse error
    })
    with FakeOpenAI(faults=plan) as server:
        monkeypatch.setenv("OPENAI_BASE_URL", server.base_url)
        run = run_stages(CONFIG, fast_sets(tmp_path, server, **{"llm.max_attempts": 2, "run.max_error_rate": 1.0}))
        by_stage = check_run(run.dir, server, max_attempts=2)
    assert by_stage["02"] == {"invalid_reply": 1}
    assert by_stage["03"] == {"http_500": 1}
    assert by_stage["05"] == {"timeout": 1}
    assert by_stage["07"] == {"http_429": 1, "empty_answer": 1, "bad_response": 1}
    gold = {g["qid"]: g for g in rows(run.dir / "01_gold.jsonl")}
    no_answer = sum(1 for a in rows(run.dir / "07_answer.jsonl") if not a["answer"] and gold[a["qid"]]["category"] != 5)
    assert by_stage["08"] == Counter({"judge_parse_error": 1, "no_answer": no_answer})
    fallback = next(r for r in rows(run.dir / "02_episodes.jsonl") if r["fallback_used"])
    assert [c["prompt_id"] for c in fallback["llm_calls"]] == ["partition_user", "partition_repair_user"]
    assert len(fallback["episodes"]) == 1  # the whole session, still retrievable
    assert manifest(run.dir, "07_answer")["failed_rows"] == 3


def test_rerun_retries_only_the_failed_calls(tmp_path, monkeypatch):
    plan = FaultPlan(pinned={"plan": ["500"], "answer": ["500", "empty"]})
    with FakeOpenAI(faults=plan) as server:
        monkeypatch.setenv("OPENAI_BASE_URL", server.base_url)
        sets = fast_sets(tmp_path, server, **{"llm.max_attempts": 2, "run.max_error_rate": 1.0})
        run = run_stages(CONFIG, sets, STAGE_ORDER[:7])
        assert sum(r["fallback_used"] for r in rows(run.path("plans"))) == 1
        assert sorted(a["error"].split(":")[0] for a in rows(run.path("answers")) if a["error"]) == [
            "empty_answer", "http_500"]
        fell_back = {r["qid"] for r in rows(run.path("plans")) if r["fallback_used"]}
        http_failed = {a["qid"] for a in rows(run.path("answers")) if a["error"].startswith("http_500")}
        empty = {a["qid"] for a in rows(run.path("answers")) if a["error"] == "empty_answer"}
        server.faults = None  # the outage is over
        before = Counter(server.request_kinds)
        embedded_before = _embedded_texts(server.requests_of_kind("embeddings"))
        n_embedding_requests = len(server.requests_of_kind("embeddings"))
        run_stages(CONFIG, sets, ["plan", "retrieve", "answer"])
        new = Counter(server.request_kinds) - before
        # The failed plan call is made again; the answers made again are the failed one and the one
        # whose plan (hence retrieval and prompt) changed; the empty reply is cached, not paid twice.
        assert {k: v for k, v in new.items() if k != "embeddings"} == {
            "plan": 1, "answer": len(fell_back | http_failed)}
        # The redone plan may name query texts no earlier retrieval embedded (which ones depends on
        # which question's plan call the fault hit); those are embedded, nothing already embedded is.
        embedded_now = _embedded_texts(server.requests_of_kind("embeddings")[n_embedding_requests:])
        assert not embedded_now & embedded_before
        assert not any(r["fallback_used"] for r in rows(run.path("plans")))
        # The cached empty reply stays, unless its question's plan was the one redone (new prompt).
        assert [a["error"] for a in rows(run.path("answers")) if a["error"]] == (
            ["empty_answer"] * len(empty - fell_back))


def _embedded_texts(requests: list[dict]) -> set[str]:
    texts: set[str] = set()
    for body in requests:
        texts.update([body["input"]] if isinstance(body["input"], str) else body["input"])
    return texts


def test_stage_writer_redo_drops_failed_rows_only(tmp_path):
    out = tmp_path / "07.jsonl"
    good, bad = {"qid": "a", "answer": "x"}, {"qid": "b", "answer": None}
    out.write_text(json.dumps(good) + "\n" + json.dumps(bad) + "\n" + '{"qid": "c", "ans', encoding="utf-8")
    writer = StageWriter(out, "qid", redo=lambda r: r["answer"] is None)
    assert writer.pending([{"qid": q} for q in "abc"], lambda i: i["qid"]) == [{"qid": "b"}, {"qid": "c"}]
    assert (writer.resumed, writer.redone) == (1, 1)
    writer.write({"qid": "b", "answer": "y"})
    assert writer.close(order=["a", "b"]) == [good, {"qid": "b", "answer": "y"}]
    assert rows(out) == [good, {"qid": "b", "answer": "y"}]


@pytest.mark.parametrize("fault", ["truncated_body", "html_body", "no_choices"])
def test_broken_200_body_is_retried_and_never_cached(tmp_path, fault):
    """A 200 whose body is cut-off JSON, an HTML page or has no choices is a retryable failure."""
    messages = [{"role": "user", "content": "Answer only from the supplied episodes.\n[D1:1] Ann: hello there"}]
    with FakeOpenAI(faults=FaultPlan(script=[fault])) as server:
        client = make_client(server, tmp_path / "once", "answer", max_attempts=2)
        reply = client.complete("answer", messages, prompt_id="answer_user")
        assert reply.text == "hello there" and client.stats["answer"].retries == 1
    with FakeOpenAI(faults=FaultPlan(script=[fault, fault])) as server:
        client = make_client(server, tmp_path / "twice", "answer", max_attempts=2)
        with pytest.raises(LLMCallError) as exc:
            client.complete("answer", messages, prompt_id="answer_user")
        assert exc.value.cause == "bad_response" and "\n" not in str(exc.value)
        key = cache_key({"base_url": server.base_url, **server.requests[0], "extra_body": {}})
        assert client.cache.get(key) is None  # a rerun asks again instead of replaying the failure
        assert client.summary()["answer"]["failures"] == {"bad_response": 1}


def _asker(server: FakeOpenAI) -> Callable[[str], Optional[str]]:
    """Answer-kind chat requests straight through the SDK (no retries); None on an HTTP error."""
    import openai

    sdk = openai.OpenAI(base_url=server.base_url, api_key="k", max_retries=0, timeout=5)

    def ask(question: str) -> Optional[str]:
        try:
            reply = sdk.chat.completions.create(model="m", messages=[
                {"role": "user", "content": f"Answer only from the supplied episodes.\nQuestion: {question}"}],
                extra_headers={"X-Prompt-Id": "answer_user"})
        except openai.APIStatusError:
            return None
        return reply.choices[0].message.content

    return ask


def test_keyed_and_pinned_faults_do_not_depend_on_arrival_order():
    """What the concurrent runs above rely on: the same request gets the same fault in any order."""
    def faults(order: list[int]) -> dict[str, str]:
        with FakeOpenAI(faults=FaultPlan(rate=0.3, keyed=True, seed=2, types=["429", "500", "malformed"])) as server:
            ask = _asker(server)
            for i in order:
                ask(f"q{i}")
            return {server.requests[idx]["messages"][0]["content"]: f for idx, _, f in server.faults_injected}

    forward, backward = faults(list(range(40))), faults(list(range(39, -1, -1)))
    assert forward == backward and 4 <= len(forward) <= 24
    # A pinned fault follows its request through every retry; the next distinct request is free.
    with FakeOpenAI(faults=FaultPlan(pinned={"answer": ["500"]})) as server:
        ask = _asker(server)
        assert [ask("first") for _ in range(3)] == [None, None, None]
        assert ask("second")
        assert [f for _, _, f in server.faults_injected] == ["500", "500", "500"]


def test_failed_embedding_batch_is_one_line_llm_error():
    """A dead embedding endpoint ends stage 04 with one line naming the cause, not a traceback."""
    import socket

    with socket.socket() as sock:  # a port nothing listens on
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    with pytest.raises(LLMCallError) as exc:
        embed_texts(["a", "b"], model="m", base_url=f"http://127.0.0.1:{port}/v1", timeout=1.0,
                    retry=RetryPolicy(max_attempts=2, initial_wait=0.01, max_wait=0.02))
    assert exc.value.cause == "connection" and "\n" not in str(exc.value)


# ----------------------------------------------------------------------------- interruption
# What may legitimately differ between a run killed and restarted in every LLM stage and one
# that ran straight through. Everything else must be identical.
# ("cached" is not volatile here: the kills land after whole rows, so no reply is cached for a row
# that is not written, and the restarted run must show exactly the calls the reference paid for.)
VOLATILE_ROW_FIELDS = frozenset({
    "latency",  # wall time of one LLM call, as the client measured it
    "seconds",  # wall time of one retrieval
    "bridge_seconds",  # the latency of a retrieval's bridge calls
})
VOLATILE_MANIFEST_FIELDS = frozenset({
    "finished_at", "wall_seconds",  # the clock
    "resumed_rows", "new_rows",  # how the rows split between the killed and the restarted process
    "llm",  # per-process call accounting (calls, cached, tokens, latencies)
    "code",  # git commit/dirty flag when the stage ended: a commit to the tree mid-test is not a resume bug
    # 04's embedding throughput (the clock); its text counts (requested, distinct, encoded) still must match
    "encode_seconds", "encode_cpu_seconds", "texts_per_second", "texts_per_cpu_second",
})
# The cost and latency ledger (common/pipeline/ledger.py, also copied into metrics.json) reports timings
# read from the row fields above; its calls, paid/cached split, tokens and costs must still match.
VOLATILE_REPORT_FIELDS = frozenset({
    "latency_mean", "latency_p50", "latency_p95", "plan_s", "retrieval_s", "generation_s", "end_to_end_s",
})
# Manifests hash their input files, which hold the volatile row fields above; the names must match.
HASHED_INPUTS = "inputs"
# Whole files that only render volatile fields for people; they must exist in both runs.
VOLATILE_FILES = frozenset({
    "ledger.md",  # the Markdown rendering of ledger.json, timings included
})

# stage -> (script, output, manifest name)
LLM_SCRIPTS = {"episodes": ("02_episodes", "02_episodes.jsonl", "02_episodes"),
               "extract": ("03_extract", "03_extract.jsonl", "03_extract"),
               "plan": ("05_plan", "05_plan.jsonl", "05_plan"),
               "answer": ("07_answer", "07_answer.jsonl", "07_answer"),
               "judge": ("08_judge", JUDGE_FILE, "08_judge_gpt-4o-mini")}
CONCURRENCY = 3


def _strip(value: Any, volatile: frozenset[str]) -> Any:
    if isinstance(value, dict):
        return {k: _strip(v, volatile) for k, v in value.items() if k not in volatile}
    if isinstance(value, list):
        return [_strip(v, volatile) for v in value]
    return value


def _comparable(path: Path) -> Any:
    if path.suffix == ".jsonl":
        return [_strip(r, VOLATILE_ROW_FIELDS) for r in rows(path)]
    if path.suffix == ".npz":
        with np.load(path) as npz:
            return {k: npz[k].tolist() for k in sorted(npz.files)}
    if path.name in ("ledger.json", "metrics.json"):
        return _strip(json.loads(path.read_text(encoding="utf-8")), VOLATILE_REPORT_FIELDS)
    if path.name.endswith(".manifest.json"):
        data = _strip(json.loads(path.read_text(encoding="utf-8")), VOLATILE_MANIFEST_FIELDS)
        data[HASHED_INPUTS] = sorted(data.get(HASHED_INPUTS, {}))
        return data
    return path.read_bytes()


def _assert_same_artifacts(expected_dir: Path, got_dir: Path) -> None:
    # invocation.json: what the last command's processes called (written by the scripts, not in-process runs)
    files = lambda d: sorted(str(p.relative_to(d)) for p in d.rglob("*")  # noqa: E731
                             if p.is_file() and p.name != "invocation.json")
    assert files(got_dir) == files(expected_dir)
    for name in files(expected_dir):
        if Path(name).name not in VOLATILE_FILES:
            assert _comparable(got_dir / name) == _comparable(expected_dir / name), name


def _complete_lines(path: Path) -> int:
    return path.read_bytes().count(b"\n") if path.exists() else 0


def _cached_keys(db: Path) -> set[str]:
    con = sqlite3.connect(db)
    try:
        return {k for (k,) in con.execute("SELECT key FROM responses")}
    finally:
        con.close()


def _chat_keys(server: FakeOpenAI, start: int, stop: Optional[int] = None) -> list[str]:
    """Cache keys of the chat requests the server received in [start, stop)."""
    return [cache_key({"base_url": server.base_url, **b, "extra_body": {}})
            for b, k in zip(server.requests[start:stop], server.request_kinds[start:stop]) if k in CHAT_KINDS]


@pytest.mark.slow
def test_killed_llm_stages_resume_to_identical_artifacts_without_paying_twice(tmp_path, monkeypatch):
    """kill -9 each LLM stage (02, 03, 05, 07, 08) after a random number k of rows, restart it.

    Builds on test_e2e_locomo's simulated crash of 07: here real processes are killed in every
    LLM stage and the whole run is compared with an uninterrupted one. The server answers the
    stage's first k requests and holds the next ones, so the kill lands with exactly k rows
    written and CONCURRENCY calls in flight.
    """
    rng = random.Random(20250601)
    with FakeOpenAI() as server:
        monkeypatch.setenv("OPENAI_BASE_URL", server.base_url)
        sets = fast_sets(tmp_path, server, **{"llm.concurrency": CONCURRENCY})
        run_stages(CONFIG, sets)  # the uninterrupted reference
        reference_keys = set(_chat_keys(server, 0))
        (tmp_path / "results").rename(tmp_path / "reference")
        for cache in tmp_path.glob("*.sqlite*"):
            cache.unlink()
        expected_dir = tmp_path / "reference" / "locomo" / "t"
        run_dir = tmp_path / "results" / "locomo" / "t"
        args = [a for s in sets for a in ("--set", s)]
        env = {**os.environ, "OPENAI_BASE_URL": server.base_url}
        first_request = server.request_count
        for stage in STAGE_ORDER:
            if stage not in LLM_SCRIPTS:
                run_stages(CONFIG, sets, [stage])
                continue
            script, out, manifest_name = LLM_SCRIPTS[stage]
            n = len(rows(expected_dir / out))
            k = rng.randint(1, n - 1)
            in_flight = min(CONCURRENCY, n - k)
            cmd = [sys.executable, "-m", f"LoCoMo.{script}", *args]
            start = server.request_count
            server.hold_from(start + k)
            proc = subprocess.Popen(cmd, cwd=REPO, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
            deadline = time.monotonic() + 120
            while (_complete_lines(run_dir / out) < k or server.request_count < start + k + in_flight) \
                    and proc.poll() is None and time.monotonic() < deadline:
                time.sleep(0.01)
            proc.kill()
            _, err = proc.communicate()
            server.hold_from(None)
            assert proc.returncode == -9, f"{script} was not killed mid-stage: {err.decode()[-500:]}"
            assert _complete_lines(run_dir / out) == k
            held = _chat_keys(server, start + k)
            assert len(held) == in_flight and set(server.request_kinds[start:]) <= CHAT_KINDS
            paid = _cached_keys(tmp_path / "llm.sqlite")  # replies that reached the cache before the kill
            restart_at = server.request_count
            done = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
            assert done.returncode == 0, done.stderr[-2000:]
            again = _chat_keys(server, restart_at)
            assert not set(again) & paid, f"{script}: the restart paid again for a cached call"
            # Only the calls in flight at the kill are made a second time.
            assert set(again) & set(_chat_keys(server, start, restart_at)) == set(held)
            assert len(again) == n - k
            m = manifest(run_dir, manifest_name)
            assert (m["resumed_rows"], m["new_rows"], m["rows"]) == (k, n - k, n)
        assert set(_chat_keys(server, first_request)) == reference_keys  # the same questions were asked
        _assert_same_artifacts(expected_dir, run_dir)
