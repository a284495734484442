"""The in-process outside systems (mem0, A-MEM) under both protocols, driven through the fake server
and checked from what reaches the endpoint and the buffer: mem0 searches 30 memories per speaker
under native (its evaluation Makefile's --top_k 30) and 10 under common, and answers with its own
ANSWER_PROMPT, speaker_a first; A-MEM asks the LLM for keywords before it searches (its LoCoMo
evaluation's generate_query_llm) and searches with them; both report what they built, so an empty
memory is counted (reported, not inferred from empty searches)."""
from __future__ import annotations

import importlib.util
import json

import pytest

from common.systems import outcomes
from tests.conftest import TINY_LOCOMO, rows, run_overrides, run_stages
from tests.fake_openai import scripted

HAVE_MEM0 = importlib.util.find_spec("mem0") is not None
HAVE_AMEM = importlib.util.find_spec("agentic_memory") is not None
UP_TO_06 = ["preprocess", "episodes", "extract", "index", "plan", "retrieve"]
TURNS_EACH = 32  # more memories per speaker than the native depth (30)


def many_turns(path):
    """One LoCoMo conversation of one session where each speaker says TURNS_EACH similar things, the
    second speaker (speaker_b) first, so that every memory is near the question and the benchmark's
    speaker order differs from the order of first appearance."""
    turns = []
    for i in range(2 * TURNS_EACH):
        who = "Ben" if i % 2 == 0 else "Ana"
        turns.append({"speaker": who, "dia_id": f"D1:{i + 1}",
                      "text": f"I went hiking in the mountains with my dog on trail number {i + 1}."})
    conv = {"speaker_a": "Ana", "speaker_b": "Ben", "session_1_date_time": "1:56 pm on 8 May, 2023",
            "session_1": turns}
    qa = [{"question": "Where did Ana go hiking with her dog?", "answer": "the mountains", "evidence": ["D1:2"],
           "category": 4}]
    path.write_text(json.dumps([{"sample_id": "many-1", "conversation": conv, "qa": qa}]), encoding="utf-8")
    return path


def per_source(row) -> dict[str, int]:
    counts: dict[str, int] = {}
    for e in row["method_info"]["evidence"]:
        counts[e["source"]] = counts.get(e["source"], 0) + 1
    return counts


# ---------------------------------------------------------------------------- mem0
@pytest.mark.slow
@pytest.mark.skipif(not HAVE_MEM0, reason="mem0ai not installed (make install installs requirements-systems.txt)")
def test_mem0_searches_30_per_speaker_native_and_10_common_and_answers_with_its_own_prompt(tmp_path, fake_server,
                                                                                           monkeypatch):
    monkeypatch.setenv("OPENAI_BASE_URL", fake_server.base_url)
    data = many_turns(tmp_path / "many.json")
    runs = {}
    for protocol in ("common", "native"):
        sets = run_overrides(tmp_path, data, **{"method.name": "mem0", "systems.protocol": protocol,
                                                "run.name": protocol})
        start = len(fake_server.requests)
        runs[protocol] = run_stages("configs/locomo.yaml", sets, UP_TO_06 + ["answer"])
        runs[protocol + "_requests"] = list(zip(fake_server.requests[start:], fake_server.request_kinds[start:],
                                                fake_server.request_headers[start:]))
    for protocol, depth in (("common", 10), ("native", 30)):
        run = runs[protocol]
        (row,) = rows(run.path("retrievals"))
        assert per_source(row) == {"Ana": depth, "Ben": depth}, protocol  # each memory holds 32
        # what mem0 built is reported with the memory: its memories, per speaker in the order added
        marker = json.loads((run.dir / "06_retrieve" / "memory" / "many-1" / "ingested.json").read_text())
        assert marker["outcome"]["items"] == 2 * TURNS_EACH
        assert marker["outcome"]["built"] == {"memories": 2 * TURNS_EACH, "memories_first_speaker": TURNS_EACH,
                                              "memories_second_speaker": TURNS_EACH}
    # the answer each protocol sent: the harness's prompt under common, mem0's ANSWER_PROMPT under native
    answers = {p: [(body, headers) for body, kind, headers in runs[p + "_requests"] if kind == "answer"]
               for p in ("common", "native")}
    assert [h["x-prompt-id"] for _, h in answers["common"]] == ["answer_baseline_user"]
    assert [h["x-prompt-id"] for _, h in answers["native"]] == ["answer_mem0_user"]
    (body, _), = answers["native"]
    (message,) = body["messages"]
    assert message["role"] == "system"
    text = message["content"]
    # speaker_a's memories first, as mem0's search.py fills speaker_1 (Ben spoke first here)
    assert text.index("Memories for user Ana:") < text.index("Memories for user Ben:")
    ana = text.split("Memories for user Ana:", 1)[1].split("Memories for user Ben:", 1)[0]
    listed = json.loads(ana.strip())
    assert len(listed) == 30 and all(m.startswith("1:56 pm on 8 May, 2023: Ana said: ") for m in listed)
    # the common run's buffer keeps the order of first appearance (its rows' digests are unchanged)
    (common_row,) = rows(runs["common"].path("retrievals"))
    assert common_row["buffer_text"].startswith("Memories of Ben:")


