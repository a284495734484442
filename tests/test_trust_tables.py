"""The trust numbers in the paper tables (``make tables``): judge runs, the audited key, category 5, power.

One LoCoMo run is built by hand with three judge runs per answer, corrected-key judgments for the
two conv-26 questions the locomo-audit corrects (q0003, q0006) and two category-5 answers; its
metrics.json is written by the harness's own 09_aggregate code with ``data.errata`` and
``score.adversarial`` set. Every expected number is worked out by hand from the labels below.
A run without those blocks (tests.test_tables.main_runs) must show none of them.
"""
from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import pandas as pd
import pytest

from common.core import artifacts
from common.evaluation import locomo as locomo_eval
from common.evaluation import scoring
from tests.conftest import REAL_LOCOMO, REPO
from tests.test_tables import PRIMARY, main_runs, make_run, run_tables

ERRATA = REPO.parent / "shared" / "data" / "locomo-audit" / "errors.json"
pytestmark = pytest.mark.skipif(not (ERRATA.exists() and REAL_LOCOMO.exists()),
                                reason="locomo-audit errors.json or locomo10.json not in ../shared/data")

# qid, category, the three judge runs' labels, the three runs on the corrected key (audited questions only).
ITEMS = [
    ("conv-26:q0001", 1, [1, 1, 1], None),
    ("conv-26:q0002", 2, [1, 0, 1], None),  # flips
    ("conv-26:q0003", 3, [0, 0, 0], [1, 1, 0]),  # wrong golden answer: right on the corrected key (2 of 3)
    ("conv-26:q0004", 4, [1, 1, 1], None),
    ("conv-26:q0005", 1, [0, 1, 0], None),  # flips
    ("conv-26:q0006", 2, [1, 1, 1], [0, 0, 0]),  # wrong golden answer: wrong on the corrected key
    ("conv-30:q0001", 4, [1, 1, 1], None),
    ("conv-30:q0002", 4, [0, 0, 0], None),
    ("conv-30:q0003", 1, [1, 1, 0], None),  # flips
    ("conv-30:q0004", 2, [0, 0, 0], None),
]
ADVERSARIAL = {"conv-26:q0100": "Unknown", "conv-30:q0100": "She went to Paris."}  # abstains / answers


def majority(labels: list[int]) -> int:
    return int(sum(labels) * 2 > len(labels))


def trusted_run(results: Path) -> Path:
    items = [(c, majority(runs)) for _, c, runs, _ in ITEMS] + [(5, None)] * len(ADVERSARIAL)
    qids = [q for q, *_ in ITEMS] + list(ADVERSARIAL)
    d = make_run(results, "locomo", "paper", items, {PRIMARY: [x[1] for x in items]}, qids=qids)
    judge_file = artifacts.judge_path(d, PRIMARY)
    rows = [json.loads(line) for line in judge_file.read_text().splitlines()]
    spec = {q: (runs, fixed) for q, _, runs, fixed in ITEMS}
    for r in rows:
        runs, fixed = spec[r["qid"]]
        r["labels"] = runs
        if fixed is not None:
            r["corrected"] = {"answer": "corrected", "label": majority(fixed), "labels": fixed, "error": ""}
    judge_file.write_text("".join(json.dumps(r) + "\n" for r in rows))
    answers_file = artifacts.path(d, "answers")
    answers = [json.loads(line) for line in answers_file.read_text().splitlines()]
    for a in answers:
        a["answer"] = ADVERSARIAL.get(a["qid"], a["answer"])
    answers_file.write_text("".join(json.dumps(a) + "\n" for a in answers))
    # 09_aggregate's code, with the audited key and category 5 switched on.
    cfg = SimpleNamespace(run=SimpleNamespace(name="paper"), benchmark="locomo", method=SimpleNamespace(name="ensimem"),
                          data=SimpleNamespace(errata=str(ERRATA), path=str(REAL_LOCOMO), env=None),
                          score=SimpleNamespace(adversarial=True))
    fake = SimpleNamespace(dir=d, path=lambda n: artifacts.path(d, n), judge_path=lambda j: artifacts.judge_path(d, j),
                           cfg=cfg)
    metrics = locomo_eval.aggregate(fake, [PRIMARY])
    metrics["coverage"] = scoring.coverage("locomo", metrics["judges"][PRIMARY]["overall"]["n"], {})
    artifacts.path(d, "metrics").write_text(json.dumps(metrics))
    locomo_eval.write_tables(fake, metrics)
    return d


