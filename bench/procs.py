"""Run one command as a child process and measure its wall time and peak memory.

Peak RSS is ``ru_maxrss`` from ``os.wait4`` on that one command (the command and the
descendants it waited for: ``make`` -> shell -> python), so each figure belongs to one command,
unlike ``RUSAGE_CHILDREN``, which accumulates over the bench's whole life. The command is
started by the small ``bench.measure`` process, not by the bench itself (see there why).
"""
from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent


@dataclass
class Measured:
    """One finished child process."""

    cmd: list[str]
    returncode: int
    wall_seconds: float
    peak_rss_bytes: int  # ru_maxrss (KiB on Linux) x 1024
    user_seconds: float
    system_seconds: float
    log: str  # file holding the child's stdout and stderr


def run_measured(cmd: list[str], *, env: dict[str, str], log: Path) -> Measured:
    """Run ``cmd`` from the repository root, output to ``log``; never raises on a non-zero exit."""
    log.parent.mkdir(parents=True, exist_ok=True)
    figures = log.with_suffix(".rusage.json")
    figures.unlink(missing_ok=True)
    with log.open("w", encoding="utf-8") as fh:
        proc = subprocess.run([sys.executable, "-m", "bench.measure", str(figures), "--", *cmd], cwd=REPO_ROOT,
                              env=env, stdout=fh, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    if not figures.exists():  # the wrapper itself failed before starting the command
        return Measured(list(cmd), proc.returncode or 1, 0.0, 0, 0.0, 0.0, str(log))
    m = json.loads(figures.read_text(encoding="utf-8"))
    return Measured(cmd=list(cmd), returncode=m["returncode"], wall_seconds=round(m["wall_seconds"], 3),
                    peak_rss_bytes=m["peak_rss_bytes"], user_seconds=round(m["user_seconds"], 3),
                    system_seconds=round(m["system_seconds"], 3), log=str(log))


def tail(path: str, lines: int = 5) -> str:
    """The last lines of a log, for one-line error messages."""
    try:
        text = Path(path).read_text(encoding="utf-8", errors="replace").strip().splitlines()
    except OSError:
        return ""
    return " | ".join(text[-lines:])
