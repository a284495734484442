"""MemOS as MemTensor/MemOS's LoCoMo evaluation runs it against its API server (systems/memos, its
card.yaml), against the fake server: every message the memory reader sees carries its session's
date (``chat_time``), every memory keeps it, the search asks for 20 memories per speaker under the
native protocol, and the card says what the adapter does.

The first tests load the adapter's standard-library part and the fake server's reply only (fast,
``make test``). The drives build MemOS's environment (about 10 minutes the first time): marked
``systems`` and ``systems_heavy`` (``make test-systems-all``), one xdist group with
tests/test_system_envs.py's MemOS runs so the environment is built once."""
from __future__ import annotations

import json
import re

import pytest

from common.systems import cards
from tests import systems_driver as driver

SESSIONS = 2
READER_PROMPT = "You are a memory extraction expert."
# A message as MemOS's reader writes it into its prompt: "<role>: [<chat_time>]: <content>".
READER_LINE = re.compile(r"^(user|assistant): \[([^\]\n]+)\]: ([^:\n]+): ", re.MULTILINE)


@pytest.fixture
def adapter_module(monkeypatch):
    """systems/memos/adapter.py imported here (the standard library and the protocol helper only at
    import time), the process's environment and sys.path restored afterwards."""
    with driver.adapter_imported("memos", monkeypatch) as module:
        yield module


def _iso_dates(adapter_module) -> dict[str, str]:
    sessions, _ = driver.locomo_sessions(count=SESSIONS)
    return {s["session_id"]: adapter_module.chat_time(s) for s in sessions}


# --------------------------------------------------------------------------- fast: the adapter's requests
def test_every_message_carries_its_sessions_date_from_its_speakers_side(adapter_module):
    sessions, _ = driver.locomo_sessions(count=SESSIONS)
    first = sessions[0]
    assert adapter_module.chat_time(first) == "2023-05-08T13:56:00+00:00"  # "1:56 pm on 8 May, 2023"
    speakers = adapter_module.speakers_of(sessions)
    assert speakers == ["Caroline", "Melanie"]
    for speaker in speakers:
        messages = adapter_module.messages_for(first, speaker)
        assert len(messages) == len(first["turns"])
        assert {m["chat_time"] for m in messages} == {"2023-05-08T13:56:00+00:00"}
        for m, turn in zip(messages, first["turns"]):
            assert m["content"] == f"{turn['speaker']}: {turn['text']}"
            assert m["role"] == ("user" if turn["speaker"] == speaker else "assistant")
    # LoCoMo's speaker_a first, as the harness names the speakers (first appearance without names).
    assert adapter_module.ordered_speakers(sessions, {"speaker_a": "Melanie", "speaker_b": "Caroline"}) == [
        "Melanie", "Caroline"]
    assert adapter_module.ordered_speakers(sessions, {}) == ["Caroline", "Melanie"]
    assert adapter_module.cube_id("conv-26", 0) == "locomo_conv_26_speaker_a"
    assert adapter_module.cube_id("conv-26", 1) == "locomo_conv_26_speaker_b"


@pytest.mark.parametrize("protocol", cards.PROTOCOLS)
def test_the_card_agrees_with_what_the_adapter_resolves(adapter_module, protocol):
    """Native: top_k 20 (run_locomo_eval.sh), whatever the harness's limit; common: the limit."""
    adapter = adapter_module.MemOSAdapter()
    adapter.protocol = protocol
    resolved = adapter.settings()
    assert (resolved.get("top_k") == 20) is (protocol == "native")
    assert adapter._top_k(10) == (20 if protocol == "native" else 10) and adapter._top_k(3) == (
        20 if protocol == "native" else 3)
    # As the harness checks a child: its hello settings, and the limit unless they name a depth.
    check = cards.check(cards.load("memos"), protocol, {**resolved, **({} if "top_k" in resolved else {"limit": 10})})
    assert not check.mismatches, check.mismatches
    assert check.checked.get("top_k", check.checked.get("k")) == (20 if protocol == "native" else 10)


