"""Know before you pay: probe every endpoint a configuration will call (``make doctor``).

    python -m common.pipeline.doctor --config configs/locomo.yaml [--set ...] [--pilot]

For each endpoint and model the configured roles use (the roles of the stages this method runs):
the model is listed by ``/v1/models`` and answers one tiny call; JSON mode (``response_format``
``json_object``) and JSON-schema ``response_format`` are accepted or not; ``seed`` is accepted;
two identical calls give identical replies; the latency of those calls; the rate-limit headers the
endpoint sends; whether ``configs/prices.yaml`` knows the model. One table, one line per check.
The exit status is 1 when a stage cannot work: no endpoint, the model does not answer, JSON mode
refused for a role that sends it, ``seed`` refused for a role that sets one.

The probe calls go through the ``openai`` SDK straight to the endpoint (``common.core.llm.EndpointProbe``),
never through the LLM cache: a cached reply would say nothing about the endpoint. About a dozen tiny calls per endpoint.

``--pilot`` (``make doctor PILOT=1``) then runs the real pipeline on one conversation and 20 of its
questions as ``LIMIT=20`` takes them (``--pilot-questions``) into a run directory of its own (``<run name>-pilot``), and
projects the measured tokens of each stage to the full run, beside the dry-run estimate
(``common.pipeline.dryrun``): cost from ``configs/prices.yaml``, and time from the measured latency
of the paid calls at the configured concurrency. The pilot's calls are cached like any run's.

The API key is never printed: error messages are masked, endpoint URLs lose any user:password.
"""
from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import statistics
import sys
from dataclasses import dataclass, field
from typing import Any, Optional
from urllib.parse import urlsplit, urlunsplit

from common.benchmarks.subset import load_selected
from common.core import prompts
from common.core.config import Config, ConfigError, load_config
from common.core.endpoints import cause_hint
from common.core.llm import (
    PROBE_ERRORS,
    EndpointNotConfigured,
    EndpointProbe,
    LLMClient,
    RoleSettings,
    failure_cause,
    resolve_endpoints,
)
from common.evaluation.registry import evaluator
from common.pipeline.dryrun import estimate, format_estimate
from common.pipeline.engine import Run, run_pipeline
from common.pipeline.graph import llm_stages
from common.pipeline.ledger import cost, ledger, load_prices
from common.systems.registry import system_class, uses_stage

PROBE_ID = "doctor_user"  # the probe's prompt template, sent as X-Prompt-Id like every harness call
PROBE_MAX_TOKENS = 60
PROBE_SCHEMA = {"type": "json_schema", "json_schema": {"name": "probe", "strict": True, "schema": {
    "type": "object", "additionalProperties": False, "required": ["word", "sentence"],
    "properties": {"word": {"type": "string"}, "sentence": {"type": "string"}}}}}
# Roles whose calls ask for JSON mode (json_mode=True): partition, extraction, planning and bridges
# through common.core.repair, and the LoCoMo judge (common.evaluation.judge); the LongMemEval judge
# and the answer stage ask for plain text.
JSON_ROLES = {"locomo": ("partition", "extract", "plan", "bridge", "judge"),
              "longmemeval": ("partition", "extract", "plan", "bridge"),
              "beam": ("partition", "extract", "plan", "bridge"),
              "realtalk": ("partition", "extract", "plan", "bridge", "judge", "gpt_score"),

              "locomo_plus": ("partition", "extract", "plan", "bridge")}
OK, WARN, FAIL, INFO = "ok", "warn", "FAIL", "info"
# What a probe call may raise: the SDK's errors, and a 200 whose body is not a chat completion
# (cut-off JSON, no choices).
CALL_ERRORS = PROBE_ERRORS


@dataclass(frozen=True)
class Check:
    """One line of the report."""

    check: str
    status: str  # ok | warn | FAIL | info
    detail: str
    endpoint: str = ""
    model: str = ""
    roles: str = ""


