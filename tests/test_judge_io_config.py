"""common/evaluation/judge.py label parsing, common/core/io.py resumable writer, common/core/config.py loading."""
from __future__ import annotations

import json
import os

import pytest

from common.core.config import ConfigError, load_config, to_yaml
from common.core.io import ArtifactError, StageWriter, read_jsonl
from common.core.llm import LLMClient, ResponseCache, RetryPolicy, RoleSettings
from common.core.schema import AnswerRow, Gold
from common.evaluation.judge import judge_answer, parse_label
from tests.fake_openai import FakeOpenAI

PAPER = "configs/locomo.yaml"


# --------------------------------------------------------------------------- judge
@pytest.mark.parametrize("text, label", [
    ('{"label": "CORRECT"}', 1),
    ('{"label": "WRONG"}', 0),
    ('  {"label":"WRONG"}\n', 0),
    ('```json\n{"label": "CORRECT"}\n```', 1),
    ('```\n{"label": "WRONG"}\n```', 0),
])
def test_parse_label_accepts(text, label):
    assert parse_label(text) == label


@pytest.mark.parametrize("text, pattern", [
    ('{"label": "correct"}', "not CORRECT or WRONG"),
    ('{"label": "Correct"}', "not CORRECT or WRONG"),
    ('{"label": 1}', "not CORRECT or WRONG"),
    ("The answer is CORRECT.", "not a JSON object"),
    ('Reasoning first. {"label": "CORRECT"}', "not a JSON object"),
    ("", "not a JSON object"),
    ('{"verdict": "CORRECT"}', "no 'label' key"),
    ('["label"]', "no 'label' key"),
])
def test_parse_label_strict(text, pattern):
    with pytest.raises(ValueError, match=pattern):
        parse_label(text)


def _judge_client(server, tmp_path) -> LLMClient:
    return LLMClient({"judge": RoleSettings(role="judge", model="judge-m", base_url=server.base_url, timeout=2.0)},
                     cache=ResponseCache(str(tmp_path / "c.sqlite")),
                     retry=RetryPolicy(max_attempts=2, initial_wait=0.01, max_wait=0.02))


def test_judge_answer_none_makes_no_request(tmp_path):
    answer = AnswerRow(qid="q1", memory_id="conv-26", question="Q?", answer=None, model="m",
                       prompt_id="answer_user", error="http_400: boom")
    gold = Gold(qid="q1", memory_id="conv-26", answer="A", category=1)
    with FakeOpenAI() as server:
        row = judge_answer(_judge_client(server, tmp_path), "gpt-4o-mini", "judge_locomo_mem0", answer, gold)
        assert server.request_count == 0
    assert row.label is None and not row.parse_ok
    assert row.error.startswith("no_answer") and "boom" in row.error
    assert row.judge_model == "judge-m" and row.qid == "q1"


def test_judge_answer_real_call_parses_label(tmp_path):
    answer = AnswerRow(qid="q1", memory_id="conv-26", question="Q?", answer="Paris", model="m",
                       prompt_id="answer_user")
    gold = Gold(qid="q1", memory_id="conv-26", answer="Paris", category=1)
    with FakeOpenAI() as server:
        row = judge_answer(_judge_client(server, tmp_path), "gpt-4o-mini", "judge_locomo_mem0", answer, gold)
        assert server.counts_by_kind() == {"judge_locomo": 1}
    assert row.parse_ok and row.label in (0, 1)
    assert row.label == {"CORRECT": 1, "WRONG": 0}[json.loads(row.raw)["label"]]


