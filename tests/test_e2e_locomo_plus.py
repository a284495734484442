"""LoCoMo-Plus end to end against the local fake OpenAI server: ``make locomo-plus LIMIT=...`` (then 0
calls), the judge requests as the official judge sends them, the official answer temperature as an
option, the dry run sized from its own data, the tables and figures, the sweep, an outside system,
and ``make data-locomo-plus``'s checksum."""
from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from common.benchmarks import locomo_plus as data_lp
from common.core.tokens import count_tokens
from common.evaluation import locomo_plus as lp
from common.report import sweep
from tests.conftest import REPO, STAGE_ORDER, TINY_LOCOMO, fake_vectors, rows, run_overrides, run_stages

TINY_PLUS = REPO / "tests" / "fixtures" / "locomo_plus_tiny.json"


def _env(server) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("OPENAI_API_KEY", "OPENAI_BASE_URL")}
    env.update(OPENAI_BASE_URL=server.base_url, HF_HUB_OFFLINE="1", LOCOMO_PLUS_JSON=str(TINY_PLUS),
               LOCOMO_JSON=str(TINY_LOCOMO))
    return env


def _sets(tmp_path: Path, server, **extra: object) -> list[str]:
    return [s for s in run_overrides(tmp_path, TINY_PLUS, **fake_vectors(server.base_url), **extra)
            if not s.startswith("data.path=")]  # LOCOMO_PLUS_JSON names the file, as a user gives it


@pytest.mark.slow
def test_make_locomo_plus_limit_end_to_end_then_rerun_makes_zero_calls(tmp_path, fake_server):
    """Eight questions drawn across the six categories of the tiny fixture: 01-09, a rerun with no call,
    then `make tables figures` with the LoCoMo-Plus table, both parser readings and its figures."""
    env = _env(fake_server)
    cmd = ["make", "-s", "locomo-plus", f"PY={sys.executable}", "LIMIT=8",
           f"SET={' '.join(_sets(tmp_path, fake_server))}"]
    first = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=600)
    assert first.returncode == 0, first.stderr[-2000:]
    run_dir = tmp_path / "results" / "locomo_plus" / "t"
    gold = rows(run_dir / "01_gold.jsonl")
    assert len(gold) == 8 and {g["question_type"] for g in gold} == set(data_lp.CATEGORIES)
    manifest = json.loads((run_dir / "01_preprocess.manifest.json").read_text())
    assert manifest["selection"]["rule"] == data_lp.LIMIT_RULE and manifest["stitching"]["items"] >= 1
    judge_requests = [r for r in fake_server.requests if r.get("max_tokens") == 512]
    assert len(judge_requests) == 8
    for body in judge_requests:  # the official call: one user message, prefix, no JSON mode, temperature 0
        assert len(body["messages"]) == 1 and body["messages"][0]["role"] == "user"
        assert body["messages"][0]["content"].startswith("Below is a conversation between two people: A and B.")
        assert "response_format" not in body and body["temperature"] == 0.0
    metrics = json.loads((run_dir / "metrics.json").read_text())
    block = metrics["judges"]["gpt-4o-mini"]
    assert set(block["variants"]["official"]["by_category"]) == set(data_lp.CATEGORIES)
    assert metrics["coverage"]["mark"] == "PARTIAL 8 / 2,387"
    paid = fake_server.request_count
    second = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=600)
    assert second.returncode == 0, second.stderr[-2000:]
    assert fake_server.request_count == paid, "a rerun made calls"
    assert "made no LLM call" in second.stdout + second.stderr
    results = tmp_path / "results"
    out = subprocess.run(["make", "-s", "tables", "figures", f"PY={sys.executable}", f"RESULTS={results}",
                          f"FIGURES={tmp_path / 'figures'}"], cwd=REPO, env=env, capture_output=True, text=True,
                         timeout=300)
    table = (results / "tables" / "table_locomo_plus.md").read_text()
    assert "official parser (headline)" in table and "strict parser (JSON only)" in table, out.stderr[-2000:]
    assert "PARTIAL 8 / 2,387" in table and "| COG |" in table
    systems = (results / "tables" / "systems.md").read_text()
    assert "| locomo_plus | t |" in systems and "locomo_plus_official_judge" in systems
    for name in ("figure_locomo_plus", "figure_main_locomo_plus"):
        assert (tmp_path / "figures" / f"{name}.png").exists(), out.stderr[-2000:]


