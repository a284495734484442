"""End-to-end LoCoMo pipeline 01-09 against the local fake OpenAI server."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

from common.core.config import load_config
from common.core.fingerprint import FingerprintMismatch
from common.pipeline.engine import Run, run_stage
from tests import conftest
from tests.conftest import REPO, TINY_LOCOMO, rows, run_overrides
from tests.conftest import STAGE_ORDER as ORDER


def run_stages(sets: list[str], stages: list[str] = ORDER) -> Run:
    return conftest.run_stages("configs/locomo.yaml", sets, stages)


def make_env(server) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("OPENAI_API_KEY", "OPENAI_BASE_URL")}
    env["OPENAI_BASE_URL"] = server.base_url
    return env


@pytest.mark.slow
def test_make_locomo_on_fixture_then_rerun_makes_zero_requests(tmp_path, fake_server, shared_embeddings):
    sets = " ".join(run_overrides(tmp_path, TINY_LOCOMO, **{"embedding.cache_path": shared_embeddings}))
    cmd = ["make", "-s", "locomo", f"PY={sys.executable}", f"SET={sets}"]
    first = subprocess.run(cmd, cwd=REPO, env=make_env(fake_server), capture_output=True, text=True, timeout=600)
    assert first.returncode == 0, first.stderr[-2000:]
    run_dir = tmp_path / "results" / "locomo" / "t"
    assert len(rows(run_dir / "01_sessions.jsonl")) == 4
    assert len(rows(run_dir / "01_questions.jsonl")) == 11
    # Questions carry nothing the method must not see.
    assert all(set(q) == {"qid", "memory_id", "question", "question_date"}
               for q in rows(run_dir / "01_questions.jsonl"))
    assert len(rows(run_dir / "02_episodes.jsonl")) == 4
    assert len(rows(run_dir / "07_answer.jsonl")) == 11
    judged = rows(run_dir / "08_judge_gpt-4o-mini.jsonl")
    assert len(judged) == 9  # categories 1-4 only; the two category-5 questions are excluded
    metrics = json.loads((run_dir / "metrics.json").read_text())
    overall = metrics["judges"]["gpt-4o-mini"]["overall"]
    assert overall["n"] == 9 and overall["k"] == sum(r["label"] == 1 for r in judged)
    assert metrics["questions"]["excluded"]["5 (adversarial)"] == 2
    table = (run_dir / "table_gpt-4o-mini.md").read_text()
    assert f"({overall['k']}/9)" in table
    for stage in ("01_preprocess", "02_episodes", "03_extract", "04_index", "05_plan", "06_retrieve",
                  "07_answer", "08_judge_gpt-4o-mini", "09_aggregate"):
        assert (run_dir / f"{stage}.manifest.json").exists(), stage

    paid = fake_server.request_count
    assert paid > 0
    second = subprocess.run(cmd, cwd=REPO, env=make_env(fake_server), capture_output=True, text=True, timeout=600)
    assert second.returncode == 0, second.stderr[-2000:]
    assert fake_server.request_count == paid, "a finished run re-run must make zero LLM requests"
    assert json.loads((run_dir / "metrics.json").read_text())["judges"] == metrics["judges"]


def test_stages_02_to_07_never_read_the_gold_file(tmp_path, fake_server, monkeypatch):
    monkeypatch.setenv("OPENAI_BASE_URL", fake_server.base_url)
    sets = run_overrides(tmp_path, TINY_LOCOMO)
    run = run_stages(sets, ["preprocess"])
    gold = run.path("gold")
    hidden = gold.with_name("hidden_gold.jsonl")
    gold.rename(hidden)
    run_stages(sets, ["episodes", "extract", "index", "plan", "retrieve", "answer"])
    with pytest.raises(Exception, match="01_gold.jsonl"):
        run_stages(sets, ["judge"])
    hidden.rename(gold)
    run_stages(sets, ["judge", "aggregate"])
    # No prompt before the judge carries a gold-only string (answers that never occur in the dialogue).
    gold_only = ["the week before 3 March 2023", "Likely yes; she loves her dog", "it was rainy"]
    before_judge = [r for r, k in zip(fake_server.requests, fake_server.request_kinds) if k != "judge_locomo"]
    assert before_judge
    for body in before_judge:
        text = json.dumps(body)
        assert not any(g in text for g in gold_only)


def test_interrupted_answer_stage_resumes_without_paying_twice(tmp_path, fake_server, monkeypatch):
    monkeypatch.setenv("OPENAI_BASE_URL", fake_server.base_url)
    sets = run_overrides(tmp_path, TINY_LOCOMO)
    run = run_stages(sets, ORDER[:7])
    answers = run.path("answers")
    complete = answers.read_bytes()
    # Simulate a crash after 3 rows, mid-way through writing the 4th line.
    lines = complete.decode().splitlines(keepends=True)
    answers.write_text("".join(lines[:3]) + lines[3][:25], encoding="utf-8")
    (tmp_path / "llm.sqlite").unlink()  # no cache: only the resume logic can avoid new calls
    for suffix in ("-wal", "-shm"):
        Path(str(tmp_path / "llm.sqlite") + suffix).unlink(missing_ok=True)
    before = fake_server.counts_by_kind().get("answer", 0)
    run_stages(sets, ["answer"])
    assert fake_server.counts_by_kind()["answer"] - before == 11 - 3
    # Same rows in the same order; only the measured latency of the re-made calls differs.
    strip = lambda text: [{k: v for k, v in json.loads(line).items() if k != "latency"} for line in text.splitlines()]  # noqa: E731
    assert strip(answers.read_text()) == strip(complete.decode())


def test_no_endpoint_stops_at_once_with_one_line(tmp_path):
    env = {k: v for k, v in os.environ.items() if k not in ("OPENAI_API_KEY", "OPENAI_BASE_URL")}
    args = [a for s in run_overrides(tmp_path, TINY_LOCOMO) for a in ("--set", s)]
    proc = subprocess.run([sys.executable, "-m", "LoCoMo.02_episodes", *args], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode != 0
    err = proc.stderr.strip().splitlines()
    assert len(err) == 1 and "OPENAI_BASE_URL" in err[0] and "OPENAI_API_KEY" in err[0], proc.stderr


@pytest.mark.slow
def test_real_conversation_end_to_end(tmp_path, fake_server, monkeypatch, real_locomo):
    monkeypatch.setenv("OPENAI_BASE_URL", fake_server.base_url)
    sets = run_overrides(tmp_path, real_locomo, **{"data.memories": "[conv-26]", "data.question_limit": 40})
    run = run_stages(sets)
    sessions = rows(run.path("sessions"))
    assert len(sessions) == 19 and sum(len(s["turns"]) for s in sessions) == 419
    # Episodes cover every turn of every session exactly once, in order.
    parts = {r["session_key"]: r for r in rows(run.path("episodes"))}
    for s in sessions:
        covered = [d for e in parts[f"{s['memory_id']}::{s['session_id']}"]["episodes"] for d in e["dia_ids"]]
        assert covered == [t["dia_id"] for t in s["turns"]]
    episode_turns = {e["episode_id"]: set(e["dia_ids"]) for p in parts.values() for e in p["episodes"]}
    for r in rows(run.path("records")):
        for rec in r["records"]:
            assert set(rec["evidence_dia_ids"]) <= episode_turns[rec["episode_id"]]
    rets = rows(run.path("retrievals"))
    assert len(rets) == 40 and all(r["buffer_tokens"] > 0 for r in rets)
    gold = {g["qid"]: g for g in rows(run.path("gold"))}
    scored = [q for q in gold if gold[q]["category"] != 5]
    judged = rows(run.dir / "08_judge_gpt-4o-mini.jsonl")
    assert sorted(j["qid"] for j in judged) == sorted(scored)
    metrics = json.loads((run.dir / "metrics.json").read_text())
    by_cat = metrics["judges"]["gpt-4o-mini"]["by_category"]
    names = {1: "multi-hop", 2: "temporal", 3: "open-domain", 4: "single-hop"}
    expected = Counter(names[gold[q]["category"]] for q in scored)
    assert {c: v["n"] for c, v in by_cat.items()} == dict(expected)

    paid = fake_server.request_count
    run_stages(sets)
    assert fake_server.request_count == paid


def test_preprocess_counts_on_the_whole_real_file(tmp_path, real_locomo):
    run = run_stages(run_overrides(tmp_path, real_locomo), ["preprocess"])
    sessions = rows(run.path("sessions"))
    assert len({s["memory_id"] for s in sessions}) == 10
    assert len(sessions) == 272
    assert sum(len(s["turns"]) for s in sessions) == 5882
    assert len(rows(run.path("questions"))) == 1986
    cats = Counter(g["category"] for g in rows(run.path("gold")))
    assert [cats[c] for c in (1, 2, 3, 4, 5)] == [282, 321, 96, 841, 446]
    assert sum(cats[c] for c in (1, 2, 3, 4)) == 1540


def test_a_new_endpoint_for_the_same_models_resumes_the_run(tmp_path, fake_server, monkeypatch):
    """Endpoints are not protocol: moving a finished run to another server serving the same models
    is neither refused nor paid again (its rows are kept; only missing rows would be asked for)."""
    from tests.fake_openai import FakeOpenAI

    monkeypatch.setenv("OPENAI_BASE_URL", fake_server.base_url)
    sets = run_overrides(tmp_path, TINY_LOCOMO)
    run = run_stages(sets, ORDER[:7])
    before = {p.name: p.read_bytes() for p in run.dir.glob("0[2-7]_*.jsonl")}
    with FakeOpenAI() as other:
        moved = sets + [f"models.default.base_url={other.base_url}", "models.default.timeout=7"]
        run_stages(moved, ORDER[1:7])
        assert other.request_count == 0
    assert {p.name: p.read_bytes() for p in run.dir.glob("0[2-7]_*.jsonl")} == before


def test_changed_settings_are_refused_instead_of_mixed(tmp_path, fake_server, monkeypatch):
    monkeypatch.setenv("OPENAI_BASE_URL", fake_server.base_url)
    sets = run_overrides(tmp_path, TINY_LOCOMO)
    run_stages(sets, ORDER[:6])
    changed = sets + ["retrieve.mode=dense_only"]
    # The protocol fingerprint refuses first and names the changed component.
    with pytest.raises(FingerprintMismatch, match=r"changed: method\.retrieve\.mode"):
        run_stages(changed, ["retrieve"])
    # A larger question selection is not a settings change: the run extends.
    run_stages(sets + ["data.question_limit=2"], ["preprocess", "plan", "retrieve"])
    forced = Run(load_config(["configs/locomo.yaml"], changed), force=True, progress=False)
    run_stage(forced, "retrieve")
    assert {r["mode"] for r in rows(forced.path("retrievals"))} == {"dense_only"}
