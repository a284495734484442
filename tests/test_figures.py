"""Figures 2 and 3 (common.report.figures) from hand-built ablation runs (see tests/test_tables.py)."""
from __future__ import annotations

import argparse
import json
import shutil
from pathlib import Path

import yaml

from common.pipeline.experiments import load as load_experiments
from common.report import figures
from tests.test_tables import PRIMARY, REPO, ablation_runs, recount


def _all_panel_variants() -> list[str]:
    exp = load_experiments()
    names = [v for p in ("episode_granularity", "property_granularity", "budget") for v in exp.panels[p]]
    return list(dict.fromkeys(names + ["base"]))


def _run(tmp_path: Path, *extra: str) -> tuple[int, Path]:
    out = tmp_path / "figures"
    return figures.main(["--results", str(tmp_path / "results"), "--out", str(out), *extra]), out


def test_figures_written_and_every_point_traced(tmp_path):
    runs = ablation_runs(tmp_path / "results", _all_panel_variants())
    code, out = _run(tmp_path)
    assert code == 0
    for name in ("figure2", "figure3"):
        png, pdf = (out / f"{name}.png").read_bytes(), (out / f"{name}.pdf").read_bytes()
        assert png.startswith(b"\x89PNG") and len(png) > 10_000
        assert pdf.startswith(b"%PDF") and len(pdf) > 5_000
    panels = yaml.safe_load((REPO / "configs/published.yaml").read_text())["ablations"]["panels"]
    exp = load_experiments()
    seen = set()
    for name, expected in (("figure2", ["episode_granularity", "property_granularity"]), ("figure3", ["budget"])):
        side = json.loads((out / f"{name}.sources.json").read_text())
        assert [p["panel"] for p in side["panels"]] == expected
        for panel in side["panels"]:
            variants = exp.panels[panel["panel"]] + (["base"] if panel["panel"] == "budget" else [])
            assert [pt["variant"] for pt in panel["points"]] == variants
            for pt in panel["points"]:
                k, n = recount(runs[pt["variant"]], PRIMARY)
                assert (pt["k"], pt["n"]) == (k, n) and abs(pt["accuracy"] - k / n) < 1e-12
                printed = panels[panel["panel"]]["values"][pt["variant"]]
                assert pt["paper"] == (None if printed == "not reported" else float(printed))
                seen.add(pt["variant"])
    assert seen == set(_all_panel_variants())
    # Figure 3 marks only the fixed-k points that the paper prints (k=1 and k=8).
    budget = json.loads((out / "figure3.sources.json").read_text())["panels"][0]["points"]
    assert [p["variant"] for p in budget if p["paper"] is not None] == ["fixed_k1", "fixed_k8", "base"]


def test_missing_ablation_runs_are_listed_with_the_command(tmp_path, capsys):
    runs = ablation_runs(tmp_path / "results", _all_panel_variants())
    shutil.rmtree(runs["episodes_turn"])
    shutil.rmtree(runs["property_fine"])
    code, out = _run(tmp_path, "--only", "2")
    err = capsys.readouterr().err
    assert code == 1
    assert str(runs["episodes_turn"]) in err and str(runs["property_fine"]) in err and "make ablations" in err
    assert not (out / "figure2.png").exists()
    # Figure 3 needs neither run and is still drawn.
    code, out = _run(tmp_path, "--only", "3")
    assert code == 0 and (out / "figure3.pdf").stat().st_size > 0


def test_rerun_gives_identical_pdf(tmp_path):
    ablation_runs(tmp_path / "results", _all_panel_variants())
    _, out = _run(tmp_path, "--only", "3")
    first = (out / "figure3.pdf").read_bytes()
    _, out = _run(tmp_path, "--only", "3")
    assert (out / "figure3.pdf").read_bytes() == first


def test_main_run_and_systems_figures_are_drawn_from_the_runs_that_exist_and_mark_a_partial_run(tmp_path, capsys):
    """One partial LoCoMo run, no ``paper``, no ablations: its per-category figure (95% CIs) and the systems
    chart are written with PARTIAL 13 / 1,540 on them; the rest is skipped with the command; exit 0."""
    from common.report import run_figures
    from common.report.tables.command import context
    from tests.test_tables import LOCOMO_MAIN, make_run

    d = make_run(tmp_path / "results", "locomo", "try", LOCOMO_MAIN, {PRIMARY: [x[1] for x in LOCOMO_MAIN]})
    (d / "01_questions.jsonl").write_text("".join(json.dumps({"qid": f"conv-1:q{i + 1:04d}"}) + "\n"
                                                  for i in range(len(LOCOMO_MAIN))))
    answers = [json.loads(line) for line in (d / "07_answers.jsonl").read_text().splitlines()]
    for a in answers:  # what the ledger counts: 1,020 tokens per question
        a["usage"] = {"prompt_tokens": 1000, "completion_tokens": 20}
    (d / "07_answers.jsonl").write_text("".join(json.dumps(a) + "\n" for a in answers))
    code, out = _run(tmp_path)
    captured = capsys.readouterr()
    assert code == 0, captured.err
    main = json.loads((out / "figure_main_locomo.sources.json").read_text())
    assert main["run"] == "try" and main["coverage"]["mark"] == "PARTIAL 13 / 1,540"
    k, n = recount(d, PRIMARY)
    overall = main["points"][-1]
    assert overall["group"] == "overall" and overall["k_n"] == f"{k}/{n}"
    assert overall["ci"][0] < k / n < overall["ci"][1]
    assert [p["group"] for p in main["points"]] == ["multi-hop", "temporal", "open-domain", "single-hop", "overall"]
    systems = json.loads((out / "figure_systems.sources.json").read_text())
    (point,) = systems["points"]
    assert point["tokens_per_question"] == 1020 and point["coverage"]["mark"] == "PARTIAL 13 / 1,540"
    for name in ("figure_main_locomo", "figure_systems"):
        assert (out / f"{name}.png").read_bytes().startswith(b"\x89PNG") and (out / f"{name}.pdf").exists()
    ctx = context(argparse.Namespace(results=str(tmp_path / "results"), experiments="configs/experiments.yaml",
                                      published="configs/published.yaml", subset=None, run=None))
    fig, _ = run_figures.main_figure(ctx, "locomo")
    assert "PARTIAL 13 / 1,540" in fig.axes[0].get_title()
    fig, _ = run_figures.systems_figure(ctx)
    assert "PARTIAL" in fig.get_suptitle()
    assert "figure main_longmemeval: skipped:" in captured.err and "make longmemeval RUN=paper" in captured.err
    assert "figure 2: skipped:" in captured.err and "make ablations" in captured.err
