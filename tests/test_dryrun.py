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


def test_beam_answers_are_priced_with_a_buffer_sized_from_beams_own_turns(tmp_path):
    """The paper's 7,620-token LoCoMo buffer (7,470 + the plan) is about 19 episodes of LoCoMo's short
    turns; a BEAM chat's messages are ten times as long, and so is the buffer its answers are sent."""
    import shutil
    from pathlib import Path

    import pytest

    from common.benchmarks import beam
    from common.core.tokens import count_tokens
    from common.method.render import render_turn

    shared = REPO.parent / "shared" / "data" / "beam" / "100K"
    locomo_json = REPO.parent / "shared" / "data" / "locomo" / "locomo10.json"
    for needed in (shared, locomo_json):  # the test compares BEAM's buffer with LoCoMo's: both must be there
        if not needed.exists():
            pytest.skip(f"shared data not at {needed}")
    tier = tmp_path / "100K"
    shutil.copytree(shared / "1", tier / "1")  # one real chat: its 20 questions, its own long turns

    def answer_per_question(config: str, data: Path, **sets: object) -> tuple[float, str]:
        est = dryrun.estimate(load_config([config], run_overrides(tmp_path, data, **sets)))
        row = _stage(est, "07_answer")
        return row["prompt_tokens"] / row["calls"], row["basis"]

    locomo, _ = answer_per_question("configs/locomo.yaml", locomo_json,
                                    **{"data.memories": "[conv-26]", "data.question_limit": 4})
    beam_q, basis = answer_per_question("configs/beam.yaml", tier, **{"data.memories": "[1]", "data.question_limit": 4})
    assert 7000 < locomo < 8500  # LoCoMo: the paper's mean, as before
    turns = [count_tokens(render_turn(t, False)) for s in beam.load_beam(tier).sessions
             if s.memory_id == "beam-100K-1" for t in s.turns]
    mean_turn = sum(turns) / len(turns)
    expected = min(7470 / (8 * 48.2) * 8 * mean_turn, sum(turns))  # 19 episodes of BEAM turns, at most the chat
    assert beam_q > 5 * locomo
    assert abs(beam_q - expected) < 700  # the rest: the answer prompt, the plan text and the question
    assert f"x {mean_turn:.0f} tokens per turn of this data" in basis
    capped, _ = answer_per_question("configs/beam.yaml", tier, **{"data.memories": "[1]", "data.question_limit": 4,
                                                                  "retrieve.max_buffer_tokens": 2000})
    assert capped < 3000
