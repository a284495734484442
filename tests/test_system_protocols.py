"""The two protocols of an outside system (systems.protocol: common | native), protocol cards, and
what a system reports beyond its evidence: what it built per memory, and a search's fallbacks and
errors, through both doors (in the harness's process, and a child's protocol replies)."""
from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from common.core.config import ConfigError, load_config
from common.core.fingerprint import run_components
from common.core.schema import Question, RetrievalRow
from common.method import answer as answer_mod
from common.systems import cards, outcomes
from tests.conftest import REPO, TINY_LOCOMO, rows, run_overrides, run_stages
from tests.test_process_systems import FIXTURES, child_env  # noqa: F401 - the module's fixture

CARD = {
    "system": "demo", "title": "Demo memory", "package": "demo==1.0", "version": "1.0",
    "reference": {"repository": "someone/demo", "commit": "0123abc", "path": "eval/locomo.py"},
    "embedding": {"reference": "text-embedding-3-small", "harness": "embedding.model"},
    "ingest": {"unit": "one message per turn", "speakers": "names", "dates": "session date",
               "captions": "appended"},
    "search": {"common": {"k": 10}, "native": {"k": 30}},
    "rendering": "one line per memory",
    "answer": {"reference": "its own prompt", "common": "harness", "native": "agent"},
    "departures": [{"id": "local", "what": "runs locally", "why": "no cloud here"},
                   {"id": "k10", "what": "k 10", "why": "the harness's common k", "protocols": ["common"]}],
}


def test_a_card_parses_and_counts_departures_per_protocol():
    card = cards.parse(CARD, "demo.yaml")
    assert [d.id for d in card.departures_for("common")] == ["local", "k10"]
    assert [d.id for d in card.departures_for("native")] == ["local"]
    assert card.answers_itself("native") and not card.answers_itself("common")


@pytest.mark.parametrize("broken, field", [
    ({"reference": {"repository": "a/b", "commit": "xyz", "path": "p"}}, "reference.commit"),
    ({"ingest": {"unit": "u", "speakers": "s", "dates": "d"}}, "captions"),
    ({"search": {"common": {"k": 1}}}, "search.native"),
    ({"answer": {"reference": "r", "common": "harness"}}, "native"),
    ({"departures": [{"id": "x", "what": "w", "why": "y", "protocols": ["both"]}]}, "protocols"),
    ({"departures": [{"id": "x", "what": "w", "why": "y"}, {"id": "x", "what": "v", "why": "z"}]}, "repeat"),
])
def test_a_broken_card_is_one_line_naming_the_file_and_the_field(broken, field):
    with pytest.raises(ConfigError) as err:
        cards.parse({**CARD, **broken}, "systems/demo/card.yaml")
    message = str(err.value)
    assert message.startswith("systems/demo/card.yaml") and field in message and "\n" not in message


def test_the_protocol_is_in_the_fingerprint_only_when_native():
    common = load_config(["configs/locomo.yaml"], [])
    native = load_config(["configs/locomo.yaml"], ["systems.protocol=native"])
    assert "systems_protocol" not in run_components(common, "x")
    assert run_components(native, "x")["systems_protocol"] == "native"
    with pytest.raises(ConfigError, match="systems.protocol"):
        load_config(["configs/locomo.yaml"], ["systems.protocol=vendor"])


def test_built_and_fallbacks_are_noted_in_the_current_account_only():
    outcomes.note_built(triples=3)  # no account: nothing to note, nothing raised
    with outcomes.active(outcomes.Account()) as acct:
        outcomes.note_built(triples=3, facts=2)
        outcomes.note_fallback("dense_passages", "no fact survived the filter")
        outcomes.note_fallback("dense_passages")
    assert acct.outcome()["built"] == {"facts": 2, "triples": 3}
    assert acct.search_outcome() == {"fallbacks": {"dense_passages": 2}}  # a fallback is not an error
    assert acct.samples == ["fallback dense_passages: no fact survived the filter"]
    assert outcomes.Account().search_outcome() == {}


def test_a_native_answer_is_taken_without_a_call_and_an_empty_one_is_a_failure():
    q = Question(qid="m:q1", memory_id="m", question="Where?")
    ret = RetrievalRow(qid="m:q1", memory_id="m", question="Where?", mode="x", scope="", reasoning_type="",
                       selected=[], episode_ids=[], dia_ids=[], coverage={}, buffer_text="ctx", buffer_tokens=1,
                       seconds=0.0, method_info={"native_answer": "  Paris "})
    row = answer_mod.native_answer(q, ret, "m-model", "x")
    assert row is not None and row.answer == "Paris" and not row.error and row.prompt_id == "native.x"
    ret.method_info["native_answer"] = ""
    assert answer_mod.native_answer(q, ret, "m-model", "x").error == "empty_answer"
    del ret.method_info["native_answer"]
    assert answer_mod.native_answer(q, ret, "m-model", "x") is None


