"""BEAM through the harness's shared outputs: the report page's rubric detail, the official-release
check of a BEAM folder, the export and its import back, the run table's method label.

One small synthetic run (two chats cut from the shared 100K tier, judge rows built as
``common.evaluation.beam`` writes them) serves every test: no LLM call.
"""
from __future__ import annotations

import csv
import json
import re
import shutil
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from common.benchmarks import beam as beam_data_mod
from common.benchmarks import checksums
from common.benchmarks.registry import ADAPTERS
from common.core.io import read_jsonl, write_jsonl
from common.core.schema import AnswerRow, JudgeRow, to_dict
from common.evaluation import beam
from tests.conftest import REPO, run_overrides, run_stages
from tests.test_beam import TIER, tiny_tier

pytestmark = pytest.mark.skipif(not TIER.exists(), reason=f"shared BEAM data not at {TIER}")
JUDGE = "j"


def _scores(ability: str, k: int, rubric: list[str]) -> dict[str, Any]:
    """The scores block of one question as ``beam.question_scores`` writes it (fill_question off)."""
    floats = [(0.5, 1.0, 0.0)[(k + i) % 3] for i in range(len(rubric))]
    items = [{"item": item, "score": f, "reason": f"reason {k}.{i}: {'met' if f == 1.0 else 'partly'}",
              "int": int(f), "float": f} for i, (item, f) in enumerate(zip(rubric, floats))]
    out: dict[str, Any] = {"ability": ability, "items": items, "filled": None, "corrected": None,
                           "headline": "official"}
    if ability == beam.EVENT_ORDERING:
        tau = 0.25 + 0.05 * (k % 5)
        out["ordering"] = {"precision": 1.0, "recall": 0.5, "f1": 2 / 3, "tau_norm": tau, "final_score": tau * 2 / 3,
                           "tau_undefined": False, "aligned": []}
        out["rubric_judge"] = {"float": sum(floats) / len(floats)}
        out["official"] = out["float"] = tau
    else:
        out["official"] = sum(int(f) for f in floats) / len(floats)
        out["float"] = sum(floats) / len(floats)
    return out


@pytest.fixture(scope="module")
def run(tmp_path_factory) -> SimpleNamespace:
    """01 on a two-chat tier, then synthetic 07/08 rows, then 09 (which writes tables and the export)."""
    tmp = tmp_path_factory.mktemp("beam_run")
    root = tiny_tier(tmp, groups=1)
    mp = pytest.MonkeyPatch()
    mp.setattr(beam, "N_RESAMPLES", 200)  # the CIs' precision is not the point
    sets = run_overrides(tmp, root, **{"judge.name": JUDGE, "method.name": "full_context"})
    r = run_stages("configs/beam.yaml", sets, ["preprocess"])
    golds = {g["qid"]: g for g in read_jsonl(r.path("gold"))}
    questions = read_jsonl(r.path("questions"))
    answers, judged = [], []
    for k, q in enumerate(questions):
        g = golds[q["qid"]]
        answers.append(AnswerRow(qid=q["qid"], memory_id=q["memory_id"], question=q["question"],
                                 answer=f"answer {k}", model="gpt-4.1-mini", prompt_id="answer_beam"))
        scores = _scores(g["question_type"], k, g["rubric"])
        judged.append(JudgeRow(qid=q["qid"], judge=JUDGE, judge_model="gpt-4.1-mini", prompt_id=beam.RUBRIC_PROMPT,
                               label=int(scores["official"] == 1.0), parse_ok=True, raw="{}", scores=scores))
    write_jsonl(r.path("answers"), [to_dict(a) for a in answers])
    write_jsonl(r.judge_path(JUDGE), [to_dict(j) for j in judged])
    run_stages("configs/beam.yaml", sets, ["aggregate"])
    yield SimpleNamespace(dir=r.dir, root=root, tmp=tmp, sets=sets, golds=golds, judged=judged)
    mp.undo()


# ----------------------------------------------------------------------------- 1. the report page
def _page_data(page: Path) -> dict[str, Any]:
    text = page.read_text(encoding="utf-8")
    blob = re.search(r'<script type="application/json" id="report-data">(.*?)</script>', text, re.S)
    assert blob is not None, "the page carries no data block"
    return json.loads(blob.group(1))


