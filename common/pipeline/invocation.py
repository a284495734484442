"""What THIS invocation did: its new and cached LLM calls, its dollars, and where the results are.

Every stage records the calls it made (the client's counters since the stage began) in
``<run>/invocation.json`` under the invocation's id; ``make`` gives every stage it runs one id
(``HARNESS_INVOCATION``, set once per ``make`` command), so the nine stages of ``make locomo`` (one
process, ``common.pipeline.run_all``) or the stage targets of one ``make`` command add up to one
invocation, and a script run by hand is an invocation of its own. The last stage of
the invocation (the whole-pipeline process's last; ``HARNESS_SUMMARY_AT`` where one ``make`` target
runs several stage processes, as ``make judge2`` does; otherwise every stage) prints the summary in
words: a rerun that made no call says so, instead of reprinting the whole
ledger as if everything was paid again. The full ledger stays in ``ledger.md``/``ledger.json``.
"""
from __future__ import annotations

import json
import os
import time
from typing import Any

from common.core import artifacts
from common.core.io import write_json
from common.pipeline.ledger import cost, load_prices

ENV_ID = "HARNESS_INVOCATION"
ENV_SUMMARY_AT = "HARNESS_SUMMARY_AT"
FILE = "invocation.json"
_OWN_ID = f"process-{os.getpid()}-{time.time_ns()}"  # a script run by hand: its own invocation


def invocation_id() -> str:
    return os.environ.get(ENV_ID) or _OWN_ID


COUNTERS = ("calls", "new", "cached", "failed", "prompt_tokens", "completion_tokens")


def snapshot(run: Any) -> dict[str, dict[str, int]]:
    """The client's counters now, per role: a stage of a whole-pipeline process records only the
    calls made since the snapshot taken before it (the client is shared by the nine stages)."""
    client = getattr(run, "_client", None)
    if client is None:
        return {}
    return {role: {k: int(s.get(k, 0)) for k in COUNTERS} for role, s in client.summary().items()}


def stage_spend(run: Any, before: dict[str, dict[str, int]] | None = None) -> dict[str, Any]:
    """This process's calls per role (since ``before``): new, cached, failed, paid tokens, dollars."""
    now = snapshot(run)
    if not now:
        return {}
    prices = load_prices()
    out: dict[str, Any] = {}
    for role, s in now.items():
        base = (before or {}).get(role, {})
        s = {k: s[k] - base.get(k, 0) for k in COUNTERS}
        if before is not None and not any(s.values()):  # a role the stages before used
            continue
        try:
            model = run.cfg.role(role).model
        except (KeyError, ValueError, AttributeError):
            model = ""
        dollars = cost(str(model), s.get("prompt_tokens", 0), s.get("completion_tokens", 0), prices)
        out[role] = {"model": model, "calls": s.get("calls", 0), "new": s.get("new", 0), "cached": s.get("cached", 0),
                     "failed": s.get("failed", 0), "cost_usd": None if dollars is None else round(dollars, 6)}
    return out


def record(run: Any, stage: str, before: dict[str, dict[str, int]] | None = None) -> dict[str, Any]:
    """Add this process's calls (since ``before``) under ``stage`` to the invocation's record;
    return the record."""
    path = run.dir / FILE
    inv = invocation_id()
    data: dict[str, Any] = {}
    if path.exists():
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except ValueError:
            data = {}
    if data.get("id") != inv:
        data = {"id": inv, "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "stages": {}}
    data["stages"][stage] = stage_spend(run, before)
    if run.dir.is_dir():
        write_json(path, data)
    return data


def summary(run: Any, data: dict[str, Any]) -> str:
    """The lines printed at the end of an invocation."""
    roles = [r for s in data.get("stages", {}).values() for r in s.values()]
    new, cached, failed = (sum(r[k] for r in roles) for k in ("new", "cached", "failed"))
    unpriced = sorted({str(r["model"]) for r in roles if r["cost_usd"] is None and r["new"]})
    dollars = sum(r["cost_usd"] or 0.0 for r in roles)
    stages = ", ".join(data.get("stages", {})) or "none"
    if new == 0 and failed == 0:
        did = (f"This invocation made no new LLM call ({cached} answered from the cache, $0 spent now)" if cached
               else "This invocation made no LLM call (everything was already in the run's files, $0 spent now)")
    else:
        did = (f"This invocation made {new} new LLM calls (${dollars:.4f} now"
               + (f"; unpriced: {', '.join(unpriced)}" if unpriced else "") + f"), {cached} from the cache"
               + (f", {failed} failed" if failed else ""))
    lines = [f"{did}; stages: {stages}."]
    led = run.dir / "ledger.json"
    if led.exists():
        total = json.loads(led.read_text(encoding="utf-8")).get("total", {})
        lines.append(f"The run in total: ${total.get('cost_paid_usd', 0.0):.4f} paid for {total.get('paid', 0)} of "
                     f"{total.get('calls', 0)} calls (full ledger: {run.dir / 'ledger.md'}).")
    tables = sorted(p.name for p in run.dir.glob("table_*.md")) if run.dir.is_dir() else []
    where = f"Results: {run.dir}/" + (f" ({', '.join(tables)}, {artifacts.path(run.dir, 'metrics').name})"
                                      if tables else "")
    if not run.dir.is_dir():  # never name a directory that does not exist as where the results are
        where = f"No results written yet ({run.dir} does not exist)"
    page = run.dir / "report" / "index.html"
    report = (f"report: {page}" if page.exists() else
              f"report: make report RUN={run.cfg.run.name}" + ("" if run.cfg.benchmark == "locomo" else
                                                                  f" BENCH={run.cfg.benchmark}"))
    lines.append(f"{where}; {report}")
    return "\n".join(lines)


def finish(run: Any, stage_id: str, *, stopped: bool = False, before: dict[str, dict[str, int]] | None = None,
           last: bool | None = None) -> dict[str, Any]:
    """Record this stage's calls (since ``before``); print the summary when this stage ends the
    invocation: ``last`` when the caller knows (the whole-pipeline process), else the configured
    last stage, or any stage that stopped it after a call. Return the invocation's record."""
    data = record(run, stage_id, before)
    at = os.environ.get(ENV_SUMMARY_AT)
    ends = last if last is not None else (not at or at == stage_id)
    if stopped and not made_calls(data):
        return data  # an error before any call (a missing data file, an unknown memory): its line says all
    if stopped or ends:
        print(summary(run, data), flush=True)
    return data


def made_calls(data: dict[str, Any]) -> bool:
    """Whether the invocation's stages asked for any LLM call (new, cached or failed)."""
    return any(r.get("calls") for s in data.get("stages", {}).values() for r in s.values())
