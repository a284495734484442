"""Digests of a fixture run's artifacts, per memory system: did putting a system behind
``common.systems`` change any of its results?

``tests/fixtures/system_digests.json`` holds the digests recorded on the code path before the
registry existed (commit 7293515); ``test_systems.py`` reruns the fixture and compares. Re-recorded
once since, on merging issues 11 and 12: the digests were taken on issue 11's code (new retrieval
defaults and judge prompt, still without the registry), and the merged tree reproduced every one of
them once the two judge-row fields issue 12 added (``labels``, ``corrected``) were left out; only the
08 digests changed, by those fields. Re-recorded again for protocol 2026.12.1 (dense chunks under
the authors' header, without the episode id): only EnSIMem's 06, 07 and 08 changed (its dense
vectors did; 02, 03, 05 and every baseline kept their digests). Volatile
fields (latencies, wall times, cache hits) are left out; everything a reader of the results sees
is in. A deliberate change of the method that alters its outputs re-records the file:

    OPENAI_BASE_URL= .venv/bin/python -m tests.system_digests
"""
from __future__ import annotations

import hashlib
import json
import sys
import tempfile
from pathlib import Path

from tests.conftest import TINY_LOCOMO, run_overrides, run_stages
from tests.fake_openai import FakeOpenAI

SYSTEMS = ("ensimem", "full_context", "rag_turns", "no_memory", "oracle")
FILES = ("02_episodes.jsonl", "03_extract.jsonl", "05_plan.jsonl", "06_retrieve.jsonl", "07_answer.jsonl",
         "08_judge_gpt-4o-mini.jsonl")
# cache_key hashes the endpoint too, and the fake server gets a new port each time.
VOLATILE = {"latency", "seconds", "bridge_seconds", "cached", "wall_seconds", "cache_key"}
RECORDED = Path(__file__).parent / "fixtures" / "system_digests.json"


def _strip(obj: object) -> object:
    if isinstance(obj, dict):
        return {k: _strip(v) for k, v in obj.items() if k not in VOLATILE}
    if isinstance(obj, list):
        return [_strip(v) for v in obj]
    return obj


def file_digest(path: Path) -> str | None:
    if not path.exists():
        return None
    rows = [json.dumps(_strip(json.loads(line)), sort_keys=True) for line in path.read_text().splitlines() if line]
    return hashlib.sha256("\n".join(sorted(rows)).encode()).hexdigest()[:16]


def run_digests(tmp: Path, base_url: str, system: str) -> dict[str, object]:
    import os

    os.environ["OPENAI_BASE_URL"] = base_url
    sets = run_overrides(tmp / system, TINY_LOCOMO, **{"method.name": system, "run.name": system})
    run = run_stages("configs/locomo.yaml", sets)
    metrics = json.loads((run.dir / "metrics.json").read_text())["judges"]["gpt-4o-mini"]["overall"]
    return {**{f: file_digest(run.dir / f) for f in FILES},
            "overall": {k: metrics[k] for k in ("k", "n", "accuracy") if k in metrics}}


def main() -> int:
    out = {}
    with FakeOpenAI() as server, tempfile.TemporaryDirectory() as tmp:
        for system in SYSTEMS:
            out[system] = run_digests(Path(tmp), server.base_url, system)
    RECORDED.write_text(json.dumps(out, indent=1, sort_keys=True) + "\n")
    print(f"recorded {RECORDED}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