@dataclass
class Target:
    """One endpoint serving one model, and the roles that call it there."""

    url: str
    model: str
    key: str
    settings: RoleSettings  # of the first role (the probe's temperature, top_p, extra_body, timeout)
    roles: list[str] = field(default_factory=list)
    json_roles: list[str] = field(default_factory=list)  # roles that send response_format json_object
    seed_roles: list[str] = field(default_factory=list)  # roles that send a seed


def roles_in_use(cfg: Config) -> list[str]:
    """The LLM roles the configured method's stages call, in graph order."""
    roles: list[str] = []
    for node in llm_stages():
        if not node.role or not uses_stage(cfg.method.name, node.name):
            continue
        if node.name == "episodes" and cfg.episodes.mode != "theme":
            continue
        # Bridge calls resolve the hops of EnSIMem's plans (as the dry run counts them).
        if node.name == "retrieve" and not (uses_stage(cfg.method.name, "plan") and cfg.retrieve.bridges
                                            and cfg.retrieve.mode != "dense_only"):
            continue
        roles.append(node.role)
    own = system_class(cfg.method.name).role  # an outside system's own calls (mem0's extraction)
    if own and own not in roles:
        roles.append(own)
    # The judge stage's other roles (REALTALK's GPT score), asked of the evaluator that calls them.
    return roles + [r for r in getattr(evaluator(cfg.benchmark), "roles", ()) if r not in roles]


def targets(cfg: Config) -> tuple[list[Target], list[Check]]:
    """The (endpoint, model) pairs to probe, and a FAIL line for each role without an endpoint."""
    found: dict[tuple[str, str], Target] = {}
    missing: list[Check] = []
    json_roles = JSON_ROLES[cfg.benchmark]
    for role in roles_in_use(cfg):
        settings = cfg.role(role)
        try:
            specs, key = resolve_endpoints(settings)
        except EndpointNotConfigured as exc:
            missing.append(Check("endpoint", FAIL, str(exc), model=settings.model, roles=role))
            continue
        for spec in specs:
            t = found.setdefault((spec.url, settings.model), Target(spec.url, settings.model, key, settings))
            t.roles.append(role)
            if role in json_roles and settings.json_mode:
                t.json_roles.append(role)
            if settings.seed is not None:
                t.seed_roles.append(role)
    return list(found.values()), missing


def shown_url(url: str) -> str:
    """``url`` without a user:password part (never printed)."""
    parts = urlsplit(url)
    if parts.username is None and parts.password is None:
        return url
    host = parts.hostname or ""
    return urlunsplit(parts._replace(netloc=host + (f":{parts.port}" if parts.port else "")))


class Prober:
    """The probe calls to one target, through the ``openai`` SDK (no cache, no retries)."""

    def __init__(self, target: Target):
        self.t = target
        self.sdk = EndpointProbe(target.url, target.key, min(target.settings.timeout, 60.0))
        self.latencies: list[float] = []
        self.headers: dict[str, str] = {}

    def body(self, *, seed: bool, json_mode: bool) -> dict[str, Any]:
        messages = [{"role": "system", "content": prompts.load("doctor_system")},
                    {"role": "user", "content": prompts.load(PROBE_ID)}]
        settings = dataclasses.replace(self.t.settings, model=self.t.model, max_tokens=PROBE_MAX_TOKENS,
                                       seed=(self.t.settings.seed if self.t.settings.seed is not None else 42)
                                       if seed else None, json_mode=True)
        return LLMClient.request_body(settings, messages, json_mode)

    def call(self, body: dict[str, Any]) -> str:
        """The reply text; raises a ``PROBE_ERRORS``. Records latency and rate-limit headers."""
        text, seconds, headers = self.sdk.chat(body, prompt_id=PROBE_ID, extra_body=self.t.settings.extra_body)
        self.latencies.append(seconds)
        self.headers.update(headers)
        return text

    def why(self, exc: BaseException) -> str:
        return self.sdk.describe(exc)[0]

    def attempt(self, body: dict[str, Any]) -> tuple[Optional[str], str]:
        """(reply, "") when the endpoint accepts ``body``; (None, why) when it refuses it (a 400 or
        422 on this request) or the call fails otherwise."""
        try:
            return self.call(body), ""
        except CALL_ERRORS as exc:
            why, refused = self.sdk.describe(exc)
            return None, f"{'refused' if refused else 'call failed'} ({why})"


