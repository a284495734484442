"""``make audit-judge`` against the fake server on conv-26 (152 scored questions per set).

Reads ``../shared/data/locomo-audit/`` and ``locomo10.json`` (skipped when absent).
"""
from __future__ import annotations

import json

import pytest

from common.evaluation.judge import judge_messages
from common.pipeline.audit import main
from tests.conftest import REAL_LOCOMO, REPO, rows, run_overrides
from tests.fake_openai import scripted

AUDIT = REPO.parent / "shared" / "data" / "locomo-audit"
pytestmark = pytest.mark.skipif(not (AUDIT.exists() and REAL_LOCOMO.exists()),
                                reason="locomo-audit or locomo10.json not in ../shared/data")
SETS = "ap-v1,gold,fc-gpt-4.1-mini-cot"


def _args(tmp_path, server, *extra):
    sets = run_overrides(tmp_path, REAL_LOCOMO, **{"models.default.base_url": server.base_url,
                                                    "data.memories": "[conv-26]"})
    sets = [s for s in sets if not s.startswith("run.")]
    return [a for s in sets for a in ("--set", s)] + ["--sets", SETS, "--out", str(tmp_path / "audit"), *extra]


def _report(tmp_path) -> dict:
    return {r["set"]: r for r in json.loads((tmp_path / "audit" / "gpt-4o-mini" / "audit.json").read_text())["sets"]}


def _published(name: str) -> dict[str, list[int]]:
    path = AUDIT / ("ap-baseline/v1/ap_eval_results_scored.json" if name == "ap-v1"
                    else "fc-baseline/gpt-4.1-mini-cot/eval_results.json")
    doc = json.loads(path.read_text())
    out = {}
    for r in doc["detailed_results"]["locomo_exp_user_0"]:  # conv-26
        out[r["question_id"]] = (r, [int(v) for v in r["llm_judgments"].values()])
    return out


def test_an_accept_everything_judge_false_accepts_every_wrong_answer(tmp_path, fake_server, monkeypatch):
    monkeypatch.setattr(scripted, "judge_label", lambda text: "CORRECT")
    assert main(_args(tmp_path, fake_server)) == 0
    rep = _report(tmp_path)
    ap = rep["ap-v1"]
    assert ap["accept"]["n"] == 152 and ap["accept"]["accuracy"] == 1.0  # 100 % false accepts
    agreement = ap["published_labels"]["agreement"]
    assert agreement["kappa"] == pytest.approx(0.0, abs=1e-9)  # no agreement beyond chance
    published = _published("ap-v1")
    accepted = sum(sum(labels) * 2 > len(labels) for _, labels in published.values())
    assert agreement["exact"] == pytest.approx(accepted / 152)
    assert rep["gold"]["accept"]["accuracy"] == 1.0 and "published_labels" not in rep["gold"]
    assert "ap-v1" in (tmp_path / "audit" / "gpt-4o-mini" / "audit.md").read_text()
    assert "10.61" in (tmp_path / "audit" / "gpt-4o-mini" / "audit.md").read_text()


def test_the_fake_judges_scripted_labels_give_the_exact_rates_and_a_rerun_pays_nothing(tmp_path, fake_server):
    assert main(_args(tmp_path, fake_server)) == 0
    n_requests = fake_server.request_count
    assert n_requests == 3 * 152
    rep = _report(tmp_path)
    for name in ("ap-v1", "fc-gpt-4.1-mini-cot"):
        expected, agree = 0, 0
        for row, labels in _published(name).values():
            text = scripted.prompt_text(judge_messages("judge_locomo_mem0", row["question"], row["golden_answer"],
                                                       row["generated_answer"]))
            mine = int(scripted.judge_label(text) == "CORRECT")
            expected += mine
            agree += mine == int(sum(labels) * 2 > len(labels))
        assert rep[name]["accept"]["k"] == expected, name
        assert rep[name]["published_labels"]["agreement"]["exact"] == pytest.approx(agree / 152), name
    set_dir = tmp_path / "audit" / "gpt-4o-mini" / "locomo" / "ap-v1"
    assert len(rows(set_dir / "08_judge_gpt-4o-mini.jsonl")) == len(rows(set_dir / "08_judge_published.jsonl")) == 152
    assert main(_args(tmp_path, fake_server)) == 0  # resumed: every judgment is already there
    assert fake_server.request_count == n_requests


def test_dry_run_counts_calls_and_writes_nothing(tmp_path, fake_server, capsys):
    assert main(_args(tmp_path, fake_server, "--dry-run")) == 0
    out = capsys.readouterr().out
    assert "456 judge calls in total (none made)" in out
    assert fake_server.request_count == 0 and not (tmp_path / "audit").exists()


def test_an_unknown_set_is_a_one_line_error(tmp_path, fake_server, capsys):
    assert main(_args(tmp_path, fake_server)[:-4] + ["--sets", "ap-v9", "--out", str(tmp_path / "a")]) == 2
    assert "unknown audit set(s) ['ap-v9']" in capsys.readouterr().err
