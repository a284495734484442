"""`make doctor` against the fake server: every check, each capability missing in turn, no cache,
no secret printed, and the pilot's projection."""
from __future__ import annotations

import subprocess
import sys

import pytest

from common.pipeline import doctor
from tests.conftest import REPO, TINY_LOCOMO, run_overrides
from tests.fake_openai import Capabilities, FakeOpenAI, FaultPlan

MAIN, JUDGE = "gpt-4.1-mini-2025-04-14", "gpt-4o-mini-2024-07-18"
SERVES_BOTH = (MAIN, JUDGE)
LIMITS = {"x-ratelimit-limit-requests": "500", "x-ratelimit-remaining-tokens": "199000"}


def run_doctor(capsys, monkeypatch, tmp_path, caps: Capabilities | None = None, *sets: str,
               faults: FaultPlan | None = None, key: str = "", url_of=lambda u: u):
    """(exit status, stdout, {(check, model): line}) of the doctor on configs/locomo.yaml."""
    monkeypatch.delenv("OPENAI_BASE_URLS", raising=False)
    monkeypatch.setenv("OPENAI_API_KEY", key) if key else monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    args = [a for s in (*run_overrides(tmp_path, TINY_LOCOMO), *sets) for a in ("--set", s)]
    with FakeOpenAI(capabilities=caps or Capabilities(models=SERVES_BOTH), faults=faults) as server:
        monkeypatch.setenv("OPENAI_BASE_URL", url_of(server.base_url))
        status = doctor.main(args)
        out = capsys.readouterr().out
        assert server.request_count > 0 or server.capabilities.v1_only  # a 404 on a path is not recorded
        if faults is None and server.request_count:  # every probe names its prompt, as every harness call does
            assert {h.get("x-prompt-id") for h in server.request_headers} == {"doctor_user"}
    lines = {}
    for row in out.splitlines():
        cells = [c.strip() for c in row.strip("|").split("|")]
        if len(cells) == 6 and cells[0] not in ("check", "---"):
            lines[(cells[0], cells[3])] = {"roles": cells[1], "endpoint": cells[2], "status": cells[4],
                                           "detail": cells[5]}
    return status, out, lines


def test_a_capable_endpoint_passes_every_check_without_the_cache(capsys, monkeypatch, tmp_path):
    caps = Capabilities(models=SERVES_BOTH, rate_limit_headers=LIMITS)
    status, out, lines = run_doctor(capsys, monkeypatch, tmp_path, caps)
    assert status == 0, out
    checks = ["model", "JSON mode", "JSON schema", "seed", "deterministic", "latency", "rate limits", "price"]
    assert [c for c, m in lines if m == MAIN] == checks and [c for c, m in lines if m == JUDGE] == checks
    assert lines[("model", MAIN)]["roles"] == "partition, extract, plan, bridge, answer"
    assert lines[("model", JUDGE)]["roles"] == "judge"
    assert {v["status"] for v in lines.values()} == {"ok", "info"}
    assert lines[("rate limits", MAIN)]["detail"] == "limit-requests=500, remaining-tokens=199000"
    assert lines[("latency", JUDGE)]["detail"].startswith("6 calls: median ")
    assert "0 failed, 0 warnings" in out
    # Probes, not cached calls: the LLM cache of the config is never opened, and a second doctor
    # makes every call again.
    assert not (tmp_path / "llm.sqlite").exists()


def test_the_doctor_calls_again_each_time(monkeypatch, tmp_path, capsys):
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    with FakeOpenAI(capabilities=Capabilities(models=SERVES_BOTH)) as server:
        monkeypatch.setenv("OPENAI_BASE_URL", server.base_url)
        args = [a for s in run_overrides(tmp_path, TINY_LOCOMO) for a in ("--set", s)]
        assert doctor.main(args) == 0
        first = server.request_count
        assert doctor.main(args) == 0
        assert server.request_count == 2 * first == 2 * 2 * 6  # two models, six calls each
    capsys.readouterr()


