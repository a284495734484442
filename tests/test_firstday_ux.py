"""A new user's first day: runs say what ran and what they did, stops say why, commands run as shown."""
from __future__ import annotations

import pytest

from common.core.config import load_config
from common.systems.base import Found, MemorySystem, Spent


# ----------------------------------------------------------------------------- the method that ran
def test_method_label_names_systems_and_user_classes():
    from common.evaluation.scoring import method_label

    for name, want in (("mem0", "mem0 (this harness, run m0)"), ("amem", "A-MEM (this harness, run m0)"),
                       ("ensimem", "EnSIMem (this harness, run m0)")):
        cfg = load_config(["configs/locomo.yaml"], [f"method.name={name}", "run.name=m0"])
        assert method_label(cfg) == want
    lme = load_config(["configs/longmemeval.yaml"], ["method.name=my.pkg:Mine", "run.name=x"])
    assert method_label(lme) == "my.pkg:Mine (this harness, run x)"


# ----------------------------------------------------------------------------- why a stage stopped
def test_a_stage_stopped_by_its_error_rate_names_the_cause_and_the_missing_v1(monkeypatch, tmp_path):
    from common.pipeline.engine import StageFailed
    from tests.conftest import TINY_LOCOMO, run_overrides, run_stages
    from tests.fake_openai import Capabilities, FakeOpenAI

    with FakeOpenAI(capabilities=Capabilities(v1_only=True)) as server:
        root = server.base_url.removesuffix("/v1")  # a base URL without /v1: every call is a 404
        monkeypatch.setenv("OPENAI_BASE_URL", root)
        monkeypatch.delenv("OPENAI_BASE_URLS", raising=False)
        sets = run_overrides(tmp_path, TINY_LOCOMO, **{"data.memories": "[tiny-1]"})
        with pytest.raises(StageFailed) as err:
            run_stages("configs/locomo.yaml", sets, ["preprocess", "episodes"])
    message = str(err.value)
    assert "most failed with http_404" in message
    assert "has no /v1" in message and f"try {root}/v1" in message


# ----------------------------------------------------------------------------- what this invocation did
def _stage(monkeypatch, capsys, script: str, sets: list[str], invocation: str) -> str:
    import sys

    from common.pipeline import cli

    monkeypatch.setenv("HARNESS_INVOCATION", invocation)
    monkeypatch.setattr(sys, "argv", [script] + [a for s in sets for a in ("--set", s)])
    cli.main(script, "locomo")
    return capsys.readouterr().out


def test_each_invocation_says_what_it_did_and_a_rerun_says_it_made_no_call(monkeypatch, capsys, tmp_path):
    from tests.conftest import TINY_LOCOMO, run_overrides
    from tests.fake_openai import FakeOpenAI

    sets = run_overrides(tmp_path, TINY_LOCOMO, **{"data.memories": "[tiny-1]", "run.name": "inv"})
    with FakeOpenAI() as server:
        monkeypatch.setenv("OPENAI_BASE_URL", server.base_url)
        monkeypatch.delenv("OPENAI_BASE_URLS", raising=False)
        monkeypatch.setenv("HARNESS_SUMMARY_AT", "02_episodes")  # as `make locomo` names its last stage
        first = _stage(monkeypatch, capsys, "01_preprocess", sets, "one")
        assert "This invocation" not in first  # not the invocation's last stage
        first = _stage(monkeypatch, capsys, "02_episodes", sets, "one")
        paid = server.request_count
        assert paid > 0
        assert f"This invocation made {paid} new LLM calls ($" in first
        assert "stages: 01_preprocess, 02_episodes" in first
        assert "report: make report RUN=inv" in first and str(tmp_path / "results" / "locomo" / "inv") in first
        monkeypatch.delenv("HARNESS_SUMMARY_AT")
        again = _stage(monkeypatch, capsys, "02_episodes", sets, "two")
        assert server.request_count == paid
        assert "This invocation made no LLM call (everything was already in the run's files, $0 spent now)" in again
        assert "stages: 02_episodes." in again


