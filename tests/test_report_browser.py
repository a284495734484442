"""The per-question report opened in a real headless Chromium (Debian ``chromium`` + ``chromium-driver``).

Every check goes through the DOM and compares with the run's own files. Without the browser the
tests FAIL (never skip) with the one command that installs it.
"""
from __future__ import annotations

import json
import shutil
import tempfile
import time
from pathlib import Path

import pytest

from common.benchmarks.locomo import CATEGORY_NAMES
from common.evaluation.loss import question_losses
from common.report.html import build
from tests.conftest import rows
from tests.report_runs import report_runs

# The report runs (tests/report_runs.py) are made once per worker: both report modules on one.
pytestmark = pytest.mark.xdist_group("report_runs")

INSTALL = "apt-get install -y chromium chromium-driver"
JUDGE = "gpt-4o-mini"
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync", "--window-size=1500,1200"]


def browser_paths() -> tuple[str, str]:
    """The Chromium binary and its driver, or a test failure naming the install command."""
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    driver = shutil.which("chromedriver")
    missing = [name for name, path in (("chromium", chromium), ("chromedriver", driver)) if not path]
    if missing:
        pytest.fail(f"{' and '.join(missing)} not found: the report's browser test needs the Debian browser; "
                    f"install it with: sudo {INSTALL}", pytrace=False)
    try:
        import selenium  # noqa: F401
    except ImportError:
        pytest.fail("selenium is not installed: make install (requirements.txt pins it)", pytrace=False)
    assert chromium and driver
    return chromium, driver


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> dict[str, Path]:
    return report_runs(tmp_path_factory.getbasetemp() / "report_runs")


@pytest.fixture(scope="module")
def driver():
    chromium, chromedriver = browser_paths()
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = chromium
    for flag in FLAGS:
        options.add_argument(flag)
    profile = tempfile.mkdtemp(prefix="chromium-profile-")
    options.add_argument(f"--user-data-dir={profile}")
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    drv = webdriver.Chrome(service=Service(chromedriver), options=options)
    yield drv
    drv.quit()
    shutil.rmtree(profile, ignore_errors=True)


@pytest.fixture(scope="module")
def page(runs, tmp_path_factory) -> Path:
    return build(runs["a"], other=runs["b"], out=tmp_path_factory.mktemp("report") / "index.html")


def open_page(driver, path: Path) -> None:
    driver.get(path.as_uri())
    errors = [e for e in driver.get_log("browser") if e["level"] == "SEVERE"]
    assert not errors, errors


def listed(driver) -> list[str]:
    """The question ids of the list's rows, in order (one script call: 2,000 WebDriver calls would be slow)."""
    return driver.execute_script(
        "return Array.from(document.querySelectorAll('#question-body > .qrow'), r => r.dataset.qid);")


def pct(x: float) -> str:
    return f"{100 * x:.1f}"


def test_a_missing_browser_fails_with_the_install_command(monkeypatch):
    monkeypatch.setattr(shutil, "which", lambda name: None)
    with pytest.raises(pytest.fail.Exception, match=INSTALL):
        browser_paths()


def test_overview_numbers_equal_metrics_json(driver, page, runs, tmp_path):
    open_page(driver, page)
    metrics = json.loads((runs["a"] / "metrics.json").read_text())
    judge = metrics["judges"][JUDGE]
    seen = set()
    for tr in driver.find_elements("css selector", "#accuracy-table tbody tr"):
        group = tr.get_attribute("data-group")
        block = judge["overall"] if group == "overall" else judge["by_category"][group]
        seen.add(group)
        assert tr.find_element("css selector", ".k").text == str(block["k"])
        assert tr.find_element("css selector", ".n").text == str(block["n"])
        assert tr.find_element("css selector", ".acc").text == pct(block["accuracy"])
        assert tr.find_element("css selector", ".ci").text == f"[{pct(block['ci']['low'])}, {pct(block['ci']['high'])}]"
        assert tr.find_element("css selector", ".failed").text == str(block["n_failed"])
    assert seen == set(judge["by_category"]) | {"overall"}
    assert driver.find_element("id", "failures-total").text == str(judge["failures_total"])
    assert driver.find_element("id", "fp-run").text == metrics["fingerprint"]["run"]
    ledger = driver.find_element("css selector", '#ledger tr[data-key="calls"] .v').text
    assert ledger == str(metrics["ledger"]["total"]["calls"])
    loss = metrics["loss"]["judges"][JUDGE]
    for tr in driver.find_elements("css selector", "#loss-table tbody tr"):
        group = tr.get_attribute("data-group")
        block = loss["overall"] if group == "overall" else loss["by_category"][group]
        for cell in tr.find_elements("css selector", "td[data-class]"):
            cls = cell.get_attribute("data-class")
            assert cell.find_element("css selector", ".count").text == str(block["counts"][cls]), (group, cls)
    # The chart draws one segment per non-zero class of the overall bar.
    n_segments = sum(1 for k in loss["overall"]["counts"].values() if k)
    assert n_segments and len(driver.find_elements("css selector", "#loss-chart rect.seg")) >= n_segments
    shot = tmp_path / "report_overview.png"
    assert driver.save_screenshot(str(shot)) and shot.stat().st_size > 10_000


