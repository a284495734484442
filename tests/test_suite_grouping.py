"""The suite's own scheduling: tests sharing a module-scoped fixture run on one xdist worker.

The default run's time depends on it (a bench or a pipeline fixture built once, not once per
worker), and it broke silently once: pytest 9.2 ignores the node-id suffix through which
pytest-xdist 3.8's ``--dist loadgroup`` groups tests (pytest-xdist issue 1386), so every
module fixture was built on both workers. This runs a probe module the way ``make test`` runs
the suite and counts the fixture's builds.
"""
from __future__ import annotations

import os
import subprocess
import sys

from tests.conftest import REPO

PROBE = '''
import os
import time

import pytest


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    with open(os.environ["PROBE_LOG"], "a") as f:
        f.write(os.environ.get("PYTEST_XDIST_WORKER", "main") + "\\n")
    return True


@pytest.mark.parametrize("i", range(6))
def test_shares_the_fixture(built, i):
    time.sleep(0.05)


@pytest.mark.parametrize("i", range(6))
def test_needs_nothing(i):
    time.sleep(0.05)
'''


def test_tests_sharing_a_module_fixture_run_on_one_worker(tmp_path):
    (tmp_path / "test_probe.py").write_text(PROBE)
    log = tmp_path / "builds.txt"
    cmd = [sys.executable, "-m", "pytest", "-q", "-n", "2", "--dist", "loadgroup", "-p", "tests.conftest",
           "-p", "no:cacheprovider", "--rootdir", str(tmp_path), str(tmp_path / "test_probe.py")]
    out = subprocess.run(cmd,
                         cwd=REPO, capture_output=True, text=True, timeout=120,
                         env={**os.environ, "PROBE_LOG": str(log), "PYTHONPATH": str(REPO)})
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-2000:]
    assert "12 passed" in out.stdout
    builds = log.read_text().split()
    assert len(builds) == 1 and builds[0].startswith("gw"), builds
