"""Published claims: the Zep / mem0 / Hindsight import formats, the question mapper, ``make claims``.

The format fixtures are built here, a few rows each in the documented schema, with questions taken
from ``../shared/data/locomo/locomo10.json`` at test time (so the mapping is real); the
locomo-audit runs are read from ``../shared/data/locomo-audit/`` (never committed). Tests that
need them are skipped when they are absent.
"""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from common.benchmarks.question_map import SourceRow, map_rows, normalise
from common.core.config import ConfigError
from common.core.schema import Gold, Question
from common.evaluation.claims import load_claims
from common.evaluation.judge import judge_messages
from common.pipeline.importer import SourceError, import_run, main
from common.report import claims as claims_report
from common.report.html import build as build_report
from tests.conftest import REAL_LOCOMO, REPO, rows, run_overrides, run_stages
from tests.fake_openai import scripted

AUDIT = REPO.parent / "shared" / "data" / "locomo-audit"
needs_locomo = pytest.mark.skipif(not REAL_LOCOMO.exists(), reason="locomo10.json not in ../shared/data")
needs_audit = pytest.mark.skipif(not (AUDIT.exists() and REAL_LOCOMO.exists()),
                                 reason="locomo-audit or locomo10.json not in ../shared/data")


# ----------------------------------------------------------------------------- the mapper
def _bench() -> tuple[list[Question], list[Gold]]:
    texts = [("m1", "Where did Ann go?", 1), ("m1", "What did Ann buy?", 4), ("m1", "What did Ann buy?", 4),
             ("m1", "Who came?", 4), ("m1", "Who came?", 5), ("m2", "Where did Ann go?", 2)]
    qs, gs = [], []
    for i, (m, t, c) in enumerate(texts):
        qs.append(Question(qid=f"{m}:q{i:04d}", memory_id=m, question=t))
        gs.append(Gold(qid=f"{m}:q{i:04d}", memory_id=m, answer=f"a{i}", category=c))
    return qs, gs


def test_normalised_text_maps_unique_questions_and_conversation_order_resolves_duplicates():
    qs, gs = _bench()
    src = [SourceRow("r0", "m1", "  where did ANN go?"), SourceRow("r1", "m1", "What did Ann buy?"),
           SourceRow("r2", "m1", "What  did Ann buy?"), SourceRow("r3", "m2", "Where did Ann go?"),
           SourceRow("r4", "m1", "Who came?", category=4)]
    m = map_rows(src, qs, gs, ordered=True)
    assert m.qids == ["m1:q0000", "m1:q0001", "m1:q0002", "m2:q0005", "m1:q0003"]
    assert m.by_order == 2 and not m.unmapped
    assert normalise("Ｗhere  did\nAnn go?") == "where did ann go?"


def test_a_row_that_maps_to_no_question_or_to_two_is_listed_never_guessed():
    qs, gs = _bench()
    src = [SourceRow("r0", "m1", "What did Ann buy?"),  # one row for two identical questions
           SourceRow("r1", "m1", "Who came?"),  # no category: two questions (categories 4 and 5)
           SourceRow("r2", "m1", "What did Bob buy?")]  # no such question
    m = map_rows(src, qs, gs, ordered=True)
    assert m.qids == [None, None, None]
    got = {u.where: (u.reason, u.candidates) for u in m.unmapped}
    assert got == {"r0": ("ambiguous", ("m1:q0001", "m1:q0002")), "r1": ("ambiguous", ("m1:q0003", "m1:q0004")),
                   "r2": ("no_qid", ())}
    # Rows in completion order (Hindsight) cannot pair duplicates by order.
    both = [SourceRow("a", "m1", "What did Ann buy?"), SourceRow("b", "m1", "What did Ann buy?")]
    assert map_rows(both, qs, gs, ordered=False).qids == [None, None]
    assert map_rows(both, qs, gs, ordered=True).qids == ["m1:q0001", "m1:q0002"]


