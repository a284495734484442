"""`make lint` and `make test` do their own set-up: the installed environment (the stamp `make demo`
uses) and the browser packages of the report's browser test. Checked with `make -n` and a PATH of
stand-in programs, so nothing is installed and the machine's own chromium does not matter."""
from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

from tests.conftest import REPO

MAKE = shutil.which("make") or "make"
APT_INSTALL = "apt-get install -y -qq chromium chromium-driver"
REQUIREMENTS = ("requirements.txt", "requirements-demo.txt", "requirements-systems.txt")


def _bin(tmp_path: Path, **programs: str) -> Path:
    """A directory of stand-in programs (name -> shell body): the only PATH make and its recipes see."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    for name, body in programs.items():
        (bin_dir / name).write_text(f"#!/bin/sh\n{body}\n")
        (bin_dir / name).chmod(0o755)
    return bin_dir


def _make(tmp_path: Path, bin_dir: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PATH": str(bin_dir)}
    # Under `make test PYTEST_ARGS=...` the outer make exports its command-line variables (and
    # MAKEFLAGS): the make run here must see none of them.
    for var in ("MAKEFLAGS", "MFLAGS", "MAKEOVERRIDES", "MAKELEVEL", "VENV", "PYTEST_ARGS"):
        env.pop(var, None)
    return subprocess.run([MAKE, "--no-print-directory", *args], cwd=REPO, env=env, capture_output=True,
                          text=True, timeout=60)


def test_make_test_without_the_stamp_installs_first_and_skips_apt_when_chromium_is_there(tmp_path):
    venv = tmp_path / "venv"
    bin_dir = _bin(tmp_path, chromium="true", chromedriver="true")
    out = _make(tmp_path, bin_dir, "-n", "test", f"VENV={venv}")
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert f"python3 -m venv {venv}" in lines
    assert f"{venv}/bin/pip install -q -r requirements.txt" in lines
    install_done = lines.index(f"cat {' '.join(REQUIREMENTS)} | cksum > {venv}/.installed")
    pytest_line = next(i for i, line in enumerate(lines) if "-m pytest" in line)
    assert install_done < pytest_line and lines[pytest_line].startswith(f"HF_HUB_OFFLINE=1 {venv}/bin/python ")
    assert "apt-get" not in out.stdout


def test_make_test_with_a_fresh_stamp_does_not_install_again(tmp_path):
    venv = tmp_path / "venv"
    venv.mkdir()
    (venv / ".installed").touch()
    newer = max((REPO / f).stat().st_mtime for f in ("requirements.txt", "requirements-demo.txt",
                                                        "requirements-systems.txt")) + 60
    os.utime(venv / ".installed", (newer, newer))
    out = _make(tmp_path, _bin(tmp_path, chromium="true", chromedriver="true"), "-n", "test", f"VENV={venv}")
    assert out.returncode == 0, out.stderr
    assert "pip install" not in out.stdout
    # The stamped venv's python runs the suite, on every core.
    assert (f'HF_HUB_OFFLINE=1 {venv}/bin/python -m pytest -q -n auto --dist loadgroup -m "not (cluster or systems)" '
            in out.stdout.splitlines())


def test_make_test_slow_runs_only_the_tests_make_test_leaves_out(tmp_path):
    """The Ray, PostgreSQL and systems' own-environment tests: `make test-slow` selects exactly the marks
    that `make test` deselects, after installing the environment and PostgreSQL's server."""
    venv = tmp_path / "venv"
    venv.mkdir()
    (venv / ".installed").touch()
    newer = max((REPO / f).stat().st_mtime for f in REQUIREMENTS) + 60
    os.utime(venv / ".installed", (newer, newer))
    bin_dir = _bin(tmp_path, chromium="true", chromedriver="true", id="echo 0")
    out = _make(tmp_path, bin_dir, "-n", "test-slow", f"VENV={venv}")
    assert out.returncode == 0, out.stderr
    pytest_line = next(line for line in out.stdout.splitlines() if "-m pytest" in line)
    # The heaviest systems' environments (about an hour from a clean clone) only in make test-systems-all.
    assert pytest_line.strip().endswith('-m "(cluster or systems) and not systems_heavy"')
    fast = _make(tmp_path, bin_dir, "-n", "test", f"VENV={venv}").stdout
    assert '-m "not (cluster or systems)"' in fast
    # MARKS narrows either selection without replacing it.
    narrowed = _make(tmp_path, bin_dir, "-n", "test", f"VENV={venv}", "MARKS=not slow").stdout
    assert '-m "not (cluster or systems) and (not slow)"' in narrowed
    # PostgreSQL's server comes from Debian's packages when its initdb is missing.
    if not list(Path("/usr/lib/postgresql").glob("*/bin/initdb")):
        assert "apt-get install -y -qq postgresql postgresql-contrib" in out.stdout
        assert out.stdout.index("apt-get install") < out.stdout.index("-m pytest")