def test_the_report_shows_each_rubric_item_with_its_scores_reason_and_tau(run):
    from common.report.html import build

    data = _page_data(build(run.dir))
    assert data["page"]["category_label"] == "Ability"
    for row in run.judged:
        view = data["details"][row.qid]["judges"][JUDGE]["rubric"]
        assert [(i["item"], i["int"], i["float"], i["reason"]) for i in view["items"]] == \
            [(i["item"], i["int"], i["float"], i["reason"]) for i in row.scores["items"]]
        assert view["variants"]["official"] == row.scores["official"]
        assert view["variants"]["float"] == row.scores["float"] and view["headline"] == "official"
        if row.scores["ability"] == beam.EVENT_ORDERING:
            assert view["ordering"]["tau_norm"] == row.scores["ordering"]["tau_norm"]
        else:
            assert view["ordering"] is None
    js = (REPO / "common" / "report" / "templates" / "report.js").read_text(encoding="utf-8")
    assert "rubricSection(r.rubric)" in js and "tau_norm" in js and "rubric-reason" in js


# ----------------------------------------------------------------------------- 2. the official release
def _cfg(path: Path) -> SimpleNamespace:
    return SimpleNamespace(data=SimpleNamespace(path=str(path), env="", tier="100K"))


def test_a_beam_folder_is_checked_file_by_file_against_the_official_release(tmp_path):
    data = ADAPTERS["beam"]
    assert checksums.run_dataset(data, _cfg(TIER), None)["status"] == "official"
    copy = tmp_path / "100K"
    shutil.copytree(TIER, copy)
    assert checksums.run_dataset(data, _cfg(copy), None)["status"] == "official"
    edited = copy / "3" / beam_data_mod.QUESTIONS_FILE
    edited.write_bytes(edited.read_bytes().replace(b"?", b"??", 1))
    got = checksums.run_dataset(data, _cfg(copy), None)
    rel = "3/probing_questions/probing_questions.json"
    want = beam_data_mod.official_files("100K")[rel]
    assert got["status"] == "modified" and got["official_sha256"][rel] == want
    assert got["warning"] == (f"MODIFIED DATASET: {rel} sha256 {checksums.sha256_file(edited)} differs from the "
                              f"official release's {want}")
    # A chat the release does not have is a difference too; a moved folder cannot be compared.
    shutil.copytree(copy / "3", copy / "99")
    assert "99/chat.json sha256 " in checksums.run_dataset(data, _cfg(copy), None)["warning"]
    assert checksums.run_dataset(data, _cfg(tmp_path / "gone"), "ab" * 32)["status"] == "unknown"


def test_a_run_on_a_cut_beam_folder_says_modified_in_metrics_tables_and_export(run):
    metrics = json.loads((run.dir / "metrics.json").read_text(encoding="utf-8"))
    warning = metrics["dataset"]["warning"]
    assert metrics["dataset"]["status"] == "modified" and warning.startswith("MODIFIED DATASET: 1/chat.json sha256 ")
    assert "differs from the official release's" in warning
    assert warning in (run.dir / f"table_{JUDGE}.md").read_text(encoding="utf-8")
    assert json.loads((run.dir / "export" / "manifest.json").read_text())["dataset"]["warning"] == warning
    from common.report.tables import command

    out = run.tmp / "tables"
    assert command.main(["--results", str(run.tmp / "results"), "--out", str(out), "--only", "beam"]) == 0
    md = (out / "table_beam.md").read_text(encoding="utf-8")
    assert f"t: {warning}" in md and "full context (this harness, run t)" in md


