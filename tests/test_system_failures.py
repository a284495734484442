"""A memory system's failures and outcomes, counted and never a traceback that stops the run
(common/systems/failures.py, common/systems/outcomes.py): an exception in search (SimpleMem's KeyError
on a planning reply without ``required_info``) or in ingestion, in the harness's process or in a child,
is a counted failure of that question or memory (``system_error`` with its message), 07 does not
answer it (``retrieval_failed``), the run goes on under ``run.max_error_rate`` and the next run redoes
exactly it; errors logged while searching (in-process, or in ``child_search.log``) are counted like
those logged while ingesting; a memory of a system that reports no item count is an ``empty_memory``
when every search of it came back empty (inferred, and said so); fallbacks and what each memory
holds reach metrics.json, the line under the score table, the systems table and the report."""
from __future__ import annotations

import json
import logging
import os
import re
from pathlib import Path

import pytest

from common.core.config import ConfigError
from common.core.schema import Question
from common.method.render import MemoryView
from common.systems import outcomes
from common.systems.base import Evidence, Found, MemorySystem, Spent
from tests.conftest import TINY_LOCOMO, rows, run_overrides, run_stages
from tests.test_process_systems import child_env, sets_for  # noqa: F401 - the module's fixture

RAISES, LOGS, FALLS_BACK = "tiny-1:q0002", "tiny-1:q0003", "tiny-1:q0004"  # scored questions (categories 2, 1, 3)


def _switch(name: str) -> list[str]:
    return [x for x in os.environ.get(name, "").split(",") if x]


class Flaky(MemorySystem):
    """Word overlap over a memory's turns; it misbehaves where the test's environment says (switches
    read at each call, so a rerun without them keeps the memories ingested): FLAKY_INGEST raises in
    the ingestion of those memories, FLAKY_SEARCH raises SimpleMem's KeyError for those questions,
    FLAKY_LOG logs an error while searching them, FLAKY_FALLBACK notes a fallback, FLAKY_EMPTY
    finds nothing in those memories. It reports what it built, but never an item count (as mem0)."""

    def ingest(self, view: MemoryView, state_dir: Path) -> Spent:
        if view.memory_id in _switch("FLAKY_INGEST"):
            raise RuntimeError(f"index build of {view.memory_id} failed")
        turns = [{"id": t.dia_id, "text": f"{t.speaker}: {t.text}", "date": s.date_time}
                 for s in view.sessions for t in s.turns]
        (state_dir / "turns.json").write_text(json.dumps(turns), encoding="utf-8")
        outcomes.note_built(turns=len(turns), sessions=len(view.sessions))
        return Spent()

    def search(self, question: Question, view: MemoryView) -> Found:
        if question.qid in _switch("FLAKY_SEARCH"):
            plan = {"question_type": "factual", "key_entities": ["Nadia"]}  # a reply without required_info
            print(f"[Planning] Identified {len(plan['required_info'])} information requirements")
        if question.qid in _switch("FLAKY_LOG"):
            logging.getLogger("flaky.reranker").error("reranker unavailable for %s", question.qid)
        if question.qid in _switch("FLAKY_FALLBACK"):
            outcomes.note_fallback("dense", "no fact survived the filter")
        if question.memory_id in _switch("FLAKY_EMPTY"):
            return Found([])
        turns = json.loads((self.ctx.state_dir / question.memory_id / "turns.json").read_text(encoding="utf-8"))
        words = set(re.findall(r"[a-z]+", question.question.lower()))
        ranked = sorted(turns, key=lambda t: (-len(words & set(re.findall(r"[a-z]+", t["text"].lower()))), t["id"]))
        return Found([Evidence(t["text"], [t["id"]], t["date"]) for t in ranked[:3]])


class OwnError(Flaky):
    """A system whose search meets an error of the harness's own (a bad setting): that stops the run."""

    def search(self, question: Question, view: MemoryView) -> Found:
        raise ConfigError("method.options.k: must be a positive integer")


NAME = "tests.test_system_failures:Flaky"


@pytest.fixture(scope="module")
def flaky_runs(tmp_path_factory):
    """01-09 with one search raising, one logging an error, one falling back and tiny-2 finding
    nothing; then the same command with the faults gone."""
    from tests.fake_openai import FakeOpenAI

    tmp = tmp_path_factory.mktemp("flaky")
    sets = run_overrides(tmp, TINY_LOCOMO, **{"method.name": NAME})
    with FakeOpenAI() as fake, pytest.MonkeyPatch.context() as mp:
        mp.setenv("OPENAI_BASE_URL", fake.base_url)
        for name, value in (("FLAKY_SEARCH", RAISES), ("FLAKY_LOG", LOGS), ("FLAKY_FALLBACK", FALLS_BACK),
                            ("FLAKY_EMPTY", "tiny-2")):
            mp.setenv(name, value)
        run = run_stages("configs/locomo.yaml", sets)  # no exception: 1 failed row of 11 is under 0.2
        first = {"kinds": fake.counts_by_kind(), "retrievals": rows(run.path("retrievals")),
                 "answers": rows(run.path("answers")), "metrics": json.loads(run.path("metrics").read_text())}
        mp.delenv("FLAKY_SEARCH")
        before = fake.counts_by_kind()
        again = run_stages("configs/locomo.yaml", sets)
        redone = {k: v - before.get(k, 0) for k, v in fake.counts_by_kind().items() if v != before.get(k, 0)}
        manifest = json.loads((again.dir / "06_retrieve.manifest.json").read_text())
    yield {"run": run, "first": first, "redone": redone, "manifest": manifest, "tmp": tmp}


