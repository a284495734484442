"""The loss decomposition (metrics.json, make compare) and the report page's build (no browser here)."""
from __future__ import annotations

import csv
import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from common.benchmarks import checksums
from common.core import artifacts
from common.core.io import sha256_file
from common.core.schema import Gold
from common.evaluation.loss import CLASSES, classify, decompose, disagreements, evidence_coverage, question_losses
from common.pipeline.export import main as export_main
from common.pipeline.importer import import_run
from common.report import compare
from common.report.html import TEMPLATES, build, main, question_data
from tests.conftest import REPO, TINY_LOCOMO, rows
from tests.report_runs import report_runs

# The report runs (tests/report_runs.py) are made once per worker: both report modules on one.
pytestmark = pytest.mark.xdist_group("report_runs")

JUDGE = "gpt-4o-mini"


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> dict[str, Path]:
    return report_runs(tmp_path_factory.getbasetemp() / "report_runs")


def gold(**kw) -> Gold:
    return Gold(qid="m:q1", memory_id="m", answer="x", category=1, **kw)


# ----------------------------------------------------------------------------- the classes
@pytest.mark.parametrize("state,label,expected", [
    ("full", 1, "ok"), ("full", 0, "reading_error"), ("partial", 1, "partial"), ("partial", 0, "partial"),
    ("none", 1, "lucky"), ("none", 0, "retrieval_miss"), ("full", None, "failed"), ("none", None, "failed"),
    ("no_gold", 1, "no_gold_evidence"), ("no_gold", None, "no_gold_evidence"), ("unknown", 0, "no_buffer"),
])
def test_every_cell_of_coverage_x_label_has_its_class(state, label, expected):
    assert classify(state, label) == expected


def test_evidence_coverage_full_partial_none_and_its_sources():
    g = gold(evidence=["D1:1", "D1:3", "D1:3"])
    assert evidence_coverage(g, ["D1:1", "D1:2", "D1:3"]).state == "full"
    part = evidence_coverage(g, ["D1:3"])
    assert (part.state, part.found, part.needed, part.source) == ("partial", 1, 2, "evidence")
    assert evidence_coverage(g, ["D9:9"]).state == "none"
    assert evidence_coverage(g, []).state == "none"
    assert evidence_coverage(g, None).state == "unknown"
    assert evidence_coverage(gold(), ["D1:1"]).state == "no_gold"
    # Corrected evidence (errata) replaces the gold evidence of the question.
    fixed = evidence_coverage(g, ["D1:1", "D1:3"], corrected=["D2:1"])
    assert (fixed.state, fixed.source, fixed.gold_ids) == ("none", "corrected", ("D2:1",))
    # LongMemEval: has_answer turns, else whole answer sessions (found when any of their turns is read).
    assert evidence_coverage(gold(has_answer=["s1:2"]), ["s1:2"]).source == "has_answer"
    sessions = gold(answer_session_ids=["ans_1", "ans_2"])
    cov = evidence_coverage(sessions, ["t1", "t7"], session_of={"t1": "ans_1", "t7": "other"})
    assert (cov.state, cov.found, cov.needed, cov.source) == ("partial", 1, 2, "answer_sessions")
    assert evidence_coverage(gold(answer_session_ids=["ans_1"], abstention=True), ["t1"]).state == "no_gold"


def test_disagreements_ignore_failed_judgments():
    assert disagreements({"a": {"q1": 1, "q2": 0, "q3": None}, "b": {"q1": 0, "q2": 0, "q3": 1}}) == {"q1"}