# ----------------------------------------------------------------------------- 3. export and import
def test_the_export_carries_beam_scores_and_imports_back_with_the_same_sums(run):
    from common.pipeline.importer import import_run

    exported = read_jsonl(run.dir / "export" / "questions.jsonl")
    by_qid = {j.qid: j for j in run.judged}
    assert len(exported) == len(run.judged)
    for row in exported:
        block, want = row["judges"][JUDGE], by_qid[row["qid"]].scores
        assert row["category"] == run.golds[row["qid"]]["question_type"]
        assert block["scores"]["official"] == want["official"] and block["scores"]["float"] == want["float"]
        assert block["score"] == want["official"] and block["scores"]["corrected"] is None
    with (run.dir / "export" / "questions.csv").open(encoding="utf-8") as fh:
        table = list(csv.DictReader(fh))
    assert [float(t[f"judge.{JUDGE}.score_float"]) for t in table] == [r["judges"][JUDGE]["scores"]["float"]
                                                                      for r in exported]
    sets = [s for s in run.sets if not s.startswith(("run.name=", "judge.name=", "method.name="))]
    back = import_run(run.dir / "export" / "questions.jsonl", "back", benchmark="beam", fmt="export",
                      overrides=(*sets, "run.export=false"))
    before = json.loads((run.dir / "metrics.json").read_text())["judges"][JUDGE]["variants"]
    after = json.loads((back / "metrics.json").read_text())["judges"][JUDGE]["variants"]
    for v in ("official", "float"):
        assert {a: (b["sum"], b["n"], b["score"]) for a, b in after[v]["by_ability"].items()} == \
            {a: (b["sum"], b["n"], b["score"]) for a, b in before[v]["by_ability"].items()}
        assert after[v]["overall"] == before[v]["overall"]
    assert [r["scores"]["float"] for r in read_jsonl(back / f"08_judge_{JUDGE}.jsonl")] == \
        [j.scores["float"] for j in run.judged]


def test_an_export_with_a_bad_score_is_one_line_naming_the_field(run, tmp_path):
    from common.pipeline.formats import SourceError
    from common.pipeline.importer import import_run

    shutil.copytree(run.dir / "export", tmp_path / "export")
    rows = read_jsonl(tmp_path / "export" / "questions.jsonl")
    rows[1]["judges"][JUDGE]["scores"]["float"] = "0.5"
    write_jsonl(tmp_path / "export" / "questions.jsonl", rows)
    sets = [s for s in run.sets if not s.startswith(("run.name=", "judge.name=", "method.name="))]
    with pytest.raises(SourceError) as err:
        import_run(tmp_path / "export" / "questions.jsonl", "bad", benchmark="beam", fmt="export",
                   overrides=(*sets, "run.export=false"), aggregate=False)
    assert "line 2" in str(err.value) and f"judges.{JUDGE}.scores.float" in str(err.value)
    assert "\n" not in str(err.value)


# ----------------------------------------------------------------------------- 4. the run table
def test_the_beam_run_table_names_the_method_and_run_through_the_shared_helper(run):
    table = (run.dir / f"table_{JUDGE}.md").read_text(encoding="utf-8")
    assert "BEAM scores of full context (this harness, run t), judge gpt-4.1-mini" in table
    hard_coded = [p for p in (REPO / "common").rglob("*.py")
                  if "EnSIMem (this harness" in p.read_text(encoding="utf-8")]
    assert hard_coded == []


# ----------------------------------------------------------------------------- 5. the docs' trust check
def test_the_docs_trust_check_states_defects_switches_audit_and_the_dry_run_count():
    from common.benchmarks.beam import load_beam
    from common.core.config import load_config

    text = (REPO / "docs" / "beam.md").read_text(encoding="utf-8")
    section = " ".join(text.split("## How far to trust a BEAM number", 1)[1].split("\n## ", 1)[0].split())
    cfg = load_config(["configs/beam.yaml"], [])
    for switch in ("beam_float_scores", "beam_fill_question"):  # the switches exist in the one config schema
        assert f"score.{switch}: true" in section and hasattr(cfg.score, switch)
    assert "int(response['score'])" in section and "`<question>` is never filled" in section
    assert "No number of the BEAM paper is transcribed" in section and "could not be read from here" in section
    make = (REPO / "Makefile").read_text(encoding="utf-8")
    assert "`make audit-judge-beam GOLD=results/beam/<run>/01_gold.jsonl`" in section and "\naudit-judge-beam:" in make
    calls, filled = (beam.judge_calls(load_beam(TIER).gold, fill) for fill in (False, True))
    assert (f"counts {calls['rubric'] + calls['align_max']:,} judge calls: {calls['rubric']:,} rubric-item calls plus "
            f"at most {calls['align_max']:,} event-ordering alignment calls "
            f"({filled['rubric'] + filled['align_max']:,} with `score.beam_fill_question`)") in section