def test_the_official_answer_sampling_is_an_option(tmp_path, fake_server, monkeypatch):
    """configs/locomo_plus_answer_t03.yaml: the answer call at evaluate_qa.py's temperature 0.3 and 1,024
    tokens; the harness's default stays 0 and 256."""
    monkeypatch.setenv("OPENAI_BASE_URL", fake_server.base_url)
    monkeypatch.setenv("LOCOMO_JSON", str(TINY_LOCOMO))
    sampled = []
    for name, config in (("default", "configs/locomo_plus.yaml"), ("t03", "configs/locomo_plus_answer_t03.yaml")):
        start = len(fake_server.requests)
        sets = run_overrides(tmp_path / name, TINY_PLUS, **{"method.name": "no_memory", "data.question_limit": 2})
        run_stages(config, sets, STAGE_ORDER[:7])
        sampled.append({(b["temperature"], b["max_tokens"]) for b in fake_server.requests[start:]})
    assert sampled == [{(0.0, 256)}, {(0.3, 1024)}]


def test_dry_run_sizes_it_from_its_own_data(tmp_path):
    env = {**os.environ, "LOCOMO_PLUS_JSON": str(TINY_PLUS), "LOCOMO_JSON": str(TINY_LOCOMO)}
    out = subprocess.run(["make", "-s", "locomo-plus", "DRY_RUN=1", f"PY={sys.executable}",
                          f"SET=run.results_dir={tmp_path}"], cwd=REPO, env=env, capture_output=True, text=True,
                         timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    text = out.stdout
    assert "Dry run (locomo_plus, method ensimem): 7 memories, 16 unique sessions of 19" in text
    judge = next(line for line in text.splitlines() if line.startswith("| 08_judge_gpt-4o-mini"))
    cells = [c.strip() for c in judge.split("|")]
    data = data_lp.load_locomo_plus(TINY_PLUS, data_lp.Source(TINY_LOCOMO))
    expected = lp.judge_prompt_tokens(data.gold, "a " * 12, count_tokens)
    assert cells[3] == "16" and int(cells[6].replace(",", "")) == expected  # the exact LoCoMo-Plus prompts
    assert not (tmp_path / "locomo_plus").exists()  # nothing written


def test_sweep_takes_the_make_target_name():
    runs = sweep.plan(["ensimem", "full_context"], ["locomo-plus"], [])
    assert [(r.benchmark, r.name) for r in runs] == [("locomo_plus", "ensimem"), ("locomo_plus", "full_context")]
    assert sweep.command(runs[0], Path("/r"), "local", [])[3:6] == ["locomo_plus", "--config",
                                                                   "configs/locomo_plus.yaml"]


@pytest.mark.cluster  # two whole pipelines in their own processes: make test-slow
def test_make_sweep_on_locomo_plus_ends_with_its_table(tmp_path, fake_server):
    env = _env(fake_server)
    sets = [s for s in _sets(tmp_path, fake_server) if not s.startswith(("run.name=", "run.results_dir="))]
    out = subprocess.run(["make", "-s", "sweep", f"PY={sys.executable}", "BENCHES=locomo-plus",
                          "SYSTEMS=full_context,no_memory", "LIMIT=6", f"RESULTS={tmp_path / 'sweep'}",
                          f"SET={' '.join(sets)}"], cwd=REPO, env=env, capture_output=True, text=True, timeout=900)
    assert out.returncode == 0, out.stderr[-2000:]
    table = (tmp_path / "sweep" / "sweep.md").read_text()
    assert "| locomo_plus | full_context |" in table and "| locomo_plus | no_memory |" in table
    assert "LoCoMo-Plus: official mean score" in table


@pytest.mark.skipif(importlib.util.find_spec("mem0") is None, reason="mem0ai not installed")
def test_an_outside_system_runs_on_locomo_plus(tmp_path, fake_server, monkeypatch):
    """mem0 needs nothing LoCoMo-Plus-specific: a stitched memory is a conversation of two speakers."""
    monkeypatch.setenv("OPENAI_BASE_URL", fake_server.base_url)
    monkeypatch.setenv("LOCOMO_JSON", str(TINY_LOCOMO))
    sets = run_overrides(tmp_path, TINY_PLUS, **fake_vectors(fake_server.base_url),
                         **{"method.name": "mem0", "data.memories": "[tiny-2]", "data.question_limit": 3})
    run = run_stages("configs/locomo_plus.yaml", sets, STAGE_ORDER)
    rets = rows(run.path("retrievals"))
    assert len(rets) == 3 and all(r["mode"] == "mem0" for r in rets)
    assert fake_server.counts_by_kind()["mem0_extraction"] > 0
    assert json.loads(run.path("metrics").read_text())["judges"]["gpt-4o-mini"]["overall"]["n"] == 3


def test_make_data_locomo_plus_checks_the_sha256(tmp_path):
    """The download is checked against configs/datasets.sha256 (curl stood in by a copy of a file)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    curl = bin_dir / "curl"
    curl.write_text('#!/bin/sh\n# -fsSL -o OUT URL: write $SOURCE to OUT\ncp "$SOURCE" "$3"\n')
    curl.chmod(0o755)
    work = tmp_path / "work"
    work.mkdir()
    (work / "configs").mkdir()
    (work / "configs" / "datasets.sha256").write_text((REPO / "configs" / "datasets.sha256").read_text())
    (work / "Makefile").write_text((REPO / "Makefile").read_text())
    (work / "data").mkdir()
    (work / "data" / "locomo10.json").write_text("{}")  # present: only the LoCoMo-Plus file is fetched
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}", "SOURCE": str(TINY_PLUS)}
    bad = subprocess.run(["make", "-s", "data-locomo-plus"], cwd=work, env=env, capture_output=True, text=True)
    assert bad.returncode != 0 and "FAILED" in bad.stdout + bad.stderr
    assert not (work / "data" / "locomo_plus.json").exists()
    release = REPO.parent / "shared" / "data" / "locomo-plus" / "locomo_plus.json"
    if release.exists():  # the released file passes the same check
        env["SOURCE"] = str(release)
        ok = subprocess.run(["make", "-s", "data-locomo-plus"], cwd=work, env=env, capture_output=True, text=True)
        assert ok.returncode == 0, ok.stderr
        assert (work / "data" / "locomo_plus.json").read_bytes() == release.read_bytes()


@pytest.mark.cluster  # a local Ray cluster started by the run: make test-slow
def test_make_locomo_plus_on_ray_reruns_free_and_scores_as_the_local_engine(tmp_path, fake_server):
    """EXECUTOR=ray: one task per memory (stitched memories share sessions across tasks), a rerun with
    no request, and the same scores as the local engine."""
    env = _env(fake_server)
    scores = {}
    for executor in ("ray", "local"):
        sets = _sets(tmp_path / executor, fake_server, **{"run.name": executor})
        cmd = ["make", "-s", "locomo-plus", f"PY={sys.executable}", "LIMIT=8", f"EXECUTOR={executor}",
               f"SET={' '.join(sets)}"]
        first = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=900)
        assert first.returncode == 0, first.stderr[-2000:]
        if executor == "ray":
            paid = fake_server.request_count
            again = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=900)
            assert again.returncode == 0 and fake_server.request_count == paid, again.stderr[-2000:]
        metrics = json.loads((tmp_path / executor / "results" / "locomo_plus" / executor / "metrics.json").read_text())
        block = metrics["judges"]["gpt-4o-mini"]["variants"]["official"]
        scores[executor] = {c: s["score"] for c, s in block["by_category"].items()}
    assert scores["ray"] == scores["local"]