@pytest.mark.parametrize("missing, check, status, says, failing", [
    # Every LoCoMo role but the answer sends JSON mode; every role sends the seed.
    ({"json_mode": False}, "JSON mode", "FAIL", "refused (HTTP 400: Invalid parameter: 'response_format'", SERVES_BOTH),
    ({"seed": False}, "seed", "FAIL", "refused (HTTP 400: Unrecognized request argument supplied: seed)", SERVES_BOTH),
    ({"models": (MAIN,)}, "model", "FAIL", "does not answer: HTTP 404: The model `gpt-4o-mini-2024-07-18`", (JUDGE,)),
    ({"deterministic": False}, "deterministic", "warn", "two identical calls, different replies", ()),
    ({"json_schema": False}, "JSON schema", "info", "refused (HTTP 400", ()),
])
def test_each_missing_capability_is_reported(capsys, monkeypatch, tmp_path, missing, check, status, says, failing):
    caps = Capabilities(**{"models": SERVES_BOTH, **missing})
    code, out, lines = run_doctor(capsys, monkeypatch, tmp_path, caps)
    model = failing[-1] if failing else MAIN
    assert lines[(check, model)]["status"] == status and lines[(check, model)]["detail"].startswith(says), out
    # A stage cannot work exactly when a line says FAIL; everything else is only reported.
    assert code == (1 if failing else 0)
    assert [k for k, v in lines.items() if v["status"] == "FAIL"] == [(check, m) for m in failing]


def test_a_model_that_does_not_answer_skips_its_other_probes(capsys, monkeypatch, tmp_path):
    code, out, lines = run_doctor(capsys, monkeypatch, tmp_path, Capabilities(models=(MAIN,)))
    assert [c for c, m in lines if m == JUDGE] == ["model", "probes", "price"]
    assert "not listed by /v1/models (it lists gpt-4.1-mini-2025-04-14)" in lines[("model", JUDGE)]["detail"]


def test_a_capability_no_role_uses_is_not_a_failure(capsys, monkeypatch, tmp_path):
    # JSON mode refused, but every role asks for JSON in the prompt only; seed refused, none is sent.
    caps = Capabilities(models=SERVES_BOTH, json_mode=False, seed=False)
    code, out, lines = run_doctor(capsys, monkeypatch, tmp_path, caps, "models.default.json_mode=false",
                                  "models.default.seed=null")
    assert code == 0, out
    assert lines[("JSON mode", MAIN)]["status"] == lines[("seed", JUDGE)]["status"] == "info"
    # A baseline runs no JSON stage but the judge: only the judge's JSON mode matters.
    code, out, lines = run_doctor(capsys, monkeypatch, tmp_path, Capabilities(models=SERVES_BOTH, json_mode=False),
                                  "method.name=full_context", "models.judge.json_mode=false")
    assert code == 0 and lines[("model", MAIN)]["roles"] == "answer", out


def test_no_rate_limit_headers_and_an_unpriced_model(capsys, monkeypatch, tmp_path):
    code, out, lines = run_doctor(capsys, monkeypatch, tmp_path, Capabilities(), "models.judge.model=my-judge")
    assert code == 0, out
    assert lines[("rate limits", MAIN)]["detail"] == "no x-ratelimit-* headers"
    assert lines[("price", "my-judge")]["status"] == "warn" and "not in configs/prices.yaml" in \
        lines[("price", "my-judge")]["detail"]
    # The default server lists only fake-model: answered, but not listed, is a warning.
    assert lines[("model", MAIN)]["status"] == "warn" and "not listed" in lines[("model", MAIN)]["detail"]


def test_no_endpoint_is_a_failure_naming_the_role(capsys, monkeypatch, tmp_path):
    for var in ("OPENAI_BASE_URL", "OPENAI_BASE_URLS", "OPENAI_API_KEY"):
        monkeypatch.delenv(var, raising=False)
    args = [a for s in run_overrides(tmp_path, TINY_LOCOMO) for a in ("--set", s)]
    assert doctor.main(args + ["--set", "method.name=no_memory"]) == 1
    out = capsys.readouterr().out
    assert "| endpoint | answer |" in out and "| endpoint | judge |" in out and "no LLM endpoint for role" in out


def test_the_key_is_never_printed(capsys, monkeypatch, tmp_path):
    secret = "sk-doctor-secret-0123456789"
    # The first call is answered with a 401 that echoes the key, as a careless proxy does.
    code, out, lines = run_doctor(capsys, monkeypatch, tmp_path, Capabilities(models=SERVES_BOTH), key=secret,
                                  faults=FaultPlan(script=["401"]))
    assert code == 1 and lines[("model", MAIN)]["status"] == "FAIL"
    assert "Incorrect API key provided: *** (injected fault)" in lines[("model", MAIN)]["detail"]
    assert secret not in out


@pytest.mark.parametrize("fault", ["html_body", "no_choices", "truncated_body", "500"])
def test_a_broken_reply_is_a_failed_check_not_a_crash(capsys, monkeypatch, tmp_path, fault):
    code, out, lines = run_doctor(capsys, monkeypatch, tmp_path, Capabilities(models=SERVES_BOTH),
                                  faults=FaultPlan(script=[fault]))
    assert code == 1 and lines[("model", MAIN)]["status"] == "FAIL", out
    assert lines[("model", MAIN)]["detail"].startswith("does not answer: ")
    assert lines[("model", JUDGE)]["status"] == "ok"


