"""The API key reaches the server and nothing else: no artifact, cache, manifest, log or output.

A unique sentinel key is exported for a whole 01-09 run against the fake server, with verbose
logging on and a server that echoes the key in one of its error replies. Then every byte the run
left behind (run directory, LLM cache with its WAL, embedding cache) and everything it printed is
searched for it. The key must also be seen by the server, or the test would prove nothing.
"""
from __future__ import annotations

import os
import subprocess
import sys
import uuid

from tests.conftest import REPO, STAGE_ORDER, TINY_LOCOMO, run_overrides
from tests.fake_openai import CHAT_KINDS, FakeOpenAI, FaultPlan

# Every stage in one interpreter, each through the entry point its numbered script uses
# (argument parsing, logging set-up, one-line errors), which saves eight interpreter start-ups.
DRIVER = """
import sys
from common.pipeline import cli
argv = sys.argv[1:]
for stage in {stages!r}:
    sys.argv = ["LoCoMo." + stage, "-v", *argv]
    cli.main(stage, "locomo")
"""


def _sentinel() -> tuple[str, bytes]:
    token = uuid.uuid4().hex
    return f"sk-test-{token}", token.encode()  # the random part alone catches partial copies too


def test_api_key_is_sent_but_never_stored_or_printed(tmp_path):
    key, needle = _sentinel()
    # One answer call is refused with a 401 whose message quotes the key back; one 429 makes the
    # client log a retry at DEBUG level.
    with FakeOpenAI(faults=FaultPlan(script=["429"], pinned={"answer": ["401"]})) as server:
        sets = run_overrides(tmp_path, TINY_LOCOMO, **{
            "embedding.backend": "openai", "embedding.model": "fake-model", "embedding.base_url": server.base_url,
            "run.max_error_rate": 1.0})
        env = {k: v for k, v in os.environ.items() if k != "OPENAI_LOG"}
        env.update(OPENAI_API_KEY=key, OPENAI_BASE_URL=server.base_url)
        args = [a for s in sets for a in ("--set", s)]
        proc = subprocess.run([sys.executable, "-c", DRIVER.format(stages=STAGE_ORDER), *args], cwd=REPO,
                              env=env, capture_output=True, timeout=300)
        assert proc.returncode == 0, proc.stderr.decode()[-2000:]
        kinds = set(server.request_kinds)
        auth = {h.get("authorization") for h in server.request_headers}
        refusals = [server.replies[i] for i, _, f in server.faults_injected if f == "401"]
        assert refusals and all(status == 401 and needle in text.encode() for status, text in refusals)

    # The key did travel, on chat and embedding requests alike (so the search below can fail).
    assert auth == {f"Bearer {key}"}
    assert "embeddings" in kinds and kinds & CHAT_KINDS
    run_dir = tmp_path / "results" / "locomo" / "t"
    answers = (run_dir / "07_answer.jsonl").read_text(encoding="utf-8")
    assert "http_401" in answers and "***" in answers  # the echoed key was recorded, masked
    files = [p for p in tmp_path.rglob("*") if p.is_file()]
    names = {p.name for p in files}
    assert {"llm.sqlite", "emb.sqlite", "metrics.json", "config.resolved.yaml", "09_aggregate.manifest.json"} <= names
    assert [str(p) for p in files if needle in p.read_bytes()] == []
    assert b"DEBUG common.core.llm: retrying" in proc.stderr  # verbose logging was really on
    assert needle not in proc.stdout and needle not in proc.stderr


def test_a_key_in_the_config_is_refused_without_echoing_it(tmp_path):
    """Keys come from the environment only: a config key for one is unknown, and not printed."""
    key, needle = _sentinel()
    env = {k: v for k, v in os.environ.items() if k not in ("OPENAI_API_KEY", "OPENAI_BASE_URL")}
    args = [a for s in run_overrides(tmp_path, TINY_LOCOMO) for a in ("--set", s)]
    proc = subprocess.run([sys.executable, "-m", "LoCoMo.01_preprocess", *args, "--set", f"models.judge.api_key={key}"],
                          cwd=REPO, env=env, capture_output=True, timeout=120)
    assert proc.returncode != 0
    lines = proc.stderr.decode().splitlines()
    assert len(lines) == 1 and "models.judge.api_key" in lines[0], lines
    assert needle not in proc.stderr and needle not in proc.stdout
    assert not (tmp_path / "results").exists()