def test_a_systems_own_answer_prompt_fills_only_its_slots(tmp_path, monkeypatch):
    from common.core import prompts

    monkeypatch.setattr(prompts, "PROMPT_DIR", tmp_path)
    prompts.load.cache_clear()
    (tmp_path / "answer_demo_user.txt").write_text("Memories:\n{context}\nQ: {question}\n", encoding="utf-8")
    try:
        q = Question(qid="m:q1", memory_id="m", question="Where?", question_date="2023-05-01")
        ret = RetrievalRow(qid="m:q1", memory_id="m", question="Where?", mode="x", scope="", reasoning_type="",
                           selected=[], episode_ids=[], dia_ids=[], coverage={}, buffer_text="- Paris", buffer_tokens=2,
                           seconds=0.0)
        messages = answer_mod.answer_messages(q, None, ret, style="demo")
        assert messages == [{"role": "user", "content": "Memories:\n- Paris\nQ: Where?"}]
        (tmp_path / "answer_demo_system.txt").write_text("Be brief.\n", encoding="utf-8")
        assert answer_mod.answer_messages(q, None, ret, style="demo")[0] == {"role": "system", "content": "Be brief."}
    finally:
        prompts.load.cache_clear()


ADAPTER = textwrap.dedent("""
    import logging, sys
    sys.path.insert(0, {systems!r})
    from _protocol import Adapter, serve

    class Demo(Adapter):
        system = "demo"
        answers = True

        def ingest(self, memory_id, sessions):
            self.note_built(passages=len(sessions))
            if sessions:
                self.note_built(dated=1)
            return 2, []

        def search(self, memory_id, question, question_date, limit):
            logging.getLogger("demo").error("reranker failed: %s", "timeout")
            self.note_fallback("dense")
            return [{{"text": "t", "source_turn_ids": []}}], "ctx " + self.protocol

        def answer(self, memory_id, question, question_date, limit):
            evidence, context = self.search(memory_id, question, question_date, limit)
            return evidence, context, "forty-two"

    serve(Demo())
""")


def test_the_child_protocol_reports_built_fallbacks_errors_and_answers(tmp_path):
    script = tmp_path / "adapter.py"
    script.write_text(ADAPTER.format(systems=str(REPO / "systems")), encoding="utf-8")
    requests = [{"op": "hello", "options": {"k": 3}, "protocol": "native"},
                {"op": "ingest", "memory_id": "m", "sessions": [{}, {}]},
                {"op": "search", "memory_id": "m", "question": "q", "limit": 3},
                {"op": "answer", "memory_id": "m", "question": "q", "limit": 3},
                {"op": "ingest", "memory_id": "m2", "sessions": []},
                {"op": "close"}]
    out = subprocess.run([sys.executable, str(script)], input="\n".join(json.dumps(r) for r in requests) + "\n",
                         capture_output=True, text=True, timeout=60, check=True).stdout
    hello, ingest, search, answered, second, close = [json.loads(line) for line in out.splitlines()]
    assert hello["answers"] is True
    assert ingest == {"ok": True, "items": 2, "errors": [], "built": {"passages": 2, "dated": 1}}
    assert search["context"] == "ctx native" and search["fallbacks"] == {"dense": 1}
    assert search["errors"] == ["demo: reranker failed: timeout"] and "answer" not in search
    assert answered["answer"] == "forty-two" and answered["fallbacks"] == {"dense": 1}
    assert second["built"] == {"passages": 0} and close == {"ok": True}  # no note leaks into the next request


@pytest.fixture()
def fake():
    from tests.fake_openai import FakeOpenAI

    with FakeOpenAI() as server:
        yield server


def _run(child_env, fake, tmp: Path, protocol: str, stages: list[str]):  # noqa: F811
    sets = run_overrides(tmp, TINY_LOCOMO, **{
        "method.name": "stdlib_turns", "embedding.backend": "openai", "embedding.model": "fake-embed",
        "embedding.base_url": fake.base_url, "data.memories": "[tiny-1]", "data.question_limit": 3,
        "systems.protocol": protocol,
        "method.options": json.dumps({"built": True, "fallback": True, "answers": True})})
    return run_stages("configs/locomo.yaml", sets, stages)


def test_native_protocol_takes_the_agents_answer_and_counts_what_was_built(child_env, fake, tmp_path,  # noqa: F811
                                                                           monkeypatch):
    monkeypatch.setenv("OPENAI_BASE_URL", fake.base_url)
    stages = ["preprocess", "retrieve", "answer"]
    native = _run(child_env, fake, tmp_path / "native", "native", stages)
    kinds = fake.counts_by_kind()
    answers = rows(native.path("answers"))
    assert answers and all(a["answer"].startswith("agent says:") and a["prompt_id"] == "native.stdlib_turns"
                           for a in answers)
    assert "answer" not in kinds  # the agent answered: no answer call of the harness
    marker = json.loads((native.dir / "06_retrieve" / "memory" / "tiny-1" / "ingested.json").read_text())
    assert marker["outcome"]["built"]["sessions"] >= 1 and marker["outcome"]["built"]["dated_turns"] > 0
    for r in rows(native.path("retrievals")):
        assert r["method_info"]["outcome"]["fallbacks"] == {"keyword_only": 1}
        assert r["method_info"]["outcome"]["errors"] == {"system_error": 1}
    # the common protocol: the same system searched (no agent), the harness's answer call
    common = _run(child_env, fake, tmp_path / "common", "common", stages)
    assert fake.counts_by_kind()["answer"] == len(rows(common.path("answers")))
    assert not any(a["answer"].startswith("agent says:") for a in rows(common.path("answers")))
    assert all("native_answer" not in r["method_info"] for r in rows(common.path("retrievals")))
