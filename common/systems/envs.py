"""A memory system's own environment: ``systems/<name>/`` in the project, ``.systems/<name>/venv`` built.

    python -m common.systems.envs <name>        # what `make system-env NAME=<name>` runs

``systems/<name>/requirements.txt`` pins the system's packages exactly (``package==version``, one
per line; comments, blank lines and pip option lines ``--...`` allowed); ``systems/<name>/adapter.py``
is the child process the harness talks to (``common.systems.process``); an optional
``systems/<name>/pip-args.txt`` holds extra pip arguments (e.g. ``--no-deps`` when a system's own
metadata pins versions that cannot be met together, and its requirements list every package). The
environment is ``python3 -m venv`` plus ``pip install <pip-args> -r requirements.txt``, stamped
(``venv/.stamp``) with the checksum of both files and the interpreter's version: built once, rebuilt
when any of them changes, built on first use by a run when missing.
pip's output goes to ``.systems/<name>/pip.log``; the console shows one line per package pip
collects; a package pip cannot install stops the build with one line naming it.

``HARNESS_SYSTEMS_ROOT`` (default ``systems``) and ``HARNESS_SYSTEMS_ENVS`` (default ``.systems``)
move either directory (the tests keep their adapters and environments in temporary directories).
"""
from __future__ import annotations

import argparse
import fcntl
import hashlib
import os
import re
import shutil
import subprocess
import sys
import threading
from pathlib import Path
from typing import Optional

REPO = Path(__file__).resolve().parents[2]
STAMP = ".stamp"
# ``package==version`` with optional extras; nothing looser: a system's numbers depend on its versions.
PIN = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*(\[[A-Za-z0-9._,-]+\])?==[A-Za-z0-9.!+_-]+$")


class SystemEnvError(RuntimeError):
    """A system's environment cannot be built (the message is one line)."""


def systems_root() -> Path:
    root = Path(os.environ.get("HARNESS_SYSTEMS_ROOT") or REPO / "systems")
    return root if root.is_absolute() else REPO / root


def envs_root() -> Path:
    root = Path(os.environ.get("HARNESS_SYSTEMS_ENVS") or REPO / ".systems")
    return root if root.is_absolute() else REPO / root


def system_dir(name: str) -> Path:
    return systems_root() / name


def is_system(name: str) -> bool:
    """Whether ``name`` is a system with its own environment (``systems/<name>/adapter.py``)."""
    return bool(re.fullmatch(r"[A-Za-z0-9_][A-Za-z0-9_.-]*", name)) and (system_dir(name) / "adapter.py").is_file()


def names() -> list[str]:
    root = systems_root()
    return sorted(p.parent.name for p in root.glob("*/adapter.py")) if root.is_dir() else []


def requirements(name: str) -> list[str]:
    """The pinned requirement lines; a line that is not an exact pin is refused, naming it."""
    path = system_dir(name) / "requirements.txt"
    if not path.is_file():
        raise SystemEnvError(f"{path}: missing (a system's environment needs its pinned requirements.txt, "
                             f"possibly empty)")
    out = []
    for i, raw in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        line = raw.split("#", 1)[0].strip()
        if not line or line.startswith("--"):  # blank, or a pip option line (e.g. --only-binary=:all:)
            continue
        if not PIN.match(line):
            raise SystemEnvError(f"{path}:{i}: {line!r} is not an exact pin package==version")
        out.append(line)
    return out


def pip_args(name: str) -> list[str]:
    """The extra pip arguments of ``systems/<name>/pip-args.txt`` (none when it is missing)."""
    path = system_dir(name) / "pip-args.txt"
    if not path.is_file():
        return []
    return [a for raw in path.read_text(encoding="utf-8").splitlines() for a in raw.split("#", 1)[0].split()]


def checksum(name: str) -> str:
    """What a built environment must match: its pins, its pip arguments, the interpreter that made it."""
    data = (system_dir(name) / "requirements.txt").read_bytes()
    args = system_dir(name) / "pip-args.txt"
    extra = b"\x00" + args.read_bytes() if args.is_file() else b""
    return hashlib.sha256(data + extra + sys.version.encode()).hexdigest()


