"""Run one command and write its own wall time and peak RSS: ``python -m bench.measure OUT.json -- CMD...``.

Why a separate, small process: on Linux a child's ``ru_maxrss`` starts from the RSS of the
process it was forked from (exec records the replaced address space's high-water mark), so a
stage forked straight from the bench, whose fake server holds every request it answered, would
report the bench's memory instead of its own. Forked from this ~10 MiB interpreter, the
stage's figure is its own (floor: this process's RSS).
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time


def main(argv: list[str]) -> int:
    if len(argv) < 3 or argv[1] != "--":
        print("usage: python -m bench.measure OUT.json -- CMD [ARGS...]", file=sys.stderr)
        return 2
    out, cmd = argv[0], argv[2:]
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd)  # stdout, stderr and cwd are this process's (the caller's log)
    _, status, usage = os.wait4(proc.pid, 0)
    code = os.waitstatus_to_exitcode(status)
    with open(out, "w", encoding="utf-8") as fh:
        json.dump({"returncode": code, "wall_seconds": time.perf_counter() - t0,
                   "peak_rss_bytes": int(usage.ru_maxrss) * 1024, "user_seconds": usage.ru_utime,
                   "system_seconds": usage.ru_stime}, fh)
    return code


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