# ----------------------------------------------------------------------------- metrics.json
def recount(run_dir: Path, judge: str) -> dict[str, int]:
    """The classes recounted here from the files, independently of common.evaluation.loss."""
    golds = {g["qid"]: g for g in rows(run_dir / "01_gold.jsonl")}
    rets = {r["qid"]: set(r["dia_ids"]) for r in rows(run_dir / "06_retrieve.jsonl")}
    counts = dict.fromkeys(CLASSES, 0)
    for j in rows(run_dir / f"08_judge_{judge}.jsonl"):
        ev = set(golds[j["qid"]]["evidence"] or golds[j["qid"]]["has_answer"])
        found = len(ev & rets[j["qid"]])
        if not ev:
            cls = "no_gold_evidence"
        elif j["label"] is None:
            cls = "failed"
        elif found == len(ev):
            cls = "ok" if j["label"] == 1 else "reading_error"
        elif found == 0:
            cls = "lucky" if j["label"] == 1 else "retrieval_miss"
        else:
            cls = "partial"
        counts[cls] += 1
    return counts


@pytest.mark.parametrize("name", ["a", "b"])
def test_metrics_json_holds_the_loss_decomposition(runs, name):
    metrics = json.loads((runs[name] / "metrics.json").read_text())
    loss = metrics["loss"]["judges"][JUDGE]
    assert loss["overall"]["counts"] == recount(runs[name], JUDGE)
    assert loss["overall"]["n"] == metrics["judges"][JUDGE]["overall"]["n"] == sum(loss["overall"]["counts"].values())
    for cat, block in loss["by_category"].items():
        assert block["n"] == metrics["judges"][JUDGE]["by_category"][cat]["n"]
        assert sum(block["counts"].values()) == block["n"]
        assert all(block["rates"][c] == pytest.approx(block["counts"][c] / block["n"]) for c in CLASSES)
    # Right answers are ok, lucky or partial-right; the matrix keeps the partial split.
    k = metrics["judges"][JUDGE]["overall"]["k"]
    o = loss["overall"]
    assert o["counts"]["ok"] + o["counts"]["lucky"] + o["coverage"]["partial"]["right"] == k


def test_the_rag_baseline_with_one_turn_misses_evidence(runs):
    counts = json.loads((runs["b"] / "metrics.json").read_text())["loss"]["judges"][JUDGE]["overall"]["counts"]
    assert counts["retrieval_miss"] + counts["partial"] + counts["lucky"] > 0


def test_longmemeval_loss_uses_has_answer_turns(runs):
    metrics = json.loads((runs["lme"] / "metrics.json").read_text())
    judge = next(iter(metrics["judges"]))
    loss = metrics["loss"]
    gold_rows = rows(runs["lme"] / "01_gold.jsonl")
    # LongMemEval's preprocess stores the has_answer turns as the question's evidence too.
    with_turns = [g for g in gold_rows if g["has_answer"]]
    assert with_turns and all(g["evidence"] == g["has_answer"] for g in with_turns)
    sources = loss["evidence_sources"]
    assert sources.get("evidence", 0) + sources.get("has_answer", 0) == len(with_turns)
    assert loss["evidence_sources"].get("none", 0) >= sum(g["abstention"] for g in gold_rows)
    overall = loss["judges"][judge]["overall"]
    assert overall["n"] == metrics["judges"][judge]["overall"]["n"] == sum(overall["counts"].values())
    assert set(loss["judges"][judge]["by_category"]) <= set(metrics["judges"][judge]["by_type"])


def test_corrected_evidence_can_be_passed_in(runs):
    first = question_losses(runs["a"], JUDGE)[0]
    plain = decompose(runs["a"], [JUDGE])
    fixed = decompose(runs["a"], [JUDGE], corrected={first.qid: ["D99:1"]})
    assert plain["corrected_evidence"] == 0 and fixed["corrected_evidence"] == 1
    moved = "lucky" if first.label == 1 else "retrieval_miss"
    assert fixed["judges"][JUDGE]["overall"]["counts"][moved] == plain["judges"][JUDGE]["overall"]["counts"][moved] + 1


