"""The official LoCoMo-Plus code and data, read at test time from the fetched repository.

``LOCOMO_PLUS_REPO`` (default: the workplace mirror of xjtuleeyf/Locomo-Plus) is a git directory;
its files at ``LOCOMO_PLUS_COMMIT`` are written into the test's tmp dir and imported from there,
so nothing of the official code is vendored. The data files are the shared copies when present
(``../shared/data/locomo-plus``, ``../shared/data/locomo``), else the same files from the repository
(it ships ``locomo10.json`` byte-identical). Tests skip, naming the path, when neither is there.
"""
from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path
from types import ModuleType, SimpleNamespace

import pytest

REPO = Path(__file__).resolve().parent.parent
OFFICIAL_REPO = Path(os.environ.get("LOCOMO_PLUS_REPO", "/work/.mirror/xjtuleeyf+Locomo-Plus/repo"))
COMMIT = os.environ.get("LOCOMO_PLUS_COMMIT", "059f4e3d38f7f1f96765e8e2cb7de3097551bffb")
SHARED_PLUS = REPO.parent / "shared" / "data" / "locomo-plus" / "locomo_plus.json"
SHARED_LOCOMO = REPO.parent / "shared" / "data" / "locomo" / "locomo10.json"
CODE = ("data/build_conv.py", "data/unified_input.py", "evaluation_framework/task_eval/prompt.py",
        "evaluation_framework/task_eval/utils.py", "evaluation_framework/task_eval/llm_as_judge.py")


def have_repo() -> bool:
    return (OFFICIAL_REPO / "HEAD").exists() or (OFFICIAL_REPO / ".git").exists()


def _show(path: str) -> bytes:
    return subprocess.run(["git", "--git-dir" if (OFFICIAL_REPO / "HEAD").exists() else "-C", str(OFFICIAL_REPO),
                           "show", f"{COMMIT}:{path}"], check=True, capture_output=True).stdout


def extract(root: Path, paths: tuple[str, ...]) -> None:
    if not have_repo():
        pytest.skip(f"the official LoCoMo-Plus repository is not at {OFFICIAL_REPO} (set LOCOMO_PLUS_REPO)")
    for p in paths:
        (root / p).parent.mkdir(parents=True, exist_ok=True)
        (root / p).write_bytes(_show(p))


def _module(name: str, path: Path) -> ModuleType:
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def code(root: Path, monkeypatch: pytest.MonkeyPatch) -> SimpleNamespace:
    """The official modules, imported from ``root`` (their own ``sys.path`` inserts undone after the test)."""
    extract(root, CODE)
    monkeypatch.syspath_prepend(str(root / "data"))  # unified_input imports build_conv by name
    monkeypatch.syspath_prepend(str(root / "evaluation_framework"))  # llm_as_judge: from task_eval.prompt ...
    for name in ("build_conv", "task_eval", "task_eval.prompt", "task_eval.utils"):
        monkeypatch.delitem(sys.modules, name, raising=False)
    build_conv = _module("build_conv", root / "data" / "build_conv.py")
    unified = _module("lp_unified_input", root / "data" / "unified_input.py")
    judge = _module("lp_llm_as_judge", root / "evaluation_framework" / "task_eval" / "llm_as_judge.py")
    for name in ("lp_unified_input", "lp_llm_as_judge"):
        monkeypatch.delitem(sys.modules, name, raising=False)
    return SimpleNamespace(build_conv=build_conv, unified=unified, judge=judge,
                           prompt=sys.modules["task_eval.prompt"], utils=sys.modules["task_eval.utils"])


def data(root: Path) -> tuple[Path, Path]:
    """(locomo_plus.json, locomo10.json): the shared copies, else the repository's."""
    if SHARED_PLUS.exists() and SHARED_LOCOMO.exists():
        return SHARED_PLUS, SHARED_LOCOMO
    extract(root, ("data/locomo_plus.json", "data/locomo10.json"))
    return root / "data" / "locomo_plus.json", root / "data" / "locomo10.json"