@pytest.mark.skipif(not HAVE_MEM0, reason="mem0ai not installed (make install installs requirements-systems.txt)")
def test_a_memory_mem0_leaves_empty_is_counted_as_reported(tmp_path, fake_server, monkeypatch):
    monkeypatch.setenv("OPENAI_BASE_URL", fake_server.base_url)
    # a model that finds nothing worth remembering: the reply's one field, empty
    monkeypatch.setattr(scripted, "reply_mem0_extraction", lambda text: {"memory": []})
    sets = run_overrides(tmp_path, TINY_LOCOMO, **{"method.name": "mem0", "data.memories": "[tiny-1]"})
    run = run_stages("configs/locomo.yaml", sets, UP_TO_06)
    assert fake_server.counts_by_kind()["mem0_extraction"] > 0
    marker = json.loads((run.dir / "06_retrieve" / "memory" / "tiny-1" / "ingested.json").read_text())
    assert marker["outcome"]["items"] == 0
    summary = outcomes.summary(run.dir)
    assert summary["outcomes"]["empty_memory"] == 1 and "empty_memory_inferred" not in summary
    assert summary["built"] == {"memories": 0, "memories_first_speaker": 0, "memories_second_speaker": 0}


# ---------------------------------------------------------------------------- A-MEM
amem_only = pytest.mark.skipif(not HAVE_AMEM, reason="a-mem not installed (make install installs "
                                                     "requirements-systems.txt)")


@amem_only
def test_amem_asks_for_keywords_before_it_searches_and_searches_with_them(tmp_path, fake_server, monkeypatch):
    from common.systems.amem import JSON_SYSTEM, KEYWORDS_PROMPT

    monkeypatch.setenv("OPENAI_BASE_URL", fake_server.base_url)
    sets = run_overrides(tmp_path, TINY_LOCOMO, **{"method.name": "amem", "data.memories": "[tiny-1]",
                                                   "systems.protocol": "native"})
    run = run_stages("configs/locomo.yaml", sets, UP_TO_06)
    got = rows(run.path("retrievals"))
    kinds = fake_server.request_kinds
    asked = [r for r, k in zip(fake_server.requests, kinds) if k == "amem_keywords"]
    assert len(asked) == len(got) > 0
    # every keyword request comes after the memory's notes were built (06 ingests, then searches)
    assert kinds.index("amem_keywords") > max(i for i, k in enumerate(kinds) if k in ("amem_analyze", "amem_evolve"))
    by_question = {r["messages"][1]["content"]: r for r in asked}
    for row in got:
        prompt = KEYWORDS_PROMPT.format(question=row["question"])
        request = by_question[prompt]  # A-MEM's prompt, byte for byte, with its system message
        assert request["messages"][0] == {"role": "system", "content": JSON_SYSTEM}
        # the notes were searched with the keywords the endpoint gave, not with the question
        keywords = scripted.reply_amem_keywords(prompt)["keywords"]
        assert row["method_info"]["query"] == keywords != row["question"]
        assert any(c.get("prompt_id") == "amem_keywords" for c in row["llm_calls"])  # counted with the question
        # native: A-MEM's own rendering of the hits is the buffer
        assert row["buffer_text"].startswith("talk start time:") and "\tmemory keywords: " in row["buffer_text"]
    marker = json.loads((run.dir / "06_retrieve" / "memory" / "tiny-1" / "ingested.json").read_text())
    turns = sum(len(s["turns"]) for s in rows(run.path("sessions")))
    assert marker["outcome"]["items"] == turns and marker["outcome"]["built"] == {"notes": turns}


@amem_only
def test_an_unparsed_keyword_reply_is_searched_as_text_and_counted(tmp_path, fake_server, monkeypatch):
    monkeypatch.setenv("OPENAI_BASE_URL", fake_server.base_url)
    monkeypatch.setattr(scripted, "reply_amem_keywords", lambda text: {})  # no field the code wants
    sets = run_overrides(tmp_path, TINY_LOCOMO, **{"method.name": "amem", "data.memories": "[tiny-1]",
                                                   "data.question_limit": 2})
    run = run_stages("configs/locomo.yaml", sets, UP_TO_06)
    got = rows(run.path("retrievals"))
    assert got and all(r["method_info"]["query"] == "{}" for r in got)  # the reply's text, as the reference
    assert all(r["method_info"]["outcome"]["fallbacks"] == {"keywords_unparsed": 1} for r in got)
    assert all(r["buffer_text"].startswith("- ") for r in got)  # common: the harness's rendering
    assert outcomes.summary(run.dir)["search_fallbacks"] == {"keywords_unparsed": len(got)}


