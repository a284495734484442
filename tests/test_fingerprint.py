"""Protocol fingerprints: stored per run and per judge, refused when they change, in metrics.json."""
from __future__ import annotations

import json
import shutil

import pytest

from common.core import fingerprint, prompts
from common.core.config import load_config
from common.core.fingerprint import FingerprintMismatch
from tests.conftest import TINY_LOCOMO, run_overrides, run_stages


def _cfg(*sets: str):
    return load_config(["configs/locomo.yaml"], list(sets))


def test_fingerprint_changes_with_every_protocol_component_and_nothing_else():
    base = fingerprint.short(fingerprint.run_components(_cfg(), "sha-a"))
    assert base == fingerprint.short(fingerprint.run_components(_cfg(), "sha-a"))
    changed = {
        "dataset": fingerprint.run_components(_cfg(), "sha-b"),
        "model": fingerprint.run_components(_cfg("models.answer.model=other"), "sha-a"),
        "decoding": fingerprint.run_components(_cfg("models.default.temperature=0.7"), "sha-a"),
        "method": fingerprint.run_components(_cfg("extract.granularity=fine"), "sha-a"),
    }
    for name, comps in changed.items():
        assert fingerprint.short(comps) != base, name
    # Endpoints, caches, concurrency and the question selection do not change the protocol.
    same = _cfg("models.default.base_url=http://elsewhere/v1", "llm.concurrency=2", "llm.cache_path=x.sqlite",
                "data.question_limit=3", "run.name=other", "models.default.timeout=5")
    assert fingerprint.short(fingerprint.run_components(same, "sha-a")) == base
    # The judge fingerprint covers judge model, prompt and scoring policy on top of the run.
    j = fingerprint.short(fingerprint.judge_components(_cfg(), base, "policy"))
    assert j != fingerprint.short(fingerprint.judge_components(_cfg("models.judge.model=qwen"), base, "policy"))
    assert j != fingerprint.short(fingerprint.judge_components(_cfg("judge.prompt=judge_locomo_paper"), base, "policy"))
    assert j != fingerprint.short(fingerprint.judge_components(_cfg(), base, "other policy"))


def test_prompt_text_is_part_of_the_protocol(tmp_path, monkeypatch):
    copy = tmp_path / "prompts"
    shutil.copytree(prompts.PROMPT_DIR, copy)
    before = fingerprint.short(fingerprint.run_components(_cfg(), "s"))
    monkeypatch.setattr(fingerprint, "PROMPT_DIR", copy)
    assert fingerprint.short(fingerprint.run_components(_cfg(), "s")) == before
    (copy / "answer_system.txt").write_text("Answer briefly.", encoding="utf-8")
    assert fingerprint.short(fingerprint.run_components(_cfg(), "s")) != before
    # Judge prompts belong to the judge fingerprint, not the run's.
    (copy / "answer_system.txt").write_text((prompts.PROMPT_DIR / "answer_system.txt").read_text(encoding="utf-8"),
                                            encoding="utf-8")
    (copy / "judge_locomo_mem0.txt").write_text("x {question} {gold_answer} {generated_answer}", encoding="utf-8")
    assert fingerprint.short(fingerprint.run_components(_cfg(), "s")) == before


def test_run_refuses_rows_under_another_protocol_and_reports_fingerprints(tmp_path, fake_server, monkeypatch):
    monkeypatch.setenv("OPENAI_BASE_URL", fake_server.base_url)
    sets = run_overrides(tmp_path, TINY_LOCOMO)
    run = run_stages("configs/locomo.yaml", sets)
    stored = json.loads((run.dir / "fingerprint.json").read_text())
    metrics = json.loads((run.dir / "metrics.json").read_text())
    assert metrics["fingerprint"]["run"] == stored["run"]["id"]
    assert metrics["fingerprint"]["judges"]["gpt-4o-mini"] == stored["judge:gpt-4o-mini"]["id"]
    assert stored["run"]["components"]["dataset_sha256"]
    table = (run.dir / "table_gpt-4o-mini.md").read_text()
    assert stored["run"]["id"] in table and stored["judge:gpt-4o-mini"]["id"] in table
    # A different data file under the same run name is refused before anything is written.
    other = tmp_path / "other.json"
    other.write_text(TINY_LOCOMO.read_text().replace("tiny", "tinY"))
    before = (run.dir / "01_questions.jsonl").read_bytes()
    with pytest.raises(FingerprintMismatch, match="dataset_sha256"):
        run_stages("configs/locomo.yaml", [s for s in sets if not s.startswith("data.path")] + [f"data.path={other}"],
                   ["preprocess"])
    assert (run.dir / "01_questions.jsonl").read_bytes() == before
    # A different judge model on the same judge name is refused; a new judge name is its own entry.
    with pytest.raises(FingerprintMismatch, match="judge_role.model"):
        run_stages("configs/locomo.yaml", sets + ["models.judge.model=other-judge"], ["judge"])
    run_stages("configs/locomo.yaml", sets + ["models.judge.model=other-judge", "judge.name=j2"],
               ["judge", "aggregate"])
    metrics = json.loads((run.dir / "metrics.json").read_text())
    assert set(metrics["fingerprint"]["judges"]) == {"gpt-4o-mini", "j2"}
    assert metrics["fingerprint"]["judges"]["j2"] != metrics["fingerprint"]["judges"]["gpt-4o-mini"]
