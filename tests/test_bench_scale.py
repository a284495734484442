"""`make bench-scale` (bench/scale.py): the fit to S = 500, the verdicts, and one tiny real run."""
from __future__ import annotations

import json

import pytest
import yaml

from bench import scale
from bench.pipeline import PipelineRun, StageResult
from bench.procs import Measured
from bench.scale_data import LME_FILE, LOCOMO_FILE
from tests.conftest import needs_files


def _run(sessions: int, cpu04: float, cpu06: float, rss: int) -> dict:
    def row(stage, cpu):
        return {"stage": stage, "cpu_seconds": cpu, "process_wall_seconds": cpu * 1.5, "peak_rss_bytes": rss}
    return {"sessions": sessions, "stages": [row("04_index", cpu04), row("06_retrieve", cpu06)]}


def test_fit_extrapolates_each_cpu_stage_to_s500_and_says_so():
    runs = [_run(10, 12.0, 5.0, 100), _run(20, 22.0, 7.0, 150), _run(40, 42.0, 11.0, 250)]
    f = scale.fit(runs, 500, questions=4)
    assert f["label"].startswith("EXTRAPOLATED")
    cpu04 = f["04_index"]["cpu_seconds"]
    assert cpu04["a"] == pytest.approx(2.0) and cpu04["b_per_session"] == pytest.approx(1.0)
    assert cpu04["at_S500"] == pytest.approx(502.0) and cpu04["r2"] == pytest.approx(1.0)
    # the intercept (imports, model load) is paid once; the per-session work grows with the questions
    assert cpu04["at_S500_Q500"] == pytest.approx(2.0 + 1.0 * 500 * 500 / 4, rel=1e-3)
    assert cpu04["growth_measured"] is True
    assert f["06_retrieve"]["cpu_seconds"]["at_S500"] == pytest.approx(3.0 + 0.2 * 500)
    rss = f["04_index"]["peak_rss_bytes"]
    assert rss["at_S500"] == pytest.approx(50 + 5 * 500) and "at_S500_Q500" not in rss
    shrinking = scale.fit([_run(10, 12.0, 9.0, 100), _run(20, 22.0, 8.0, 100)], 500, questions=2)
    assert shrinking["06_retrieve"]["cpu_seconds"]["growth_measured"] is False


def _result(stage, calls, wall, cpu, rss, manifest):
    proc = Measured(["x"], 0, wall, rss, cpu, 0.0, "log")
    return StageResult(stage, proc, {"partition": calls} if calls else {}, manifest)


def test_stage_rows_and_verdicts():
    results = [_result("02_episodes", 80, 2.0, 1.0, 200 * 2**20,
                       {"wall_seconds": 1.1, "dedup": {"calls_saved_by_reuse": 20}}),
               _result("04_index", 0, 30.0, 25.0, 900 * 2**20,
                       {"wall_seconds": 20.0, "embedding": {"texts_per_second": 70.0, "encoded": 1400}})]
    rows = scale.stage_rows(results, latency=0.2, concurrency=16)
    part, idx = rows
    assert part["calls"] == 80 and part["calls_saved_by_reuse"] == 20 and part["bound_seconds"] == 1.0
    assert part["ratio"] == pytest.approx(1.1) and part["ratio_passed"] is True
    assert idx["ratio_passed"] is None and idx["texts_per_second"] == 70.0 and idx["cpu_seconds"] == 25.0
    run = {"stages": rows, "peak_rss_bytes": 900 * 2**20, "rerun_calls": 0}
    assert scale.verdicts(run, 600.0) == {"cpu_side": True, "peak_rss": True, "llm_ratio": True, "rerun_calls": True}
    bad = scale.verdicts({**run, "rerun_calls": 3, "peak_rss_bytes": 5 * 2**30}, 1300.0)
    assert bad == {"cpu_side": False, "peak_rss": False, "llm_ratio": True, "rerun_calls": False}


