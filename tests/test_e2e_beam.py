"""BEAM through the pipeline against the local fake OpenAI server: gold never reaches a method request,
the outside systems run on it, and ``make beam`` runs 01-09 on the shared 100K tier (then 0 calls)."""
from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from common.benchmarks import beam
from tests.conftest import REPO, fake_vectors, rows, run_overrides, run_stages
from tests.conftest import STAGE_ORDER as ORDER
from tests.test_beam import TIER, tiny_tier

pytestmark = pytest.mark.skipif(not TIER.exists(), reason=f"shared BEAM data not at {TIER}")


def _poison(root: Path) -> None:
    """Every gold-side field of every question file changed; the question texts stay in place."""
    for d in beam.chat_dirs(root):
        path = d / beam.QUESTIONS_FILE
        data = json.loads(path.read_text(encoding="utf-8"))
        lists = list(data.values())
        items = [q for qs in lists for q in qs]
        rubrics = [q["rubric"] for q in items]
        for n, q in enumerate(items):
            q["rubric"] = rubrics[(n + 7) % len(rubrics)] + [f"POISON-RUBRIC-{n}"]
            for key in beam.ANSWER_KEYS:
                if key in q:
                    q[key] = f"POISON-ANSWER-{n}"
            q["source_chat_ids"] = [n % 3]
            q["difficulty"] = "POISON"
        # Each list under another ability's name (swapped abilities), in the same file position.
        names = list(data)
        swapped = {names[(i + 1) % len(names)]: qs for i, qs in enumerate(lists)}
        path.write_text(json.dumps(swapped), encoding="utf-8")


def test_no_request_of_stages_02_to_07_depends_on_abilities_rubrics_or_answers(tmp_path, fake_server, monkeypatch):
    monkeypatch.setenv("OPENAI_BASE_URL", fake_server.base_url)
    clean = tiny_tier(tmp_path / "clean", chats=("1",), groups=2)
    poisoned = tiny_tier(tmp_path / "poisoned", chats=("1",), groups=2)
    _poison(poisoned)
    gold = beam.load_beam(poisoned).gold
    assert gold[0].question_type != beam.load_beam(clean).gold[0].question_type  # the poison took
    sent = []
    for name, data in (("clean", clean), ("poisoned", poisoned)):
        start = len(fake_server.requests)
        run_stages("configs/beam.yaml", run_overrides(tmp_path / name, data, **fake_vectors(fake_server.base_url)),
                   ORDER[:7])
        sent.append(sorted(json.dumps(b, sort_keys=True) for b in fake_server.requests[start:]))
    assert sent[0] and sent[0] == sent[1], "an ability, rubric or answer changed what the method sent"
    assert "POISON" not in json.dumps(sent[1])
    text = json.dumps(sent[0])
    for ability in beam.ABILITIES:
        assert ability not in text
    for g in beam.load_beam(clean).gold:
        assert all(item not in text for item in g.rubric if len(item) > 30)


@pytest.mark.skipif(importlib.util.find_spec("mem0") is None, reason="mem0ai not installed")
def test_mem0_runs_on_beam(tmp_path, fake_server, monkeypatch):
    """The outside systems need nothing BEAM-specific: the speakers are the user and the assistant."""
    monkeypatch.setenv("OPENAI_BASE_URL", fake_server.base_url)
    data = tiny_tier(tmp_path, chats=("3",), groups=1)
    sets = run_overrides(tmp_path, data, **fake_vectors(fake_server.base_url),
                         **{"method.name": "mem0", "data.question_limit": 2})
    run = run_stages("configs/beam.yaml", sets, ORDER[:7])
    rets = rows(run.path("retrievals"))
    assert len(rets) == 2 and all(r["mode"] == "mem0" for r in rets)
    assert all({e["source"] for e in r["method_info"]["evidence"]} <= {"user", "assistant"} for r in rets)
    assert fake_server.counts_by_kind()["mem0_extraction"] > 0
    assert len(rows(run.path("answers"))) == 2


CHATS = "beam-100K-1"  # one real chat (its 20 questions across the ten abilities): every stage, both runs


