"""REALTALK through the pipeline against the local fake OpenAI server: no gold field reaches a request of
stages 01-07 for any memory system, each defect's switch changes exactly the requests it names, the dry
run sizes the run from its own data, ``make realtalk LIMIT=...`` runs 01-09 (then 0 calls), and the
REALTALK table, figures and sweep read the runs."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from common.benchmarks import realtalk
from common.core.config import load_config
from common.pipeline import dryrun
from common.report import sweep
from common.systems import registry
from tests.conftest import REPO, fake_vectors, run_overrides, run_stages, through_the_gateway
from tests.conftest import STAGE_ORDER as ORDER
from tests.fake_openai import FakeOpenAI, FaultPlan
from tests.test_systems import HAVE_AMEM, HAVE_GRAPHITI, HAVE_LANGMEM, HAVE_MEM0, HAVE_SIMPLEMEM

TINY = REPO / "tests" / "fixtures" / "realtalk_tiny"
SHARED = REPO.parent / "shared" / "data" / "realtalk"
CONFIG = "configs/realtalk.yaml"
HAVE = {"mem0": HAVE_MEM0, "amem": HAVE_AMEM, "langmem": HAVE_LANGMEM, "graphiti": HAVE_GRAPHITI,
        "simplemem": HAVE_SIMPLEMEM}
# Every registered system but the labelled oracle (SimpleMem imports LanceDB and pandas: make test-slow;
# A-MEM's ingestion, 2 sequential calls a turn, takes a minute here and reads nothing a LoCoMo memory does
# not: its gold isolation is the LoCoMo test's), and the full-context baseline with the official context.
SYSTEMS = [pytest.param(n, marks=pytest.mark.systems) if n == "simplemem" else n
           for n in registry.REGISTERED if n not in ("oracle", "amem")] + ["full_context official"]


def _poison(src: Path, out: Path) -> Path:
    """Every gold-side field changed (answers, evidence, categories) and the events annotations, which
    no method reads; the turns, speakers, dates and question texts stay as they are."""
    shutil.copytree(src, out)
    for path in realtalk.chat_files(out):
        doc = json.loads(path.read_text(encoding="utf-8"))
        for n, qa in enumerate(doc["qa"]):
            qa["answer"] = f"POISON-ANSWER-{n}"
            qa["evidence"] = ["D9:9"] if qa["evidence"] != ["D9:9"] else ["D1:1"]
            qa["category"] = {1: 2, 2: 3, 3: 1}[qa["category"]]
        for key in [k for k in doc if k.startswith("events_session_")]:
            doc[key] = {"agent_a": [{"sub-event": "POISON-EVENT"}], "agent_b": []}
        path.write_text(json.dumps(doc), encoding="utf-8")
    return out


@pytest.mark.parametrize("name", SYSTEMS)
def test_no_request_of_stages_01_to_07_depends_on_answers_evidence_categories_or_events(
        tmp_path, fake_server, monkeypatch, name):
    system = name.split()[0]
    if system in HAVE and not HAVE[system]:
        pytest.skip(f"{system} not installed (make install installs requirements-systems.txt)")
    if system in ("graphiti", "simplemem"):
        through_the_gateway(monkeypatch, fake_server.base_url)  # no socket but the fake server's and the gateway's
    monkeypatch.setenv("OPENAI_BASE_URL", fake_server.base_url)
    poisoned = _poison(TINY, tmp_path / "poisoned")
    extra = {"method.context_builder": "official", "answer.prompt": "realtalk"} if "official" in name else {}
    # An outside system: one chat (its ingestion is sequential calls). Not LIMIT: its draw reads the
    # categories, which the poison permutes, so it would pick other questions (a choice of the data subset).
    few = {} if system in ("ensimem", "full_context", "rag_turns", "no_memory") else {"data.memories": "[realtalk-2]"}
    sent = []
    for label, data in (("clean", TINY), ("poisoned", poisoned)):
        start = len(fake_server.requests)
        sets = run_overrides(tmp_path / label, data, **fake_vectors(fake_server.base_url),
                             **{"method.name": system, **extra, **few})
        run_stages(CONFIG, sets, ORDER[:7])
        sent.append(sorted(json.dumps(b, sort_keys=True) for b in fake_server.requests[start:]
                           if b.get("input") != ["dimension probe"]))
    assert sent[0] and sent[0] == sent[1], f"a gold field changed what {name} sent to the model"
    text = json.dumps(sent[1])
    assert "POISON" not in text and "plans something" not in text  # nor the events annotations


def test_the_official_switches_change_the_requests_they_name_and_nothing_else(tmp_path, fake_server, monkeypatch):
    """Full context on one chat: the harness's defaults, then evaluate_memory.py's protocol
    (configs/realtalk_official.yaml): context twice, QA prompt, answer model scoring its own answers,
    no temperature; the judge's own requests unchanged."""
    monkeypatch.setenv("OPENAI_BASE_URL", fake_server.base_url)
    bodies = {}
    for config in (CONFIG, "configs/realtalk_official.yaml"):
        start = len(fake_server.requests)
        sets = run_overrides(tmp_path / Path(config).stem, TINY, **{"data.memories": "[realtalk-1]",
                                                                     "method.name": "full_context",
                                                                     "models.judge.model": "judge-m",
                                                                     "models.answer.model": "answer-m"})
        run = run_stages(config, sets)
        new = list(zip(fake_server.requests[start:], fake_server.request_kinds[start:]))
        bodies[config] = {kind: [b for b, k in new if k == kind]
                          for kind in ("answer", "judge_locomo", "judge_realtalk_gpt_score")}
        metrics = json.loads((run.dir / "metrics.json").read_text())
        assert metrics["judges"]["gpt-4o-mini"]["gpt_score"]["overall"]["n"] == 5
    harness, official = bodies[CONFIG], bodies["configs/realtalk_official.yaml"]
    gpt = "judge_realtalk_gpt_score"
    assert {b["model"] for b in harness[gpt]} == {"judge-m"}
    assert {b["model"] for b in official[gpt]} == {"answer-m"}  # the model scores its own answers
    assert all(b["temperature"] == 0.0 and b["seed"] == 42 for b in harness["answer"] + harness[gpt])
    assert all("temperature" not in b and "seed" not in b for b in official["answer"] + official[gpt])
    # The LoCoMo judge keeps its own settings under every switch.
    assert all(b["temperature"] == 0.0 and b["model"] == "judge-m" for b in harness["judge_locomo"] +
               official["judge_locomo"]) and len(official["judge_locomo"]) == 5
    paid = fake_server.request_count  # the official run again: every row resumed, no call
    run_stages("configs/realtalk_official.yaml", sets)
    assert fake_server.request_count == paid
    text = official["answer"][0]["messages"][0]["content"]
    assert text.startswith("Below is a conversation between two people: Maren and tobias.")
    assert text.count("DATE: 09.01.2024, 21:15:00") == 2 and text.index("09.01.2024") < text.index("02.01.2024")
    assert text.endswith("Answer:\n")
    harness_text = harness["answer"][0]["messages"][1]["content"]
    assert harness_text.count("09.01.2024") == 1 and harness_text.index("02.01.2024") < harness_text.index("09.01")