# --------------------------------------------------------------------------- fast: the fake's reply
def test_the_fake_reader_reply_names_only_what_the_prompts_example_shows():
    from tests.fake_openai.contract import requested_fields, unrequested
    from tests.fake_openai.scripted import generic_reply

    lines = ("user: [2023-05-08T13:56:00+00:00]: Caroline: I went to a support group\n"
             "assistant: [2023-05-08T13:56:00+00:00]: Melanie: Wow, cool")
    narrow = 'Return JSON:\n{"memory list": [{"key": "...", "value": "..."}]}\n\n' + lines
    body = {"messages": [{"role": "user", "content": narrow}]}
    content, calls = generic_reply(body, narrow, "gateway.memos")
    reply = json.loads(content)
    assert calls == [] and not unrequested(reply, requested_fields(body))
    assert reply == {"memory list": [
        {"key": "Caroline", "value": "On 2023-05-08T13:56:00+00:00, Caroline: I went to a support group"},
        {"key": "Melanie", "value": "On 2023-05-08T13:56:00+00:00, Melanie: Wow, cool"}]}
    # A prompt of MemOS's that shows another shape (its preference extractors) gets none of these fields.
    other = 'Return JSON:\n[{"explicit_preference": "..."}]\n\n' + lines
    assert json.loads(generic_reply({"messages": []}, other, "gateway.memos")[0]) == {}


# --------------------------------------------------------------------------- drives (MemOS's environment)


@pytest.fixture(scope="module")
def common_drive():
    return driver.drive("memos", sessions=SESSIONS)


def _reader_prompts(run: driver.Exchange) -> list[str]:
    out = []
    for body in run.requests:
        for m in body.get("messages") or []:
            if isinstance(m.get("content"), str) and READER_PROMPT in m["content"]:
                out.append(m["content"])
    return out


@pytest.mark.systems
@pytest.mark.systems_heavy
@pytest.mark.xdist_group("system-memos")
def test_the_readers_requests_carry_every_messages_session_date(common_drive, adapter_module):
    run, dates = common_drive, _iso_dates(adapter_module)
    prompts = _reader_prompts(run)
    sessions, _ = driver.locomo_sessions(count=SESSIONS)
    batches = sum((len(s["turns"]) + 1) // 2 for s in sessions)
    assert len(prompts) == 2 * batches, (len(prompts), run.stderr[-3000:])  # each speaker, two messages a call
    seen = set()
    for prompt in prompts:
        conversation = prompt.split(READER_PROMPT, 1)[1]
        lines = READER_LINE.findall(conversation)
        assert 1 <= len(lines) <= 2, conversation[-800:]
        stamps = {stamp for _, stamp, _ in lines}
        assert len(stamps) == 1 and stamps <= set(dates.values()), stamps
        seen |= stamps
    assert seen == set(dates.values())  # every session's date reached the reader
    assert run.attempts == [] and run.forwarded == run.fake_requests


@pytest.mark.systems
@pytest.mark.systems_heavy
@pytest.mark.xdist_group("system-memos")
def test_every_memory_built_carries_its_sessions_date(common_drive):
    hello, ingest = common_drive.replies["hello"], common_drive.replies["ingest"]
    assert hello["ok"] and hello["version"] == cards.load("memos").version
    assert ingest["ok"] and ingest["errors"] == [], ingest
    built = ingest["built"]
    assert built["memories"] == ingest["items"] > 0 and built["dated"] == built["memories"], built
    assert set(built) == {"memories", "dated", "preferences"}


@pytest.mark.systems
@pytest.mark.systems_heavy
@pytest.mark.xdist_group("system-memos")
def test_native_search_asks_for_20_and_finds_a_memory_with_its_date(adapter_module):
    """The fake's vectors relate only equal texts, and MemOS's search keeps memories of relevance
    0.45 or more: the question is the memory the fake's reader makes of the first turn."""
    sessions, _ = driver.locomo_sessions(count=SESSIONS)
    first = sessions[0]["turns"][0]
    stamp = adapter_module.chat_time(sessions[0])
    memory = f"On {stamp}, {first['speaker']}: {first['text']}"
    run = driver.drive("memos", sessions=SESSIONS, protocol="native", limit=3,
                       question={"question": memory, "question_date": sessions[-1]["date"]})
    hello, search = run.replies["hello"], run.replies["search"]
    assert hello["settings"]["top_k"] == 20 and not cards.check(cards.load("memos"), "native",
                                                                  hello["settings"]).mismatches
    assert search["ok"] and "errors" not in search, search
    texts = [e["text"] for e in search["evidence"]]
    assert texts.count(memory) == 2, texts  # one in each speaker's memory, each with its date
    assert search["context"].startswith("Memories for user Caroline:") and memory in search["context"]
    assert "Memories for user Melanie:" in search["context"]
