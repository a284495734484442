"""The first day, fourth pass: what a new user met from the docs alone, each fixed and checked here.

Runs over different questions are told apart, a partial run is never "comparable" to a full claim,
documented syntax works, no preamble or figure misleads, LIMIT draws across categories, and a
run starts from Python through the same ``evaluate`` as ``make locomo``.
"""
from __future__ import annotations

import dataclasses
import json
import shlex
import subprocess
import sys
import typing

import pytest

from common.core.config import Config, ConfigError, load_config
from tests.conftest import REPO, TINY_LOCOMO, run_overrides


def _run_all(monkeypatch, benchmark: str, sets: list[str], *extra: str) -> None:
    from common.pipeline import run_all

    monkeypatch.setattr(sys, "argv", ["run_all", benchmark, *[a for s in sets for a in ("--set", s)], *extra])
    run_all.main()


# ----------------------------------------------------------------------------- false preambles
@pytest.mark.parametrize("case", ["missing data file", "unknown memory"])
def test_a_run_stopped_before_any_call_prints_only_its_error(tmp_path, monkeypatch, capsys, case):
    """No "This invocation made no LLM call ... Results: <a directory that does not exist>" before the error."""
    from tests.fake_openai import FakeOpenAI

    extra = {"data.path": str(tmp_path / "nofile.json")} if case == "missing data file" else {}
    sets = run_overrides(tmp_path, TINY_LOCOMO, **extra)
    with FakeOpenAI() as server:
        monkeypatch.setenv("OPENAI_BASE_URL", server.base_url)
        monkeypatch.delenv("OPENAI_BASE_URLS", raising=False)
        with pytest.raises(SystemExit) as stop:
            _run_all(monkeypatch, "locomo", sets, *(["--memories", "tiny-99"] if case == "unknown memory" else []))
        assert server.request_count == 0
    out = capsys.readouterr().out
    message = str(stop.value.code)
    assert "This invocation" not in out and "Results:" not in out, out
    assert message.startswith("error: ") and "\n" not in message
    assert ("file not found" in message) if case == "missing data file" else ("tiny-99" in message)
    assert not (tmp_path / "results" / "locomo" / "t").exists()


# ----------------------------------------------------------------------------- SET
def _make_sets(set_value: str) -> list[str]:
    """The ``--set`` words ``make locomo SET="..."`` hands the pipeline (make splits SET at spaces)."""
    out = subprocess.run(["make", "-s", "-n", "locomo", f"SET={set_value}", f"PY={sys.executable}"], cwd=REPO,
                         capture_output=True, text=True, timeout=60, check=True).stdout
    line = next(ln for ln in out.splitlines() if "common.pipeline.run_all" in ln)
    words = shlex.split(line.split("else ", 1)[1].rsplit(";", 1)[0])
    return [words[i + 1] for i, w in enumerate(words) if w == "--set"]


def test_the_documented_set_syntax_works_through_make():
    """docs/memory-systems.md: SET="method.options={k: 5}" (make splits it in two words)."""
    page = (REPO / "docs" / "memory-systems.md").read_text(encoding="utf-8")
    assert 'SET="method.options={k: 5}"' in page
    sets = _make_sets("method.options={k: 5} run.note=a note with spaces")
    assert len(sets) > 2  # make did split it
    cfg = load_config(["configs/locomo.yaml"], sets)
    assert cfg.method.options == {"k": 5} and cfg.run.note == "a note with spaces"
    cfg = load_config(["configs/locomo.yaml"], _make_sets("method.options.k=5 method.options.name=x"))
    assert cfg.method.options == {"k": 5, "name": "x"}
    # YAML 1.1 reads off/on/yes/no as booleans; the documented llm.cache_mode=off means the word.
    assert load_config(["configs/locomo.yaml"], _make_sets("llm.cache_mode=off")).llm.cache_mode == "off"


def _keys(cls: type, prefix: str = "") -> list[str]:
    out = []
    hints = typing.get_type_hints(cls)
    for f in dataclasses.fields(cls):
        tp = hints[f.name]
        if isinstance(tp, type) and dataclasses.is_dataclass(tp):
            out += _keys(tp, f"{prefix}{f.name}.")
        out.append(f"{prefix}{f.name}")
    return out