def test_a_failed_gpt_score_is_counted_then_redone_by_the_rerun_alone(tmp_path, monkeypatch):
    """The GPT score of one answer fails for good (HTTP 500): the LoCoMo judge's label stands, the
    question's GPT score counts 0 with its cause; the rerun redoes that row only (its judge call from
    the cache) once the endpoint answers."""
    sets = run_overrides(tmp_path, TINY, **{"data.memories": "[realtalk-2]", "method.name": "no_memory",
                                            "llm.max_attempts": 1, "run.max_error_rate": 0.5})
    with FakeOpenAI(faults=FaultPlan(pinned={"judge_realtalk_gpt_score": ["500"]})) as server:
        monkeypatch.setenv("OPENAI_BASE_URL", server.base_url)
        run = run_stages(CONFIG, sets)
        metrics = json.loads((run.dir / "metrics.json").read_text())
        block = metrics["judges"]["gpt-4o-mini"]
        assert block["gpt_score"]["failures"] == {"http_500": 1} and block["gpt_score"]["overall"]["n_failed"] == 1
        assert block["overall"]["n_failed"] == 0  # the label of that answer is there
        manifest = json.loads((run.dir / "08_judge_gpt-4o-mini.manifest.json").read_text())
        assert manifest["failed_rows"] == 1, manifest
        server.faults, start = FaultPlan(), server.request_count  # the endpoint answers again
        run_stages(CONFIG, sets, ["judge", "aggregate"])
        assert server.request_kinds[start:] == ["judge_realtalk_gpt_score"]
    block = json.loads((run.dir / "metrics.json").read_text())["judges"]["gpt-4o-mini"]
    assert block["gpt_score"]["failures"] == {} and block["gpt_score"]["overall"]["n_failed"] == 0


def test_a_stage_stopped_by_failed_gpt_scores_names_their_cause():
    from common.pipeline.engine import error_cause

    row = {"label": 1, "error": "", "scores": {"gpt_score": None, "gpt_score_error": "http_500: the gpt score failed"}}
    assert error_cause(row) == "http_500"
    assert error_cause({"label": None, "error": "timeout: x", "scores": row["scores"]}) == "timeout"