def test_a_position_is_taken_only_when_its_question_text_matches():
    qs, gs = _bench()
    m = map_rows([SourceRow("a", "m1", "Who came?", position=4), SourceRow("b", "m1", "Who came?", position=1)],
                 qs, gs, ordered=False)
    assert m.qids == ["m1:q0004", None]
    assert (m.unmapped[0].where, m.unmapped[0].reason) == ("b", "text_differs")


# ----------------------------------------------------------------------------- the registry
def test_the_claims_registry_is_validated_and_names_every_source(tmp_path):
    claims = load_claims()
    zep = claims["zep-locomo"]
    assert zep.value == "75.14" and zep.per_question.format == "zep" and zep.denominator == "1540"
    assert zep.per_question.repository == "getzep/zep-papers" and len(zep.per_question.commit or "") == 40
    for c in claims.values():
        assert c.published_in and c.answer_model and c.judge_model and c.denominator
        assert c.per_question.available or c.per_question.why, c.id
    bad = tmp_path / "claims.yaml"
    bad.write_text("claims:\n  x:\n    system: S\n    value: '1'\n    published_in: p\n    judge: oops\n")
    with pytest.raises(ConfigError, match="unknown config key 'claims.x.judge'"):
        load_claims(bad)


# ----------------------------------------------------------------------------- fixtures in the documented schemas
def _locomo() -> list[dict]:
    return json.loads(REAL_LOCOMO.read_text())


def _scored(conv: dict) -> list[tuple[int, dict]]:
    return [(i, q) for i, q in enumerate(conv["qa"]) if q.get("category") != 5]


def zep_fixture(path: Path) -> dict:
    """A Zep grades file: conv-26's first 8 scored questions, conv-48's duplicated pair both times
    (and another duplicate once), one question no conversation asks; grades alternate."""
    data = _locomo()
    c0, c7 = data[0], data[7]
    picks: list[tuple[str, dict, str]] = [("locomo_experiment_user_0", q, f"q{i + 1:04d}")
                                          for i, q in _scored(c0)[:8]]
    dup = [q for i, q in enumerate(c7["qa"]) if q["question"] == "What are the names of Jolene's snakes?"]
    picks += [("locomo_experiment_user_7", dup[0], "first"), ("locomo_experiment_user_7", dup[1], "second")]
    once = next(q for q in c7["qa"] if q["question"] == "What are Jolene's favorite books?")
    picks.append(("locomo_experiment_user_7", once, "ambiguous"))
    picks.append(("locomo_experiment_user_7", {"question": "What colour is Jolene's car?", "answer": "red",
                                               "category": 4}, "none"))
    doc: dict[str, list] = {}
    for n, (user, q, _) in enumerate(picks):
        doc.setdefault(user, []).append({"question": q["question"], "answer": f"Answer {n}: {q['answer']}",
                                         "golden_answer": q["answer"], "grade": n % 3 != 1,
                                         "category": q["category"]})
    path.write_text(json.dumps(doc))
    return doc


def _import(src: Path, results: Path, name: str, *extra: str) -> Path:
    assert main([str(src), "--run", name, "--set", f"run.results_dir={results}", "--set",
                 f"data.path={REAL_LOCOMO}", *extra]) == 0
    return results / "locomo" / name


@needs_locomo
def test_a_zep_file_imports_with_its_own_accuracy_and_its_unmapped_rows_listed(tmp_path, capsys):
    doc = zep_fixture(tmp_path / "zep_locomo_grades.json")
    run_dir = _import(tmp_path / "zep_locomo_grades.json", tmp_path / "results", "zep", "--format", "zep",
                      "--claim", "zep-locomo")
    every = [r for rs in doc.values() for r in rs]
    source = json.loads((run_dir / "source.json").read_text())
    own = source["own_accuracy"]
    assert own["k"] == sum(r["grade"] for r in every) and own["n"] == len(every) == 12
    assert own["accuracy"] == sum(r["grade"] for r in every) / len(every)
    assert source["mapping"]["mapped"] == 10 and source["mapping"]["resolved_by_conversation_order"] == 2
    assert {(u["where"], u["reason"]) for u in source["unmapped"]} == {
        ("locomo_experiment_user_7[2]", "ambiguous"), ("locomo_experiment_user_7[3]", "no_qid")}
    assert source["origin"]["repository"] == "getzep/zep-papers" and source["claim"]["value"] == "75.14"
    judged = {r["qid"]: r for r in rows(run_dir / "08_judge_published.jsonl")}
    answers = {r["qid"]: r["answer"] for r in rows(run_dir / "07_answer.jsonl")}
    # The duplicated question is asked at qa index 16 and 89 of conv-48: file order pairs them.
    assert answers["conv-48:q0017"].startswith("Answer 8:") and answers["conv-48:q0090"].startswith("Answer 9:")
    assert judged["conv-26:q0002"]["label"] == 0 and judged["conv-26:q0001"]["label"] == 1
    assert len(judged) == 10
    assert "2 rows map to no single question" in capsys.readouterr().out