def test_two_judges_count_their_disagreements(runs, tmp_path):
    run = tmp_path / "run"
    shutil.copytree(runs["a"], run)
    judged = rows(run / f"08_judge_{JUDGE}.jsonl")
    flipped = judged[:3]
    other = [{**r, "judge": "other", "label": 1 - r["label"]} if r in flipped else {**r, "judge": "other"}
             for r in judged]
    (run / "08_judge_other.jsonl").write_text("".join(json.dumps(r) + "\n" for r in other))
    loss = decompose(run, [JUDGE, "other"])
    for j in (JUDGE, "other"):
        assert loss["judges"][j]["overall"]["judge_disagreement"] == 3
    assert "judge_disagreement" not in decompose(run, [JUDGE])["judges"][JUDGE]["overall"]
    data = question_data(run, JUDGE)
    assert {q["qid"] for q in data["questions"] if q["disagree"]} == {r["qid"] for r in flipped}


# ----------------------------------------------------------------------------- make compare
def test_compare_prints_the_loss_decomposition_of_both_runs(runs, capsys):
    assert compare.main([str(runs["a"]), str(runs["b"])]) == 0
    out = capsys.readouterr().out
    assert "Loss decomposition" in out
    a = decompose(runs["a"], [JUDGE])["judges"][JUDGE]["overall"]["counts"]
    b = decompose(runs["b"], [JUDGE])["judges"][JUDGE]["overall"]["counts"]
    for cls in CLASSES:
        line = next(ln for ln in out.splitlines() if ln.startswith(f"| {cls} |"))
        cells = [c.strip() for c in line.strip("|").split("|")]
        assert cells[1].split()[0] == str(a[cls]) and cells[2].split()[0] == str(b[cls])
        assert cells[3] == f"{b[cls] - a[cls]:+d}"


# ----------------------------------------------------------------------------- the page
def outside_data(html: str) -> str:
    """The page without its JSON data block and inline script (which quote stored text)."""
    return re.sub(r"<script\b.*?</script>", "", html, flags=re.S)


def test_the_page_is_static_self_contained_and_lazy(runs, tmp_path):
    path = build(runs["a"], out=tmp_path / "index.html")
    html = path.read_text(encoding="utf-8")
    assert "<script src" not in html and "<link" not in html and "@import" not in html
    static = outside_data(html)
    assert not re.search(r"(src|href)=\"(https?:)?//", static)
    # No buffer is rendered up front: details are built from the JSON when a question is opened.
    assert "<pre" not in static
    data = json.loads(re.search(r'<script type="application/json" id="report-data">(.*?)</script>',
                                html, re.S).group(1))
    rets = {r["qid"]: r for r in rows(runs["a"] / "06_retrieve.jsonl")}
    for qid, d in data["details"].items():
        assert "\n\n".join(data["blocks"][i] for i in d["retrieval"]["buffer"]) == rets[qid]["buffer_text"]
    # Shared episodes are stored once.
    assert len(data["blocks"]) < sum(len(d["retrieval"]["buffer"]) for d in data["details"].values())
    # "</script>" inside stored text could not end the data block early.
    assert "</" not in re.search(r'id="report-data">(.*?)</script>', html, re.S).group(1)


def test_an_imported_run_with_answers_and_labels_only(runs, tmp_path):
    run = tmp_path / "imported"
    run.mkdir()
    for name in ("config.resolved.yaml", "01_gold.jsonl", "01_questions.jsonl", "07_answer.jsonl",
                 f"08_judge_{JUDGE}.jsonl"):
        shutil.copy(runs["a"] / name, run / name)
    path = build(run)
    assert path == run / "report" / "index.html"
    data = question_data(run, JUDGE)
    scored = [q for q in data["questions"] if q["scored"]]
    assert scored and {q["cls"] for q in scored} == {"no_buffer"}
    assert all(d["retrieval"] is None and d["plan"] is None for d in data["details"].values())
    assert "No metrics.json" in path.read_text(encoding="utf-8")


