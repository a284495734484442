"""The first day, fourth pass: what a new user met from the docs alone, each fixed and checked here.

Runs over different questions are told apart, a partial run is never "comparable" to a full claim,
documented syntax works, no preamble or figure misleads, LIMIT draws across categories, and a
run starts from Python through the same ``evaluate`` as ``make locomo``.
"""
from __future__ import annotations

import dataclasses
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