def test_filters_show_exactly_the_matching_questions(driver, page, runs):
    from selenium.webdriver.support.ui import Select

    open_page(driver, page)
    gold = rows(runs["a"] / "01_gold.jsonl")
    assert listed(driver) == [g["qid"] for g in gold]
    categories = Select(driver.find_element("id", "f-cat"))
    for cat in sorted({g["category"] for g in gold}):
        categories.select_by_value(CATEGORY_NAMES[cat])
        assert listed(driver) == [g["qid"] for g in gold if g["category"] == cat]
        assert driver.find_element("id", "shown-count").text == str(sum(g["category"] == cat for g in gold))
    categories.select_by_value("")
    judged = rows(runs["a"] / f"08_judge_{JUDGE}.jsonl")
    label = Select(driver.find_element("id", "f-label"))
    label.select_by_value("0")
    wrong = {r["qid"] for r in judged if r["label"] == 0}
    assert wrong and set(listed(driver)) == wrong
    label.select_by_value("")
    losses = question_losses(runs["a"], JUDGE)
    cls = Select(driver.find_element("id", "f-cls"))
    for name in {q.loss_class for q in losses}:
        cls.select_by_value(name)
        assert listed(driver) == [q.qid for q in losses if q.loss_class == name]
    cls.select_by_value("")
    search = driver.find_element("id", "f-text")
    search.send_keys("biscuit")
    questions = {q["qid"]: q["question"] for q in rows(runs["a"] / "01_questions.jsonl")}
    answers = {a["qid"]: a["answer"] or "" for a in rows(runs["a"] / "07_answer.jsonl")}
    # The list's gold column is the answer, or the adversarial answer of a category-5 question.
    expected = [g["qid"] for g in gold if "biscuit" in "\n".join(
        [g["qid"], questions[g["qid"]], answers[g["qid"]], g["answer"] or g["adversarial_answer"]]).lower()]
    deadline = time.time() + 5
    while listed(driver) != expected and time.time() < deadline:
        time.sleep(0.05)
    assert expected and listed(driver) == expected


def test_sorting_by_buffer_tokens_and_retrieval_time(driver, page, runs):
    from selenium.webdriver.support.ui import Select

    open_page(driver, page)
    rets = {r["qid"]: r for r in rows(runs["a"] / "06_retrieve.jsonl")}
    Select(driver.find_element("id", "f-sort")).select_by_value("seconds")
    order = listed(driver)
    times = [rets[q]["seconds"] for q in order]
    assert times == sorted(times, reverse=True) and len(order) == len(rets)
    Select(driver.find_element("id", "f-dir")).select_by_value("asc")
    assert [rets[q]["seconds"] for q in listed(driver)] == sorted(times)
    driver.find_element("css selector", '.qhead [data-sort="tokens"]').click()
    tokens = [rets[q]["buffer_tokens"] for q in listed(driver)]
    assert tokens == sorted(tokens, reverse=True)