def test_cpu_side_extrapolates_encoding_by_distinct_sessions_and_the_rest_by_questions():
    stages = [{"stage": "04_index", "encode_cpu_seconds": 40.0}, {"stage": "06_retrieve"}]
    run = {"questions": 20, "data": {"distinct_sessions": 800}, "stages": stages, "cpu_side_seconds": 100.0}
    x = scale.extrapolate_cpu_side(run, questions_full=500, distinct_full=2500)
    # 40 s of encoding x 2500/800 sessions + 60 s of the rest x 500/20 questions
    assert x["seconds"] == pytest.approx(40 * 3.125 + 60 * 25)
    assert x["label"].startswith("EXTRAPOLATED") and "2500/800" in x["label"]
    assert x["distinct_sessions"] == {"measured": 800, "full": 2500}
    full = scale.extrapolate_cpu_side({**run, "questions": 500}, 500, 2500)
    assert full == {"seconds": 100.0, "measured_questions": 500, "label": "measured"}


def test_pipeline_run_names_the_benchmark_package():
    run = PipelineRun("x", "configs/longmemeval.yaml", [], package="LongMemEval")
    assert run.stage_command("05_plan")[2] == "LongMemEval.05_plan"
    assert PipelineRun("x", "configs/locomo.yaml", []).stage_command("05_plan")[2] == "LoCoMo.05_plan"


@pytest.mark.slow
@needs_files(LOCOMO_FILE, LME_FILE, why="bench-scale generates its sets from these sessions")
def test_tiny_bench_scale_run_end_to_end(tmp_path):
    """Two questions x 3 sessions: every stage runs, the report has its figures, the rerun is free.

    The vectors come from the fake server's /v1/embeddings (``--set``, as tests/test_bench.py
    does), so that no stage process pays for importing and loading the CPU model."""
    code = scale.main(["--preset", "s", "--limit", "2", "--sessions", "3", "--pool", "4", "--latency", "0.01",
                       "--concurrency", "4", "--out", str(tmp_path),
                       "--set", "embedding.backend=openai", "--set", "embedding.model=fake-embed"])
    assert code == 0
    (resolved,) = (tmp_path / "work-scale").rglob("config.resolved.yaml")
    assert yaml.safe_load(resolved.read_text())["embedding"]["backend"] == "openai"  # --set reached the stages
    r = json.loads((tmp_path / "scale_s.json").read_text())
    (run,) = r["runs"]
    assert [s["stage"] for s in run["stages"]][0] == "01_preprocess" and len(run["stages"]) == 9
    by = {s["stage"]: s for s in run["stages"]}
    assert by["02_episodes"]["calls"] > 0 and by["08_judge"]["calls"] == 2
    # a pool of 4 for 2 x 3 slots: some session is in both haystacks and partitioned once
    assert run["data"]["reused_share"] > 0 and by["02_episodes"]["calls_saved_by_reuse"] > 0
    assert by["04_index"]["texts_per_second"] and by["04_index"]["cpu_seconds"] > 0
    assert run["rerun_calls"] == 0 and r["passed"]["rerun_calls"] is True
    assert run["disk_bytes"]["run_dir"] > 0 and run["disk_bytes"]["llm_cache"] > 0
    assert r["cpu_side_500"]["label"].startswith("EXTRAPOLATED")
    md = (tmp_path / "scale_s.md").read_text()
    assert "| 04_index |" in md and "rerun 0 calls" in md


def test_a_deduplicated_stage_manifest_times_both_passes(tmp_path, monkeypatch):
    """02 on haystacks sharing a session runs twice (unique sessions, then the copies from the
    cache); its manifest wall must cover the first pass's calls, not only the cached second."""
    from common.core.config import ROLES
    from tests import conftest
    from tests.fake_openai import FakeOpenAI

    tiny = conftest.REPO / "tests" / "fixtures" / "lme_tiny.json"
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    with FakeOpenAI(latency=0.4) as server:
        sets = conftest.run_overrides(tmp_path, tiny) + [f"models.{r}.base_url={server.base_url}" for r in ROLES]
        run = conftest.run_stages("configs/longmemeval.yaml", sets, ["01_preprocess", "02_episodes"])
        partitions = server.counts_by_kind()["partition"]
    m = json.loads((run.dir / "02_episodes.manifest.json").read_text())
    assert m["dedup"]["calls_saved_by_reuse"] > 0 and partitions == m["dedup"]["unique"]
    assert m["wall_seconds"] >= 0.4  # at least one call's latency (concurrency 4)
