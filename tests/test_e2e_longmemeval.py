"""End-to-end LongMemEval pipeline 01-09 against the local fake OpenAI server."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from common.pipeline.engine import Run
from tests import conftest
from tests.conftest import REPO, rows, run_overrides
from tests.conftest import STAGE_ORDER as ORDER

TINY = REPO / "tests" / "fixtures" / "lme_tiny.json"
REAL_ITEM = REPO.parent / "shared" / "data" / "longmemeval" / "longmemeval_s_single_e47becba.json"
TYPES = ["single-session-preference", "single-session-assistant", "temporal-reasoning", "multi-session",
         "knowledge-update", "single-session-user"]



def run_stages(sets: list[str], stages: list[str] = ORDER) -> Run:
    return conftest.run_stages("configs/longmemeval.yaml", sets, stages)


@pytest.mark.slow
def test_make_longmemeval_on_fixture_then_rerun_makes_zero_requests(tmp_path, fake_server, shared_embeddings):
    env = {k: v for k, v in os.environ.items() if k not in ("OPENAI_API_KEY", "OPENAI_BASE_URL")}
    env["OPENAI_BASE_URL"] = fake_server.base_url
    sets = run_overrides(tmp_path, TINY, **{"embedding.cache_path": shared_embeddings})
    cmd = ["make", "-s", "longmemeval", f"PY={sys.executable}", f"SET={' '.join(sets)}"]
    first = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=600)
    assert first.returncode == 0, first.stderr[-2000:]
    run_dir = tmp_path / "results" / "longmemeval" / "t"
    items = json.loads(TINY.read_text())
    assert len(rows(run_dir / "07_answer.jsonl")) == len(items)
    judged = rows(run_dir / "08_judge_gpt-4o-mini.jsonl")
    assert len(judged) == len(items)  # every LongMemEval question is judged, abstention included
    metrics = json.loads((run_dir / "metrics.json").read_text())
    m = metrics["judges"]["gpt-4o-mini"]
    assert set(m["by_type"]) == set(TYPES)
    assert m["overall"]["n"] == len(items) and m["overall"]["k"] == sum(r["label"] == 1 for r in judged)
    assert m["abstention"]["n"] == sum("_abs" in it["question_id"] for it in items)
    per_type = [m["by_type"][t]["accuracy"] for t in TYPES]
    assert m["task_averaged"] == pytest.approx(sum(per_type) / 6)
    # Abstention items are judged with the abstention template, whatever their type.
    for r in judged:
        assert (r["prompt_id"] == "judge_lme_abstention") == ("_abs" in r["qid"])
    assert metrics["retrieval"]["skipped"].get("abstention", 0) >= 1
    assert "recall_any@5" in metrics["retrieval"]["session"]
    # The session shared by two questions was partitioned once.
    dedup = json.loads((run_dir / "02_episodes.manifest.json").read_text())["dedup"]
    assert dedup["unique"] < dedup["instances"]
    assert fake_server.counts_by_kind()["partition"] == dedup["unique"]

    paid = fake_server.request_count
    second = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=600)
    assert second.returncode == 0, second.stderr[-2000:]
    assert fake_server.request_count == paid


def _poison(items: list[dict]) -> list[dict]:
    """Change every gold-side field; nothing the method may see."""
    out = json.loads(json.dumps(items))
    for n, it in enumerate(out):
        it["answer"] = f"POISON-ANSWER-{n}"
        it["question_type"] = TYPES[(TYPES.index(it["question_type"]) + 1) % len(TYPES)]
        it["answer_session_ids"] = ["POISON-SESSION"]
        for session in it["haystack_sessions"]:
            for turn in session:
                turn["has_answer"] = not turn.get("has_answer", False)
    return out


def test_no_prompt_of_stages_02_to_07_depends_on_gold_fields(tmp_path, fake_server, monkeypatch):
    monkeypatch.setenv("OPENAI_BASE_URL", fake_server.base_url)
    items = json.loads(TINY.read_text())
    poisoned = tmp_path / "poisoned.json"
    poisoned.write_text(json.dumps(_poison(items)))
    sent = []
    for name, data in (("clean", TINY), ("poisoned", poisoned)):
        start = len(fake_server.requests)
        run_stages(run_overrides(tmp_path / name, data), ORDER[:7])
        # Arrival order varies with concurrency; the multiset of requests must not.
        sent.append(sorted(json.dumps(b, sort_keys=True) for b in fake_server.requests[start:]))
    assert sent[0] and sent[0] == sent[1], "a gold field changed what the method sent to the model"
    text = json.dumps(sent[0])
    assert "POISON" not in json.dumps(sent[1])
    assert "_abs" not in text and "has_answer" not in text and "question_type" not in text
    for t in TYPES:
        assert t not in text
    for it in items:
        # Answers that occur nowhere in the haystack (and are long enough not to occur by chance).
        haystack = " ".join(str(turn["content"]) for s in it["haystack_sessions"] for turn in s)
        if len(str(it["answer"])) >= 4 and str(it["answer"]) not in haystack:
            assert str(it["answer"]) not in text


@pytest.mark.slow
def test_real_item_end_to_end(tmp_path, fake_server, monkeypatch):
    if not REAL_ITEM.exists():
        pytest.skip(f"{REAL_ITEM} not available")
    monkeypatch.setenv("OPENAI_BASE_URL", fake_server.base_url)
    run = run_stages(run_overrides(tmp_path, REAL_ITEM))
    sessions = rows(run.path("sessions"))
    assert len(sessions) == 53
    assert any(t["role"] == "assistant" for s in sessions for t in s["turns"])
    metrics = json.loads((run.dir / "metrics.json").read_text())
    assert metrics["judges"]["gpt-4o-mini"]["by_type"]["single-session-user"]["n"] == 1
    assert metrics["retrieval"]["n"] == 1  # a single-session-user item with user has_answer turns