def test_opening_a_question_shows_its_plan_buffer_and_judge_reply(driver, page, runs, tmp_path):
    open_page(driver, page)
    # Details are built on demand: nothing is rendered before a question is opened.
    assert not driver.find_elements("css selector", "#detail pre.buffer")
    rets = {r["qid"]: r for r in rows(runs["a"] / "06_retrieve.jsonl")}
    plans = {r["qid"]: r for r in rows(runs["a"] / "05_plan.jsonl")}
    judged = {r["qid"]: r for r in rows(runs["a"] / f"08_judge_{JUDGE}.jsonl")}
    gold = {g["qid"]: g for g in rows(runs["a"] / "01_gold.jsonl")}
    # A question whose plan has a bridge, so hops, anchors and bridge values are all on show.
    qid = next(q for q, r in rets.items() if r.get("bridges") and q in judged)
    driver.find_element("css selector", f'#question-body > [data-qid="{qid}"]').click()
    assert driver.find_element("id", "detail-qid").text == qid
    plan = plans[qid]["plan"]
    assert driver.find_element("id", "plan-reasoning").text == plan["reasoning_type"]
    assert driver.find_element("id", "plan-scope").text == plan["retrieval_scope"]
    hops = driver.find_elements("css selector", "#plan-hops tbody tr")
    assert [h.get_attribute("data-hop") for h in hops] == [h["hop_id"] for h in plan["hops"]]
    values = [b.text for b in driver.find_elements("css selector", "#plan-hops .bridge-value")]
    assert values == [b["value"] for b in rets[qid]["bridges"]]
    selected = driver.find_elements("css selector", "#d-retrieval table.hop tbody tr")
    assert len(selected) == len(rets[qid]["selected"])
    buffer = driver.find_element("id", "buffer-text")
    assert buffer.get_attribute("textContent") == rets[qid]["buffer_text"]
    highlighted = {s.get_attribute("data-dia") for s in buffer.find_elements("css selector", ".gold")}
    assert highlighted == set(gold[qid]["evidence"]) & set(rets[qid]["dia_ids"])
    raw = driver.find_element("css selector", f'#d-judges .judge[data-judge="{JUDGE}"] .judge-raw')
    assert raw.get_attribute("textContent") == judged[qid]["raw"]
    answer = next(a for a in rows(runs["a"] / "07_answer.jsonl") if a["qid"] == qid)
    assert driver.find_element("id", "detail-answer").text == answer["answer"]
    assert driver.find_element("id", "detail-gold").text == gold[qid]["answer"]
    line = next(i for i, r in enumerate(rows(runs["a"] / "05_plan.jsonl"), 1) if r["qid"] == qid)
    assert f"05_plan.jsonl:{line}" in driver.find_element("id", "d-links").text
    shot = tmp_path / "report_detail.png"
    assert driver.save_screenshot(str(shot)) and shot.stat().st_size > 10_000


def test_diff_view_lists_exactly_the_flipped_questions(driver, page, runs, tmp_path):
    open_page(driver, page)
    a = {r["qid"]: r["label"] == 1 for r in rows(runs["a"] / f"08_judge_{JUDGE}.jsonl")}
    b = {r["qid"]: r["label"] == 1 for r in rows(runs["b"] / f"08_judge_{JUDGE}.jsonl")}
    expected = [(q, "right->wrong") for q in a if q in b and a[q] and not b[q]] + \
               [(q, "wrong->right") for q in a if q in b and not a[q] and b[q]]
    # The two runs were made so that questions flip both ways.
    assert {d for _, d in expected} == {"right->wrong", "wrong->right"}
    shown = [(tr.get_attribute("data-qid"), tr.get_attribute("data-direction"))
             for tr in driver.find_elements("css selector", "#diff-body tr.flip-row")]
    assert shown == expected
    assert driver.find_element("id", "only-a").text == str(sum(d == "right->wrong" for _, d in expected))
    assert driver.find_element("id", "only-b").text == str(sum(d == "wrong->right" for _, d in expected))
    assert "McNemar" in driver.find_element("id", "mcnemar-line").text
    # The unchanged questions are drawn when their list is opened; together they cover every shared question.
    assert not driver.find_elements("css selector", "#diff-unchanged-body tr")
    driver.find_element("css selector", "#diff-unchanged summary").click()
    # The <details> "toggle" event that draws them is dispatched after the click returns: wait for it.
    from selenium.webdriver.support.ui import WebDriverWait

    shared = [q for q in a if q in b]
    WebDriverWait(driver, 10).until(
        lambda d: len(d.find_elements("css selector", "#diff-unchanged-body tr")) >= len(shared) - len(expected))
    same = [tr.get_attribute("data-qid") for tr in driver.find_elements("css selector", "#diff-unchanged-body tr")]
    assert sorted(same + [q for q, _ in expected]) == sorted(q for q in a if q in b)
    # Opening a flipped question shows run B's answer and label beside run A's.
    qid, direction = expected[0]
    driver.find_element("css selector", f'#diff-body tr[data-qid="{qid}"]').click()
    assert driver.find_element("id", "detail-qid").text == qid
    answer_b = next(r["answer"] for r in rows(runs["b"] / "07_answer.jsonl") if r["qid"] == qid)
    assert driver.find_element("id", "detail-b-answer").text == answer_b
    assert driver.find_element("id", "detail-b-label").text == ("0" if direction == "right->wrong" else "1")
    shot = tmp_path / "report_diff.png"
    driver.find_element("id", "diff").screenshot(str(shot))
    assert shot.stat().st_size > 1_000


