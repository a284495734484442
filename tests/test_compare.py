"""python -m common.report.compare on tiny hand-written run directories.

Expected counts, accuracies, p-values and Table 10 numbers are derived by hand from the labels
written below (comments show the arithmetic), never read back from the code under test.
"""
from __future__ import annotations

import json
import statistics
import subprocess
import sys

import pytest

from common.core.schema import Gold
from common.report.compare import main
from tests.conftest import REPO
from tests.test_stats import exact_mcnemar_p, locomo_gold, pearson, write_run

# LoCoMo run A and run B. Each has one single-hop question the other lacks, so the question sets
# differ (18 shared). Category 5 ("x") is never scored.
MULTI = [f"c:m{i:02d}" for i in range(12)]
TEMP = [f"c:t{i}" for i in range(6)]
A_LABELS = {**{q: 1 for q in MULTI},
            **dict(zip(TEMP, [1, 0, None, 1, 0, 1])), "c:s_a": 1, "c:x": 1}
B_LABELS = {**{q: int(i < 3) for i, q in enumerate(MULTI)},
            **dict(zip(TEMP[:3] + TEMP[4:], [1, 1, 1, 0, 1])), "c:s_b": 0, "c:x": 0}  # c:t3 has no row


@pytest.fixture
def two_runs(tmp_path):
    def golds(extra: str):
        return ([locomo_gold(q, 1) for q in MULTI] + [locomo_gold(q, 2) for q in TEMP]
                + [locomo_gold(extra, 4), locomo_gold("c:x", 5)])
    a = write_run(tmp_path / "locomo" / "a", "locomo", golds("c:s_a"), {"gpt": A_LABELS},
                  errors={"c:t2": "timeout: read timed out"})
    b = write_run(tmp_path / "locomo" / "b", "locomo", golds("c:s_b"), {"gpt": B_LABELS})
    return a, b


def test_compare_two_runs(two_runs, tmp_path, capsys):
    a, b = two_runs
    out_json = tmp_path / "cmp.json"
    assert main([str(a), str(b), "--json", str(out_json)]) == 0
    printed = capsys.readouterr()
    report = json.loads(out_json.read_text())
    assert report["mode"] == "runs" and report["benchmark"] == "locomo" and report["failures"] == "strict"
    assert report["questions"] == {"shared": 18, "only_in_a": 1, "only_in_b": 1}
    assert any("QUESTION SETS DIFFER" in w for w in report["warnings"])
    assert "WARNING: QUESTION SETS DIFFER" in printed.out and "WARNING: QUESTION SETS DIFFER" in printed.err
    assert report["a"]["failures"] == {"judge_api_error": 1} and report["b"]["failures"] == {"missing_judgment": 1}

    rows = {r["category"]: r for r in report["rows"]}
    assert list(rows) == ["multi-hop", "temporal", "single-hop", "overall"]  # paper column order
    # multi-hop: A 12/12, B 3/12; 9 pairs where only A is right.
    mh = rows["multi-hop"]
    assert (mh["a"]["k"], mh["a"]["n"], mh["b"]["k"], mh["b"]["n"]) == (12, 12, 3, 12)
    assert (mh["mcnemar"]["only_a_right"], mh["mcnemar"]["only_b_right"]) == (9, 0)
    assert mh["mcnemar"]["p_value"] == pytest.approx(2 / 2**9)
    assert mh["mcnemar"]["difference"] == pytest.approx(-9 / 12)
    # temporal, strict: A 1,0,F,1,0,1 -> 3/6; B 1,1,1,missing,0,1 -> 4/6.
    # Pairs: (1,1) (0,1) (0,1) (1,0) (0,0) (1,1): both 2, only A 1, only B 2, neither 1.
    t = rows["temporal"]
    assert (t["a"]["k"], t["a"]["n_failed"], t["b"]["k"], t["b"]["n_failed"]) == (3, 1, 4, 1)
    m = t["mcnemar"]
    assert (m["both_right"], m["only_a_right"], m["only_b_right"], m["both_wrong"]) == (2, 1, 2, 1)
    assert m["p_value"] == pytest.approx(exact_mcnemar_p(1, 2)) and m["difference"] == pytest.approx(1 / 6)
    lo, hi = t["difference_ci"]["low"], t["difference_ci"]["high"]
    assert lo <= 1 / 6 <= hi
    # single-hop: one question in each run, none shared -> no paired test.
    sh = rows["single-hop"]
    assert (sh["a"]["k"], sh["b"]["k"], sh["mcnemar"]["n_used"], sh["mcnemar"]["p_value"]) == (1, 0, 0, None)
    # overall: A 16/19, B 7/19; shared pairs only A right 9+1, only B right 0+2.
    ov = rows["overall"]
    assert (ov["a"]["k"], ov["a"]["n"], ov["b"]["k"], ov["b"]["n"]) == (16, 19, 7, 19)
    assert ov["mcnemar"]["n_used"] == 18 and ov["mcnemar"]["p_value"] == pytest.approx(exact_mcnemar_p(10, 2))
    assert ov["a"]["ci"]["low"] <= 16 / 19 <= ov["a"]["ci"]["high"]
    # Holm over the two tested categories: p(1) * 2, then max(that, p(2) * 1), capped at 1.
    p1, p2 = sorted([2 / 2**9, exact_mcnemar_p(1, 2)])
    assert mh["mcnemar"]["p_holm"] == pytest.approx(min(1, 2 * p1))
    assert t["mcnemar"]["p_holm"] == pytest.approx(min(1, max(2 * p1, p2)))
    assert "p_holm" not in ov["mcnemar"]

    assert "| multi-hop | 100.0 [" in printed.out and "(12/12)" in printed.out and "| overall |" in printed.out