# --------------------------------------------------------------------------- io
def test_stage_writer_resume_discards_partial_line(tmp_path):
    path = tmp_path / "run" / "03_extract.jsonl"
    w = StageWriter(path, "id")
    w.write({"id": "a", "v": 1})
    w.write({"id": "b", "v": 2})
    w._fh.close()  # simulate a crash: no close(order)
    with path.open("a", encoding="utf-8") as fh:
        fh.write('{"id": "c", "v": ')  # cut mid-row, no newline
    w2 = StageWriter(path, "id")
    assert w2.resumed == 2
    assert w2.done("a") and w2.done("b") and not w2.done("c")
    assert w2.pending(["a", "b", "c", "d"], lambda k: k) == ["c", "d"]
    w2.write({"id": "c", "v": 3})
    rows = w2.close(order=["c", "a", "b"])
    assert [r["id"] for r in rows] == ["c", "a", "b"]
    lines = path.read_text(encoding="utf-8").splitlines()
    assert [json.loads(line) for line in lines] == [{"id": "c", "v": 3}, {"id": "a", "v": 1}, {"id": "b", "v": 2}]
    assert read_jsonl(path) == [{"id": "c", "v": 3}, {"id": "a", "v": 1}, {"id": "b", "v": 2}]


def test_stage_writer_force_starts_over(tmp_path):
    path = tmp_path / "x.jsonl"
    w = StageWriter(path, "id")
    w.write({"id": "a"})
    w.close()
    w2 = StageWriter(path, "id", force=True)
    assert w2.resumed == 0 and not w2.done("a")
    assert w2.close() == [] and path.read_text() == ""


def test_read_jsonl_missing_file_names_it(tmp_path):
    missing = tmp_path / "02_episodes.jsonl"
    with pytest.raises(ArtifactError, match="02_episodes.jsonl"):
        read_jsonl(missing)
    assert read_jsonl(missing, missing_ok=True) == []  # optional inputs (e.g. 05 for a baseline)


def test_read_jsonl_bad_line_names_line(tmp_path):
    path = tmp_path / "f.jsonl"
    path.write_text('{"a": 1}\n\n{oops\n', encoding="utf-8")
    with pytest.raises(ArtifactError, match=r"f\.jsonl:3"):
        read_jsonl(path)


# --------------------------------------------------------------------------- config
def test_paper_config():
    cfg = load_config([PAPER])
    assert cfg.role("answer").model == "gpt-4.1-mini-2025-04-14"
    judge = cfg.role("judge")
    assert judge.model == "gpt-4o-mini-2024-07-18"
    for role in ("partition", "extract", "plan", "answer", "judge"):
        s = cfg.role(role)
        assert s.temperature == 0.0 and s.seed == 42 and s.role == role
    assert cfg.extract.granularity == "broad"
    assert cfg.episodes.mode == "theme"
    assert cfg.retrieve.mode == "adaptive" and cfg.judge.prompt == "judge_locomo_mem0"
    assert cfg.role("answer").max_tokens == 256


def test_judge_role_inherits_default():
    cfg = load_config([PAPER], ["models.default.temperature=0.3", "models.default.seed=7"])
    j = cfg.role("judge")
    assert (j.temperature, j.seed, j.model) == (0.3, 7, "gpt-4o-mini-2024-07-18")
    assert j.max_tokens is None and j.timeout == 120.0 and j.json_mode is True


def test_set_overrides_only_that_role():
    cfg = load_config([PAPER], ["models.answer.model=x"])
    assert cfg.role("answer").model == "x"
    assert cfg.role("plan").model == "gpt-4.1-mini-2025-04-14"
    assert cfg.role("judge").model == "gpt-4o-mini-2024-07-18"
    assert cfg.models.default.model == "gpt-4.1-mini-2025-04-14"
    assert cfg.role("answer").max_tokens == 256  # the rest of the role survives


def test_set_yaml_parsed_values():
    cfg = load_config([PAPER], ["retrieve.point.structured_k=null", "llm.concurrency=2",
                                "retrieve.min_score=1", "data.memories=[conv-26]"])
    assert cfg.retrieve.point.structured_k is None and cfg.llm.concurrency == 2
    assert cfg.retrieve.min_score == 1.0 and isinstance(cfg.retrieve.min_score, float)
    assert cfg.data.memories == ["conv-26"]