def test_an_exception_in_search_is_a_counted_failure_of_that_question_and_the_run_goes_on(flaky_runs):
    first = flaky_runs["first"]
    failed = [r for r in first["retrievals"] if r["error"]]
    assert [r["qid"] for r in failed] == [RAISES]
    row = failed[0]
    assert row["error"] == "system_error: KeyError: 'required_info'" and row["fallback_used"]
    info = row["method_info"]
    assert info["failed"] == "system_error" and info["failed_in"] == "search"
    assert "KeyError: 'required_info'" in info["traceback"] and "in search" in info["traceback"]
    # 07 makes no answer call for it: a counted failure of the question, not an answer from nothing
    answer = next(a for a in first["answers"] if a["qid"] == RAISES)
    assert answer["answer"] is None and answer["error"].startswith("retrieval_failed: system_error: KeyError")
    assert first["kinds"]["answer"] == len(first["answers"]) - 1
    judge = first["metrics"]["judges"]["gpt-4o-mini"]
    assert judge["failures"] == {"retrieval_failed": 1} and judge["overall"]["n_failed"] == 1
    assert first["metrics"]["memory_system"]["search_failed"] == {"system_error": 1}


def test_the_next_run_redoes_exactly_the_failed_question(flaky_runs):
    assert flaky_runs["manifest"]["redone_rows"] == 1 and flaky_runs["manifest"]["new_rows"] == 1
    assert flaky_runs["redone"] == {"answer": 1, "judge_locomo": 1}  # its answer and judgment, nothing else
    again = rows(flaky_runs["run"].path("retrievals"))
    assert not any(r["error"] for r in again)
    assert next(a for a in rows(flaky_runs["run"].path("answers")) if a["qid"] == RAISES)["answer"]


def test_errors_logged_while_searching_fallbacks_and_what_was_built_are_counted(flaky_runs):
    by_qid = {r["qid"]: r for r in flaky_runs["first"]["retrievals"]}
    assert by_qid[LOGS]["method_info"]["outcome"]["errors"] == {"logged_error": 1}
    assert "flaky.reranker: reranker unavailable" in by_qid[LOGS]["method_info"]["outcome"]["error_samples"][0]
    assert by_qid[FALLS_BACK]["method_info"]["outcome"]["fallbacks"] == {"dense": 1}
    block = flaky_runs["first"]["metrics"]["memory_system"]
    assert block["search_errors"] == {"logged_error": 1} and block["search_fallbacks"] == {"dense": 1}
    turns = sum(len(s["turns"]) for s in rows(flaky_runs["run"].path("sessions")))
    assert block["built"] == {"sessions": len(rows(flaky_runs["run"].path("sessions"))), "turns": turns}
    assert block["built_memories"] == 2


def test_an_empty_memory_of_a_system_that_reports_no_count_is_inferred_from_its_searches(flaky_runs):
    block = flaky_runs["first"]["metrics"]["memory_system"]
    assert block["memories_counted"] == 2 and block["outcomes"]["empty_memory"] == 1
    assert block["empty_memory_inferred"] == 1
    markers = {m["memory_id"]: m for m in outcomes.markers(flaky_runs["run"].dir)}
    assert all(m["outcome"]["items"] is None for m in markers.values())  # the system never said


def test_the_outcomes_reach_the_score_line_the_systems_table_and_the_report(flaky_runs):
    from common.evaluation.scoring import score_note
    from common.report import html
    from common.report.tables import command

    metrics = flaky_runs["first"]["metrics"]
    note = score_note(metrics, "gpt-4o-mini")
    for part in ("retrieval_failed 1", "empty_memory 1 of 2 (1 inferred)", "search logged_error 1",
                 "search failed (system_error) 1", "fallback dense 1 of 11", "built (2 memories): sessions"):
        assert part in note, part
    results = flaky_runs["tmp"] / "results"
    assert command.main(["--results", str(results), "--out", str(results / "tables"), "--only", "systems"]) == 0
    table = (results / "tables" / "systems.md").read_text()
    head = next(x for x in table.splitlines() if x.startswith("| Ref"))
    line = next(x for x in table.splitlines() if f" | {NAME} | " in x)
    cells = dict(zip([c.strip() for c in head.split("|")], [c.strip() for c in line.split("|")]))
    assert "fallback dense 1 of 11" in cells["Outcomes"] and "built (2 memories)" in cells["Outcomes"]
    assert cells["Departures"] == "no card" and cells["System protocol"] == "common"
    page = html.build(flaky_runs["run"].dir, out=flaky_runs["tmp"] / "report.html").read_text()
    outcomes_table = page.split('id="system-outcomes"', 1)[1].split("</table>", 1)[0]
    assert 'data-outcome="search logged_error"' in outcomes_table and 'data-outcome="fallback dense"' in outcomes_table
    assert 'data-outcome="built turns"' in outcomes_table