def test_compare_two_runs_clean_mode(two_runs, tmp_path):
    a, b = two_runs
    out_json = tmp_path / "clean.json"
    assert main([str(a), str(b), "--failures", "clean", "--json", str(out_json)]) == 0
    t = {r["category"]: r for r in json.loads(out_json.read_text())["rows"]}["temporal"]["mcnemar"]
    # c:t2 (A failed) and c:t3 (B missing) are dropped: (1,1) (0,1) (0,0) (1,1).
    assert (t["failures"], t["n_used"], t["n_dropped"]) == ("clean", 4, 2)
    assert (t["both_right"], t["only_a_right"], t["only_b_right"], t["both_wrong"]) == (2, 0, 1, 1)


def test_compare_two_judges_of_one_longmemeval_run(tmp_path, capsys):
    types = {"single-session-preference": "p", "temporal-reasoning": "t", "multi-session": "m"}
    golds = [Gold(qid=f"{short}{i}", memory_id="m", answer="x", category=0, question_type=qt)
             for qt, short in types.items() for i in range(4)]
    gpt = dict(zip([g.qid for g in golds], [1, 1, 0, 0] + [1, 1, 1, 0] + [1, 1, 1, 1]))
    qwen = dict(zip([g.qid for g in golds], [1, 1, 1, 0] + [1, 0, 1, 0] + [1, 1, 1, None]))
    run = write_run(tmp_path / "lme", "longmemeval", golds, {"gpt": gpt, "qwen": qwen},
                    errors={"m3": "judge_parse_error: empty"})
    out_json = tmp_path / "judges.json"
    assert main([str(run), "--judge", "gpt", "--judge-b", "qwen", "--json", str(out_json)]) == 0
    printed = capsys.readouterr().out
    report = json.loads(out_json.read_text())
    assert report["mode"] == "judges" and report["b"]["failures"] == {"judge_parse_error": 1}

    overall = report["rows"][-1]
    assert (overall["a"]["k"], overall["b"]["k"], overall["a"]["n"]) == (9, 8, 12)
    # Pairs (gpt, qwen): both right 2+2+3 = 7, only gpt 1+1 = 2, only qwen 1, neither 1+1 = 2.
    # p_o = 9/12; p_e = (9/12)(8/12) + (3/12)(4/12) = 84/144; kappa = (108-84)/(144-84) = 0.4.
    ag = overall["agreement"]
    assert (ag["n"], ag["agreement"], ag["kappa"]) == (12, pytest.approx(0.75), pytest.approx(0.4))
    m = ag["mcnemar"]
    assert (m["both_right"], m["only_a_right"], m["only_b_right"], m["both_wrong"]) == (7, 2, 1, 2)
    assert m["p_value"] == pytest.approx(exact_mcnemar_p(2, 1))

    # Table 10 on the strict accuracies: gpt 50, 75, 100; qwen 75, 50, 75 (pp).
    g, q = [50.0, 75.0, 100.0], [75.0, 50.0, 75.0]
    delta = [y - x for x, y in zip(g, q)]
    t10 = report["table10"]
    assert t10["m"] == 3
    assert t10["mean_delta_pp"] == pytest.approx(-25 / 3)
    assert t10["mae_pp"] == pytest.approx(25.0)
    assert t10["sd_delta_pp"] == pytest.approx(statistics.pstdev(delta))
    assert t10["max_abs_delta_pp"] == pytest.approx(25.0)
    assert t10["max_abs_delta_category"] == "single-session-preference"  # first of the ties, column order
    assert t10["abs_delta_overall_pp"] == pytest.approx(100 * (9 - 8) / 12)
    assert t10["pearson_r"] == pytest.approx(pearson(g, q))
    assert "Table 10 statistics" in printed and "| single-session-preference |" in printed


def _error(capsys) -> str:
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: ") and "\n" not in err, err
    return err


def test_compare_refuses_bad_input(two_runs, tmp_path, capsys):
    a, b = two_runs
    lme = write_run(tmp_path / "lme", "longmemeval",
                    [Gold(qid="q", memory_id="m", answer="x", category=0, question_type="multi-session")],
                    {"gpt": {"q": 1}})
    assert main([str(a), str(lme)]) == 2
    err = _error(capsys)
    assert "is a locomo run and B" in err and "a longmemeval run; only runs of the same benchmark" in err
    assert main([str(a)]) == 2
    assert "--judge-b" in _error(capsys)
    assert main([str(a), str(b), "--judge", "nope"]) == 2
    assert "08_judge_nope.jsonl: not found (judges in this run: gpt)" in _error(capsys)
    assert main([str(a), str(a), "--judge", "gpt", "--judge-b", "gpt"]) == 2
    assert "nothing to compare" in _error(capsys)
    assert main([str(tmp_path / "missing"), str(b)]) == 2
    assert "not a run directory" in _error(capsys)
    (a / "08_judge_other.jsonl").write_text("")  # a second judge in A: the choice must be explicit
    assert main([str(a), str(b)]) == 2
    assert "several judges (gpt, other)" in _error(capsys)


def test_compare_module_entry_point(two_runs):
    a, b = two_runs
    proc = subprocess.run([sys.executable, "-m", "common.report.compare", str(a), str(b)], cwd=REPO,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert "# locomo: compare two runs" in proc.stdout and "| temporal | 50.0 [" in proc.stdout
    assert "QUESTION SETS DIFFER" in proc.stderr