HOSTILE = ["[", "{k:", "{k: 5}", "]", "'", "{[1]: 2}", "*a", "!!python/object:os.system x", "1e999", "null",
           "-1", "? x", ""]


def test_no_set_value_of_any_key_ends_in_anything_but_a_config_error():
    """Every key of the schema, and keys that are not, with values YAML cannot read or the schema refuses:
    a config loads or raises ConfigError (one line naming the key), never a parser's traceback."""
    keys = _keys(Config) + ["", "a..b", ".", "method..name", "no.such.key", "run.name.x"]
    assert len(keys) > 200
    for key in keys:
        for value in HOSTILE:
            try:
                load_config([], [f"{key}={value}"])
            except ConfigError as exc:
                assert "\n" not in str(exc), (key, value)
    for bad in ("run.name=../elsewhere", "run.name=", "run.name=/abs", "judge.name=a/b", "llm.cache_path="):
        with pytest.raises(ConfigError, match=bad.split("=")[0]):
            load_config([], [bad])


def test_a_value_that_fails_after_the_config_loads_is_one_line_too(tmp_path, monkeypatch):
    """An unwritable cache path fails when the client opens it: one ``error:`` line, not a traceback."""
    from common.pipeline import cli
    from common.pipeline.graph import STAGES
    from tests.fake_openai import FakeOpenAI

    sets = run_overrides(tmp_path, TINY_LOCOMO, **{"llm.cache_path": "/proc/no/such/dir/llm.sqlite"})
    with FakeOpenAI() as server:
        monkeypatch.setenv("OPENAI_BASE_URL", server.base_url)
        with pytest.raises(SystemExit) as stop:
            cli.main_stages(STAGES, "locomo", argv=[a for s in sets for a in ("--set", s)])
    message = str(stop.value.code)
    assert message.startswith("error: ") and "\n" not in message and "llm.cache_path: cannot open" in message


# ----------------------------------------------------------------------------- LIMIT across categories
def _blocked(memories: list[str], groups: list[tuple[str, int, int]]):
    """Data listed in blocks, as the releases list them (conv-26's first 20 questions hold no
    single-hop one): per memory, ``n`` questions of each (question type, LoCoMo category)."""
    from common.benchmarks.base import BenchmarkData
    from common.core.schema import Gold, Question, Session, Turn

    sessions, questions, gold = [], [], []
    for m in memories:
        sessions.append(Session(m, "session_1", 1, "1 May 2023", [Turn("D1:1", "A", "hello")]))
        k = 0
        for qtype, category, n in groups:
            for _ in range(n):
                k += 1
                qid = f"{m}:q{k:04d}"
                questions.append(Question(qid, m, f"question {k}?"))
                gold.append(Gold(qid, m, "a", category, question_type=qtype))
    return BenchmarkData(sessions, questions, gold)


def test_limit_on_locomo_draws_judged_questions_across_categories_seeded_and_first_n_is_an_option():
    from collections import Counter

    from common.benchmarks.locomo import ADAPTER, CATEGORY_NAMES

    data = _blocked(["conv-1", "conv-2"], [("", 2, 8), ("", 5, 3), ("", 1, 4), ("", 4, 4), ("", 3, 2)])
    cfg = load_config(["configs/locomo.yaml"], ["data.question_limit=4"])
    assert cfg.data.limit_rule == "sample"  # the default
    kept = ADAPTER.select(data, cfg)
    per_memory = Counter(g.memory_id for g in kept.gold)
    assert per_memory == {"conv-1": 4, "conv-2": 4}
    for m in per_memory:  # one of each of the four judged categories, never category 5
        assert Counter(CATEGORY_NAMES[g.category] for g in kept.gold if g.memory_id == m) == \
            {"temporal": 1, "multi-hop": 1, "single-hop": 1, "open-domain": 1}
    assert kept.questions == ADAPTER.select(data, cfg).questions  # seeded: the same draw again
    alone = ADAPTER.select(data, load_config(["configs/locomo.yaml"], ["data.question_limit=4",
                                                                        "data.memories=[conv-2]"]))
    assert [q.qid for q in alone.questions] == [q.qid for q in kept.questions if q.memory_id == "conv-2"]
    order = [q.qid for q in data.questions]
    assert [q.qid for q in kept.questions] == sorted((q.qid for q in kept.questions), key=order.index)
    first = ADAPTER.select(data, load_config(["configs/locomo.yaml"], ["data.question_limit=4",
                                                                        "data.limit_rule=first"]))
    assert {g.category for g in first.gold} == {2}  # file order: the first block only


