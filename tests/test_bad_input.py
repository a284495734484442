"""Bad benchmark files through ``01_preprocess``: one ``error:`` line naming file and field, no artifact.

The loaders' own error messages are unit-tested in test_locomo_adapter.py and
test_longmemeval_adapter.py; here the whole script is run as a user runs it, and what is checked
is what the user sees: a non-zero exit, exactly one line on stderr that starts with ``error:`` and
names the file and the field, and a run directory holding no ``01_*`` artifact (nor an older
run's artifacts rewritten).
"""
from __future__ import annotations

import copy
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any, Callable

import pytest

from common.pipeline.cli import main
from tests.conftest import REPO, TINY_LOCOMO, run_overrides

TINY_LME = REPO / "tests" / "fixtures" / "lme_tiny.json"
SCRIPT = {"locomo": "LoCoMo.01_preprocess", "longmemeval": "LongMemEval.01_preprocess"}
FIXTURE = {"locomo": TINY_LOCOMO, "longmemeval": TINY_LME}
Mutation = Callable[[Any], None]


def _set(path: tuple[Any, ...], value: Any) -> Mutation:
    def mutate(data: Any) -> None:
        for part in path[:-1]:
            data = data[part]
        data[path[-1]] = value
    return mutate


def _del(path: tuple[Any, ...]) -> Mutation:
    def mutate(data: Any) -> None:
        for part in path[:-1]:
            data = data[part]
        del data[path[-1]]
    return mutate


def _append_copy(index: int) -> Mutation:
    def mutate(data: list[Any]) -> None:
        data.append(copy.deepcopy(data[index]))
    return mutate


def _repeat_dia_id(data: list[Any]) -> None:
    # The second session of tiny-1 reuses the first session's first turn id.
    conv = data[0]["conversation"]
    conv["session_2"][1]["dia_id"] = conv["session_1"][0]["dia_id"]


# (benchmark, mutation, the field the error must name). Field names are those of the source file.
CASES: list[tuple[str, str, Mutation, str]] = [
    ("locomo", "missing field", _del((0, "qa", 3, "category")), "qa[3].category"),
    ("locomo", "missing field", _del((1, "conversation", "speaker_a")), "conversation.speaker_a"),
    ("locomo", "wrong type", _set((0, "qa", 2, "evidence"), "D1:1"), "qa[2].evidence"),
    ("locomo", "wrong type", _set((1, "conversation", "session_1", 0, "text"), 7), "session_1[0].text"),
    ("locomo", "unknown category", _set((0, "qa", 3, "category"), 6), "qa[3].category"),
    ("locomo", "duplicate sample_id", _append_copy(0), "sample_id"),
    ("locomo", "duplicate dia_id", _repeat_dia_id, "session_2[1].dia_id"),
    ("locomo", "empty session", _set((0, "conversation", "session_2"), []), "conversation.session_2"),
    ("longmemeval", "missing field", _del((2, "question_date")), "question_date"),
    ("longmemeval", "wrong type", _set((4, "answer_session_ids"), "answer_ku_1"), "answer_session_ids"),
    ("longmemeval", "wrong type", _set((1, "haystack_sessions", 0, 0, "has_answer"), "yes"),
     "haystack_sessions[0][0].has_answer"),
    ("longmemeval", "unknown question_type", _set((3, "question_type"), "multi_session"), "question_type"),
    ("longmemeval", "duplicate question_id", _append_copy(2), "question_id"),
]


def _write_mutated(tmp_path: Path, benchmark: str, mutate: Mutation) -> Path:
    data = json.loads(FIXTURE[benchmark].read_text(encoding="utf-8"))
    mutate(data)
    path = tmp_path / f"bad_{benchmark}.json"
    path.write_text(json.dumps(data), encoding="utf-8")
    return path


def _argv(tmp_path: Path, benchmark: str, data: Path) -> list[str]:
    args = ["--config", f"configs/{benchmark}.yaml"]
    for s in run_overrides(tmp_path, data):
        args += ["--set", s]
    return args


def _run_dir(tmp_path: Path, benchmark: str) -> Path:
    return tmp_path / "results" / benchmark / "t"


def _artifacts(run_dir: Path) -> list[str]:
    return sorted(p.name for p in run_dir.glob("*")) if run_dir.exists() else []


def _run_in_process(monkeypatch, capsys, benchmark: str, argv: list[str]) -> tuple[object, str]:
    """``main`` as the numbered script calls it; returns (exit code, stderr)."""
    monkeypatch.setattr(sys, "argv", [SCRIPT[benchmark], *argv])
    with pytest.raises(SystemExit) as exc:
        main("preprocess", benchmark)
    return exc.value.code, capsys.readouterr().err