@amem_only
def test_an_empty_amem_memory_is_counted_as_reported(tmp_path, fake_server, monkeypatch):
    from common.systems import amem

    monkeypatch.setenv("OPENAI_BASE_URL", fake_server.base_url)
    monkeypatch.setattr(amem, "session_notes", lambda session, include_images: [])  # nothing to note
    sets = run_overrides(tmp_path, TINY_LOCOMO, **{"method.name": "amem", "data.memories": "[tiny-1]",
                                                   "data.question_limit": 1})
    run = run_stages("configs/locomo.yaml", sets, UP_TO_06)
    assert "amem_keywords" not in fake_server.counts_by_kind()  # nothing to search: no keyword call
    summary = outcomes.summary(run.dir)
    assert summary["outcomes"]["empty_memory"] == 1 and "empty_memory_inferred" not in summary


def test_the_dry_run_counts_amems_keyword_call_per_question_unless_it_searches_with_the_question(tmp_path):
    from common.core.config import load_config
    from common.pipeline import dryrun

    def search_rows(**options):
        sets = run_overrides(tmp_path, TINY_LOCOMO, **{"method.name": "amem",
                                                       "method.options": json.dumps(options)})
        est = dryrun.estimate(load_config(["configs/locomo.yaml"], sets))
        return [s for s in est["stages"] if s["stage"] == "06_retrieve" and "search calls" in s["basis"]]

    questions = sum(len(c["qa"]) for c in json.loads(TINY_LOCOMO.read_text()))
    (row,) = search_rows()
    assert row["role"] == "memory" and row["calls"] == questions and row["prompt_tokens"] > 0
    (row,) = search_rows(query="question")
    assert row["calls"] == 0


def test_amems_keyword_prompt_is_the_references_byte_for_byte():
    import hashlib

    from common.systems.amem import KEYWORDS_PROMPT

    # generate_query_llm's f-string in WujiangXu/A-mem@17ce6b6 test_advanced.py, its slot written
    # {question} (common/prompts/SOURCES.md), hashed from the reference's text.
    text = KEYWORDS_PROMPT.format(question="{question}")
    assert hashlib.sha256(text.encode("utf-8")).hexdigest() == \
        "31b2678c75ba5fb467774faedc19c2bf0c305bef88a51e0a403004e1df4b858e"
    assert "containing the selected text. \n\n" in text
    assert text.endswith('{"keywords": "keyword1, keyword2, keyword3"}')


# ---------------------------------------------------------------------------- SimpleMem
@pytest.mark.systems  # importing SimpleMem (LanceDB, pandas) takes 20 s: make test-slow runs it
@pytest.mark.skipif(importlib.util.find_spec("simplemem") is None,
                    reason="simplemem not installed (make install installs requirements-systems.txt)")
def test_simplemem_answers_itself_under_native_and_07_takes_its_answer(tmp_path, fake_server, monkeypatch):
    monkeypatch.setenv("OPENAI_BASE_URL", fake_server.base_url)
    sets = run_overrides(tmp_path, TINY_LOCOMO, **{
        "method.name": "simplemem", "embedding.backend": "openai", "embedding.model": "fake-embed",
        "embedding.base_url": fake_server.base_url, "data.memories": "[tiny-1]", "data.question_limit": 2,
        "systems.protocol": "native"})
    run = run_stages("configs/locomo.yaml", sets, UP_TO_06 + ["answer"])
    # SimpleMem's answer generator reached the endpoint once per question, through the gateway
    asked = [r for r in fake_server.requests
             if "messages" in r and scripted.SIMPLEMEM_ANSWER in r["messages"][-1]["content"]]
    got = rows(run.path("retrievals"))
    assert len(asked) == len(got) == 2
    replies = {scripted.reply_simplemem_answer(r["messages"][-1]["content"])["answer"] for r in asked}
    # 07 made no answer call of its own and took SimpleMem's answer, the JSON reply's answer field
    assert "answer" not in fake_server.counts_by_kind()
    answers = rows(run.path("answers"))
    assert {a["answer"] for a in answers} == replies and all(a["prompt_id"] == "native.simplemem" for a in answers)
    assert all(r["buffer_text"].startswith("[Context 1]") for r in got)  # its rendering, both protocols