def test_the_whole_pipeline_in_one_process_records_each_stages_own_calls_and_sums_up_once(
        monkeypatch, capsys, tmp_path):
    """``make locomo`` (``common.pipeline.run_all``): one client serves the nine stages, and each
    stage's entry holds its own calls, not the running total; the summary is printed once."""
    import json
    import sys

    from common.pipeline import run_all
    from common.pipeline.graph import STAGES
    from tests.conftest import TINY_LOCOMO, run_overrides
    from tests.fake_openai import FakeOpenAI

    sets = run_overrides(tmp_path, TINY_LOCOMO, **{"data.memories": "[tiny-1]", "run.name": "whole"})
    with FakeOpenAI() as server:
        monkeypatch.setenv("OPENAI_BASE_URL", server.base_url)
        monkeypatch.delenv("OPENAI_BASE_URLS", raising=False)
        monkeypatch.delenv("HARNESS_SUMMARY_AT", raising=False)
        monkeypatch.setenv("HARNESS_INVOCATION", "whole-1")
        monkeypatch.setattr(sys, "argv", ["run_all", "locomo"] + [a for s in sets for a in ("--set", s)])
        run_all.main()
        out = capsys.readouterr().out
        kinds = server.counts_by_kind()
    assert out.count("This invocation made") == 1 and out.rstrip().splitlines()[-3].startswith("This invocation")
    assert f"This invocation made {server.request_count} new LLM calls" in out
    record = json.loads((tmp_path / "results" / "locomo" / "whole" / "invocation.json").read_text())
    stages = record["stages"]
    assert list(stages) == [s.id for s in STAGES]
    # Each role's calls sit under the one stage that made them, equal to the fake server's count.
    per_role = {role: (stage, v["new"]) for stage, roles in stages.items() for role, v in roles.items()}
    expected_stage = {s.role: s.id for s in STAGES if s.role}
    assert {role: stage for role, (stage, _) in per_role.items()} == {r: expected_stage[r] for r in per_role}
    served = {"partition": kinds.get("partition", 0), "extract": kinds.get("extract", 0),
              "plan": kinds.get("plan", 0), "answer": kinds.get("answer", 0), "judge": kinds.get("judge_locomo", 0)}
    assert {r: per_role[r][1] for r in served} == served
    assert sum(v["new"] for roles in stages.values() for v in roles.values()) == server.request_count


# ----------------------------------------------------------------------------- where things are
USER_VARIABLES = ("CONFIG", "RUN", "MEMORIES", "LIMIT", "SET", "DRY_RUN", "LOCOMO_JSON", "LONGMEMEVAL_JSON",
                  "BEAM_DIR", "OPENAI_API_KEY", "OPENAI_BASE_URL", "OPENAI_BASE_URLS", "VENV")


def test_make_help_lists_every_variable_a_user_sets_and_the_readme_names_the_data_paths():
    import subprocess

    from tests.conftest import REPO

    out = subprocess.run(["make", "--no-print-directory", "help"], cwd=REPO, capture_output=True, text=True,
                         check=True).stdout
    described = {line.split()[0]: line for line in out.split("Variables", 1)[1].splitlines()[1:] if line.strip()}
    for var in USER_VARIABLES:
        assert var in described and len(described[var].split()) > 3, var
    readme = (REPO / "README.md").read_text(encoding="utf-8").splitlines()
    at = next(i for i, ln in enumerate(readme) if ln.startswith("make data "))
    beside = " ".join(readme[at:at + 2])  # the command's line and its continued comment
    assert all(var in beside for var in ("LOCOMO_JSON", "LONGMEMEVAL_JSON", "BEAM_DIR")), beside


# ----------------------------------------------------------------------------- progress
def test_progress_bars_are_drawn_on_a_terminal_only_and_never_in_ci(monkeypatch):
    import sys

    from common.core import progress

    monkeypatch.delenv("CI", raising=False)
    monkeypatch.setattr(sys.stderr, "isatty", lambda: True, raising=False)
    assert progress.interactive()
    for ci in ("true", "1", "yes"):
        monkeypatch.setenv("CI", ci)
        assert not progress.interactive()
    monkeypatch.setenv("CI", "false")
    assert progress.interactive()
    monkeypatch.setattr(sys.stderr, "isatty", lambda: False, raising=False)
    assert not progress.interactive()
    assert progress.bar(range(10), desc="x").disable


class Ticking(MemorySystem):
    """Ingests nothing but says so session by session, as mem0 and A-MEM do."""

    def ingest(self, view, state_dir):
        for _ in view.sessions:
            self.ctx.advance(1)
        return Spent()

    def search(self, question, view):
        return Found([])


