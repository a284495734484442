"""The later stages' slow imports run in the background of a whole-pipeline run, and only there."""
from __future__ import annotations

import importlib.util
import subprocess
import sys
import threading

import pytest

from common.pipeline import warmup
from common.pipeline.graph import STAGES, Stage
from tests.conftest import REPO, TINY_LOCOMO, run_overrides


def _stage(number: int, *mods: str) -> Stage:
    return Stage(number, f"s{number}", lambda run: None, reads=(), writes=(), summary="", warm_imports=mods)


def test_every_declared_warm_import_exists_so_a_typo_cannot_silently_warm_nothing():
    declared = warmup.modules(STAGES)
    assert "scipy.stats" in declared and "nltk.stem" in declared  # what 09 spends its first second on
    for name in declared:
        assert importlib.util.find_spec(name) is not None, name


def test_the_thread_imports_the_declared_modules_in_graph_order_each_once(tmp_path, monkeypatch):
    (tmp_path / "warm_probe_a.py").write_text("import warm_probe_log; warm_probe_log.seen.append('a')\n")
    (tmp_path / "warm_probe_b.py").write_text("import warm_probe_log; warm_probe_log.seen.append('b')\n")
    (tmp_path / "warm_probe_log.py").write_text("seen = []\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    stages = [_stage(2), _stage(5, "warm_probe_b", "warm_probe_a"), _stage(9, "warm_probe_a")]
    assert warmup.modules(stages) == ["warm_probe_b", "warm_probe_a"]
    thread = warmup.start(stages)
    assert thread is not None and thread.daemon
    thread.join(30)
    import warm_probe_log  # noqa: E402 - written by this test above

    assert warm_probe_log.seen == ["b", "a"]
    assert warmup.start([_stage(2), _stage(3)]) is None  # nothing declared: no thread


def test_a_module_that_fails_to_import_is_left_to_its_stage_and_never_raises_on_the_thread(tmp_path, monkeypatch):
    (tmp_path / "warm_broken.py").write_text("raise ImportError('broken on purpose')\n")
    (tmp_path / "warm_fine.py").write_text("VALUE = 1\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    raised: list[BaseException] = []
    monkeypatch.setattr(threading, "excepthook", lambda args: raised.append(args.exc_value))
    thread = warmup.start([_stage(9, "warm_broken", "no_such_module_anywhere", "warm_fine")])
    assert thread is not None
    thread.join(30)
    assert raised == [] and "warm_fine" in sys.modules  # the modules after a failing one still load
    with pytest.raises(ImportError, match="broken on purpose"):  # the stage still meets its own error
        importlib.import_module("warm_broken")


_PROBE = """
import sys
from common.pipeline import api, warmup
started, threads = [], []
real = warmup.start
def spy(later):
    started.append([s.id for s in later])
    threads.append(real(later))
    return threads[-1]
warmup.start = spy
stages = ["01_preprocess"] if sys.argv[1] == "one" else ["01_preprocess", "09_aggregate"]
try:
    api.evaluate("locomo", overrides=sys.argv[2:], stages=stages)
except api.RunError as exc:  # 09 with no judge file: stops after the warm thread was joined
    print("STOPPED", exc)
print("STARTED", started, "scipy.stats" in sys.modules, [t is not None and t.is_alive() for t in threads])
"""


@pytest.mark.parametrize("which", ["one", "whole"])
def test_only_a_run_of_several_stages_warms_the_later_ones(tmp_path, which):
    """A numbered script (one stage) starts no thread and never loads scipy; a run of several stages
    warms 09's imports and joins the thread before 09 (which then stops here for want of a judge file)."""
    sets = [s for s in run_overrides(tmp_path, TINY_LOCOMO) if not s.startswith("run.name=")] + ["run.name=warm"]
    out = subprocess.run([sys.executable, "-c", _PROBE, which, *sets], cwd=REPO, capture_output=True, text=True,
                         timeout=300)
    assert out.returncode == 0, out.stderr
    if which == "one":
        assert "STARTED [] False []" in out.stdout
    else:
        assert "STOPPED" in out.stdout
        assert "STARTED [['09_aggregate']] True [False]" in out.stdout