def test_limit_on_longmemeval_draws_questions_of_the_file_across_question_types():
    from collections import Counter

    from common.benchmarks.base import BenchmarkData
    from common.benchmarks.longmemeval import ADAPTER
    from common.core.schema import Gold, Question

    memories = [f"lme-{i}" for i in range(12)]  # one question per memory, listed by type
    types = ["temporal-reasoning"] * 6 + ["multi-session"] * 3 + ["knowledge-update"] * 3
    data = BenchmarkData(_blocked(memories, []).sessions, [Question(f"{m}:q", m, "?") for m in memories],
                         [Gold(f"{m}:q", m, "a", 0, question_type=t) for m, t in zip(memories, types)])
    cfg = load_config(["configs/longmemeval.yaml"], ["data.question_limit=3"])
    kept = ADAPTER.select(data, cfg)
    assert Counter(g.question_type for g in kept.gold) == {"temporal-reasoning": 1, "multi-session": 1,
                                                           "knowledge-update": 1}
    assert {s.memory_id for s in kept.sessions} == {q.memory_id for q in kept.questions}  # their haystacks only
    first = ADAPTER.select(data, load_config(["configs/longmemeval.yaml"], ["data.question_limit=3",
                                                                             "data.limit_rule=first"]))
    assert {g.question_type for g in first.gold} == {"temporal-reasoning"}


@pytest.mark.parametrize("rule", ["sample", "first"])
def test_01_records_the_limit_rule_and_its_seed(tmp_path, monkeypatch, capsys, rule):
    import json

    from common.benchmarks import sampling
    from common.benchmarks.base import FIRST_N
    from common.benchmarks.locomo import LIMIT_RULE
    from common.pipeline.cli import main

    sets = run_overrides(tmp_path, TINY_LOCOMO, **{"data.question_limit": 2, "data.limit_rule": rule})
    monkeypatch.setattr(sys, "argv", ["01_preprocess"] + [a for s in sets for a in ("--set", s)])
    main("01_preprocess", "locomo")
    out = capsys.readouterr().out
    manifest = json.loads((tmp_path / "results" / "locomo" / "t" / "01_preprocess.manifest.json").read_text())
    selection = manifest["selection"]
    assert selection["limit_rule"] == rule and selection["question_limit"] == 2
    assert selection["rule"] == (LIMIT_RULE if rule == "sample" else FIRST_N)
    assert selection["seed"] == (sampling.SEED if rule == "sample" else None)
    assert f"LIMIT=2: {selection['rule']}" in out


def test_the_docs_say_how_limit_picks_its_questions():
    help_text = subprocess.run(["make", "--no-print-directory", "help"], cwd=REPO, capture_output=True, text=True,
                               check=True).stdout
    limit_line = next(ln for ln in help_text.splitlines() if ln.strip().startswith("LIMIT "))
    assert "across" in limit_line and "first N" not in limit_line.split("limit_rule")[0]
    running = (REPO / "docs" / "running.md").read_text(encoding="utf-8")
    assert "its first 20 questions" not in running and "# the first 10 questions" not in running
    assert "data.limit_rule" in running


# ----------------------------------------------------------------------------- runs side by side
def _tables(results, *extra: str):
    import pandas as pd

    from common.report import tables

    out = results.parent / "tables"
    assert tables.main(["--results", str(results), "--out", str(out), *extra]) == 0
    return out, lambda name: pd.read_csv(out / f"{name}.csv", dtype=str, keep_default_na=False)


def _context(results, run=None):
    import argparse

    from common.report.tables.command import context

    return context(argparse.Namespace(results=str(results), experiments="configs/experiments.yaml",
                                      published="configs/published.yaml", subset=None, run=run))