@needs_locomo
def test_a_mem0_file_imports_and_reproduces_its_mean_llm_score(tmp_path):
    conv = _locomo()[1]  # conv-30: one of its questions is asked in categories 4 and 5
    doc = {"1": []}
    for n, (_, q) in enumerate(_scored(conv)[:6]):
        doc["1"].append({"question": q["question"], "answer": q["answer"], "response": f"r{n}",
                         "category": str(q["category"]), "bleu_score": 0.1, "f1_score": 0.2,
                         "llm_score": int(n % 2 == 0)})
    twice = next(q for q in conv["qa"] if q["question"] == "What did Gina receive from a dance contest?"
                 and q["category"] == 4)
    doc["1"].append({"question": twice["question"], "answer": twice["answer"], "response": "a trophy",
                     "category": "4", "bleu_score": 1, "f1_score": 1, "llm_score": 1})
    (tmp_path / "evaluation_metrics.json").write_text(json.dumps(doc))
    run_dir = _import(tmp_path / "evaluation_metrics.json", tmp_path / "results", "m", "--format", "mem0")
    source = json.loads((run_dir / "source.json").read_text())
    assert source["own_accuracy"]["accuracy"] == 4 / 7 and source["mapping"]["mapped"] == 7
    assert source["unmapped"] == [] and source["claim"] is None
    qid = f"conv-30:q{conv['qa'].index(twice) + 1:04d}"
    assert {r["qid"]: r["label"] for r in rows(run_dir / "08_judge_published.jsonl")}[qid] == 1


@needs_locomo
def test_a_hindsight_file_reproduces_correct_over_valid_and_keeps_invalid_rows_as_failures(tmp_path):
    conv = _locomo()[0]
    details = []
    for n, (i, q) in enumerate(_scored(conv)[:6]):
        row = {"question": q["question"], "correct_answer": q["answer"], "predicted_answer": f"p{n}",
               "reasoning": "", "category": q["category"], "is_correct": n % 2 == 0, "is_invalid": False}
        if n == 5:
            row.update(is_invalid=True, is_correct=None, predicted_answer="ERROR: Failed to generate answer")
        if n == 4:
            row["question_index"] = i
        details.append(row)
    details.reverse()  # completion order, not question order
    doc = {"overall_accuracy": 100 * 3 / 5, "total_correct": 3, "total_questions": 6, "total_invalid": 1,
           "total_valid": 5, "num_items": 1,
           "item_results": [{"item_id": "conv-26", "metrics": {"detailed_results": details}}]}
    (tmp_path / "locomo.json").write_text(json.dumps(doc))
    run_dir = _import(tmp_path / "locomo.json", tmp_path / "results", "h", "--format", "hindsight")
    source = json.loads((run_dir / "source.json").read_text())
    assert 100 * source["own_accuracy"]["accuracy"] == pytest.approx(doc["overall_accuracy"], abs=1e-12)
    assert source["stated"]["total_invalid"] == 1 and source["mapping"]["mapped"] == 6
    judged = rows(run_dir / "08_judge_published.jsonl")
    failed = [r for r in judged if r["label"] is None]
    assert len(failed) == 1 and "is_invalid" in failed[0]["error"]
    metrics = json.loads((run_dir / "metrics.json").read_text())
    assert metrics["judges"]["published"]["failures"]["answer_api_error"] == 1