@pytest.mark.parametrize("terminal", [True, False])
def test_the_index_build_and_a_systems_ingestion_show_a_bar_on_a_terminal(monkeypatch, capsys, tmp_path, terminal):
    from common.core import progress
    from common.pipeline.engine import Run
    from common.pipeline.graph import by_name
    from tests.conftest import TINY_LOCOMO, run_overrides
    from tests.fake_openai import FakeOpenAI

    monkeypatch.setattr(progress, "interactive", lambda: terminal)
    with FakeOpenAI() as server:
        monkeypatch.setenv("OPENAI_BASE_URL", server.base_url)
        base = run_overrides(tmp_path, TINY_LOCOMO, **{"embedding.backend": "openai", "embedding.model": "fake-embed"})
        ensimem = Run(load_config(["configs/locomo.yaml"], base), progress=progress.interactive())
        for stage in ("preprocess", "episodes", "extract", "index"):
            by_name(stage).resolve()(ensimem)
        index_err = capsys.readouterr().err
        ticking = Run(load_config(["configs/locomo.yaml"], [*base, "run.name=tick",
                                                             "method.name=tests.test_firstday_ux:Ticking"]),
                      progress=progress.interactive())
        for stage in ("preprocess", "retrieve"):
            by_name(stage).resolve()(ticking)
        ingest_err = capsys.readouterr().err
    assert ("04_index" in index_err and "memory" in index_err) is terminal
    assert ("06_retrieve ingest" in ingest_err and "/4 [" in ingest_err and "session" in ingest_err) is terminal


# ----------------------------------------------------------------------------- the commands the docs show
def _doc_files():
    from tests.conftest import REPO

    return [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]


def _command_lines(text: str) -> list[str]:
    """Every command of the fenced code blocks: continuations joined, prompts and comments cut,
    ``a && b`` and ``a; b`` split."""
    import re

    out: list[str] = []
    for block in re.findall(r"^```[^\n]*\n(.*?)^```", text, flags=re.S | re.M):
        joined = re.sub(r"\\\n\s*", " ", block)
        for line in joined.splitlines():
            line = re.sub(r"(^|\s)#.*$", "", line.strip().removeprefix("$ ")).strip()
            out += [part.strip() for part in re.split(r"&&|;", line) if part.strip()]
    return out


def test_every_python_command_in_the_docs_runs_without_an_activated_venv():
    import importlib.util
    import re
    import shlex

    bare, missing, checked = [], [], 0
    for path in _doc_files():
        text = path.read_text(encoding="utf-8")
        bare += [f"{path.name}: {m.group(0)}" for m in re.finditer(r"(?<![/\w.])python3? -m \S+", text)]
        for command in _command_lines(text):
            if not command.startswith(".venv/bin/python -m "):
                continue
            words = shlex.split(command)
            if words[:2] == [".venv/bin/python", "-m"]:
                checked += 1
                if importlib.util.find_spec(words[2]) is None:
                    missing.append(f"{path.name}: {command}")
    assert not bare, f"`python -m` works only in an activated venv; write .venv/bin/python -m or a make target: {bare}"
    assert not missing, f"commands naming modules that do not exist: {missing}"
    assert checked >= 5


def test_every_make_command_in_the_docs_names_a_target_that_runs():
    import shlex
    import subprocess

    from common.pipeline.graph import STAGES
    from tests.conftest import REPO

    stages = " ".join(s.id for s in STAGES)
    commands = {c for path in _doc_files() for c in _command_lines(path.read_text(encoding="utf-8"))
                if c.startswith("make ")}
    assert len(commands) >= 20
    failed = []
    for command in sorted(commands):
        words = shlex.split(command)[1:]
        out = subprocess.run(["make", "-n", "--no-print-directory", *words, f"STAGES={stages}"], cwd=REPO,
                             capture_output=True, text=True, timeout=60,
                             env={**__import__("os").environ, "HARNESS_INVOCATION": "docs-check"})
        if out.returncode != 0:
            failed.append(f"{command}: {out.stderr.strip().splitlines()[-1:]}")
    assert not failed, failed


# ----------------------------------------------------------------------------- make claims
def test_make_claims_lists_the_claims_without_a_run_and_the_command_that_imports_each(tmp_path, capsys):
    import json

    from common.evaluation.claims import load_claims
    from common.report import claims as report

    assert report.main(["--results", str(tmp_path / "results"), "--no-rejudge"]) == 0
    printed = capsys.readouterr().out
    registered = load_claims()
    for cid in registered:
        assert f"CLAIM={cid} RUN={cid}" in printed, cid
    assert ("`make import FILE=zep_locomo_grades.json FORMAT=zep CLAIM=zep-locomo RUN=zep-locomo` (the file: "
            "https://raw.githubusercontent.com/getzep/zep-papers/") in printed
    stored = json.loads((tmp_path / "results" / "claims" / "claims.json").read_text(encoding="utf-8"))
    assert {m["claim"] for m in stored["claims_without_a_run"]} == set(registered)
    # A claim that a run of the table backs is not listed.
    left = report.unimported(registered, [{"claim": {"id": "zep-locomo"}}, {"claim": None}])
    assert "zep-locomo" not in {m["claim"] for m in left} and len(left) == len(registered) - 1