def test_the_dry_run_sizes_realtalk_from_its_own_data():
    cfg = load_config([CONFIG], [f"data.path={TINY}", "method.name=full_context"])
    est = dryrun.estimate(cfg)
    assert (est["questions"], est["scored"], est["memories"]) == (8, 8, 2)
    judge = [s for s in est["stages"] if s["stage"].startswith("08_judge")]
    assert [s["role"] for s in judge] == ["judge", "gpt_score"] and all(s["calls"] == 8 for s in judge)
    once = next(s for s in est["stages"] if s["role"] == "answer")["prompt_tokens"]
    twice = dryrun.estimate(load_config([CONFIG], [f"data.path={TINY}", "method.name=full_context",
                                                   "method.context_builder=official"]))
    assert next(s for s in twice["stages"] if s["role"] == "answer")["prompt_tokens"] > 1.5 * once
    official = dryrun.estimate(load_config(["configs/realtalk_official.yaml"], [f"data.path={TINY}"]))
    gpt = next(s for s in official["stages"] if s["role"] == "gpt_score")
    assert gpt["model"] == official["stages"][0]["model"] == "gpt-4o-mini-2024-07-18"  # the answer model


@pytest.mark.skipif(not SHARED.exists(), reason=f"shared REALTALK data not at {SHARED}")
def test_the_dry_run_of_the_release_counts_728_questions_and_two_judge_calls_each():
    est = dryrun.estimate(load_config([CONFIG], [f"data.path={SHARED}", "method.name=full_context",
                                                 "method.context_builder=official"]))
    assert (est["questions"], est["memories"], est["sessions"]) == (728, 10, 219)
    assert [s["calls"] for s in est["stages"] if s["stage"].startswith("08_judge")] == [728, 728]
    answer = next(s for s in est["stages"] if s["role"] == "answer")
    assert 40_000 < answer["prompt_tokens"] / 728 < 65_000  # every chat's sessions twice: 45k-59k tokens


@pytest.mark.slow
def test_make_realtalk_end_to_end_then_rerun_makes_zero_calls_then_tables_and_figures(tmp_path, fake_server):
    """EnSIMem on the fixture's chat 1 and the official full-context configuration on a real chat
    (the shared release's chat 3 when it is there, else the fixture's), LIMIT=3: one question of each
    category, 01-09, the same command again (no call), then `make tables figures`."""
    env = {k: v for k, v in os.environ.items() if k not in ("OPENAI_API_KEY", "OPENAI_BASE_URL")}
    env.update(OPENAI_BASE_URL=fake_server.base_url, HF_HUB_OFFLINE="1")
    results = tmp_path / "results"
    real = SHARED if SHARED.exists() else TINY
    for method, config, data, chat in (("ensimem", CONFIG, TINY, "realtalk-1"),
                                       ("full_context", "configs/realtalk_official.yaml", real,
                                        "realtalk-3" if real == SHARED else "realtalk-1")):
        sets = [s for s in run_overrides(tmp_path, data, **fake_vectors(fake_server.base_url), **{"run.name": method})
                if not s.startswith("data.path=")]  # REALTALK_DIR names the folder
        cmd = ["make", "-s", "realtalk", f"PY={sys.executable}", "LIMIT=3", f"MEMORIES={chat}",
               f"REALTALK_CONFIG={config}", f"SET={' '.join(sets)}"]
        first = subprocess.run(cmd, cwd=REPO, env={**env, "REALTALK_DIR": str(data)}, capture_output=True, text=True,
                               timeout=900)
        assert first.returncode == 0, first.stderr[-2000:]
        assert "REALTALK data quirks" in first.stdout and "LIMIT=3: N questions of each chat" in first.stdout
        run_dir = results / "realtalk" / method
        manifest = json.loads((run_dir / "01_preprocess.manifest.json").read_text())
        assert manifest["selection"]["by_category"] == {"inference": 1, "multi-hop": 1, "temporal": 1}
        metrics = json.loads((run_dir / "metrics.json").read_text())
        assert metrics["coverage"]["mark"] == "PARTIAL 3 / 728"
        assert metrics["dataset"]["status"] == ("official" if data == SHARED else "modified")
        block = metrics["judges"]["gpt-4o-mini"]
        assert block["gpt_score"]["overall"]["n"] == 3 and block["overall"]["n"] == 3
        exported = [json.loads(line) for line in (run_dir / "export" / "questions.jsonl").read_text().splitlines()]
        judged = {r["qid"]: r for r in (json.loads(x) for x in (run_dir / "08_judge_gpt-4o-mini.jsonl").open())}
        assert [e["judges"]["gpt-4o-mini"]["score"] for e in exported] == [
            judged[e["qid"]]["scores"]["gpt_score"] for e in exported]
        paid = fake_server.request_count
        second = subprocess.run(cmd, cwd=REPO, env={**env, "REALTALK_DIR": str(data)}, capture_output=True,
                                text=True, timeout=900)
        assert second.returncode == 0, second.stderr[-2000:]
        assert fake_server.request_count == paid, "a rerun made calls"
        assert "made no LLM call" in second.stdout + second.stderr
    out = subprocess.run(["make", "-s", "tables", "figures", f"PY={sys.executable}", f"RESULTS={results}",
                          f"FIGURES={tmp_path / 'figures'}"], cwd=REPO, env=env, capture_output=True, text=True,
                         timeout=600)
    table = (results / "tables" / "table_realtalk.md").read_text(encoding="utf-8")
    assert "EnSIMem" in table and "full context" in table and "GPT score (official, 0-1)" in table, out.stderr
    assert table.count("PARTIAL 3 / 728") == 6  # two runs x three metrics
    systems = (results / "tables" / "systems.md").read_text(encoding="utf-8")
    assert [line.split(" | ")[1] for line in systems.splitlines() if line.startswith("| S")] == ["realtalk"] * 2
    for name in ("figure_realtalk.png", "figure_main_realtalk.png"):
        assert (tmp_path / "figures" / name).exists(), out.stderr[-2000:]


