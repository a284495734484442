"""``python -m common.import_run``: published locomo-audit runs as ordinary run directories.

The real-data tests read ``../shared/data/locomo-audit/`` (CC BY-NC 4.0, never committed) and
``../shared/data/locomo/locomo10.json``; they are skipped when either is absent.
"""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from common.benchmarks.locomo import CATEGORY_NAMES
from common.core.config import load_config
from common.pipeline.engine import Run, run_stage
from common.pipeline.importer import SourceError, import_run, main
from tests.conftest import REAL_LOCOMO, REPO, TINY_LOCOMO, rows

AUDIT = REPO.parent / "shared" / "data" / "locomo-audit"
FC = AUDIT / "fc-baseline"
needs_data = pytest.mark.skipif(not (AUDIT.exists() and REAL_LOCOMO.exists()),
                                reason="locomo-audit or locomo10.json not in ../shared/data")


def _import(source: Path, results: Path, name: str, *extra: str) -> Path:
    code = main([str(source), "--run", name, "--set", f"run.results_dir={results}",
                 "--set", f"data.path={REAL_LOCOMO}", *extra])
    assert code == 0
    return results / "locomo" / name


@pytest.fixture(scope="module")
def imported(tmp_path_factory) -> dict[str, Path]:
    if not (AUDIT.exists() and REAL_LOCOMO.exists()):
        pytest.skip("locomo-audit or locomo10.json not in ../shared/data")
    results = tmp_path_factory.mktemp("imported")
    return {name: _import(FC / name / "eval_results.json", results, name)
            for name in ("gpt-4.1-mini-cot", "gpt-4.1-mini-memos")}


@needs_data
def test_imported_cot_run_reproduces_the_files_own_metadata_exactly(imported):
    meta = json.loads((FC / "gpt-4.1-mini-cot" / "eval_results.json").read_text())["metadata"]
    metrics = json.loads((imported["gpt-4.1-mini-cot"] / "metrics.json").read_text())
    runs = metrics["judges"]["gpt-4o-mini"]["runs"]
    assert runs["n_runs"] == meta["num_runs"] == 3
    o = runs["overall"]
    assert [r["accuracy"] for r in o["per_run"]] == pytest.approx(meta["run_scores"], abs=1e-12)
    assert o["mean"] == pytest.approx(meta["mean_accuracy"], abs=1e-12)
    assert round(100 * o["mean"], 2) == 92.62
    assert o["std"] == pytest.approx(meta["std_accuracy"], abs=1e-12)
    assert o["majority"]["accuracy"] == pytest.approx(meta["majority_vote_accuracy"], abs=1e-12)
    assert round(100 * o["majority"]["accuracy"], 2) == 92.66
    for cat, published in meta["category_accuracies"].items():
        mine = runs["by_category"][CATEGORY_NAMES[int(cat)]]
        assert mine["mean"] == pytest.approx(published["mean"], abs=1e-12), cat
        assert mine["std"] == pytest.approx(published["std"], abs=1e-12), cat
        assert [r["accuracy"] for r in mine["per_run"]] == pytest.approx(published["individual_runs"], abs=1e-12)
        assert mine["majority"]["n"] == published["total"]
    # The headline label of each row is the majority vote; it is what comparisons pair on.
    assert metrics["judges"]["gpt-4o-mini"]["overall"]["k"] == o["majority"]["k"]
    assert metrics["coverage"]["complete"] is True
    assert "3 judge runs: mean 92.62" in (imported["gpt-4.1-mini-cot"] / "table_gpt-4o-mini.md").read_text()