def test_corrected_key_reports_every_judge_run_not_only_the_majority(tmp_path):
    d = trusted_run(tmp_path / "results")
    a = json.loads(artifacts.path(d, "metrics").read_text())["judges"][PRIMARY]["audited_key"]
    assert a["status"] == "configured" and a["wrong_golden_answers"] == 2
    # Corrected key, per run: run 1 = 1,1,1,1,0,0,1,0,1,0 -> 6; run 2 -> 6; run 3 = 1,1,0,1,0,0,1,0,0,0 -> 4.
    runs = a["corrected"]["runs"]
    assert [r["k"] for r in runs["overall"]["per_run"]] == [6, 6, 4]
    assert runs["overall"]["mean"] == pytest.approx(16 / 30)
    assert runs["overall"]["std"] == pytest.approx(((2 * (1 / 15) ** 2 + (2 / 15) ** 2) / 3) ** 0.5)
    assert runs["overall"]["majority"]["k"] == a["corrected"]["overall"]["k"] == 6
    assert runs["overall"]["flips"]["k"] == 4  # q0002, q0003 (corrected 1,1,0), q0005, conv-30:q0003
    # Without the two wrong answers: runs 5, 5, 4 of 8.
    assert [r["k"] for r in a["excluding_wrong_answers"]["runs"]["overall"]["per_run"]] == [5, 5, 4]
    table = (d / f"table_{PRIMARY}.md").read_text()
    assert "Corrected key, 3 judge runs: mean 53.33 +- 9.43" in table


def test_tables_show_the_trust_blocks_of_a_run_that_has_them_and_none_otherwise(tmp_path):
    trusted_run(tmp_path / "results")
    code, out = run_tables(tmp_path, "--only", "1")
    assert code == 0
    df = pd.read_csv(out / "table1.csv", dtype=str, keep_default_na=False).set_index("Ref")
    md = (out / "table1.md").read_text()
    # Judge runs, original key: runs 6, 6, 5 of 10 -> mean 56.7 +- 4.7; majority 6/10; flips 3/10.
    assert df.loc["M1-runs", "Overall"] == "56.7 ± 4.7"
    assert df.loc["M1-majority", "Overall"] == "60.0 (6/10)"
    assert df.loc["M1-flips", "Overall"] == "30.0% (3/10)"
    # Multi-hop (q0001, q0005, conv-30:q0003): runs 2, 3, 1 of 3 -> mean 66.7 +- 27.2; flips 2/3.
    assert df.loc["M1-runs", "Multi-hop"] == "66.7 ± 27.2"
    assert df.loc["M1-flips", "Multi-hop"] == "66.7% (2/3)"
    # Audited key: the corrected answers re-judged (majority 6/10), every run on it, and without them (5/8).
    assert df.loc["M1-audited", "Overall"].endswith("(6/10)") and "corrected answers re-judged" in df.loc[
        "M1-audited", "Method"]
    assert df.loc["M1-audited-runs", "Overall"] == "53.3 ± 9.4"
    assert df.loc["M1-audited-flips", "Overall"] == "40.0% (4/10)"
    assert df.loc["M1-excl", "Overall"].endswith("(5/8)") and "without its 2 wrong answers" in df.loc[
        "M1-excl", "Method"]
    assert df.loc["M1-excl-runs", "Overall"] == "58.3 ± 5.9"
    # Category 5 in its own column: "Unknown" abstains, the other answers -> 1/2; not in Overall (n = 10).
    assert df.loc["M1", "Cat. 5 (adversarial)"].endswith("(1/2)") and df.loc["M1", "Overall"].endswith("(6/10)")
    assert df.loc["P1", "Cat. 5 (adversarial)"] == "not reported"
    assert "M1: audited answer key" in md and "M1 power:" in md and "abstention rule" in md
    side = json.loads((out / "table1.sources.json").read_text())
    cells = {(c["row"], c["column"]): c for c in side["cells"]}
    assert cells[("M1-flips", "Overall")]["metric"] == f"judges.{PRIMARY}.runs.overall"
    assert cells[("M1", "Cat. 5 (adversarial)")]["k"] == 1

    plain = tmp_path / "plain"
    main_runs(plain / "results")
    code, out = run_tables(plain, "--only", "1,2")
    assert code == 0
    for name in ("table1", "table2"):
        df = pd.read_csv(out / f"{name}.csv", dtype=str, keep_default_na=False)
        assert not df["Ref"].str.contains("-").any()  # no trust rows
        assert "Cat. 5 (adversarial)" not in df.columns
        text = (out / f"{name}.md").read_text()
        assert "audited answer key" not in text and "judge runs" not in text


def test_a_trust_number_that_disagrees_with_the_judge_file_is_refused(tmp_path, capsys):
    d = trusted_run(tmp_path / "results")
    path = artifacts.path(d, "metrics")
    metrics = json.loads(path.read_text())
    metrics["judges"][PRIMARY]["runs"]["overall"]["flips"]["k"] = 2
    path.write_text(json.dumps(metrics))
    code, out = run_tables(tmp_path, "--only", "1")
    assert code == 1
    assert f"judges.{PRIMARY}.runs.overall.flips.k: 2" in capsys.readouterr().err