def test_a_baseline_report_shows_its_own_evidence_without_a_plan(driver, runs, tmp_path):
    path = build(runs["b"], out=tmp_path / "b.html")
    open_page(driver, path)
    first = rows(runs["b"] / "06_retrieve.jsonl")[0]
    driver.find_element("css selector", f'#question-body > [data-qid="{first["qid"]}"]').click()
    assert "does not plan" in driver.find_element("id", "d-plan").text
    assert driver.find_element("id", "buffer-text").get_attribute("textContent") == first["buffer_text"]
    # The gold turns are marked as read or not read by the answer model.
    gold = {g["qid"]: g for g in rows(runs["b"] / "01_gold.jsonl")}
    losses = [q for q in question_losses(runs["b"], JUDGE) if q.coverage.state in ("none", "partial")]
    assert losses
    ret = next(r for r in rows(runs["b"] / "06_retrieve.jsonl") if r["qid"] == losses[0].qid)
    driver.find_element("css selector", f'#question-body > [data-qid="{ret["qid"]}"]').click()
    missing = {li.get_attribute("data-dia") for li in driver.find_elements("css selector", "#d-gold li.missing")}
    read = {li.get_attribute("data-dia") for li in driver.find_elements("css selector", "#d-gold li.in-buffer")}
    evidence = set(gold[ret["qid"]]["evidence"])
    assert missing == evidence - set(ret["dia_ids"]) and missing
    assert read == evidence & set(ret["dia_ids"])


def scaled_run(source: Path, target: Path, n: int) -> None:
    """A copy of ``source`` whose per-question files repeat its questions under new ids up to ``n``."""
    shutil.copytree(source, target, ignore=shutil.ignore_patterns("report", "04_index*"))
    for name in ("01_gold.jsonl", "01_questions.jsonl", "05_plan.jsonl", "06_retrieve.jsonl", "07_answer.jsonl",
                 f"08_judge_{JUDGE}.jsonl"):
        base = rows(source / name)
        out = []
        for i in range(n):
            row = dict(base[i % len(base)])
            row["qid"] = f"{row['qid']}-{i // len(base)}"
            out.append(json.dumps(row))
        (target / name).write_text("\n".join(out) + "\n")


def test_two_thousand_questions_stay_responsive(driver, runs, tmp_path):
    """1,986 questions, as in LoCoMo: the page loads, filters and opens a question quickly."""
    scaled_run(runs["a"], tmp_path / "big", 1986)
    path = build(tmp_path / "big")
    started = time.time()
    open_page(driver, path)
    assert len(listed(driver)) == 1986
    load_s = time.time() - started
    filter_ms = driver.execute_script(
        "const s = document.getElementById('f-cat'); const t = performance.now(); s.value = 'temporal';"
        "s.dispatchEvent(new Event('change')); return performance.now() - t;")
    gold = rows(tmp_path / "big" / "01_gold.jsonl")
    assert len(listed(driver)) == sum(g["category"] == 2 for g in gold)
    open_ms = driver.execute_script(
        "const t = performance.now(); document.querySelector('#question-body > .qrow').click();"
        "return performance.now() - t;")
    assert driver.find_elements("css selector", "#detail pre.buffer")
    # Generous bounds for a loaded 2-core machine; typical values are 10-50x smaller.
    assert load_s < 10 and filter_ms < 1500 and open_ms < 1000, (load_s, filter_ms, open_ms)


def test_two_judges_disagreements_are_flagged_and_filterable(driver, runs, tmp_path):
    from selenium.webdriver.support.ui import Select

    run = tmp_path / "two_judges"
    shutil.copytree(runs["a"], run, ignore=shutil.ignore_patterns("report"))
    judged = rows(run / f"08_judge_{JUDGE}.jsonl")
    flipped = {r["qid"] for r in judged[1:3]}
    other = [{**r, "judge": "other", "label": 1 - r["label"] if r["qid"] in flipped else r["label"]} for r in judged]
    (run / "08_judge_other.jsonl").write_text("".join(json.dumps(r) + "\n" for r in other))
    open_page(driver, build(run, judge=JUDGE))
    Select(driver.find_element("id", "f-label")).select_by_value("disagree")
    assert set(listed(driver)) == flipped
    qid = sorted(flipped)[0]
    driver.find_element("css selector", f'#question-body > [data-qid="{qid}"]').click()
    labels = {j.get_attribute("data-judge"): j.find_element("css selector", ".judge-label").text
              for j in driver.find_elements("css selector", "#d-judges .judge")}
    mine = next(r["label"] for r in judged if r["qid"] == qid)
    assert labels == {JUDGE: str(mine), "other": str(1 - mine)}