def test_old_key_data_conversations_is_read_with_a_warning(tmp_path):
    """``data.conversations`` (it also held LongMemEval question ids) is now ``data.memories``."""
    with pytest.warns(DeprecationWarning, match=r"data\.conversations is deprecated: use data\.memories"):
        cfg = load_config([PAPER], ["data.conversations=[conv-26]"])
    assert cfg.data.memories == ["conv-26"]
    old = tmp_path / "old.yaml"
    old.write_text("defaults: [%s]\ndata:\n  conversations: [conv-30]\n" % os.path.abspath(PAPER), encoding="utf-8")
    with pytest.warns(DeprecationWarning):
        assert load_config([str(old)]).data.memories == ["conv-30"]
    with pytest.warns(DeprecationWarning), pytest.raises(ConfigError, match=r"data\.memories"):
        load_config([PAPER], ["data.conversations=conv-26"])


def test_config_sections_are_frozen():
    import dataclasses

    cfg = load_config([PAPER])
    with pytest.raises(dataclasses.FrozenInstanceError):
        cfg.retrieve.mode = "dense_only"  # type: ignore[misc]
    with pytest.raises(dataclasses.FrozenInstanceError):
        cfg.run = cfg.run  # type: ignore[misc]


def test_choices_come_from_the_literal_types():
    from common.core.config import choices

    found = choices()
    assert found["retrieve.mode"] == ("adaptive", "fixed_k", "dense_only")
    assert found["episodes.mode"] == ("theme", "turn", "session")
    assert found["benchmark"] == ("locomo", "longmemeval", "beam", "realtalk", "locomo_plus")
    assert set(found) >= {"extract.granularity", "embedding.backend", "llm.cache_mode", "method.name"}


@pytest.mark.parametrize("override, key", [
    ("retrieve.modee=x", "retrieve.modee"),
    ("models.answer.modle=x", "models.answer.modle"),
    ("nosuch=1", "nosuch"),
])
def test_unknown_override_key(override, key):
    with pytest.raises(ConfigError, match=f"unknown config key '{key}'"):
        load_config([PAPER], [override])


def test_unknown_yaml_key(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("defaults: [%s]\nretrieve:\n  fixedk: 3\n" % os.path.abspath(PAPER), encoding="utf-8")
    with pytest.raises(ConfigError, match="retrieve.fixedk"):
        load_config([str(bad)])


@pytest.mark.parametrize("override, key", [
    ("llm.concurrency=many", "llm.concurrency"),
    ("llm.concurrency=true", "llm.concurrency"),
    ("retrieve.min_score=high", "retrieve.min_score"),
    ("episodes.include_images=3", "episodes.include_images"),
    ("retrieve.point=5", "retrieve.point"),
    ("data.memories=conv-26", "data.memories"),
])
def test_wrong_type(override, key):
    with pytest.raises(ConfigError, match=key.replace(".", r"\.")):
        load_config([PAPER], [override])


@pytest.mark.parametrize("override, key", [
    ("retrieve.mode=foo", "retrieve.mode"),
    ("extract.granularity=medium", "extract.granularity"),
    ("episodes.mode=paragraph", "episodes.mode"),
])
def test_invalid_choice(override, key):
    with pytest.raises(ConfigError, match=f"{key}: '"):
        load_config([PAPER], [override])


def test_override_without_equals():
    with pytest.raises(ConfigError, match="key=value"):
        load_config([PAPER], ["retrieve.mode"])


def test_missing_config_file():
    with pytest.raises(ConfigError, match="not found"):
        load_config(["configs/does_not_exist.yaml"])


def test_to_yaml_round_trip(tmp_path):
    cfg = load_config([PAPER], ["models.answer.model=x", "retrieve.mode=fixed_k", "run.name=abl"])
    path = tmp_path / "resolved.yaml"
    path.write_text(to_yaml(cfg), encoding="utf-8")
    again = load_config([str(path)])
    assert again == cfg
    assert again.role("answer").model == "x" and again.retrieve.mode == "fixed_k"
    assert to_yaml(again) == to_yaml(cfg)