@needs_data
def test_imported_run_has_the_files_of_a_run_and_a_source_fingerprint(imported):
    run_dir = imported["gpt-4.1-mini-cot"]
    for name in ("01_sessions.jsonl", "01_questions.jsonl", "01_gold.jsonl", "07_answer.jsonl",
                 "08_judge_gpt-4o-mini.jsonl", "config.resolved.yaml", "metrics.json"):
        assert (run_dir / name).exists(), name
    answers = rows(run_dir / "07_answer.jsonl")
    assert len(answers) == 1540
    first = answers[0]
    assert first["qid"] == "conv-26:q0001" and first["answer"].startswith("Caroline went to the LGBTQ")
    judged = rows(run_dir / "08_judge_gpt-4o-mini.jsonl")
    assert all(len(r["labels"]) == 3 for r in judged)
    fp = json.loads((run_dir / "fingerprint.json").read_text())
    source = fp["run"]["components"]["imported"]
    assert source["sha256"] == "7fa10ba1d8976bdc215172f9d4e1840c015644b28e8e97de840b690051e354f3"
    assert source["prompts"]["file_sha256"].startswith("ba4f668e")
    assert source["prompts"]["answer_prompt"] == "answer_prompt_cot" and source["prompts"]["answer_prompt_sha256"]
    assert source["prompts"]["judge_prompt_sha256"]
    assert source["reads_gold"] is False
    metrics = json.loads((run_dir / "metrics.json").read_text())
    assert metrics["imported"]["sha256"] == source["sha256"]


@needs_data
def test_make_compare_of_two_imported_runs_prints_a_paired_mcnemar(imported):
    out = subprocess.run(["make", "-s", "compare", f"A={imported['gpt-4.1-mini-memos']}",
                          f"B={imported['gpt-4.1-mini-cot']}", f"PY={sys.executable}"],
                         cwd=REPO, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    assert "McNemar" in out.stdout
    assert "1540 shared, 0 only in A, 0 only in B" in out.stdout
    overall = next(line for line in out.stdout.splitlines() if line.startswith("| overall"))
    # memos 82.1 (1264/1540) vs cot 92.7 (1427/1540), paired on the majority labels.
    assert "(1264/1540)" in overall and "(1427/1540)" in overall
    assert "+10.6" in overall or "10.6" in overall


@needs_data
def test_stages_that_would_rederive_answers_refuse_an_imported_run(imported):
    cfg = load_config(["configs/locomo.yaml"], [f"run.results_dir={imported['gpt-4.1-mini-cot'].parent.parent}",
                                                 "run.name=gpt-4.1-mini-cot", f"data.path={REAL_LOCOMO}"])
    with pytest.raises(RuntimeError, match="imported from"):
        run_stage(Run(cfg, progress=False), "answer")


@needs_data
def test_adversarial_answers_written_from_the_key_are_marked_reads_gold(tmp_path):
    run_dir = _import(AUDIT / "ap-baseline" / "v1" / "ap_eval_results_scored.json", tmp_path, "ap-v1",
                      "--answer-model", "locomo-audit ap-v1 (written from the answer key)")
    manifest = json.loads((run_dir / "07_answer.manifest.json").read_text())
    assert manifest["reads_gold"] is True
    runs = json.loads((run_dir / "metrics.json").read_text())["judges"]["gpt-4o-mini"]["runs"]["overall"]
    # The file's own accuracy (10.61 %) is the mean of its three judge runs (163, 166, 161 of 1540).
    published = json.loads((AUDIT / "ap-baseline" / "v1" / "ap_eval_results_scored.json").read_text())["accuracy"]
    assert runs["mean"] == pytest.approx(published, abs=1e-12)
    assert [r["k"] for r in runs["per_run"]] == [163, 166, 161]


def _small_source(tmp_path: Path, mutate) -> Path:
    doc = json.loads((FC / "gpt-4.1-mini-cot" / "eval_results.json").read_text())
    first_user = next(iter(doc["detailed_results"]))
    doc["detailed_results"] = {first_user: doc["detailed_results"][first_user][:5]}
    mutate(doc["detailed_results"][first_user])
    path = tmp_path / "eval_results.json"
    path.write_text(json.dumps(doc))
    return path


@needs_data
def test_a_question_text_mismatch_is_an_error_naming_the_row(tmp_path):
    def change(rows_: list) -> None:
        rows_[2]["question"] = "What did Caroline eat?"

    src = _small_source(tmp_path, change)
    with pytest.raises(SourceError, match=r"detailed_results\.locomo_exp_user_0\[2\]\.question: locomo_0_qa2 -> "
                                           r"conv-26:q0003"):
        import_run(src, "bad", overrides=(f"run.results_dir={tmp_path}", f"data.path={REAL_LOCOMO}"))
    assert not (tmp_path / "locomo" / "bad").exists()  # bad input: no artifact written


@needs_data
def test_a_non_boolean_judgment_is_an_error_naming_the_field(tmp_path):
    def change(rows_: list) -> None:
        rows_[1]["llm_judgments"]["judgment_2"] = "yes"

    src = _small_source(tmp_path, change)
    with pytest.raises(SourceError, match=r"\[1\]\.llm_judgments\.judgment_2: expected true or false"):
        import_run(src, "bad", overrides=(f"run.results_dir={tmp_path}", f"data.path={REAL_LOCOMO}"))


@needs_data
def test_the_entry_point_runs_as_a_module_and_refuses_to_overwrite(tmp_path):
    src = _small_source(tmp_path, lambda rows_: None)
    cmd = [sys.executable, "-m", "common.import_run", str(src), "--run", "small",
           "--set", f"run.results_dir={tmp_path}", "--set", f"data.path={REAL_LOCOMO}"]
    first = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=300)
    assert first.returncode == 0, first.stderr
    # A partial published file cannot pass for a full one: the questions it lacks count as failures.
    assert "missing_judgment 1535" in first.stdout
    again = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=300)
    assert again.returncode == 2 and "exists" in again.stderr and "--force" in again.stderr