def test_j_and_k_step_through_the_filtered_list(driver, page, runs):
    from selenium.webdriver.common.action_chains import ActionChains
    from selenium.webdriver.common.keys import Keys
    from selenium.webdriver.support.ui import Select

    open_page(driver, page)
    Select(driver.find_element("id", "f-label")).select_by_value("0")
    order = listed(driver)
    assert len(order) >= 2
    driver.execute_script("document.activeElement.blur()")

    def press(key: str) -> None:
        ActionChains(driver).send_keys(key).perform()

    press("j")
    assert driver.find_element("id", "detail-qid").text == order[0]
    press("j")
    assert driver.find_element("id", "detail-qid").text == order[1]
    press("k")
    assert driver.find_element("id", "detail-qid").text == order[0]
    # Typing in the search field does not step.
    search = driver.find_element("id", "f-text")
    search.send_keys("j")
    search.send_keys(Keys.BACKSPACE)
    assert driver.find_element("id", "detail-qid").text == order[0]


def test_failed_questions_are_listed_by_cause(driver, runs, tmp_path):
    """A failed judgment is a question with a cause and the class ``failed``, never a dropped row."""
    from selenium.webdriver.support.ui import Select

    run = tmp_path / "failures"
    shutil.copytree(runs["a"], run, ignore=shutil.ignore_patterns("report"))
    judged = rows(run / f"08_judge_{JUDGE}.jsonl")
    broken = {judged[0]["qid"]: "judge_parse_error: not CORRECT or WRONG", judged[2]["qid"]: "http_500: server error"}
    fixed = [{**r, "label": None, "error": broken[r["qid"]]} if r["qid"] in broken else r for r in judged]
    fixed = [r for r in fixed if r["qid"] != judged[4]["qid"]]  # and one question never judged at all
    (run / f"08_judge_{JUDGE}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in fixed))
    open_page(driver, build(run))
    causes = Select(driver.find_element("id", "f-cause"))
    assert sorted(o.get_attribute("value") for o in causes.options if o.get_attribute("value")) == \
        ["judge_api_error", "judge_parse_error", "missing_judgment"]
    for cause, qid in (("judge_parse_error", judged[0]["qid"]), ("judge_api_error", judged[2]["qid"]),
                       ("missing_judgment", judged[4]["qid"])):
        causes.select_by_value(cause)
        assert listed(driver) == [qid]
    causes.select_by_value("")
    Select(driver.find_element("id", "f-cls")).select_by_value("failed")
    assert sorted(listed(driver)) == sorted([judged[0]["qid"], judged[2]["qid"], judged[4]["qid"]])
    driver.find_element("css selector", f'#question-body > [data-qid="{judged[4]["qid"]}"]').click()
    assert "missing_judgment" in driver.find_element("id", "d-judges").text


def test_a_hop_with_many_episodes_shows_ten_and_folds_the_rest(driver, runs, tmp_path):
    run = tmp_path / "many"
    shutil.copytree(runs["a"], run, ignore=shutil.ignore_patterns("report"))
    rets = rows(run / "06_retrieve.jsonl")
    first = rets[0]
    hop = first["selected"][0]["hop_id"]
    first["selected"] = [{**first["selected"][0], "score": 1 - i / 100} for i in range(25)]
    (run / "06_retrieve.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rets))
    open_page(driver, build(run))
    driver.find_element("css selector", f'#question-body > [data-qid="{first["qid"]}"]').click()
    shown = driver.find_elements("css selector", f'#d-retrieval > table.hop[data-hop="{hop}"] tbody tr')
    folded = driver.find_elements("css selector", f'#d-retrieval details table.hop[data-hop="{hop}"] tbody tr')
    assert (len(shown), len(folded)) == (10, 15)
    assert "15 more episodes" in driver.find_element("css selector", "#d-retrieval details summary").text