@needs_locomo
def test_a_malformed_row_is_one_line_naming_the_file_and_field(tmp_path):
    (tmp_path / "z.json").write_text(json.dumps({"locomo_experiment_user_0": [{"question": "x", "answer": "y",
                                                                               "grade": "yes"}]}))
    with pytest.raises(SourceError, match=r"z\.json: locomo_experiment_user_0\[0\]\.grade: expected true or false"):
        import_run(tmp_path / "z.json", "bad", fmt="zep",
                   overrides=(f"run.results_dir={tmp_path}", f"data.path={REAL_LOCOMO}"))
    (tmp_path / "u.json").write_text(json.dumps({"someone": []}))
    with pytest.raises(SourceError, match="someone: names no conversation"):
        import_run(tmp_path / "u.json", "bad", fmt="zep",
                   overrides=(f"run.results_dir={tmp_path}", f"data.path={REAL_LOCOMO}"))
    assert not (tmp_path / "locomo" / "bad").exists()


@needs_audit
@pytest.mark.parametrize("name", ["gpt-4.1-mini-cot", "gpt-4o-mini-cot"])
def test_the_locomo_audit_runs_reproduce_their_own_accuracy_exactly(tmp_path, name):
    src = AUDIT / "fc-baseline" / name / "eval_results.json"
    run_dir = _import(src, tmp_path / "results", name, "--claim", f"locomo-audit-fc-{name}")
    meta = json.loads(src.read_text())["metadata"]
    source = json.loads((run_dir / "source.json").read_text())
    assert source["own_accuracy"]["accuracy"] == pytest.approx(meta["mean_accuracy"], abs=1e-12)
    assert source["mapping"]["mapped"] == 1540 and source["unmapped"] == []
    assert source["origin"]["commit"].startswith("9493fb4b")
    row = claims_report.claim_row(run_dir, load_claims(), claims_report.Rejudge("harness", None, [], None, False),
                                  None)
    assert row["cells"]["own"]["equals_import_record"] is True
    assert row["cells"]["own"]["vs_claim"] == "= claim"


# ----------------------------------------------------------------------------- make claims
def _expected_label(question: str, gold: str, answer: str) -> int:
    text = scripted.prompt_text(judge_messages("judge_locomo_mem0", question, gold, answer))
    return int(scripted.judge_label(text) == "CORRECT")


@needs_audit
def test_make_claims_offline_skips_our_judge_and_says_so(tmp_path, monkeypatch):
    for var in ("OPENAI_API_KEY", "OPENAI_BASE_URL", "OPENAI_BASE_URLS"):
        monkeypatch.delenv(var, raising=False)
    zep_fixture(tmp_path / "zep.json")
    _import(tmp_path / "zep.json", tmp_path / "results", "zep", "--format", "zep", "--claim", "zep-locomo")
    out = subprocess.run(["make", "-s", "claims", f"RESULTS={tmp_path / 'results'}", f"PY={sys.executable}",
                          f"SET=llm.cache_path={tmp_path / 'c.sqlite'}"], cwd=REPO, capture_output=True, text=True,
                         timeout=600, env={k: v for k, v in __import__("os").environ.items()
                                           if not k.startswith("OPENAI_")})
    assert out.returncode == 0, out.stderr
    assert "our judge: skipped (no judge endpoint" in out.stdout
    data = json.loads((tmp_path / "results" / "claims" / "claims.json").read_text())
    (row,) = data["rows"]
    c = row["cells"]
    assert c["our_judge"]["skipped"] and c["agreement"]["skipped"] and c["audited_rejudged"]["skipped"]
    # Own labels, own denominator: 8 of 12 rows graded true (the 2 unmapped included) ...
    assert (c["own"]["k"], c["own"]["n"]) == (8, 12) and c["own"]["vs_claim"] == "-8.47 pp vs claim"
    # ... on 1,540: the 10 mapped rows, the 1,530 missing questions counted wrong.
    assert (c["standard"]["n"], c["standard"]["missing"]) == (1540, 1530)
    assert c["standard"]["k"] == sum(1 for r in rows(tmp_path / "results" / "locomo" / "zep" /
                                                     "08_judge_published.jsonl") if r["label"] == 1)
    assert c["audited_excluding"]["n"] == 1540 - 99
    assert all(cell.get("source") for cell in c.values() if isinstance(cell, dict))
    md = (tmp_path / "results" / "claims" / "claims.md").read_text()
    assert "| locomo/zep (imported) | Zep | 75.14 |" in md and "locomo_experiment_user_7[3] (no_qid)" in md
    assert (tmp_path / "results" / "claims" / "claims.csv").exists()