def _hindsight_tiny(path: Path, stated: float) -> None:
    """A Hindsight results file over the tiny LoCoMo fixture: 3 rows of tiny-1, one without a label."""
    conv = json.loads(TINY_LOCOMO.read_text())[0]
    scored = [q for q in conv["qa"] if q["category"] != 5][:3]
    verdicts = [True, None, False]
    details = [{"question": q["question"], "correct_answer": q["answer"], "predicted_answer": f"p{n}",
                "category": q["category"], "is_correct": v, "is_invalid": False}
               for n, (q, v) in enumerate(zip(scored, verdicts))]
    path.write_text(json.dumps({"overall_accuracy": stated, "total_questions": 3, "total_invalid": 0,
                                "item_results": [{"item_id": conv["sample_id"],
                                                  "metrics": {"detailed_results": details}}]}))


def test_an_import_says_what_it_covers_counts_a_null_label_as_no_label_and_flags_its_stated_figure(tmp_path, capsys):
    """3 rows of 1,540: PARTIAL with its coverage; the null label is "no label in the file", not a judge
    API error; the file's stated 0.55 is not what its rows give (1 of 3 = 33.33 %): flagged."""
    src = tmp_path / "locomo.json"
    _hindsight_tiny(src, 0.55)
    assert main([str(src), "--run", "h", "--format", "hindsight", "--set", f"run.results_dir={tmp_path}",
                 "--set", f"data.path={TINY_LOCOMO}"]) == 0
    out = capsys.readouterr().out
    run_dir = tmp_path / "locomo" / "h"
    assert "import: covers 3 / 1,540 scored locomo questions (PARTIAL 3 / 1,540" in out
    assert ("import: WARNING: the file states overall_accuracy: 0.55 but its own rows give 33.33%" in out
            and "not reproduced" in out)
    source = json.loads((run_dir / "source.json").read_text())
    assert source["coverage"]["mark"] == "PARTIAL 3 / 1,540"
    assert source["stated_checks"][0]["reproduced"] is False
    metrics = json.loads((run_dir / "metrics.json").read_text())
    failures = metrics["judges"]["published"]["failures"]
    assert failures.get("no_label_in_file") == 1 and "judge_api_error" not in failures
    # The scored questions of the file without a row are not covered: 09_aggregate marks the run PARTIAL.
    assert metrics["coverage"]["covered"] == 3 and metrics["coverage"]["complete"] is False
    assert (run_dir / "table_published.md").read_text().startswith("PARTIAL 3 / 1,540: ")


def test_a_stated_figure_the_rows_reproduce_is_not_flagged(tmp_path, capsys):
    src = tmp_path / "locomo.json"
    _hindsight_tiny(src, 100 / 3)  # percent, as benchmark_runner.py prints it
    assert main([str(src), "--run", "h", "--format", "hindsight", "--set", f"run.results_dir={tmp_path}",
                 "--set", f"data.path={TINY_LOCOMO}"]) == 0
    assert "not reproduced" not in capsys.readouterr().out
    assert json.loads((tmp_path / "locomo" / "h" / "source.json").read_text())["stated_checks"][0]["reproduced"]