@pytest.mark.slow
def test_make_beam_end_to_end_on_the_shared_100k_tier_then_rerun_makes_zero_calls(tmp_path, fake_server):
    """EnSIMem and the full-context baseline on a real chat (eight questions), 01-09, a rerun
    that makes no call, then `make tables` with the official and corrected scores side by side.
    (All 20 chats: the same command without MEMORIES, measured by hand in docs/beam.md.)"""
    env = {k: v for k, v in os.environ.items() if k not in ("OPENAI_API_KEY", "OPENAI_BASE_URL")}
    env.update(OPENAI_BASE_URL=fake_server.base_url, BEAM_DIR=str(TIER), HF_HUB_OFFLINE="1")
    fast = fake_vectors(fake_server.base_url)
    results = tmp_path / "results"
    for method in ("ensimem", "full_context"):
        sets = [s for s in run_overrides(tmp_path, TIER, **fast, **{"run.name": method, "method.name": method})
                if not s.startswith("data.path=")]  # BEAM_DIR names the tier folder
        cmd = ["make", "-s", "beam", f"PY={sys.executable}", "LIMIT=8", "SIZE=100K", f"MEMORIES={CHATS}",
               f"SET={' '.join(sets)}"]
        first = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=900)
        assert first.returncode == 0, first.stderr[-2000:]
        run_dir = results / "beam" / method
        assert len(rows(run_dir / "01_questions.jsonl")) == 8
        assert {r["memory_id"] for r in rows(run_dir / "07_answer.jsonl")} == set(CHATS.split(","))
        metrics = json.loads((run_dir / "metrics.json").read_text())
        block = next(iter(metrics["judges"].values()))
        # The fake judge gives 0.5 to some items: int() makes them 0 in the official score only.
        assert block["rubric_items_with_half_score"] > 0
        official, floats = block["variants"]["official"], block["variants"]["float"]
        assert any(official["by_ability"][a]["score"] != floats["by_ability"][a]["score"]
                   for a in official["by_ability"] if official["by_ability"][a]["score"] is not None)
        paid = fake_server.request_count
        second = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=900)
        assert second.returncode == 0, second.stderr[-2000:]
        assert fake_server.request_count == paid, "a rerun made calls"
        assert "made no LLM call" in second.stdout + second.stderr
    tables = subprocess.run(["make", "-s", "tables", f"PY={sys.executable}", f"RESULTS={results}"], cwd=REPO,
                            env=env, capture_output=True, text=True, timeout=300)
    beam_tables = [p for p in (results / "tables").glob("*.md") if "beam" in p.name.lower()]
    assert beam_tables, (tables.stderr[-2000:], sorted(p.name for p in (results / "tables").glob("*")))
    text = "\n".join(p.read_text(encoding="utf-8") for p in beam_tables)
    assert "EnSIMem" in text and "Full context" in text.replace("full context", "Full context"), text[:2000]
    assert "official" in text and "float" in text, text[:2000]


def test_baselines_on_beam_with_the_official_answer_prompt(tmp_path, fake_server, monkeypatch):
    """RAG over turns and the labelled oracle (source_chat_ids) answer with BEAM's own template."""
    monkeypatch.setenv("OPENAI_BASE_URL", fake_server.base_url)
    data = tiny_tier(tmp_path, chats=("1",), groups=30)  # whole batches: every source_chat_id is there
    for method in ("rag_turns", "oracle"):
        sets = run_overrides(tmp_path / method, data, **fake_vectors(fake_server.base_url),
                             **{"method.name": method, "answer.prompt": "beam"})
        run = run_stages("configs/beam.yaml", sets, ORDER[:7])
        answers = rows(run.path("answers"))
        assert len(answers) == 20 and {a["prompt_id"] for a in answers} == {"answer_beam_user"}
    sent = [r["messages"] for r in fake_server.requests if "messages" in r]
    assert sent and all(len(m) == 1 and m[0]["content"].startswith("\nYou are an assistant that MUST answer")
                        for m in sent)
    gold = {g.qid: g for g in beam.load_beam(data).gold}
    oracle = {r["qid"]: r for r in rows(tmp_path / "oracle" / "results" / "beam" / "t" / "06_retrieve.jsonl")}
    for qid, r in oracle.items():
        assert r["dia_ids"] == sorted(gold[qid].evidence, key=int)
        assert r["method_info"]["evidence_source"] == ("evidence_turns" if gold[qid].evidence else "none")