def probe(target: Target, prices: dict[str, Any]) -> list[Check]:
    """Every check of one target, in order; later checks are skipped when the model does not answer."""
    p = Prober(target)
    out: list[Check] = []

    def line(check: str, status: str, detail: str) -> None:
        out.append(Check(check, status, detail, shown_url(target.url), target.model, ", ".join(target.roles)))

    listed: Optional[bool] = None
    try:
        ids = p.sdk.model_ids()
        listed = target.model in ids
        listed_note = f"listed by /v1/models (of {len(ids)})" if listed else \
            f"not listed by /v1/models (it lists {', '.join(sorted(ids)[:5])}{', ...' if len(ids) > 5 else ''})"
    except CALL_ERRORS as exc:
        listed_note = f"/v1/models unavailable ({p.why(exc)})"
    try:
        p.call(p.body(seed=False, json_mode=False))
        line("model", OK if listed is not False else WARN, f"answers a call; {listed_note}")
    except CALL_ERRORS as exc:
        hint = cause_hint(failure_cause(exc), target.url)
        line("model", FAIL, f"does not answer: {p.why(exc)}; {listed_note}{'; ' + hint if hint else ''}")
        line("probes", INFO, "skipped: the model does not answer")
        out.append(price_check(target, prices))
        return out

    reply, error = p.attempt(p.body(seed=False, json_mode=True))
    json_ok = reply is not None
    if reply is not None:
        line("JSON mode", OK if _is_object(reply) else WARN, "response_format json_object accepted, reply is "
             + ("a JSON object" if _is_object(reply) else "not a JSON object (the stages repair or fall back)"))
    else:
        hint = (f"; {', '.join(target.json_roles)} send it: set models.<role>.json_mode: false to ask for JSON "
                "in the prompt only") if target.json_roles else "; no role here sends it"
        line("JSON mode", FAIL if target.json_roles else INFO, f"{error}{hint}")

    reply, error = p.attempt({**p.body(seed=False, json_mode=False), "response_format": PROBE_SCHEMA})
    line("JSON schema", INFO, ("response_format json_schema accepted" if reply is not None else error)
         + " (the harness does not send it)")

    reply, error = p.attempt(p.body(seed=True, json_mode=False))
    seed_ok = reply is not None
    if seed_ok:
        line("seed", OK, "accepted")
    else:
        hint = f"; {', '.join(target.seed_roles)} send one: set models.<role>.seed: null" if target.seed_roles else ""
        line("seed", FAIL if target.seed_roles else INFO, f"{error}{hint}")

    # Two identical calls, as the roles send them (seed and JSON mode when accepted).
    same = p.body(seed=seed_ok and bool(target.seed_roles), json_mode=json_ok and bool(target.json_roles))
    try:
        a, b = p.call(same), p.call(same)
        line("deterministic", OK if a == b else WARN,
             "two identical calls, identical replies" if a == b else
             "two identical calls, different replies: reruns are reproducible through the LLM cache only")
    except CALL_ERRORS as exc:
        line("deterministic", WARN, f"not checked: {p.why(exc)}")

    lat = sorted(p.latencies)
    line("latency", INFO, f"{len(lat)} calls: median {statistics.median(lat):.2f} s, max {lat[-1]:.2f} s")
    line("rate limits", INFO, ", ".join(f"{k.removeprefix('x-ratelimit-')}={v}" for k, v in sorted(p.headers.items()))
         or "no x-ratelimit-* headers")
    out.append(price_check(target, prices))
    return out