@pytest.mark.cluster  # a whole pipeline in its own process (~30 s), as LoCoMo's sweep test: make test-slow
def test_make_sweep_runs_realtalk_and_ends_with_its_table(tmp_path, fake_server, monkeypatch, capsys):
    monkeypatch.setenv("OPENAI_BASE_URL", fake_server.base_url)
    sets = [s for s in run_overrides(tmp_path, TINY, **fake_vectors(fake_server.base_url))
            if not s.startswith(("run.name=", "run.results_dir="))]
    args = ["--systems", "full_context", "--benches", "realtalk", "--results", str(tmp_path / "sweep"),
            "--limit", "2"]
    for s in sets:
        args += ["--set", s]
    assert sweep.main(args) == 0
    table = (tmp_path / "sweep" / "sweep.md").read_text()
    assert (tmp_path / "sweep" / "realtalk" / "full_context" / "metrics.json").exists()
    assert "| realtalk |" in table and "token F1 (official)" in table and "PARTIAL 4 / 728" in table
    assert "sweep: 1 of 1 runs finished" in capsys.readouterr().out


def test_make_realtalk_passes_limit_memories_set_executor_and_dry_run():
    out = subprocess.run(["make", "-n", "realtalk", "realtalk-03_extract", "LIMIT=2", "MEMORIES=3", "EXECUTOR=ray",
                          "SET=method.name=mem0"], cwd=REPO, capture_output=True, text=True, check=True).stdout
    commands = [line for line in out.splitlines() if "run_all realtalk" in line or "REALTALK.03_extract" in line]
    assert len(commands) == 2, out
    for c in commands:
        for part in ("--config configs/realtalk.yaml", "--limit 2", "--memories 3", "--set method.name=mem0",
                     "--set run.executor=ray"):
            assert part in c, c
    dry = subprocess.run(["make", "-n", "realtalk", "DRY_RUN=1", "REALTALK_CONFIG=configs/realtalk_official.yaml"],
                         cwd=REPO, capture_output=True, text=True, check=True).stdout
    assert "REALTALK.01_preprocess --config configs/realtalk_official.yaml" in dry and "--dry-run" in dry


@pytest.mark.skipif(not SHARED.exists(), reason=f"shared REALTALK data not at {SHARED}")
def test_make_data_realtalk_fetches_the_ten_files_and_refuses_a_changed_one(tmp_path):
    """The download target against a local copy of the release (file://): ten files, each sha256-checked;
    a file whose bytes differ stops the target and is never moved into place."""
    source = tmp_path / "source"
    shutil.copytree(SHARED, source)
    cmd = ["make", "-s", "data-realtalk", f"REALTALK_URL=file://{source}", f"REALTALK_DATA={tmp_path / 'data'}"]
    ok = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True)
    assert ok.returncode == 0, ok.stderr
    assert sorted(p.name for p in (tmp_path / "data").iterdir()) == sorted(p.name for p in SHARED.glob("Chat_*.json"))
    (tmp_path / "data" / "Chat_3_Kevin_Paola.json").unlink()
    changed = source / "Chat_3_Kevin_Paola.json"
    changed.write_bytes(changed.read_bytes().replace(b"Paola", b"Paula", 1))
    bad = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True)
    assert bad.returncode != 0 and "FAILED" in bad.stdout + bad.stderr
    assert not (tmp_path / "data" / "Chat_3_Kevin_Paola.json").exists()