def test_a_failed_ingestion_fails_its_questions_the_others_go_on_and_the_rerun_redoes_it(tmp_path, fake_server,
                                                                                         monkeypatch):
    from common.pipeline.engine import StageFailed

    monkeypatch.setenv("OPENAI_BASE_URL", fake_server.base_url)
    monkeypatch.setenv("FLAKY_INGEST", "tiny-1")
    sets = run_overrides(tmp_path, TINY_LOCOMO, **{"method.name": NAME, "systems.ingest_concurrency": 1})
    with pytest.raises(StageFailed) as err:  # 6 of 11 questions failed: over run.max_error_rate 0.2
        run_stages("configs/locomo.yaml", sets, ["preprocess", "retrieve"])
    message = str(err.value)
    assert "\n" not in message and "most failed with system_error" in message
    assert "ingestion of tiny-1 failed: RuntimeError: index build of tiny-1 failed" in message
    memory = tmp_path / "results" / "locomo" / "t" / "06_retrieve" / "memory"
    failed = json.loads((memory / "tiny-1" / "failed.json").read_text())
    assert failed["cause"] == "system_error" and "index build of tiny-1 failed" in failed["traceback"]
    assert (memory / "tiny-2" / "ingested.json").exists()  # the next memory was ingested all the same
    got = rows(tmp_path / "results" / "locomo" / "t" / "06_retrieve.jsonl")
    assert {r["qid"].split(":")[0] for r in got if r["error"]} == {"tiny-1"}
    assert all(r["method_info"]["failed_in"] == "ingest" for r in got if r["error"])
    monkeypatch.delenv("FLAKY_INGEST")
    run = run_stages("configs/locomo.yaml", sets, ["retrieve"])
    ingest = json.loads((run.dir / "06_retrieve.manifest.json").read_text())["ingest"]
    assert (ingest["resumed"], ingest["new"], ingest["failed"]) == (1, 1, {})
    assert not (memory / "tiny-1" / "failed.json").exists()
    assert not any(r["error"] for r in rows(run.path("retrievals")))


def test_an_error_of_the_harness_still_stops_the_run(tmp_path, fake_server, monkeypatch):
    monkeypatch.setenv("OPENAI_BASE_URL", fake_server.base_url)
    sets = run_overrides(tmp_path, TINY_LOCOMO, **{"method.name": "tests.test_system_failures:OwnError"})
    with pytest.raises(ConfigError, match="method.options.k"):
        run_stages("configs/locomo.yaml", sets, ["preprocess", "retrieve"])


def test_a_childs_exception_is_a_system_error_and_its_logged_search_errors_are_counted(child_env):  # noqa: F811
    from tests.fake_openai import FakeOpenAI

    tmp = child_env["tmp"] / "child-search-errors"
    with FakeOpenAI() as fake, pytest.MonkeyPatch.context() as mp:
        mp.setenv("OPENAI_BASE_URL", fake.base_url)
        sets = sets_for(tmp, fake.base_url, **{"run.max_error_rate": 1.0, "data.question_limit": 2,
                                               "data.memories": "[tiny-1]"})
        run_stages("configs/locomo.yaml", sets, ["preprocess"])
        mp.setitem(child_env["child_env"], "STDLIB_TURNS_FAIL", "search:error")
        run = run_stages("configs/locomo.yaml", sets, ["retrieve"])
        got = rows(run.path("retrievals"))
        assert got and all(r["error"].startswith("system_error: ") and "KeyError: 'required_info'" in r["error"]
                           and r["method_info"]["failed"] == "system_error" for r in got)
        mp.setitem(child_env["child_env"], "STDLIB_TURNS_FAIL", "search:logerror")
        run = run_stages("configs/locomo.yaml", sets, ["retrieve"])
    got = rows(run.path("retrievals"))
    assert got and not any(r["error"] for r in got)
    for r in got:  # each question's own line of child_search.log, in that question's account
        assert r["method_info"]["outcome"]["errors"] == {"logged_error": 1}
        assert "ERROR ranker: index unavailable for search" in r["method_info"]["outcome"]["error_samples"][0]
    assert outcomes.summary(run.dir)["search_errors"] == {"logged_error": len(got)}
