"""--dry-run: exact counts known up front, no request, nothing written, resumed rows subtracted."""
from __future__ import annotations

import subprocess
import sys

from common.core.config import load_config
from common.pipeline import dryrun
from tests.conftest import REPO, TINY_LOCOMO, rows, run_overrides, run_stages


def _stage(est, name):
    return next(s for s in est["stages"] if s["stage"].startswith(name))


def test_estimate_counts_are_exact_where_known_and_nothing_is_written(tmp_path):
    cfg = load_config(["configs/locomo.yaml"], run_overrides(tmp_path, TINY_LOCOMO))
    est = dryrun.estimate(cfg)
    assert (est["unique_sessions"], est["questions"], est["scored"]) == (4, 11, 9)
    assert _stage(est, "02_episodes")["calls"] == 4
    assert _stage(est, "05_plan")["calls"] == _stage(est, "07_answer")["calls"] == 11
    assert _stage(est, "08_judge")["calls"] == 9
    assert est["total"]["cost_usd"] >= 0 and all(s["prompt_tokens"] > 0 for s in est["stages"])
    assert not (tmp_path / "results").exists()
    # A baseline skips 02-05 entirely; full context costs more input than no memory.
    def baseline(method):
        return dryrun.estimate(load_config(["configs/locomo.yaml"],
                                           run_overrides(tmp_path, TINY_LOCOMO, **{"method.name": method})))

    full, none = baseline("full_context"), baseline("no_memory")
    assert [s["stage"] for s in full["stages"]] == ["07_answer", "08_judge_gpt-4o-mini"]
    assert _stage(full, "07_answer")["prompt_tokens"] > _stage(none, "07_answer")["prompt_tokens"]


def test_dry_run_subtracts_rows_already_in_the_run(tmp_path, fake_server, monkeypatch):
    monkeypatch.setenv("OPENAI_BASE_URL", fake_server.base_url)
    sets = run_overrides(tmp_path, TINY_LOCOMO)
    run_stages("configs/locomo.yaml", sets, ["preprocess", "episodes"])
    est = dryrun.estimate(load_config(["configs/locomo.yaml"], sets))
    p = _stage(est, "02_episodes")
    assert p["already_done"] == len(rows(tmp_path / "results" / "locomo" / "t" / "02_episodes.jsonl")) == 4
    assert p["to_make"] == 0 and p["prompt_tokens"] == 0


def test_make_dry_run_makes_no_request(tmp_path, fake_server):
    import os

    env = {**os.environ, "OPENAI_BASE_URL": fake_server.base_url}
    sets = " ".join(run_overrides(tmp_path, TINY_LOCOMO))
    done = subprocess.run(["make", "-s", "locomo", f"PY={sys.executable}", "DRY_RUN=1", f"SET={sets}"], cwd=REPO,
                          env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "| total |" in done.stdout and "Dry run (locomo" in done.stdout
    assert fake_server.request_count == 0
    assert not (tmp_path / "results" / "locomo" / "t").exists()


def test_an_llm_stage_of_the_graph_without_an_estimator_is_listed(tmp_path, monkeypatch):
    """The dry run reads its LLM stages from the graph: a new one is a visible row, never dropped."""
    from common.pipeline import graph

    toy = graph.Stage(10, "critique", "x:y", reads=("answers",), writes=("10_critique.jsonl",),
                      summary="a second opinion", role="answer")
    monkeypatch.setattr(dryrun, "llm_stages", lambda: graph.llm_stages() + [toy])
    cfg = load_config(["configs/locomo.yaml"], run_overrides(tmp_path, TINY_LOCOMO))
    row = _stage(dryrun.estimate(cfg), "10_critique")
    assert row["role"] == "answer" and row["calls"] == 0
    assert row["basis"] == "no estimator for this stage in common.pipeline.dryrun"
    assert "10_critique" in dryrun.format_estimate(dryrun.estimate(cfg))
