"""The audited LoCoMo answer key (``data.errata``): loading, re-judging only corrected answers, metrics.

Reads ``../shared/data/locomo-audit/errors.json`` and ``locomo10.json`` (skipped when absent).
"""
from __future__ import annotations

import json

import pytest

from common.benchmarks.base import DataError
from common.benchmarks.errata import load_errata
from common.benchmarks.locomo import ADAPTER
from common.core.config import load_config
from tests.conftest import REAL_LOCOMO, REPO, rows, run_overrides, run_stages

ERRATA = REPO.parent / "shared" / "data" / "locomo-audit" / "errors.json"
pytestmark = pytest.mark.skipif(not (ERRATA.exists() and REAL_LOCOMO.exists()),
                                reason="locomo-audit errors.json or locomo10.json not in ../shared/data")
STAGES = ["preprocess", "episodes", "extract", "index", "plan", "retrieve", "answer", "judge", "aggregate"]


def _data():
    data = ADAPTER.load(REAL_LOCOMO)
    return data, list(dict.fromkeys(s.memory_id for s in data.sessions))


def test_errata_map_onto_the_benchmark_with_the_published_counts():
    data, memories = _data()
    errata = load_errata(ERRATA, memories, data.questions, data.sessions)
    assert len(errata.items) == 156
    assert len(errata.corrected_answers()) == 99  # the audit's "99 of 1,540 wrong golden answers"
    assert errata.items["conv-26:q0002"].error_type == "WRONG_CITATION"
    assert "conv-26:q0002" not in errata.corrected_answers()
    assert errata.corrected_answers()["conv-26:q0003"] == "Counseling or mental health"
    assert errata.corrected_evidence()["conv-26:q0002"] == ["D1:14"]


def test_a_question_text_mismatch_names_the_row(tmp_path):
    data, memories = _data()
    items = json.loads(ERRATA.read_text())
    items[3]["question"] = "Something else?"
    bad = tmp_path / "errors.json"
    bad.write_text(json.dumps(items))
    with pytest.raises(DataError, match=r"errors\.json: \[3\]\.question: locomo_0_qa\d+ -> conv-26:q\d{4}: text"):
        load_errata(bad, memories, data.questions, data.sessions)


def test_a_configured_but_missing_errata_file_is_a_one_line_error(tmp_path):
    from common.evaluation.audited import run_errata

    cfg = load_config(["configs/locomo.yaml"], [f"data.path={REAL_LOCOMO}", f"data.errata={tmp_path}/nope.json"])
    with pytest.raises(DataError, match="nope.json: errata file not found"):
        run_errata(cfg)


def test_corrected_evidence_for_other_diagnostics():
    from common.evaluation.audited import corrected_evidence

    cfg = load_config(["configs/locomo.yaml"], [f"data.path={REAL_LOCOMO}", f"data.errata={ERRATA}"])
    fixed = corrected_evidence(cfg)
    assert len(fixed) == 156 and fixed["conv-26:q0002"] == ["D1:14"]
    assert corrected_evidence(load_config(["configs/locomo.yaml"], [f"data.path={REAL_LOCOMO}"])) == {}


def test_only_corrected_answers_are_judged_again_and_both_keys_are_reported(tmp_path, fake_server, monkeypatch):
    monkeypatch.setenv("OPENAI_BASE_URL", fake_server.base_url)
    # conv-26's first 6 questions: q0003 (HALLUCINATION) and q0006 (TEMPORAL_ERROR) have wrong
    # golden answers; q0002 and q0005 only cite wrong evidence.
    sets = run_overrides(tmp_path, REAL_LOCOMO, **{"method.name": "no_memory", "data.memories": "[conv-26]",
                                                    "data.question_limit": 6, "data.limit_rule": "first"})
    run = run_stages("configs/locomo.yaml", sets, STAGES)
    metrics = json.loads(run.path("metrics").read_text())
    judge = run.cfg.judge.name
    assert metrics["judges"][judge]["audited_key"]["status"] == "not configured"
    assert "Audited answer key: not configured" in (run.dir / f"table_{judge}.md").read_text()
    n_judged = len(fake_server.requests_of_kind("judge_locomo"))
    assert n_judged == 6
    before = {r["qid"]: r for r in rows(run.judge_path())}

    run = run_stages("configs/locomo.yaml", sets + [f"data.errata={ERRATA}"], ["judge", "aggregate"])
    new = fake_server.requests_of_kind("judge_locomo")[n_judged:]
    assert len(new) == 2  # only the two corrected answers: every original judgment comes from the cache
    assert sum("Counseling or mental health" in json.dumps(r) for r in new) == 1
    after = {r["qid"]: r for r in rows(run.judge_path())}
    assert {q for q, r in after.items() if r.get("corrected")} == {"conv-26:q0003", "conv-26:q0006"}
    assert all(after[q]["label"] == before[q]["label"] for q in before)  # the headline key is untouched
    assert after["conv-26:q0003"]["corrected"]["answer"] == "Counseling or mental health"
    a = json.loads(run.path("metrics").read_text())["judges"][judge]["audited_key"]
    assert a["status"] == "configured" and a["wrong_golden_answers"] == 2 and a["wrong_citations_only"] == 2
    assert a["excluding_wrong_answers"]["overall"]["n"] == 4
    corrected_k = sum((r.get("corrected") or r)["label"] for r in after.values())
    assert a["corrected"]["overall"]["n"] == 6 and a["corrected"]["overall"]["k"] == corrected_k
    table = (run.dir / f"table_{judge}.md").read_text()
    assert "[audited key: 2 corrected answers re-judged]" in table
    assert "[original key without its 2 wrong answers]" in table
    metrics = json.loads(run.path("metrics").read_text())
    assert metrics["evidence_recall_audited"]["corrected_questions"] == 4


def test_the_dry_run_counts_the_corrected_answers_judged_again():
    from common.pipeline.dryrun import estimate

    def judge_calls(*extra: str) -> int:
        sets = [f"data.path={REAL_LOCOMO}", "run.results_dir=/nonexistent-results", "data.memories=[conv-26]",
                "data.question_limit=6", "data.limit_rule=first", "method.name=no_memory", *extra]
        est = estimate(load_config(["configs/locomo.yaml"], sets))
        return next(s["calls"] for s in est["stages"] if s["role"] == "judge")

    assert judge_calls() == 6
    assert judge_calls(f"data.errata={ERRATA}") == 8  # q0003 and q0006 are judged against their corrected answers