def test_make_report_writes_the_page_and_names_it(runs):
    results = runs["a"].parent.parent
    cmd = ["make", "-s", "report", f"PY={sys.executable}", "RUN=a", "BENCH=locomo", "B=b", f"RESULTS={results}"]
    proc = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    page = runs["a"] / "report" / "index.html"
    assert f"report: {page}" in proc.stdout
    assert 'id="diff"' in page.read_text(encoding="utf-8")


def test_report_errors_are_one_line(tmp_path, capsys):
    assert main(["--run", "nope", "--results", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "nope" in err[0]


def test_templates_are_tracked_package_files():
    files = sorted(p.name for p in TEMPLATES.iterdir())
    assert files == ["report.css", "report.html.j2", "report.js"]
    for name in files:
        ignored = subprocess.run(["git", "check-ignore", "-q", str(TEMPLATES / name)], cwd=REPO)
        assert ignored.returncode == 1, f"{name} is git-ignored: a clean clone would lack it"


def test_ci_installs_the_browser_before_the_tests():
    # CI types `make test`, and `make test` installs the browser before pytest (its `browser` prerequisite).
    ci = (REPO / ".ci" / "run").read_text()
    assert 'make test VENV' in ci
    makefile = (REPO / "Makefile").read_text()
    test_rule = next(line for line in makefile.splitlines() if line.startswith("test:"))
    assert "browser" in test_rule.split("##")[0].split(":", 1)[1].split()
    assert "apt-get install -y -qq $(BROWSER_PACKAGES)" in makefile
    assert "BROWSER_PACKAGES = chromium chromium-driver" in makefile


def test_the_demo_ends_with_the_report_path(fake_server, tmp_path, capsys, monkeypatch):
    from common.demo.app import main as demo

    monkeypatch.delenv("LOCOMO_JSON", raising=False)
    monkeypatch.setattr("common.demo.app.DOWNLOADED_PATH", "no/such/file.json")
    sets = ["--set", f"run.results_dir={tmp_path / 'demo'}", "--set", f"llm.cache_path={tmp_path / 'llm.sqlite'}",
            "--set", f"embedding.cache_path={tmp_path / 'emb.sqlite'}", "--set", "llm.initial_wait=0.01"]
    assert demo(["--endpoint", fake_server.base_url, "--limit", "2", *sets]) == 0
    last = capsys.readouterr().out.strip().splitlines()[-1]
    page = tmp_path / "demo" / "locomo" / "smollm2-135m" / "report" / "index.html"
    assert last.startswith("per-question report") and last.endswith(str(page).replace(str(REPO) + "/", ""))
    assert page.exists()


def test_the_report_takes_corrected_evidence(runs, tmp_path):
    first = question_losses(runs["a"], JUDGE)[0]
    data = question_data(runs["a"], JUDGE, corrected={first.qid: ["D99:1"]})
    row = next(q for q in data["questions"] if q["qid"] == first.qid)
    assert row["cls"] == ("lucky" if first.label == 1 else "retrieval_miss")
    assert data["details"][first.qid]["loss"]["coverage"]["source"] == "corrected"
    fixed = {first.qid: ["D99:1"]}
    page = build(runs["a"], out=tmp_path / "c.html", corrected=fixed).read_text(encoding="utf-8")
    table = page[page.index('id="loss-table"'):]
    overall = table[table.index('data-group="overall"'):table.index("</tr>", table.index('data-group="overall"'))]
    counts = decompose(runs["a"], [JUDGE], fixed)["judges"][JUDGE]["overall"]["counts"]
    for cls in CLASSES:
        if cls == "no_buffer" and not counts[cls]:  # left out where no question lacks a retrieval row, and said so
            assert 'data-class="no_buffer"' not in overall and "<em>no_buffer</em> (imported runs" in table
            continue
        assert f'data-class="{cls}"><span class="count">{counts[cls]}</span>' in overall


def test_a_longmemeval_report_shows_the_table_2_row(runs, tmp_path):
    metrics = json.loads((runs["lme"] / "metrics.json").read_text())
    judge = next(iter(metrics["judges"]))
    block = metrics["judges"][judge]
    page = build(runs["lme"], out=tmp_path / "lme.html").read_text(encoding="utf-8")
    for qtype, cell in block["by_type"].items():
        row = page[page.index(f'<tr data-group="{qtype}"'):]
        assert f'<span class="k">{cell["k"]}</span>/<span class="n">{cell["n"]}</span>' in row[:row.index("</tr>")]
    abstention = block["abstention"]
    assert f"Abstention: {100 * abstention['accuracy']:.1f}% ({abstention['k']}/{abstention['n']})" in page
    data = question_data(runs["lme"], judge)
    assert [q["qid"] for q in data["questions"]] == [g["qid"] for g in rows(runs["lme"] / "01_gold.jsonl")]
    assert all(q["f1"] is None for q in data["questions"])  # the official F1 is LoCoMo's


def test_compare_of_two_judges_prints_each_judges_loss_and_their_disagreements(runs, tmp_path, capsys):
    run = tmp_path / "run"
    shutil.copytree(runs["a"], run, ignore=shutil.ignore_patterns("report"))
    judged = rows(run / f"08_judge_{JUDGE}.jsonl")
    other = [{**r, "judge": "other", "label": 1 - r["label"] if i < 2 else r["label"]} for i, r in enumerate(judged)]
    (run / "08_judge_other.jsonl").write_text("".join(json.dumps(r) + "\n" for r in other))
    assert compare.main([str(run), "--judge", JUDGE, "--judge-b", "other"]) == 0
    out = capsys.readouterr().out
    assert "each judge over its own" in out
    line = next(ln for ln in out.splitlines() if ln.startswith("| judge_disagreement"))
    assert [c.strip() for c in line.strip("|").split("|")][1:3] == ["2", "2"]


def test_tables_and_report_name_the_method_and_run(runs, tmp_path):
    table = (runs["b"] / f"table_{JUDGE}.md").read_text(encoding="utf-8")
    assert "RAG over turns (this harness, run b)" in table and "EnSIMem" not in table
    assert "EnSIMem (this harness, run a)" in (runs["a"] / f"table_{JUDGE}.md").read_text(encoding="utf-8")
    assert "EnSIMem (this harness, run a)" in (runs["lme"] / f"table_{JUDGE}.md").read_text(encoding="utf-8")
    page = build(runs["b"], out=tmp_path / "b.html").read_text(encoding="utf-8")
    header = page.split("<h1>", 1)[1].split("</h1>", 1)[0]
    assert "RAG over turns (this harness, run b)" in header
# ----------------------------------------------------------------------------- export, trust, docs names
def test_the_export_joins_the_stage_files_one_row_per_question(runs):
    run = runs["a"]
    exported = rows(run / "export" / "questions.jsonl")  # written by 09_aggregate
    questions, gold = rows(run / "01_questions.jsonl"), {g["qid"]: g for g in rows(run / "01_gold.jsonl")}
    answers = {r["qid"]: r for r in rows(run / "07_answer.jsonl")}
    rets = {r["qid"]: r for r in rows(run / "06_retrieve.jsonl")}
    judged = {r["qid"]: r for r in rows(run / f"08_judge_{JUDGE}.jsonl")}
    assert [r["qid"] for r in exported] == [q["qid"] for q in questions]
    for r in exported:
        q = r["qid"]
        assert (r["question"], r["gold"], r["answer"]) == (next(x["question"] for x in questions if x["qid"] == q),
                                                         gold[q]["answer"], answers[q]["answer"])
        assert (r["evidence_ids"], r["buffer_tokens"]) == (rets[q]["dia_ids"], rets[q]["buffer_tokens"])
        assert r["judges"].get(JUDGE, {}).get("label") == (judged[q]["label"] if q in judged else None)
        assert r["calls"] >= 1 + (q in judged) and r["cost_usd"] > 0
    with (run / "export" / "questions.csv").open(encoding="utf-8") as fh:
        table = list(csv.DictReader(fh))
    assert [t["qid"] for t in table] == [r["qid"] for r in exported]
    assert [t[f"judge.{JUDGE}.label"] for t in table] == [str(r["judges"].get(JUDGE, {}).get("label", "")) for r in
                                                          exported]
    manifest = json.loads((run / "export" / "manifest.json").read_text())
    fp = json.loads((run / "fingerprint.json").read_text())
    assert manifest["fingerprint"]["run"] == fp["run"]["id"] and manifest["models"]["answer"]
    assert manifest["dataset"]["sha256"] == fp["run"]["components"]["dataset_sha256"]
    assert manifest["files"]["questions.jsonl"] == sha256_file(run / "export" / "questions.jsonl")


def test_an_export_imports_back_with_the_same_labels_and_accuracies(runs, tmp_path):
    run = tmp_path / "a"  # run a plus a second judge with three repeat runs per answer
    shutil.copytree(runs["a"], run, ignore=shutil.ignore_patterns("report", "04_index", "export"))
    repeats = [[r["label"], 1, 0] if i % 2 else [1, r["label"], 1] for i, r in
               enumerate(rows(run / f"08_judge_{JUDGE}.jsonl"))]
    second = [{**r, "judge": "second", "labels": labels, "label": int(sum(labels) >= 2)}
              for r, labels in zip(rows(run / f"08_judge_{JUDGE}.jsonl"), repeats)]
    (run / "08_judge_second.jsonl").write_text("".join(json.dumps(r) + "\n" for r in second))
    assert export_main([str(run)]) == 0  # make export RUN=<dir>
    assert export_main([str(tmp_path / "nothing")]) == 2
    back = import_run(run / "export" / "questions.jsonl", "back", fmt="export",
                      overrides=(f"run.results_dir={tmp_path / 'results'}", f"data.path={TINY_LOCOMO}",
                                 "run.export=false"))
    assert (back / "metrics.json").exists() and not (back / "export").exists()  # run.export: off
    before = json.loads((runs["a"] / "metrics.json").read_text())["judges"][JUDGE]
    after = json.loads((back / "metrics.json").read_text())["judges"]
    assert {k: after[JUDGE]["overall"][k] for k in ("k", "n", "accuracy")} == \
        {k: before["overall"][k] for k in ("k", "n", "accuracy")}
    assert {c: v["k"] for c, v in after[JUDGE]["by_category"].items()} == \
        {c: v["k"] for c, v in before["by_category"].items()}
    for judge, source in ((JUDGE, rows(runs["a"] / f"08_judge_{JUDGE}.jsonl")), ("second", second)):
        got = rows(back / f"08_judge_{judge}.jsonl")
        assert [(r["qid"], r["label"], r["labels"]) for r in got] == \
            [(r["qid"], r["label"], r.get("labels") or []) for r in source]
    assert after["second"]["overall"]["k"] == sum(r["label"] for r in second)


def test_a_run_on_a_modified_dataset_says_so_with_both_hashes(runs, tmp_path, monkeypatch):
    from common.evaluation.labels import load_labels
    from common.report.claims import build as claims_build

    for var in ("OPENAI_API_KEY", "OPENAI_BASE_URL", "OPENAI_BASE_URLS"):
        monkeypatch.delenv(var, raising=False)
    (tmp_path / "results" / "locomo").mkdir(parents=True)
    (tmp_path / "results" / "locomo" / "a").symlink_to(runs["a"])  # make claims over run a only
    claims = claims_build(tmp_path / "results", tmp_path / "claims", rejudge=False)
    claims_md = next(p for p in claims if p.suffix == ".md").read_text()
    sha = json.loads((runs["a"] / "fingerprint.json").read_text())["run"]["components"]["dataset_sha256"]
    assert f"a: MODIFIED DATASET: sha256 {sha}" in claims_md
    for run, official in ((runs["a"], "locomo10.json"), (runs["lme"], "longmemeval_s_cleaned.json")):
        metrics = json.loads((run / "metrics.json").read_text())
        fp = json.loads((run / "fingerprint.json").read_text())["run"]["components"]
        warning = (f"MODIFIED DATASET: sha256 {fp['dataset_sha256']} differs from the official release's "
                   f"{checksums.official(official)}")
        assert metrics["dataset"]["status"] == "modified" and metrics["dataset"]["warning"] == warning
        for table in run.glob("table_*.md"):
            assert warning in table.read_text(), table
        assert json.loads((run / "export" / "manifest.json").read_text())["dataset"]["warning"] == warning
    comparison = compare.compare_runs(load_labels(runs["a"], JUDGE), load_labels(runs["b"], JUDGE))
    assert any(w.startswith("A: MODIFIED DATASET: sha256 ") for w in comparison["warnings"])


# Artifact-looking names in README.md and docs/*.md: every one must be a file of a fixture run.
ARTIFACT_NAME = re.compile(r"(?:export/)?\b(?:\d\d_[A-Za-z0-9_<>{}.-]*?\.(?:jsonl|json|md|csv)|"
                           r"(?:metrics|ledger|fingerprint|source|questions)\.(?:json|jsonl|md|csv)|"
                           r"config\.resolved\.yaml|table_[A-Za-z0-9_<>{}.-]+?\.(?:md|csv))(?![A-Za-z0-9_])")
EXAMPLES = {"10_mystage.jsonl"}  # docs/development.md: the stage a reader adds, by example


def _as_glob(name: str) -> str:
    """``08_judge_<judge>.jsonl`` / ``table_{judge}.md`` / a named judge -> a glob over any judge."""
    name = re.sub(r"<[^>]+>|\{[^}]+\}", "*", name)
    return re.sub(r"^(08_judge_|table_)[^*]+?(\.(?:manifest\.)?(?:jsonl|json|md|csv))$", r"\1*\2", name)


def test_every_artifact_name_in_the_docs_is_a_file_of_a_fixture_run(runs, tmp_path):
    imported = tmp_path / "imported"  # source.json: written by an import
    import_run(runs["a"] / "export" / "questions.jsonl", "i", fmt="export", aggregate=False,
               overrides=(f"run.results_dir={imported}", f"data.path={TINY_LOCOMO}"))
    dirs = [runs["a"], runs["b"], runs["lme"], imported / "locomo" / "i"]
    legacy = set(artifacts.LEGACY.values())
    missing = []
    for page in [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]:
        for line in page.read_text(encoding="utf-8").splitlines():
            for name in ARTIFACT_NAME.findall(line):
                if name in EXAMPLES or name in legacy and "old names" in line:
                    continue
                if not any(list(d.glob(_as_glob(name))) for d in dirs):
                    missing.append(f"{page.name}: {name}")
    assert not missing, missing


# ----------------------------------------------------------------------------- partial runs, run names
def test_the_page_header_marks_a_partial_run_and_draws_accuracy_with_its_cis(runs, tmp_path):
    """The tiny fixture holds 9 of LoCoMo's 1,540 scored questions: the header says PARTIAL 9 / 1,540, and the
    accuracy chart draws one bar and CI per category and overall from metrics.json."""
    html = build(runs["a"], out=tmp_path / "index.html").read_text(encoding="utf-8")
    metrics = json.loads((runs["a"] / "metrics.json").read_text())
    mark = f"PARTIAL {metrics['coverage']['covered']} / 1,540"
    assert metrics["coverage"]["covered"] < 1540
    header = re.search(r"<header>(.*?)</header>", html, re.S).group(1)
    assert f"[{mark}]" in header and 'id="coverage-mark"' in header
    chart = re.search(r'<svg id="accuracy-chart".*?</svg>', html, re.S).group(0)
    judged = metrics["judges"][JUDGE]
    groups = [g for g, s in judged["by_category"].items() if s.get("accuracy") is not None] + ["overall"]
    assert sorted(re.findall(r'class="acc-bar" data-group="([^"]+)"', chart)) == sorted(groups)
    low = judged["overall"]["ci"]["low"]
    assert f'class="ci" data-group="overall" x1="{170 + 580 * low:.2f}"' in chart


def test_make_compare_takes_run_names_as_make_report_does(runs, capsys):
    results = runs["a"].parent.parent
    assert compare.main(["a", "b", "--benchmark", "locomo", "--results", str(results)]) == 0
    assert f"A: {runs['a']}" in capsys.readouterr().out
    assert compare.main(["nope", "b", "--benchmark", "locomo", "--results", str(results)]) == 2
    assert "nope: not a run directory, nor a run name" in capsys.readouterr().err
    dry = subprocess.run(["make", "-n", "compare", "A=a", "B=b", "BENCH=locomo", f"RESULTS={results}"], cwd=REPO,
                         capture_output=True, text=True, timeout=60)
    assert f"a b --benchmark locomo --results {results}" in dry.stdout


def test_tables_and_figures_are_written_after_a_small_run_not_named_paper(runs, tmp_path, capsys):
    """The README's `make tables figures` after `make locomo MEMORIES=conv-26 LIMIT=20 RUN=try`: here the fake
    server's tiny runs (``a``: the method, ``b``: a baseline, both partial; no ``paper``, no ablation) stand in.
    Both commands exit 0, write what they can from the runs that exist and skip the rest with one line each."""
    from common.report import figures
    from common.report import tables as tables_cli

    results = runs["a"].parent.parent
    out_t, out_f = tmp_path / "tables", tmp_path / "figures"
    assert tables_cli.main(["--results", str(results), "--out", str(out_t)]) == 0
    # Every table; the figures this scenario makes or skips (each figure costs about a second to render).
    only = "main_locomo,main_beam,systems,2"
    assert figures.main(["--results", str(results), "--out", str(out_f), "--only", only]) == 0
    captured = capsys.readouterr()
    table1 = (out_t / "table1.md").read_text(encoding="utf-8")
    mark = json.loads((runs["a"] / "metrics.json").read_text())["coverage"]["mark"]
    assert mark.startswith("PARTIAL ") and "EnSIMem (harness, run a)" in table1 and mark in table1
    assert f"main locomo run a: {mark}, the newest run of the paper's config" in captured.out
    for name in ("figure_main_locomo", "figure_systems"):
        assert (out_f / f"{name}.png").read_bytes().startswith(b"\x89PNG"), name
    systems = json.loads((out_f / "figure_systems.sources.json").read_text())
    assert {(p["benchmark"], p["run"]) for p in systems["points"]} == {("locomo", "a"), ("locomo", "b"),
                                                                       ("longmemeval", "a")}
    assert all(p["tokens_per_question"] > 0 for p in systems["points"])
    skipped = [ln for ln in captured.err.splitlines() if ": skipped: " in ln]
    assert any(ln.startswith("table 4: skipped:") and "make ablations" in ln for ln in skipped)
    assert any(ln.startswith("figure main_beam: skipped:") and "make beam" in ln for ln in skipped)
    assert any(ln.startswith("figure 2: skipped:") and "make ablations" in ln for ln in skipped)
    dry = subprocess.run(["make", "-n", "tables", "figures", "RUN=try"], cwd=REPO, capture_output=True, text=True,
                         timeout=60)
    commands = [" ".join(line.split()) for line in dry.stdout.splitlines()]
    assert any("-m common.report.tables --run try" in c for c in commands)
    assert any("-m common.report.figures --run try" in c for c in commands)