def venv(name: str) -> Path:
    return envs_root() / name / "venv"


def python(name: str) -> Path:
    return venv(name) / "bin" / "python"


def ready(name: str) -> bool:
    stamp = venv(name) / STAMP
    return python(name).exists() and stamp.exists() and stamp.read_text(encoding="utf-8").strip() == checksum(name)


def failed_package(log: str) -> Optional[str]:
    """The package pip could not install, from its output (None when pip does not say)."""
    for pattern in (r"No matching distribution found for ([^\s]+)",
                    r"Could not find a version that satisfies the requirement ([^\s]+)",
                    r"Failed to build ([^\s]+)", r"Failed building wheel for ([^\s]+)",
                    r"Cannot install ([^\s]+)", r"ResolutionImpossible.*?\n.*?requested ([^\s]+)"):
        m = re.search(pattern, log, re.S)
        if m:
            return m.group(1).rstrip(".,;")
    return None


_building = threading.Lock()


def build(name: str, *, quiet: bool = False) -> Path:
    """The system's interpreter, its environment built first when missing or out of date (one
    build at a time: memories ingested at once, or two runs, wait for the first build)."""
    if not is_system(name):
        raise SystemEnvError(f"system {name!r}: no {system_dir(name) / 'adapter.py'} "
                             f"(systems with their own environment: {', '.join(names()) or 'none'})")
    requirements(name)
    if ready(name):
        return python(name)
    envs_root().mkdir(parents=True, exist_ok=True)
    with _building, (envs_root() / f".{name}.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        return _build(name, quiet)


def _build(name: str, quiet: bool) -> Path:
    if not is_system(name):
        raise SystemEnvError(f"system {name!r}: no {system_dir(name) / 'adapter.py'} "
                             f"(systems with their own environment: {', '.join(names()) or 'none'})")
    pins = requirements(name)
    if ready(name):
        return python(name)
    say = (lambda msg: None) if quiet else (lambda msg: print(msg, flush=True))
    target = venv(name)
    shutil.rmtree(target, ignore_errors=True)
    target.parent.mkdir(parents=True, exist_ok=True)
    extra = pip_args(name)
    say(f"system-env {name}: creating {target} ({len(pins)} pinned packages"
        f"{', pip ' + ' '.join(extra) if extra else ''})")
    # No pin: the environment needs no pip (the standard library only, and much faster to make).
    cmd = [sys.executable, "-m", "venv", *(["--without-pip"] if not pins else []), str(target)]
    made = subprocess.run(cmd, capture_output=True, text=True)
    if made.returncode != 0:
        why = (made.stderr or made.stdout).strip()[-300:]
        raise SystemEnvError(f"system-env {name}: {' '.join(cmd)} failed: {why}")
    if pins:
        log = target.parent / "pip.log"
        cmd = [str(python(name)), "-m", "pip", "install", "--disable-pip-version-check", "--no-input",
               *pip_args(name), "-r", str(system_dir(name) / "requirements.txt")]
        with log.open("w", encoding="utf-8") as out:
            proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
            assert proc.stdout is not None
            seen = 0
            for line in proc.stdout:
                out.write(line)
                if line.startswith("Collecting "):
                    seen += 1
                    say(f"system-env {name}: [{seen}] {line.split()[1]}")
            code = proc.wait()
        if code != 0:
            text = log.read_text(encoding="utf-8")
            pkg = failed_package(text)
            raise SystemEnvError(f"system-env {name}: pip could not install {pkg or 'the requirements'} "
                                 f"(exit {code}; full output in {log})")
    (target / STAMP).write_text(checksum(name) + "\n", encoding="utf-8")
    say(f"system-env {name}: ready ({python(name)})")
    return python(name)


def main(argv: Optional[list[str]] = None) -> int:
    ap = argparse.ArgumentParser(description="Build a memory system's own environment (.systems/<name>/venv)")
    ap.add_argument("name", help=f"a directory of {systems_root()} with adapter.py and requirements.txt")
    args = ap.parse_args(argv)
    try:
        build(args.name)
    except SystemEnvError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