def _is_object(text: str) -> bool:
    try:
        return isinstance(json.loads(text), dict)
    except json.JSONDecodeError:
        return False


def price_check(target: Target, prices: dict[str, Any]) -> Check:
    known = target.model in prices.get("models", {})
    detail = (f"configs/prices.yaml prices it (dated {prices.get('date')})" if known else
              "not in configs/prices.yaml: the ledger and the dry run cost it at 0 and flag it unpriced")
    return Check("price", OK if known else WARN, detail, shown_url(target.url), target.model, ", ".join(target.roles))


def diagnose(cfg: Config) -> list[Check]:
    """Every check for the configuration (no cache, no artifacts written)."""
    found, checks = targets(cfg)
    prices = load_prices()
    for t in found:
        checks += probe(t, prices)
    return checks


def format_checks(checks: list[Check]) -> str:
    lines = ["| check | roles | endpoint | model | result | detail |", "|---|---|---|---|---|---|"]
    for c in checks:
        detail = c.detail.replace("|", "\\|")
        lines.append(f"| {c.check} | {c.roles} | {c.endpoint} | {c.model} | {c.status} | {detail} |")
    failed = sum(c.status == FAIL for c in checks)
    warned = sum(c.status == WARN for c in checks)
    lines.append("")
    lines.append(f"{len(checks)} checks: {failed} failed, {warned} warnings. " +
                 ("A stage cannot work as configured: see the FAIL lines." if failed else
                  "Every stage can work as configured."))
    return "\n".join(lines)


# --------------------------------------------------------------------------- pilot
def pilot_overrides(cfg: Config, questions: int) -> list[str]:
    """One memory (a LoCoMo conversation; a LongMemEval question is its own memory) and ``questions``
    questions as ``data.question_limit`` takes them (``data.limit_rule``), into ``<run name>-pilot``."""
    _, data, _ = load_selected(cfg)
    first = data.sessions[0].memory_id if data.sessions else ""
    keep = [f"data.memories=[{first}]"] if cfg.benchmark == "locomo" and first else []
    return keep + [f"data.question_limit={questions}", f"run.name={cfg.run.name}-pilot"]


def project(full: dict[str, Any], pilot_est: dict[str, Any], measured: dict[str, Any], prices: dict[str, Any],
            concurrency: int) -> list[dict[str, Any]]:
    """Per LLM stage of the full dry run: the pilot's measured tokens scaled by the ratio of the
    dry run's calls (full / pilot), their cost, and the time of those calls at ``concurrency``."""
    def key(stage: str, role: str) -> tuple[str, str]:
        return stage.split("_")[0], role

    pilot_calls = {key(s["stage"], s["role"]): s["calls"] for s in pilot_est["stages"]}
    seen = {key(e["stage"], e["role"]): e for e in measured["stages"]}
    rows = []
    for s in full["stages"]:
        k = key(s["stage"], s["role"])
        m, n = seen.get(k), pilot_calls.get(k, 0)
        row = {"stage": s["stage"], "model": s["model"], "dry_run_usd": s["cost_usd"],
               "dry_run_tokens": s["prompt_tokens"] + s["completion_tokens"], "pilot_calls": m["calls"] if m else 0}
        if m and m["calls"] and n:
            ratio = s["calls"] / n
            tin, tout = m["prompt_tokens"] * ratio, m["completion_tokens"] * ratio
            c = cost(s["model"], int(tin), int(tout), prices)
            lat = m.get("latency_mean")
            calls = m["calls"] * ratio
            row.update(projected_calls=round(calls), projected_tokens=int(tin + tout),
                       projected_usd=round(c, 2) if c is not None else None,
                       projected_seconds=round(calls * lat / max(1, concurrency)) if lat else None)
        rows.append(row)
    return rows


