"""Ablation and baseline runners (configs/experiments.yaml, common/pipeline/runner.py, make ablations)."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from common.benchmarks import subset
from common.core.config import ConfigError
from common.pipeline import experiments
from tests.conftest import REPO, TINY_LOCOMO, fake_vectors, rows, run_overrides

TINY_IDS = ["tiny-1:q0001", "tiny-1:q0002", "tiny-1:q0003", "tiny-2:q0001", "tiny-2:q0002", "tiny-2:q0003"]


def _env(server) -> dict[str, str]:
    import os

    env = {k: v for k, v in os.environ.items() if k not in ("OPENAI_API_KEY", "OPENAI_BASE_URL")}
    env["OPENAI_BASE_URL"] = server.base_url
    return env


def _subset(tmp_path: Path) -> Path:
    p = tmp_path / "subset.yaml"
    p.write_text(yaml.safe_dump({"name": "tiny", "question_ids": TINY_IDS}), encoding="utf-8")
    return p


def test_experiments_file_names_every_paper_ablation():
    exp = experiments.load()
    names = {v.name for v in exp.variants}
    assert {"base", "episodes_turn", "episodes_session", "property_fine", "property_broad_plus",
            "property_very_broad", "dense_only", "prompts_code_rules", "plan_validation_code", "plan_audit",
            "answer_rerank", "answer_verify"} <= names
    assert [exp.variant(f"fixed_k{k}").set["retrieve.fixed_k"] for k in (1, 3, 5, 8, 15, 20)] == [1, 3, 5, 8, 15, 20]
    assert {b.name for b in exp.baselines} == {"full_context", "rag_turns", "no_memory", "oracle"}
    assert "upper bound" in exp.baseline("oracle").label
    # Every variant's overrides form a valid config.
    for v in exp.variants + exp.baselines:
        from common.core.config import load_config

        load_config(["configs/locomo.yaml"], v.overrides())


def test_stored_subset_is_88_questions_stratified_and_regenerable(real_locomo):
    from common.benchmarks.registry import adapter as registry

    stored = subset.load_subset("configs/subsets/locomo_ablation88.yaml")
    doc = yaml.safe_load(stored.path.read_text())
    adapter = registry("locomo")
    data = adapter.load(real_locomo)
    assert len(stored.question_ids) == 88
    cats = {g.qid: g.category for g in data.gold}
    counts = {c: sum(cats[q] == c for q in stored.question_ids) for c in (1, 2, 3, 4)}
    assert counts == {1: 22, 2: 22, 3: 22, 4: 22}
    from common.core.io import sha256_file

    assert doc["recipe"]["source_sha256"] == sha256_file(real_locomo)
    # The recipe regenerates the same ids; another seed gives other ids.
    assert subset.draw("locomo", data.gold, 88, 42, adapter.is_scored) == list(stored.question_ids)
    assert subset.draw("locomo", data.gold, 88, 7, adapter.is_scored) != list(stored.question_ids)


def test_subset_errors_name_the_file(tmp_path):
    bad = tmp_path / "s.yaml"
    bad.write_text("question_ids: [a, a]\n")
    with pytest.raises(ConfigError, match="s.yaml: question_ids: duplicate"):
        subset.load_subset(bad)
    with pytest.raises(ConfigError, match="subset file not found"):
        subset.load_subset(tmp_path / "missing.yaml")


def test_subset_with_an_unknown_id_is_refused_before_any_artifact(tmp_path):
    from tests.conftest import run_stages

    p = tmp_path / "s.yaml"
    p.write_text(yaml.safe_dump({"name": "x", "question_ids": ["tiny-1:q0001", "nope:q1"]}))
    with pytest.raises(ValueError, match="question_ids: 1 id"):
        run_stages("configs/locomo.yaml", run_overrides(tmp_path, TINY_LOCOMO, **{"data.subset": str(p)}),
                   ["preprocess"])
    assert not (tmp_path / "results" / "locomo" / "t" / "01_questions.jsonl").exists()


@pytest.mark.slow
def test_make_ablations_runs_every_variant_reusing_cached_work(tmp_path, fake_server):
    # The vectors come from the fake server's /v1/embeddings: what is checked here is which work
    # each variant reuses or pays for, and the one runner process need not import the CPU model.
    sets = " ".join(s for s in run_overrides(tmp_path, TINY_LOCOMO, **fake_vectors(fake_server.base_url))
                    if not s.startswith("run.name"))
    cmd = ["make", "-s", "ablations", f"PY={sys.executable}", f"SUBSET={_subset(tmp_path)}", f"SET={sets}"]
    done = subprocess.run(cmd, cwd=REPO, env=_env(fake_server), capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stderr[-3000:]
    exp = experiments.load()
    root = tmp_path / "results" / "locomo"
    for v in exp.variants:
        d = root / f"ablation_tiny_{v.name}"
        metrics = json.loads((d / "metrics.json").read_text())
        judged = rows(d / "08_judge_gpt-4o-mini.jsonl")
        assert metrics["judges"]["gpt-4o-mini"]["overall"]["k"] == sum(r["label"] == 1 for r in judged)
        assert [q["qid"] for q in rows(d / "01_questions.jsonl")] == TINY_IDS
        resolved = yaml.safe_load((d / "config.resolved.yaml").read_text())
        for key, value in v.set.items():
            node = resolved  # a key names a section, a field, or a block's field (answer.routes.count)
            for part in key.split("."):
                node = node[part]
            assert node == value, (v.name, key)
        assert f"| {v.name} |" in done.stdout
    # One design choice each: partitioning is paid once (theme variants share it; per-turn and
    # per-session need no LLM), extraction once per distinct (episode set, granularity).
    counts = fake_server.counts_by_kind()
    n_sessions = len(rows(root / "ablation_tiny_base" / "01_sessions.jsonl"))
    assert counts["partition"] == n_sessions
    episodes = {v: sum(len(r["episodes"]) for r in rows(root / f"ablation_tiny_{v}" / "02_episodes.jsonl"))
                for v in ("base", "episodes_turn", "episodes_session")}
    # Theme episodes are extracted once per distinct extraction prompt: the four granularities, no
    # granularity block (property_none) and the code_rules set's checklist (prompts_code_rules); the
    # other variants (the projections included: they post-process records) reuse base's records.
    assert counts["extract"] == 6 * episodes["base"] + episodes["episodes_turn"] + episodes["episodes_session"]
    # A rerun pays for nothing.
    paid = fake_server.request_count
    again = subprocess.run(cmd, cwd=REPO, env=_env(fake_server), capture_output=True, text=True, timeout=900)
    assert again.returncode == 0, again.stderr[-3000:]
    assert fake_server.request_count == paid


def test_runner_rejects_unknown_variants_and_reports_failed_runs(tmp_path, fake_server, monkeypatch, capsys):
    from common.pipeline import runner

    assert runner.main(["--only", "nope"], group="ablations", benchmark="locomo") == 2
    assert "unknown ablations variant" in capsys.readouterr().err
    # No endpoint: every run fails, each is reported, the exit code says so.
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    sets = [a for s in run_overrides(tmp_path, TINY_LOCOMO) if not s.startswith("run.name") for a in ("--set", s)]
    code = runner.main([*sets, "--only", "no_memory"], group="baselines", benchmark="locomo")
    out = capsys.readouterr()
    assert code == 1 and "1 of 1 baselines runs failed: no_memory" in out.err
    assert "FAILED" in out.out