def test_make_postgres_stops_with_the_command_to_run_when_not_root(tmp_path):
    if list(Path("/usr/lib/postgresql").glob("*/bin/initdb")):
        out = _make(tmp_path, _bin(tmp_path, id="echo 1000"), "postgres")
        assert out.returncode == 0 and "apt-get" not in out.stdout  # installed: nothing to do, root or not
        return
    log = tmp_path / "apt.log"
    out = _make(tmp_path, _bin(tmp_path, id="echo 1000", **{"apt-get": f'echo "$*" >> {log}'}), "postgres")
    assert out.returncode != 0
    assert "sudo apt-get install -y postgresql postgresql-contrib" in out.stdout
    assert not log.exists()


def test_make_test_installs_the_browser_packages_when_either_is_missing(tmp_path):
    for present in ({}, {"chromium": "true"}, {"chromedriver": "true"}):
        bin_dir = tmp_path / "-".join(present) / "x"
        bin_dir.mkdir(parents=True)
        out = _make(bin_dir, _bin(bin_dir, **present), "-n", "test", f"VENV={tmp_path / 'venv'}")
        assert out.returncode == 0, out.stderr
        assert "apt-get update -qq && " in out.stdout and APT_INSTALL in out.stdout, present
        assert out.stdout.index(APT_INSTALL) < out.stdout.index("-m pytest")


def test_make_browser_runs_apt_get_as_root(tmp_path):
    log = tmp_path / "apt.log"
    bin_dir = _bin(tmp_path, id="echo 0", **{"apt-get": f'echo "$*" >> {log}'})
    out = _make(tmp_path, bin_dir, "browser")
    assert out.returncode == 0, out.stderr
    assert log.read_text().splitlines() == ["update -qq", "install -y -qq chromium chromium-driver"]


def test_make_browser_stops_with_the_command_to_run_when_not_root(tmp_path):
    log = tmp_path / "apt.log"
    bin_dir = _bin(tmp_path, id="echo 1000", **{"apt-get": f'echo "$*" >> {log}'})
    out = _make(tmp_path, bin_dir, "browser")
    assert out.returncode != 0
    assert "sudo apt-get update -qq && sudo apt-get install -y chromium chromium-driver" in out.stdout
    assert not log.exists()
    # With both present there is nothing to do, root or not.
    present = _bin(tmp_path, chromium="true", chromedriver="true")
    assert _make(tmp_path, present, "browser").returncode == 0


def test_ci_sets_up_through_make_lint_and_make_test_then_test_slow_only():
    script = (REPO / ".ci" / "run").read_text()
    commands = [line.strip() for line in script.splitlines() if line.strip() and not line.lstrip().startswith("#")]
    # `make docs` is a check (the strict site build), not set-up; it needs the environment `make lint` made.
    made = [c.split()[:2] for c in commands if c.startswith("make")]
    assert made == [["make", "lint"], ["make", "docs"], ["make", "test"], ["make", "test-slow"]]
    assert not any(re.search(r"\b(apt-get|pip|venv)\b", c) for c in commands if "VENV=" not in c)


def test_a_stamp_is_checked_by_content_not_by_file_times(tmp_path):
    """After `git clone` every requirement file is newer than a venv made before: not a reason to
    reinstall. The stamp holds the files' checksum; only a changed file reinstalls."""
    venv = tmp_path / "venv"
    venv.mkdir()
    checksum = subprocess.run("cat " + " ".join(REQUIREMENTS) + " | cksum", shell=True, cwd=REPO,
                              capture_output=True, text=True, check=True).stdout
    bins = _bin(tmp_path, chromium="true", chromedriver="true")
    for content, installs in ((checksum, False), ("1 2\n", True)):
        (venv / ".installed").write_text(content)
        os.utime(venv / ".installed", (1e9, 1e9))  # 2001: older than every checked-out file
        out = _make(tmp_path, bins, "-n", "docs", f"VENV={venv}")
        assert out.returncode == 0, out.stderr
        assert ("pip install" in out.stdout) is installs, content
        assert f"{venv}/bin/python -m mkdocs build" in out.stdout