def format_projection(rows: list[dict[str, Any]], full: dict[str, Any]) -> str:
    def usd(v: Optional[float]) -> str:
        return "unpriced" if v is None else f"{v:.2f}"

    lines = ["| stage | model | pilot calls | projected calls | projected tokens | projected $ | projected time | "
             "dry-run tokens | dry-run $ |", "|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        if "projected_calls" in r:
            secs = r["projected_seconds"]
            when = _duration(secs) if secs is not None else "n/a (pilot calls cached)"
            lines.append(f"| {r['stage']} | {r['model']} | {r['pilot_calls']} | {r['projected_calls']} | "
                         f"{r['projected_tokens']:,} | {usd(r['projected_usd'])} | {when} | {r['dry_run_tokens']:,} | "
                         f"{usd(r['dry_run_usd'])} |")
        else:
            lines.append(f"| {r['stage']} | {r['model']} | {r['pilot_calls']} | - | - | - | - | "
                         f"{r['dry_run_tokens']:,} | {usd(r['dry_run_usd'])} |")
    proj = [r for r in rows if r.get("projected_usd") is not None]
    total = sum(r["projected_usd"] for r in proj) + sum(r["dry_run_usd"] or 0 for r in rows
                                                       if "projected_calls" not in r)
    secs = sum(r.get("projected_seconds") or 0 for r in rows)
    lines.append(f"\nFull run projected from the pilot: ${total:.2f} live (a stage the pilot made no call in at its "
                 f"dry-run estimate), about {_duration(secs)} of LLM calls (calls x the pilot's mean latency of paid "
                 f"calls / llm.concurrency); dry run: ${full['total']['cost_usd']:.2f} live. Each stage's tokens "
                 "are the pilot's, scaled by the dry run's count of calls (full run / pilot).")
    return "\n".join(lines)


def _duration(seconds: float) -> str:
    return f"{seconds / 3600:.1f} h" if seconds >= 3600 else f"{seconds / 60:.0f} min" if seconds >= 60 else \
        f"{seconds:.0f} s"


def run_pilot(configs: list[str], overrides: list[str], questions: int) -> str:
    cfg = load_config(configs, overrides)
    pilot_cfg = load_config(configs, overrides + pilot_overrides(cfg, questions))
    print(f"pilot: {pilot_cfg.data.question_limit} questions of {', '.join(pilot_cfg.data.memories) or 'the file'}"
          f" -> {pilot_cfg.run_dir}", file=sys.stderr, flush=True)
    with contextlib.redirect_stdout(sys.stderr):  # the stages' own reports; stdout keeps the doctor's
        run_pipeline(Run(pilot_cfg, progress=False))
    prices = load_prices()
    full, pilot_est = estimate(cfg), estimate(pilot_cfg)
    rows = project(full, pilot_est, ledger(pilot_cfg.run_dir, prices), prices, cfg.llm.concurrency)
    return "\n\n".join([f"Pilot: {pilot_cfg.run_dir}", format_projection(rows, full), format_estimate(full)])


def main(argv: Optional[list[str]] = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m common.pipeline.doctor", description=__doc__.split("\n\n")[0])
    ap.add_argument("--config", action="append", default=None)
    ap.add_argument("--set", action="append", default=[])
    ap.add_argument("--pilot", action="store_true", help="then run the pipeline on one conversation and project")
    ap.add_argument("--pilot-questions", type=int, default=20)
    a = ap.parse_args(argv)
    configs = a.config or ["configs/locomo.yaml"]
    try:
        cfg = load_config(configs, a.set)
        checks = diagnose(cfg)
    except (ConfigError, ValueError, FileNotFoundError) as exc:
        print(f"error: {' '.join(str(exc).split())}", file=sys.stderr)
        return 2
    print(format_checks(checks), flush=True)
    if any(c.status == FAIL for c in checks):
        return 1
    if a.pilot:
        try:
            print("\n" + run_pilot(configs, a.set, a.pilot_questions))
        except (ConfigError, ValueError, FileNotFoundError, RuntimeError) as exc:
            print(f"error: pilot: {' '.join(str(exc).split())}", file=sys.stderr)
            return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
