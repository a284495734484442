"""Digests of a fixture run's artifacts, per memory system: did putting a system behind
``common.systems`` change any of its results?

``tests/fixtures/system_digests.json`` holds, per artifact, a digest of its rows with every float
taken out and the floats themselves, recorded on the code path before the registry existed (commit
7293515); ``test_systems.py`` reruns the fixture and compares. What must not change on any machine
(ids, routes, order, labels, texts, counts) is in the digest and compares exactly; the floats
(retrieval scores above all) come from the CPU's float kernels, whose last bits differ between
processors and torch thread counts, so they compare within ``REL_TOL``. An order that a score
difference flips still fails: the order is in the digest.

Re-recorded since: on merging issues 11 and 12 (only the 08 digests changed, by the judge-row
fields ``labels`` and ``corrected``); for protocol 2026.12.1 (dense chunks under the authors'
header: only EnSIMem's 06, 07 and 08 changed); and when the floats left the digests, on an AMD EPYC
where every recorded digest but EnSIMem's 06 was reproduced exactly by the old whole-row hash (the
files without floats kept their digests). Volatile fields (latencies, wall times, cache hits) are
left out; everything a reader of the results sees is in. A deliberate change of the method that
alters its outputs re-records the file:

    OPENAI_BASE_URL= .venv/bin/python -m tests.system_digests
"""
from __future__ import annotations

import hashlib
import json
import math
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
# Scores are rounded to 6 decimals by the method; two CPUs differ in the last one or two of them.
# 1e-4 relative (with 1e-5 absolute for scores near zero) is far below any threshold's margin that
# matters: a score that crosses a threshold changes the selection, which the digest catches.
REL_TOL = 1e-4
ABS_TOL = 1e-5
FLOAT = "<float>"


def _strip(obj: object) -> object:
    if isinstance(obj, dict):
        return {k: _strip(v) for k, v in obj.items() if k not in VOLATILE}
    if isinstance(obj, list):
        return [_strip(v) for v in obj]
    return obj


def _split(obj: object, floats: list[float]) -> object:
    """``obj`` with each float replaced by a marker; the floats appended to ``floats`` in walk order."""
    if isinstance(obj, float):
        floats.append(obj)
        return FLOAT
    if isinstance(obj, dict):
        return {k: _split(obj[k], floats) for k in sorted(obj)}
    if isinstance(obj, list):
        return [_split(v, floats) for v in obj]
    return obj


def file_digest(path: Path) -> dict[str, object] | None:
    """``{"digest": <rows without floats>, "floats": [...]}`` of one JSONL artifact (None: absent).

    Rows are sorted by their float-free text, so the floats list has a machine-independent order."""
    if not path.exists():
        return None
    split = []
    for line in path.read_text().splitlines():
        if line:
            floats: list[float] = []
            text = json.dumps(_split(_strip(json.loads(line)), floats), sort_keys=True)
            split.append((text, floats))
    split.sort(key=lambda r: r[0])
    digest = hashlib.sha256("\n".join(t for t, _ in split).encode()).hexdigest()[:16]
    return {"digest": digest, "floats": [f for _, fs in split for f in fs]}


def differences(recorded: dict[str, object], measured: dict[str, object]) -> list[str]:
    """One line per difference between two ``run_digests`` results: exact except floats."""
    out = []
    for key in sorted(set(recorded) | set(measured)):
        want, got = recorded.get(key), measured.get(key)
        if not (isinstance(want, dict) and isinstance(got, dict) and "floats" in want and "floats" in got):
            if want != got:
                out.append(f"{key}: recorded {want!r}, measured {got!r}")
            continue
        if want["digest"] != got["digest"]:
            out.append(f"{key}: rows differ beyond their floats (digest {got['digest']}, recorded {want['digest']})")
            continue
        a, b = want["floats"], got["floats"]
        assert isinstance(a, list) and isinstance(b, list)
        if len(a) != len(b):  # same digest, so same markers: unreachable unless the file was hand-edited
            out.append(f"{key}: {len(b)} floats, recorded {len(a)}")
            continue
        bad = [(i, x, y) for i, (x, y) in enumerate(zip(a, b))
               if not math.isclose(x, y, rel_tol=REL_TOL, abs_tol=ABS_TOL)]
        out += [f"{key}: float #{i} is {y!r}, recorded {x!r} (beyond {REL_TOL} relative)" for i, x, y in bad[:5]]
    return out


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
