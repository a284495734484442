"""What the numbers were measured on: CPU, memory, load, library versions, code revision."""
from __future__ import annotations

import os
import platform
import sys
import time
from importlib import metadata
from typing import Any

PACKAGES = ("torch", "sentence-transformers", "transformers", "numpy", "openai", "tiktoken", "rank-bm25", "rapidfuzz")


def _meminfo_total() -> int | None:
    try:
        with open("/proc/meminfo", encoding="utf-8") as fh:
            for line in fh:
                if line.startswith("MemTotal:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return None


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as fh:
            for line in fh:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor()


def load_average() -> list[float] | None:
    """1/5/15-minute load: other work on the machine inflates every figure of the bench."""
    try:
        return [round(x, 2) for x in os.getloadavg()]
    except OSError:
        return None


def machine_info() -> dict[str, Any]:
    from common.core.io import git_revision

    versions: dict[str, str | None] = {}
    for name in PACKAGES:
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            versions[name] = None
    return {
        "time_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "platform": platform.platform(), "python": sys.version.split()[0], "cpu": _cpu_model(),
        "cpu_count": os.cpu_count(),
        "cpus_usable": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None,
        "memory_bytes": _meminfo_total(), "load_average": load_average(),
        "packages": versions, "code": git_revision(),
    }