def test_credentials_in_an_endpoint_url_are_never_printed(capsys, monkeypatch, tmp_path):
    code, out, lines = run_doctor(capsys, monkeypatch, tmp_path, Capabilities(models=SERVES_BOTH),
                                  url_of=lambda u: u.replace("http://", "http://alice:hunter2@"))
    assert code == 0, out
    assert "hunter2" not in out and "alice" not in out
    assert lines[("model", MAIN)]["endpoint"].startswith("http://127.0.0.1:")


def test_projection_scales_the_pilot_tokens_by_the_dry_run_calls():
    full = {"stages": [{"stage": "05_plan", "role": "plan", "model": MAIN, "calls": 1000, "prompt_tokens": 9,
                        "completion_tokens": 1, "cost_usd": 0.5},
                       {"stage": "06_retrieve", "role": "bridge", "model": MAIN, "calls": 100, "prompt_tokens": 70,
                        "completion_tokens": 5, "cost_usd": 0.25}],
            "total": {"cost_usd": 0.75}}
    pilot = {"stages": [{"stage": "05_plan", "role": "plan", "calls": 20}, {"stage": "06_retrieve", "role": "bridge",
                                                                              "calls": 2}]}
    measured = {"stages": [{"stage": "05_plan", "role": "plan", "calls": 21, "prompt_tokens": 20_000,
                            "completion_tokens": 5_000, "latency_mean": 2.0}]}  # one repair call
    prices = {"models": {MAIN: {"input": 0.4, "output": 1.6}}}
    plan, bridge = doctor.project(full, pilot, measured, prices, concurrency=10)
    assert plan["projected_calls"] == 1050 and plan["projected_tokens"] == 50 * 25_000
    assert plan["projected_usd"] == pytest.approx((1_000_000 * 0.4 + 250_000 * 1.6) / 1e6, abs=0.01)
    assert plan["projected_seconds"] == 1050 * 2 // 10
    assert "projected_calls" not in bridge  # the pilot made no bridge call: the dry run stands
    text = doctor.format_projection([plan, bridge], full)
    assert "| 05_plan | gpt-4.1-mini-2025-04-14 | 21 | 1050 | 1,250,000 | 0.80 | 4 min |" in text
    assert "$1.05 live" in text and "dry run: $0.75 live" in text


def test_pilot_runs_one_conversation_into_its_own_run_dir_and_projects(capsys, monkeypatch, tmp_path):
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    with FakeOpenAI(capabilities=Capabilities(models=SERVES_BOTH)) as server:
        monkeypatch.setenv("OPENAI_BASE_URL", server.base_url)
        args = [a for s in run_overrides(tmp_path, TINY_LOCOMO) for a in ("--set", s)]
        assert doctor.main(args + ["--pilot", "--pilot-questions", "3"]) == 0
    out = capsys.readouterr().out
    runs = tmp_path / "results" / "locomo"
    assert sorted(p.name for p in runs.iterdir()) == ["t-pilot"]  # never the full run's directory
    questions = (runs / "t-pilot" / "01_questions.jsonl").read_text().splitlines()
    assert len(questions) == 3 and all('"memory_id": "tiny-1"' in q for q in questions)
    assert "Full run projected from the pilot" in out and "| 05_plan | gpt-4.1-mini-2025-04-14 | 3 | 11 |" in out
    assert "Dry run (locomo, method ensimem)" in out and "11 questions (9 judged)" in out


def test_make_doctor_passes_config_sets_and_pilot():
    out = subprocess.run(["make", "-s", "-n", "doctor", f"PY={sys.executable}", "CONFIG=configs/longmemeval.yaml",
                          "SET=a=1 b=2", "PILOT=1"], cwd=REPO, capture_output=True, text=True, timeout=60).stdout
    command = " ".join(out.replace("\\\n", " ").split())
    assert command == (f"{sys.executable} -m common.pipeline.doctor --config configs/longmemeval.yaml "
                       "--set a=1 --set b=2 --pilot")


def test_a_404_against_a_base_url_without_v1_suggests_v1(capsys, monkeypatch, tmp_path):
    caps = Capabilities(models=SERVES_BOTH, v1_only=True)
    code, out, lines = run_doctor(capsys, monkeypatch, tmp_path, caps, url_of=lambda u: u.removesuffix("/v1"))
    detail = lines[("model", MAIN)]["detail"]
    assert code != 0 and "HTTP 404" in detail and "has no /v1" in detail and "/v1 (OpenAI" in detail