@pytest.mark.slow
@needs_audit
def test_make_claims_against_the_fake_server_rejudges_every_run_and_a_rerun_pays_nothing(tmp_path, fake_server,
                                                                                        monkeypatch):
    monkeypatch.setenv("OPENAI_BASE_URL", fake_server.base_url)
    results = tmp_path / "results"
    zep_fixture(tmp_path / "zep.json")
    zep_dir = _import(tmp_path / "zep.json", results, "zep", "--format", "zep", "--claim", "zep-locomo")
    # A run of this harness, named like the run the EnSIMem claim names.
    sets = run_overrides(tmp_path, REAL_LOCOMO, **{"method.name": "no_memory", "run.name": "paper",
                                                    "data.memories": "[conv-26]", "data.question_limit": 6})
    run_stages("configs/locomo.yaml", sets, ["preprocess", "episodes", "extract", "index", "plan", "retrieve",
                                             "answer", "judge", "aggregate"])
    before = fake_server.request_count
    cache = [f"llm.cache_path={tmp_path / 'llm.sqlite'}"]
    paths = claims_report.build(results, results / "claims", overrides=cache)
    assert paths[0].name == "claims.json"
    calls = fake_server.request_count - before
    data = json.loads(paths[0].read_text())
    by_run = {r["run"]: r for r in data["rows"]}
    assert set(by_run) == {"zep", "paper"}
    # The only note: the two runs label different questions (6 of conv-26 against Zep's 10 fixture rows).
    assert len(data["notes"]) == 1 and data["notes"][0].startswith("WARNING: locomo: QUESTION SETS DIFFER: ")
    assert "(6 questions): paper" in data["notes"][0] and "(10 questions): zep" in data["notes"][0]
    # Our judge: every answer of both runs judged once, plus the corrected-key answers again.
    errata = json.loads((AUDIT / "errors.json").read_text())
    wrong = {r["question_id"] for r in errata if r["error_type"] != "WRONG_CITATION"}
    zep_rows = rows(zep_dir / "07_answer.jsonl")
    gold = {g["qid"]: g for g in rows(zep_dir / "01_gold.jsonl")}
    fixed = {f"conv-26:q{int(r['question_id'].split('qa')[1]) + 1:04d}": r["correct_answer"]
             for r in errata if r["question_id"] in wrong and r["question_id"].startswith("locomo_0_")}
    mine = {a["qid"]: _expected_label(a["question"], gold[a["qid"]]["answer"], a["answer"]) for a in zep_rows}
    zc = by_run["zep"]["cells"]
    assert (zc["our_judge"]["k"], zc["our_judge"]["n"]) == (sum(mine.values()), 1540)
    theirs = {r["qid"]: r["label"] for r in rows(zep_dir / "08_judge_published.jsonl")}
    flips_up = sum(1 for q in mine if mine[q] == 1 and theirs[q] == 0)
    flips_down = sum(1 for q in mine if mine[q] == 0 and theirs[q] == 1)
    assert (zc["agreement"]["source_wrong_ours_right"], zc["agreement"]["source_right_ours_wrong"]) == (
        flips_up, flips_down)
    assert zc["agreement"]["n"] == len(zep_rows)
    rejudged = {q: (_expected_label(next(a["question"] for a in zep_rows if a["qid"] == q), fixed[q],
                                    next(a["answer"] for a in zep_rows if a["qid"] == q)) if q in fixed else v)
                for q, v in mine.items()}
    assert zc["audited_rejudged"]["k"] == sum(rejudged.values())
    n_fixed = sum(1 for q in mine if q in fixed)
    # The harness run's own judge made the same requests as ours (same model, prompt, decoding):
    # only its corrected-key judgments are new.
    assert n_fixed >= 1 and calls == len(zep_rows) + n_fixed + sum(
        1 for r in rows(results / "locomo" / "paper" / "07_answer.jsonl") if r["qid"] in fixed)
    pc = by_run["paper"]["cells"]
    assert pc["claim"]["value"] == "90.6" and by_run["paper"]["kind"] == "harness"
    assert pc["standard"]["missing"] == 1540 - 6 and pc["our_judge"]["n"] == 1540
    assert pc["agreement"]["n"] == 6
    assert pc["agreement"]["source_right_ours_wrong"] == pc["agreement"]["source_wrong_ours_right"] == 0
    # Resumed: every judgment is in the runs' 08 files and the cache; no call is made.
    claims_report.build(results, results / "claims", overrides=cache)
    assert fake_server.request_count - before == calls
    page = build_report(zep_dir, judge="published").read_text()
    assert 'id="claim-table"' in page and "75.14" in page