def test_runs_over_different_questions_show_their_question_sets_and_are_warned_about(tmp_path, capsys):
    """Three 10-question runs read `PARTIAL 10 / 1,540` with one fingerprint; their question sets tell them apart."""
    from common.evaluation.coverage import question_set_id
    from tests.test_tables import LOCOMO_MAIN, PRIMARY, make_run

    results = tmp_path / "results"
    items = LOCOMO_MAIN[:10]
    labels = {PRIMARY: [x[1] for x in items]}
    make_run(results, "locomo", "conv26", items, labels, qids=[f"conv-26:q{i:04d}" for i in range(1, 11)])
    make_run(results, "locomo", "conv41", items, labels, qids=[f"conv-41:q{i:04d}" for i in range(1, 11)])
    make_run(results, "locomo", "again", items, labels, qids=[f"conv-26:q{i:04d}" for i in range(1, 11)])
    out, csv = _tables(results, "--only", "systems")
    printed = capsys.readouterr().out
    df = csv("systems").set_index("Run")
    assert set(df["Coverage"]) == {"PARTIAL 10 / 1,540"}  # the same coverage ...
    ids = {run: question_set_id(f"{conv}:q{i:04d}" for i in range(1, 11))
           for run, conv in (("conv26", "conv-26"), ("conv41", "conv-41"), ("again", "conv-26"))}
    for run, qs in ids.items():  # ... told apart by the question set
        assert df.loc[run, "Question set"] == f"{qs} (10)"
    assert ids["conv26"] == ids["again"] != ids["conv41"]
    md = (out / "systems.md").read_text(encoding="utf-8")
    warning = next(line for line in md.splitlines() if line.startswith("> WARNING: locomo: QUESTION SETS DIFFER"))
    assert ids["conv41"] in warning and ids["conv26"] in warning
    assert "table systems: WARNING: locomo: QUESTION SETS DIFFER" in printed
    side = json.loads((out / "systems.sources.json").read_text())
    assert side["warnings"] and "QUESTION SETS DIFFER" in side["warnings"][0]
    # One question set: no warning.
    import shutil

    shutil.rmtree(results / "locomo" / "conv41")
    out, _ = _tables(results, "--only", "systems")
    assert "QUESTION SETS DIFFER" not in (out / "systems.md").read_text(encoding="utf-8")


def test_a_partial_run_is_never_comparable_and_a_complete_one_is_by_its_models(tmp_path, monkeypatch):
    """Table 1, 3 and 10: a PARTIAL run is never "Comparable with" the paper's full-benchmark number; a
    complete run with the paper's answer model, judge and protocol is, and a partial baseline beside it is not."""
    from common.evaluation import coverage
    from tests.test_tables import JUDGE_MODEL, LME_MAIN, LOCOMO_MAIN, PRIMARY, SECONDARY, main_runs, make_run

    monkeypatch.setitem(coverage.EXPECTED_SCORED, "locomo", 13)  # these 13 questions are the whole benchmark
    monkeypatch.setitem(coverage.EXPECTED_SCORED, "longmemeval", len(LME_MAIN))
    results = tmp_path / "results"
    main_runs(results)
    make_run(results, "locomo", "baseline_full_context", LOCOMO_MAIN[:10], {PRIMARY: [1, 0, 1, 1, 0, 1, 0, 1, 1, 0]})
    _, csv = _tables(results, "--only", "1,3,10")
    t1 = csv("table1").set_index("Ref")
    p_gpt = t1.index[t1["Method"] == "EnSIMem (evaluated by GPT-4o-mini)"][0]
    p_qwen = t1.index[t1["Method"] == "EnSIMem (evaluated by Qwen3-32B)"][0]
    main_primary = t1.index[(t1["Judge"] == JUDGE_MODEL[PRIMARY]) & t1["Method"].str.startswith("EnSIMem (harness")][0]
    main_secondary = t1.index[t1["Judge"] == JUDGE_MODEL[SECONDARY]][0]
    baseline = t1.index[t1["Method"] == "Full Context (harness)"][0]
    assert t1.loc[p_gpt, "Comparable with"] == main_primary  # not the partial baseline, not the other judge
    assert t1.loc[p_qwen, "Comparable with"] == main_secondary
    assert t1.loc[baseline, "Coverage"] == "PARTIAL 10 / 13" and t1.loc[baseline, "Comparable with"] == "none"
    assert csv("table3").set_index("Ref").loc["P2", "Comparable with"] == "M1"
    t10 = csv("table10").set_index("Ref")
    assert t10.loc["P1", "Comparable with"] == "M1" and t10.loc["P2", "Comparable with"] == "M2"
    # The main run and the baseline are over different questions (13 against 10): said above the table.
    assert "QUESTION SETS DIFFER" in (tmp_path / "tables" / "table1.md").read_text(encoding="utf-8")


