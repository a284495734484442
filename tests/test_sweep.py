"""make sweep: several systems x benchmarks in one command, each run in order (local executor),
one table of all of them at the end; a failed run is counted and named, never dropped."""
from __future__ import annotations

import subprocess

import pytest

from common.report import sweep
from tests.conftest import REPO, TINY_LOCOMO, fake_vectors, run_overrides


def test_sweep_plans_every_combination_and_rejects_unknown_input(tmp_path):
    runs = sweep.plan(["ensimem", "mem0"], ["locomo", "beam"], [])
    assert [(r.benchmark, r.name) for r in runs] == [("locomo", "ensimem"), ("locomo", "mem0"),
                                                     ("beam", "ensimem"), ("beam", "mem0")]
    assert sweep.plan(["ensimem"], ["locomo"], ["configs/locomo.yaml"])[0].name == "ensimem-locomo"
    with pytest.raises(ValueError, match="--benches"):
        sweep.plan(["ensimem"], ["nope"], [])
    with pytest.raises(ValueError, match="--configs"):
        sweep.plan(["ensimem"], ["locomo"], [str(tmp_path / "missing.yaml")])
    cmd = sweep.command(runs[1], tmp_path, "ray", ["--limit=2"])
    assert cmd[2:5] == ["common.pipeline.run_all", "locomo", "--config"] and "method.name=mem0" in cmd
    assert "run.executor=ray" in cmd and f"run.results_dir={tmp_path}" in cmd and cmd[-1] == "--limit=2"


def test_make_sweep_passes_systems_benches_configs_and_executor():
    out = subprocess.run(["make", "-n", "sweep", "SYSTEMS=ensimem,mem0,langmem", "BENCHES=locomo,beam",
                          "CONFIGS=configs/locomo.yaml", "EXECUTOR=ray", "LIMIT=2"], cwd=REPO, capture_output=True,
                         text=True, check=True).stdout
    assert "common.report.sweep --systems ensimem,mem0,langmem --benches locomo,beam" in out
    assert "--configs configs/locomo.yaml --executor ray --limit 2" in out


@pytest.mark.cluster  # two whole pipelines in their own processes (~1 min): make test-slow
def test_sweep_runs_in_sequence_and_ends_with_one_table(tmp_path, fake_server, monkeypatch, capsys):
    monkeypatch.setenv("OPENAI_BASE_URL", fake_server.base_url)
    sets = [s for s in run_overrides(tmp_path, TINY_LOCOMO, **fake_vectors(fake_server.base_url))
            if not s.startswith(("run.name=", "run.results_dir="))]
    args = ["--systems", "ensimem,full_context", "--benches", "locomo", "--results", str(tmp_path / "sweep")]
    for s in sets:
        args += ["--set", s]
    assert sweep.main(args) == 0
    out = capsys.readouterr().out
    table = (tmp_path / "sweep" / "sweep.md").read_text()
    for name in ("ensimem", "full_context"):
        assert (tmp_path / "sweep" / "locomo" / name / "metrics.json").exists()
        assert f"| {name} |" in table
    assert "sweep: 2 of 2 runs finished" in out and "executor local" in out