@needs_audit
def test_our_judge_may_not_take_the_name_of_the_published_labels(tmp_path):
    zep_fixture(tmp_path / "zep.json")
    _import(tmp_path / "zep.json", tmp_path / "results", "zep", "--format", "zep")
    assert claims_report.main(["--results", str(tmp_path / "results"), "--judge", "published", "--no-rejudge"]) == 2


LME_ONE = REPO.parent / "shared" / "data" / "longmemeval" / "longmemeval_s_single_e47becba.json"


@pytest.mark.skipif(not LME_ONE.exists(), reason="the one-question LongMemEval file is not in ../shared/data")
def test_a_hindsight_longmemeval_file_maps_items_by_question_id(tmp_path):
    (q,) = json.loads(LME_ONE.read_text())
    row = {"question": q["question"], "correct_answer": q["answer"], "predicted_answer": "Business Administration",
           "category": q["question_type"], "is_correct": True, "is_invalid": False}
    doc = {"overall_accuracy": 100.0, "total_correct": 1, "total_questions": 1, "total_invalid": 0,
           "item_results": [{"item_id": q["question_id"], "metrics": {"detailed_results": [row]}}]}
    (tmp_path / "longmemeval.json").write_text(json.dumps(doc))
    assert main([str(tmp_path / "longmemeval.json"), "--format", "hindsight", "--benchmark", "longmemeval",
                 "--run", "h", "--set", f"run.results_dir={tmp_path / 'results'}",
                 "--set", f"data.path={LME_ONE}"]) == 0
    run_dir = tmp_path / "results" / "longmemeval" / "h"
    assert [r["qid"] for r in rows(run_dir / "08_judge_published.jsonl")] == [q["question_id"]]
    table = claims_report.build(tmp_path / "results", tmp_path / "claims", rejudge=False)
    (r,) = json.loads(table[0].read_text())["rows"]
    assert r["system"] == "imported (hindsight)"
    assert (r["cells"]["standard"]["n"], r["cells"]["standard"]["missing"]) == (500, 499)
    assert r["cells"]["audited_excluding"]["skipped"] and r["cells"]["our_judge"]["skipped"]