def _check_one_line(code: object, err: str, data: Path, field: str) -> str:
    """The SystemExit code is what the interpreter prints: a string means exit status 1."""
    assert isinstance(code, str), f"expected an error message, got exit code {code!r}"
    message = code
    assert err == "", f"nothing else may reach stderr: {err!r}"
    assert "\n" not in message, message
    assert message.startswith("error: "), message
    assert str(data) in message, f"the file is not named: {message}"
    assert field in message, f"the field {field!r} is not named: {message}"
    return message


@pytest.mark.parametrize(("benchmark", "what", "mutate", "field"), CASES,
                         ids=[f"{b}-{w}-{f}" for b, w, _, f in CASES])
def test_bad_file_one_line_error_and_no_artifact(tmp_path, monkeypatch, capsys, benchmark, what, mutate, field):
    data = _write_mutated(tmp_path, benchmark, mutate)
    code, err = _run_in_process(monkeypatch, capsys, benchmark, _argv(tmp_path, benchmark, data))
    _check_one_line(code, err, data, field)
    assert _artifacts(_run_dir(tmp_path, benchmark)) == []


@pytest.mark.parametrize("benchmark", ["locomo", "longmemeval"])
def test_truncated_file_one_line_error_and_no_artifact(tmp_path, monkeypatch, capsys, benchmark):
    text = FIXTURE[benchmark].read_text(encoding="utf-8")
    data = tmp_path / f"cut_{benchmark}.json"
    data.write_text(text[: len(text) * 2 // 3], encoding="utf-8")  # a download cut short
    code, err = _run_in_process(monkeypatch, capsys, benchmark, _argv(tmp_path, benchmark, data))
    message = _check_one_line(code, err, data, "invalid JSON")
    assert "line 1 column" in message or "line " in message  # where the file stops making sense
    assert _artifacts(_run_dir(tmp_path, benchmark)) == []


@pytest.mark.parametrize("benchmark", ["locomo", "longmemeval"])
def test_empty_list_is_an_error_not_an_empty_run(tmp_path, monkeypatch, capsys, benchmark):
    data = tmp_path / f"empty_{benchmark}.json"
    data.write_text("[]", encoding="utf-8")
    code, err = _run_in_process(monkeypatch, capsys, benchmark, _argv(tmp_path, benchmark, data))
    _check_one_line(code, err, data, "no ")
    assert _artifacts(_run_dir(tmp_path, benchmark)) == []


def test_bad_file_leaves_an_earlier_runs_artifacts_untouched(tmp_path, monkeypatch, capsys):
    """Re-running 01 on a broken file must not clobber what a good file produced before."""
    good = _argv(tmp_path, "locomo", TINY_LOCOMO)
    monkeypatch.setattr(sys, "argv", [SCRIPT["locomo"], *good])
    main("preprocess", "locomo")
    capsys.readouterr()
    run_dir = _run_dir(tmp_path, "locomo")
    before = {p.name: p.read_bytes() for p in run_dir.iterdir()}
    assert {"01_sessions.jsonl", "01_questions.jsonl", "01_gold.jsonl"} <= set(before)

    data = _write_mutated(tmp_path, "locomo", _set((1, "qa", 0, "category"), 0))
    code, err = _run_in_process(monkeypatch, capsys, "locomo", _argv(tmp_path, "locomo", data))
    _check_one_line(code, err, data, "qa[0].category")
    assert {p.name: p.read_bytes() for p in run_dir.iterdir()} == before


@pytest.mark.parametrize(("benchmark", "mutate", "field"), [
    ("locomo", _set((0, "qa", 3, "category"), 6), "qa[3].category"),
    ("longmemeval", _append_copy(2), "question_id"),
])
def test_script_prints_exactly_one_stderr_line(tmp_path, benchmark, mutate, field):
    """The real script in a fresh interpreter: no warning, log line or traceback besides the error."""
    data = _write_mutated(tmp_path, benchmark, mutate)
    env = {k: v for k, v in os.environ.items() if k not in ("OPENAI_API_KEY", "OPENAI_BASE_URL")}
    proc = subprocess.run([sys.executable, "-m", SCRIPT[benchmark], *_argv(tmp_path, benchmark, data)],
                          cwd=REPO, env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode != 0
    lines = proc.stderr.splitlines()
    assert len(lines) == 1, proc.stderr
    assert lines[0].startswith("error: ") and str(data) in lines[0] and field in lines[0], lines[0]
    assert proc.stdout == ""
    assert _artifacts(_run_dir(tmp_path, benchmark)) == []