def test_a_main_run_nobody_named_is_said_so_in_the_table_and_the_figure(tmp_path, capsys):
    """No RUN=, no `paper` run: the newest partial run is taken, and Table 1 and the main figure say which,
    over which questions, and how to name one."""
    from common.report import run_figures
    from tests.test_tables import LOCOMO_MAIN, PRIMARY, make_run

    results = tmp_path / "results"
    make_run(results, "locomo", "try", LOCOMO_MAIN, {PRIMARY: [x[1] for x in LOCOMO_MAIN]})
    out, _ = _tables(results, "--only", "1")
    md = (out / "table1.md").read_text(encoding="utf-8")
    assert "> WARNING: main run chosen, not named: try (PARTIAL 13 / 1,540, question set qs-" in md
    assert "name it with RUN=try" in md
    assert "table table1: WARNING: main run chosen, not named" in capsys.readouterr().out
    fig, side = run_figures.main_figure(_context(results), "locomo")
    assert "taken as the newest run" in fig.axes[0].get_title() and side["warnings"]
    out, _ = _tables(results, "--only", "1", "--run", "try")  # named: no warning
    assert "not named" not in (out / "table1.md").read_text(encoding="utf-8")
    fig, side = run_figures.main_figure(_context(results, "try"), "locomo")
    assert "newest" not in fig.axes[0].get_title() and not side["warnings"]


def test_the_main_figure_draws_the_published_values_beside_the_measured_ones(tmp_path):
    from matplotlib.patches import Rectangle

    from common.report import run_figures
    from common.report.tables.published import load_published
    from tests.test_tables import LME_MAIN, PRIMARY, make_run

    results = tmp_path / "results"
    make_run(results, "longmemeval", "paper", LME_MAIN, {PRIMARY: [x[1] for x in LME_MAIN]})
    fig, side = run_figures.main_figure(_context(results), "longmemeval")
    paper = next(r for r in load_published().rows("table2") if r.method == "EnSIMem (evaluated by GPT-4o-mini)")
    want = {g: float(v) for g, v in paper.values.items() if g != "average"}
    want["overall"] = float(paper.values["average"])
    assert side["published"]["values"] == want and side["published"]["method"] == paper.method
    assert side["published"]["comparable"].startswith("no (coverage PARTIAL 13 / 500")
    heights = sorted(round(p.get_height(), 6) for p in fig.axes[0].patches if isinstance(p, Rectangle))
    for value in want.values():  # a bar for every printed value
        assert round(value, 6) in heights
    assert any("paper, as printed" in t.get_text() for t in fig.legends[0].get_texts())