@needs_locomo  # the Zep fixture takes its questions from the real file
def test_the_claims_row_carries_question_and_conversation_intervals(tmp_path, monkeypatch):
    """Each row has a 95% CI over the run's labelled questions and one resampling whole
    conversations, equal to the statistics module's on the same labels."""
    from common.evaluation.labels import load_labels
    from common.evaluation.stats import accuracy_with_ci
    from common.report.claims import build

    for var in ("OPENAI_API_KEY", "OPENAI_BASE_URL", "OPENAI_BASE_URLS"):
        monkeypatch.delenv(var, raising=False)
    zep_fixture(tmp_path / "zep.json")
    _import(tmp_path / "zep.json", tmp_path / "results", "zep", "--format", "zep", "--claim", "zep-locomo")
    build(tmp_path / "results", tmp_path / "results" / "claims", rejudge=False)
    (row,) = json.loads((tmp_path / "results" / "claims" / "claims.json").read_text())["rows"]
    cell = row["cells"]["intervals"]
    from common.evaluation.labels import MISSING

    labelled = [r for r in load_labels(tmp_path / "results" / "locomo" / "zep", "published").records
                if r.cause != MISSING]  # the questions the file has a row for; the missing are the standard cell's
    expected = accuracy_with_ci([r.label for r in labelled], clusters=[r.cluster for r in labelled])
    assert cell["n"] == len(labelled) == 10
    assert cell["ci"]["low"] == expected["ci"]["low"] and cell["ci_cluster"]["high"] == expected["ci_cluster"]["high"]
    assert cell["ci_cluster"]["n_clusters"] == len({r.cluster for r in labelled}) > 1
    md = (tmp_path / "results" / "claims" / "claims.md").read_text()
    assert "95% CI (questions; conversations)" in md
    assert f"q {100 * expected['ci']['low']:.1f}-{100 * expected['ci']['high']:.1f}; cl " in md


def test_a_run_a_claim_names_is_paired_with_the_claims_import_on_the_questions_both_labelled():
    from common.evaluation.labels import MISSING, LabelRecord, RunLabels
    from common.report.claims import paired

    def labels(pairs):
        return RunLabels("r", "locomo", "j", ("m",), tuple(LabelRecord(q, "single-hop", v, MISSING if v is None else "")
                                                           for q, v in pairs))

    ours = labels([("q1", 1), ("q2", 0), ("q3", 1), ("q4", None)])  # q4: not answered here
    zep = labels([("q1", 1), ("q2", 1), ("q3", 0), ("q4", 1), ("q5", 1)])
    p = paired(ours, zep)
    assert (p["n"], p["k"], p["k_claim_run"]) == (3, 2, 2) and p["accuracy"] == p["accuracy_claim_run"] == 2 / 3
    assert paired(labels([]), zep)["accuracy"] is None


def _claims_file(path: Path) -> Path:
    """A registry with one claim on 1,540 questions that names harness run ``paper``."""
    path.write_text(yaml.safe_dump({"claims": {"sys-locomo": {
        "system": "Sys", "benchmark": "locomo", "value": "75.14", "printed": "75.14 %", "published_in": "a paper",
        "per_question": {"available": False, "why": "none"}, "denominator": "1540", "runs": ["paper"]}}}))
    return path


def test_a_partial_run_is_marked_beside_a_claim_and_its_difference_printed_only_when_asked(tmp_path):
    from tests.test_tables import LOCOMO_MAIN, PRIMARY, make_run

    results = tmp_path / "results"
    make_run(results, "locomo", "paper", LOCOMO_MAIN, {PRIMARY: [x[1] for x in LOCOMO_MAIN]})
    registry = _claims_file(tmp_path / "claims.yaml")
    out = tmp_path / "claims"
    claims_report.build(results, out, rejudge=False, claims_path=str(registry))
    data = json.loads((out / "claims.json").read_text())
    (row,) = data["rows"]
    # 13 scored questions (category 5 is not scored) of the claim's 1,540.
    assert row["coverage"]["mark"] == "PARTIAL 13 / 1,540"
    assert row["cells"]["own"]["vs_claim"].endswith("pp vs claim")  # kept in claims.json
    md = (out / "claims.md").read_text()
    line = next(ln for ln in md.splitlines() if ln.startswith("| locomo/paper"))
    assert "PARTIAL 13 / 1,540" in line and "not compared: PARTIAL 13 / 1,540" in line and "pp vs claim" not in line
    claims_report.build(results, out, rejudge=False, claims_path=str(registry), partial_vs_claim=True)
    line = next(ln for ln in (out / "claims.md").read_text().splitlines() if ln.startswith("| locomo/paper"))
    assert "PARTIAL 13 / 1,540" in line and "pp vs claim" in line