def test_the_systems_figure_draws_every_run_and_its_title_fits(tmp_path):
    """Nine runs: two on the same spot, three imported (no tokens measured here): nine numbered points,
    and the title within the figure."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    from common.report import run_figures
    from tests.test_tables import LOCOMO_MAIN, PRIMARY, make_run

    results = tmp_path / "results"
    for i in range(9):
        d = make_run(results, "locomo", f"run{i}", LOCOMO_MAIN[: 13 - i % 3], {PRIMARY: [x[1] for x in LOCOMO_MAIN]})
        (d / "01_questions.jsonl").write_text((d / "01_gold.jsonl").read_text())
        answers = [json.loads(line) for line in (d / "07_answers.jsonl").read_text().splitlines()]
        for a in answers:
            a["usage"] = {"prompt_tokens": 1000, "completion_tokens": 20}
        (d / "07_answers.jsonl").write_text("".join(json.dumps(a) + "\n" for a in answers))
        if i >= 6:  # imported: its calls were not made here
            (d / "fingerprint.json").write_text(json.dumps({"run": {"components": {"imported": {"file": "x"}}}}))
    fig, side = run_figures.systems_figure(_context(results))
    assert side["drawn"] == 9 and not side["not_drawn"]
    canvas = FigureCanvasAgg(fig)
    canvas.draw()
    marks = [line for ax in fig.axes for line in ax.lines if line.get_marker() in ("o", "s")]
    xy = {(ax_i, tuple(line.get_xydata()[0])) for ax_i, ax in enumerate(fig.axes) for line in ax.lines
          if line.get_marker() in ("o", "s")}
    assert len(marks) == 9 and len(xy) == 9  # every run drawn, none on top of another
    assert sorted(int(t.get_text()) for ax in fig.axes for t in ax.texts) == list(range(1, 10))
    title = fig._suptitle.get_window_extent(canvas.get_renderer())
    assert title.x0 >= 0 and title.x1 <= fig.bbox.x1, "the title is cut off"
    assert "QUESTION SETS DIFFER" in " ".join(fig._suptitle.get_text().split()) and side["warnings"]


def test_the_beam_figure_tells_a_zero_from_a_missing_score(tmp_path, monkeypatch):
    from common.evaluation import beam
    from common.report.tables import beam as beam_tables

    results = tmp_path / "results"
    fake = {"abstention": 0.0, "summarization": None}
    monkeypatch.setattr(beam_tables, "recount", lambda run, judge: {"official": {a: fake.get(a, 0.5)
                                                                                 for a in beam.ABILITIES}})
    run = beam_tables.RunData("beam", "r1", results / "beam" / "r1", {"judges": {"j": {}}})
    monkeypatch.setattr(beam_tables, "beam_runs", lambda root: [run])
    monkeypatch.setattr(beam_tables.RunData, "question_set", property(lambda self: ("qs-0", 1)))
    monkeypatch.setattr(beam_tables.RunData, "judge_model", lambda self, j: "m")
    fig, series = beam_tables.beam_figure(_context(results))
    texts = {t.get_text() for t in fig.axes[0].texts}
    assert {"0", "n/a"} <= texts  # the 0 is written and ticked; the missing score says n/a
    assert any(line.get_marker() == "_" for line in fig.axes[0].lines)


def test_the_report_does_not_set_no_buffer_0_beside_an_empty_buffer_count(tmp_path):
    from common.report.html import build
    from tests.report_runs import report_runs

    run = report_runs(tmp_path)["a"]
    metrics = json.loads((run / "metrics.json").read_text())
    metrics.setdefault("memory_system", {}).setdefault("outcomes", {})["empty_buffer"] = 3
    (run / "metrics.json").write_text(json.dumps(metrics))
    page = build(run, out=tmp_path / "page.html").read_text(encoding="utf-8")
    table = page[page.index('id="loss-table"'):page.index("</table>", page.index('id="loss-table"'))]
    assert "no_buffer" not in table
    note = page[page.index('id="loss-classes-note"'):]
    assert "<em>no_buffer</em> (imported runs" in note[:600]
    assert "3 questions whose search returned nothing" in " ".join(note[:600].split())


def test_a_bundled_sample_is_never_counted_against_the_benchmarks_size():
    from common.evaluation.scoring import coverage

    sample = coverage("locomo", 5, {"sample": "demo-sample", "question_limit": 5}, question_ids=["a", "b"])
    assert sample["expected"] is None and sample["mark"] == "PARTIAL 5 questions"
    assert "1540" not in sample["warning"] and "of all the scored questions of demo-sample" in sample["warning"]
    assert coverage("locomo", 5, {"question_limit": 5})["mark"] == "PARTIAL 5 / 1,540"  # LoCoMo itself: its size
    assert sample["question_set"]["n"] == 2


# ----------------------------------------------------------------------------- a system that calls a model
def _notes_example(tmp_path, monkeypatch) -> str:
    """The LLM-calling example of docs/memory-systems.md, as it stands, on sys.path: its import path."""
    page = (REPO / "docs" / "memory-systems.md").read_text(encoding="utf-8")
    block = page.split("<!-- notes-example:start -->", 1)[1].split("<!-- notes-example:end -->", 1)[0]
    code = block.split("```python\n", 1)[1].split("```", 1)[0]
    (tmp_path / "pkg_notes").mkdir(exist_ok=True)
    (tmp_path / "pkg_notes" / "notes_memory.py").write_text(code, encoding="utf-8")
    monkeypatch.syspath_prepend(str(tmp_path / "pkg_notes"))
    return "notes_memory:Notes"


def test_the_docs_system_that_calls_a_model_makes_one_call_per_memory_and_is_counted(tmp_path, fake_server,
                                                                                      monkeypatch):
    from tests.conftest import rows, run_stages

    page = (REPO / "docs" / "memory-systems.md").read_text(encoding="utf-8")
    assert 'role = "memory"' in page and "returns a `Completion`" in page and "`.text` is the reply" in page
    monkeypatch.setenv("OPENAI_BASE_URL", fake_server.base_url)
    name = _notes_example(tmp_path, monkeypatch)
    sets = run_overrides(tmp_path, TINY_LOCOMO, **{"method.name": name})
    run = run_stages("configs/locomo.yaml", sets)
    memory_calls = [r for r, kind in zip(fake_server.requests, fake_server.request_kinds) if kind == "generic"]
    assert len(memory_calls) == 2  # one call per memory (tiny-1, tiny-2)
    assert all(r["response_format"]["json_schema"]["name"] == "notes" for r in memory_calls)
    rets = rows(run.path("retrievals"))
    assert rets and all(r["method_info"]["evidence"] for r in rets)  # the model's notes are the evidence
    ledger = json.loads((run.dir / "ledger.json").read_text())
    ingest = next(e for e in ledger["stages"] if e["stage"] == "06_retrieve_ingest")
    assert ingest["role"] == "memory" and ingest["calls"] == 2  # counted by the harness, not the system's Spent
    paid = fake_server.request_count
    run_stages("configs/locomo.yaml", sets, ["retrieve", "answer", "judge"])
    assert fake_server.request_count == paid  # cached: a rerun pays nothing


# ----------------------------------------------------------------------------- the Python API
def test_evaluate_runs_a_benchmark_from_python_and_returns_its_numbers_and_files(tmp_path, monkeypatch, capsys):
    from common.pipeline.api import RunResult, evaluate
    from common.pipeline.graph import STAGES
    from tests.fake_openai import FakeOpenAI

    base = [s for s in run_overrides(tmp_path, TINY_LOCOMO) if not s.startswith("run.name=")]
    with FakeOpenAI() as server:
        monkeypatch.setenv("OPENAI_BASE_URL", server.base_url)
        monkeypatch.delenv("OPENAI_BASE_URLS", raising=False)
        result = evaluate("locomo", run="api", memories=["tiny-1"], limit=2, overrides=base)
        paid = server.request_count
        again = evaluate("locomo", run="api", memories="tiny-1", limit=2, overrides=base)
        assert server.request_count == paid  # the same call resumes: nothing paid twice
    assert isinstance(result, RunResult) and result.name == "api" and result.benchmark == "locomo"
    assert result.dir == tmp_path / "results" / "locomo" / "api"
    assert result.stages == tuple(s.id for s in STAGES)
    metrics = json.loads((result.dir / "metrics.json").read_text())
    judge = result.config.judge.name
    assert result.metrics == metrics and result.accuracy == metrics["judges"][judge]["overall"]["accuracy"]
    assert metrics["judges"][judge]["overall"]["n"] == 2
    assert result.coverage == metrics["coverage"]["mark"] == "PARTIAL 2 / 1,540"
    assert result.question_set == metrics["coverage"]["question_set"]["id"]
    assert {"metrics", "ledger", f"table_{judge}"} <= set(result.paths)
    assert sum(r["new"] for roles in result.calls.values() for r in roles.values()) == paid
    assert sum(r["new"] for roles in again.calls.values() for r in roles.values()) == 0
    assert "This invocation made no LLM call" in capsys.readouterr().out  # it prints what make prints


def test_evaluate_takes_python_values_counts_a_dry_run_and_stops_with_the_commands_line(tmp_path, monkeypatch):
    from common.pipeline.api import RunError, evaluate

    sets = {"data.path": str(TINY_LOCOMO), "run.results_dir": str(tmp_path / "results"), "llm.concurrency": 4,
            "llm.cache_path": str(tmp_path / "llm.sqlite"), "run.note": "a note: with spaces",
            "method.options": {"k": 3}}
    dry = evaluate("locomo", overrides=sets, dry_run=True)
    assert dry.config.run.note == "a note: with spaces" and dry.config.method.options == {"k": 3}
    assert dry.estimate and dry.estimate["questions"] == 11 and not dry.stages
    assert not (tmp_path / "results").exists()  # a dry run writes nothing
    with pytest.raises(RunError) as err:
        evaluate("locomo", overrides=["no.such=1"], dry_run=True)
    assert str(err.value).startswith("config error: unknown config key 'no'") and err.value.exit_code == 1
    with pytest.raises(RunError, match="the config is for 'longmemeval'"):
        evaluate("locomo", config="configs/longmemeval.yaml", dry_run=True)
    with pytest.raises(RunError, match="error: stages: no stage 'nope'; known: 01_preprocess"):
        evaluate("locomo", stages=["nope"], dry_run=True)
    only = evaluate("locomo", overrides=sets, stages=["01_preprocess"])  # one stage, as a numbered script
    assert only.stages == ("01_preprocess",) and (only.dir / "01_questions.jsonl").exists() and only.metrics is None


def test_make_and_every_numbered_script_start_a_run_through_evaluate(monkeypatch):
    """One code path: `make locomo` (common.pipeline.run_all) and a numbered script parse their options
    and hand them to api.evaluate."""
    from common.pipeline import api, run_all
    from common.pipeline.graph import STAGES

    calls = []
    monkeypatch.setattr(api, "evaluate", lambda benchmark, **kw: calls.append((benchmark, kw)))
    args = _make_args("locomo", "RUN=try", "LIMIT=20", "MEMORIES=conv-26", "EXECUTOR=ray",
                      "SET=method.options={k: 5}")
    monkeypatch.setattr(sys, "argv", ["run_all", *args])
    run_all.main()
    (benchmark, kw), = calls
    assert benchmark == "locomo" and kw["run"] == "try" and kw["limit"] == 20 and kw["memories"] == "conv-26"
    assert kw["stages"] == STAGES and not kw["dry_run"]
    assert load_config(["configs/locomo.yaml"], kw["overrides"]).method.options == {"k": 5}
    assert "run.executor=ray" in kw["overrides"]
    script = (REPO / "LoCoMo" / "06_retrieve.py").read_text(encoding="utf-8")
    assert 'cli.main("06_retrieve", benchmark="locomo"' in script


def _make_args(target: str, *variables: str) -> list[str]:
    """The arguments ``make <target> <variables>`` hands ``common.pipeline.run_all`` (after the benchmark)."""
    out = subprocess.run(["make", "-s", "-n", target, *variables, f"PY={sys.executable}"], cwd=REPO,
                         capture_output=True, text=True, timeout=60, check=True).stdout
    line = next(ln for ln in out.splitlines() if "common.pipeline.run_all" in ln)
    words = shlex.split(line.split("else ", 1)[1].rsplit(";", 1)[0])
    return words[words.index("common.pipeline.run_all") + 1:]


def test_make_claims_shows_each_runs_question_set_and_warns_when_they_differ(tmp_path, capsys):
    from common.report import claims
    from tests.test_tables import LOCOMO_MAIN, PRIMARY, make_run

    results = tmp_path / "results"
    make_run(results, "locomo", "a", LOCOMO_MAIN[:10], {PRIMARY: [x[1] for x in LOCOMO_MAIN[:10]]})
    make_run(results, "locomo", "b", LOCOMO_MAIN[:10], {PRIMARY: [x[1] for x in LOCOMO_MAIN[:10]]},
             qids=[f"conv-41:q{i:04d}" for i in range(1, 11)])
    assert claims.main(["--results", str(results), "--out", str(tmp_path / "claims"), "--no-rejudge"]) == 0
    md = (tmp_path / "claims" / "claims.md").read_text(encoding="utf-8")
    stored = json.loads((tmp_path / "claims" / "claims.json").read_text(encoding="utf-8"))
    ids = {r["run"]: r["question_set"]["id"] for r in stored["rows"]}
    assert ids["a"] != ids["b"] and all(f"{qs} (10)" in md for qs in ids.values())
    assert "WARNING: locomo: QUESTION SETS DIFFER" in md and "claims: WARNING" in capsys.readouterr().out
