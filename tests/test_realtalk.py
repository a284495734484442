"""REALTALK: the adapter and its data quirks, the official context builder, the scorer's worked values
and each defect's switch (common.benchmarks.realtalk, common.method.official_context,
common.evaluation.realtalk). The official code itself is run in tests/test_realtalk_official.py."""
from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from common.benchmarks import realtalk, realtalk_errata
from common.benchmarks.base import DataError
from common.core.config import ConfigError, load_config
from common.core.io import write_jsonl
from common.core.llm import LLMClient
from common.core.schema import AnswerRow, Gold, to_dict
from common.evaluation import realtalk as scorer
from common.evaluation.metrics import locomo_f1
from common.method import official_context
from common.method.render import MemoryView
from tests.conftest import REPO

TINY = REPO / "tests" / "fixtures" / "realtalk_tiny"
SHARED = REPO.parent / "shared" / "data" / "realtalk"
need_shared = pytest.mark.skipif(not SHARED.exists(), reason=f"shared REALTALK data not at {SHARED}")


def view(data, memory: str) -> MemoryView:
    return MemoryView(memory, [s for s in data.sessions if s.memory_id == memory])


# --------------------------------------------------------------------------- the adapter
def test_the_adapter_reads_a_chat_folder_through_locomos_parsers():
    data = realtalk.load_realtalk(TINY)
    assert data.memory_ids == ["realtalk-1", "realtalk-2"]
    assert [q.qid for q in data.questions][:2] == ["realtalk-1:q0001", "realtalk-1:q0002"]
    s1 = data.sessions[0]
    assert s1.speakers == ["Maren", "tobias"] and s1.date_time == "02.01.2024, 10:00:00"
    assert s1.turns[0].text.startswith("Good morning!")  # clean_text
    assert s1.turns[4].blip_caption == "a room with pottery wheels"
    # Questions carry their text only; gold the category number and name, cleaned and raw evidence.
    assert set(to_dict(data.questions[0])) == {"qid", "memory_id", "question", "question_date"}
    g = {x.qid: x for x in data.gold}
    assert (g["realtalk-1:q0003"].category, g["realtalk-1:q0003"].question_type) == (3, "inference")
    assert g["realtalk-1:q0004"].evidence == ["D2:3"]
    assert g["realtalk-1:q0004"].raw_evidence == ["D2:3", "D2:4. D3:9"]
    assert g["realtalk-1:q0004"].details == {"quirks": ["dangling_evidence: D2:4. D3:9"]}
    # The events annotations are side data: nothing of them reaches a session.
    assert "plans something" not in json.dumps([to_dict(s) for s in data.sessions])


def test_memories_by_id_or_number_and_limit_drawn_across_the_categories():
    data = realtalk.load_realtalk(TINY)
    kept = realtalk.select(data, ["2"], None)
    assert kept.memory_ids == ["realtalk-2"] and len(kept.questions) == 3
    assert realtalk.select(data, ["realtalk-1"], None).memory_ids == ["realtalk-1"]
    with pytest.raises(ValueError, match="unknown REALTALK chat"):
        realtalk.select(data, ["7"], None)
    drawn = realtalk.select(data, None, 3)
    # Chat 1 lists two multi-hop questions first: its first 3 would miss a category; the draw covers all.
    by_chat = {m: sorted(g.question_type for g in drawn.gold if g.memory_id == m) for m in drawn.memory_ids}
    assert by_chat == {"realtalk-1": ["inference", "multi-hop", "temporal"],
                       "realtalk-2": ["inference", "multi-hop", "temporal"]}
    assert realtalk.select(data, None, 3).gold == drawn.gold  # seeded


@pytest.mark.parametrize("change, where", [
    (lambda d: d.pop("name"), "name: missing required field"),
    (lambda d: d["qa"][0].update(category=4), "qa[0].category: expected int 1-3, got 4"),
    (lambda d: d["session_2"][1].pop("clean_text"), "session_2[1].clean_text: missing required field"),
    (lambda d: d["qa"][1].pop("answer"), "qa[1].answer: missing required field"),
    (lambda d: d["session_1"][1].update(dia_id="D1:1"), "session_1[1].dia_id: duplicate 'D1:1'"),
    (lambda d: d.update(qa={}), "qa: expected list"),
])
def test_bad_input_is_one_line_naming_the_file_and_the_field(tmp_path, change, where):
    folder = tmp_path / "rt"
    shutil.copytree(TINY, folder)
    path = folder / "Chat_1_Maren_Tobias.json"
    doc = json.loads(path.read_text())
    change(doc)
    path.write_text(json.dumps(doc))
    with pytest.raises(DataError) as err:
        realtalk.load_realtalk(folder)
    message = str(err.value)
    assert "\n" not in message and str(path) in message and where in message, message


def test_a_folder_without_chat_files_or_with_broken_json_says_so(tmp_path):
    with pytest.raises(DataError, match="no Chat_<n>_<A>_<B>.json files"):
        realtalk.load_realtalk(tmp_path)
    (tmp_path / "Chat_3_A_B.json").write_text('{"name": ')
    with pytest.raises(DataError, match="Chat_3_A_B.json: invalid JSON"):
        realtalk.load_realtalk(tmp_path)


def test_speaker_alias_and_dangling_evidence_are_counted_per_question():
    ids = {"D1:1", "D1:2"}
    assert realtalk_errata.question_quirks("realtalk-1", "What are Kate's hobbies?", ["D1:1", "D3:4"], ids) == [
        "speaker_alias: Kate = Emi", "dangling_evidence: D3:4"]
    assert realtalk_errata.question_quirks("realtalk-2", "What are Kate's hobbies?", ["D1:2"], ids) == []
    assert realtalk_errata.question_quirks("realtalk-1", "What does Katelyn do?", [], ids) == []  # a whole word
    data = realtalk.load_realtalk(TINY)
    counts = realtalk_errata.counts(data.gold)
    assert (counts["evidence_entries"], counts["evidence_entries_naming_no_turn"],
            counts["questions_dangling_evidence"]) == (12, 2, 2)
    assert [x["session"] for x in realtalk_errata.session_numbering(data.sessions)] == ["session_3", "session_3"]


@need_shared
def test_the_release_has_728_questions_and_its_quirks_are_the_committed_list():
    data = realtalk.load_realtalk(SHARED)
    assert len(data.memory_ids) == 10 and len(data.questions) == 728
    by = {c: sum(g.question_type == c for g in data.gold) for c in realtalk.CATEGORY_NAMES.values()}
    assert by == {"multi-hop": 301, "temporal": 319, "inference": 108}
    counts = realtalk_errata.counts(data.gold)
    assert counts["questions_speaker_alias"] == 35
    assert (counts["evidence_entries"], counts["evidence_entries_naming_no_turn"]) == (1742, 188)
    assert all(g.memory_id == "realtalk-1" for g in data.gold if "speaker_alias: Kate = Emi" in
               g.details.get("quirks", []))
    committed = (REPO / "configs" / "realtalk_errata.yaml").read_text(encoding="utf-8")
    regenerated = REPO / "errata.yaml"
    try:
        assert realtalk.main(["--data", str(SHARED), "--errata", str(regenerated)]) == 0
        assert regenerated.read_text(encoding="utf-8") == committed
    finally:
        regenerated.unlink(missing_ok=True)
    assert "status: official" in committed


@need_shared
def test_the_shared_folder_is_the_official_release_file_by_file():
    from common.benchmarks import checksums

    files = realtalk.ADAPTER.data_files(SHARED)
    assert len(realtalk.ADAPTER.official_sha256) == 10
    check = checksums.check(realtalk.ADAPTER.official_sha256, SHARED, folder=True, read=[f.name for f in files])
    assert check["status"] == "official"


# --------------------------------------------------------------------------- the official context
def test_official_context_shows_every_session_twice_newest_first_and_chronological_once():
    data = realtalk.load_realtalk(TINY)
    v = view(data, "realtalk-1")
    blocks = [official_context.session_block(s) for s in v.sessions]
    header = ("Below is a conversation between two people: Maren and tobias. The conversation takes place over "
              "multiple days and the date of each conversation is written at the beginning of the conversation.\n\n")
    text, sessions, info = official_context.build(v, "official", None, 120_000)
    assert text == header + blocks[2] + blocks[2] + blocks[1] + blocks[1] + blocks[0] + blocks[0]
    assert info["copies_per_session"] == 2 and info["sessions_dropped_oldest"] == 0
    chrono, _, _ = official_context.build(v, "chronological", None, 120_000)
    assert chrono == header + blocks[0] + blocks[1] + blocks[2]
    assert blocks[0].startswith("DATE: 02.01.2024, 10:00:00\nCONVERSATION:\nMaren said, \"Good morning!")
    assert 'Maren said, "Here is the studio where the course happens."\nMaren shared, an image of ' \
           '"a room with pottery wheels".\n' in blocks[0]
    assert blocks[0].endswith("\n\n")


def test_the_context_budget_drops_the_oldest_sessions_of_both_copies():
    data = realtalk.load_realtalk(TINY)
    v = view(data, "realtalk-1")
    full, _, _ = official_context.build(v, "official", None, 120_000)
    from common.core.tokens import count_tokens

    budget = count_tokens(full) - 5  # too small by a little: the oldest session goes, twice
    text, sessions, info = official_context.build(v, "official", None, budget)
    assert [s.session_id for s in sessions] == ["session_2", "session_3"] and info["sessions_dropped_oldest"] == 1
    assert "Good morning!" not in text and count_tokens(text) <= budget


def _header_in_a_fresh_process(hash_seed_env: str, context_hash_seed: object) -> str:
    """The official builder's first line, built in a child interpreter with that PYTHONHASHSEED."""
    code = ("import sys; from common.benchmarks import realtalk; from common.method import official_context; "
            "from common.method.render import MemoryView; d = realtalk.load_realtalk(sys.argv[1]); "
            "v = MemoryView('realtalk-2', [s for s in d.sessions if s.memory_id == 'realtalk-2']); "
            f"print(official_context.build(v, 'official', {context_hash_seed!r}, 120000)[0].splitlines()[0])")
    env = {"PYTHONHASHSEED": hash_seed_env, "PATH": "/usr/bin:/bin"}
    return subprocess.run([sys.executable, "-c", code, str(TINY)], cwd=REPO, env=env, capture_output=True,
                          text=True, check=True).stdout.strip()


def seeds_with_both_orders(names: tuple[str, ...]) -> tuple[int, int]:
    """Two PYTHONHASHSEED values under which set() orders the two names differently."""
    orders: dict[tuple[str, ...], int] = {}
    for seed in range(40):
        orders.setdefault(official_context.hash_order(names, seed), seed)
        if len(orders) == 2:
            a, b = orders.values()
            return a, b
    raise AssertionError("two names: both orders occur among 40 seeds")


def test_the_header_order_follows_the_hash_seed_only_when_asked():
    """Defect: the official header names list(set(speakers)), an order set by the process's hash seed.
    Default: their order of first appearance, the same prompt under any PYTHONHASHSEED (fails without
    the fix: a header built from set() differs between the two seeds below)."""
    a, b = seeds_with_both_orders(("Ruben", "Ilse"))
    default = {_header_in_a_fresh_process(str(s), None) for s in (a, b)}
    assert default == {"Below is a conversation between two people: Ruben and Ilse. The conversation takes place "
                       "over multiple days and the date of each conversation is written at the beginning of the "
                       "conversation."}
    # context_hash_seed: N reproduces the official order of PYTHONHASHSEED=N, whatever this process's seed.
    official = {s: _header_in_a_fresh_process("0", s) for s in (a, b)}
    assert official[a] != official[b]
    assert {official[s].split(": ")[1].split(".")[0] for s in (a, b)} == {"Ruben and Ilse", "Ilse and Ruben"}


def test_official_and_chronological_builders_are_realtalk_only():
    with pytest.raises(ConfigError, match="method.context_builder: 'official' is REALTALK's"):
        load_config(["configs/locomo.yaml"], ["method.context_builder=official"])
    cfg = load_config(["configs/realtalk.yaml"], ["method.context_builder=official"])
    assert cfg.method.context_builder == "official"


# --------------------------------------------------------------------------- the official scoring
@pytest.mark.parametrize("prediction, gold, category, expected", [
    # Category 1: each comma-separated gold part earns its best match among the predicted parts.
    ("pottery", "pottery, sailing", 1, 0.5),
    ("sailing, pottery", "pottery, sailing", 1, 1.0),
    ("pottery and sailing", "pottery, sailing", 1, 2 * (1 / 2) * 1 / (1 / 2 + 1)),  # "and" dropped, 2 tokens
    # Category 3: only the gold up to its first ';' counts.
    ("yes", "yes; probably, his uncle owns a boat", 3, 1.0),
    ("probably, his uncle owns a boat", "yes; probably, his uncle owns a boat", 3, 0.0),
    # Category 2: plain token F1 over normalised, Porter-stemmed tokens.
    ("in January 2024", "January 2024", 2, 0.8),
    ("Jan 5", "January 5, 2024", 2, 2 * (1 / 2) * (1 / 3) / (1 / 2 + 1 / 3)),
])
def test_token_f1_worked_values(prediction, gold, category, expected):
    assert locomo_f1(prediction, gold, category) == pytest.approx(expected)


class Replies:
    """An LLMClient stand-in: the recorded replies in order, each request logged."""

    def __init__(self, *texts: str, model: str = "judge-model"):
        self.texts, self.sent, self.model = list(texts), [], model

    def settings(self, role):
        return SimpleNamespace(model=self.model)

    def complete(self, role, messages, **kw):
        self.sent.append((role, messages, kw))
        text = self.texts.pop(0)
        return SimpleNamespace(text=text, record=lambda pid: {"prompt_id": pid, "model": self.model,
                                                              "cache_key": f"k{len(self.sent)}", "cached": False,
                                                              "usage": {"prompt_tokens": 5}, "latency": 0.01})


def test_gpt_score_reads_the_reply_as_generate_json_does_and_retries_a_non_json_reply():
    client = Replies("The score is 0.7", '```json\n{"score": 0.7}\n```', '  {"score": 0.7}\n')
    value, error, calls = scorer.gpt_score(client, "Q?", "gold", "pred")  # type: ignore[arg-type]
    assert (value, error, len(calls)) == (0.7, "", 3)
    # Each retry is its own request (a cache entry of its own), as the official loop sends it again.
    assert [kw.get("repeat", 0) for _, _, kw in client.sent] == [0, 1000, 2000]
    assert all(kw["json_mode"] and role == "gpt_score" for role, _, kw in client.sent)
    four = Replies(*["not json"] * 5)
    value, error, calls = scorer.gpt_score(four, "Q?", "gold", "pred")  # type: ignore[arg-type]
    assert value is None and len(calls) == 4 and error.startswith("judge_parse_error: gpt score reply is not JSON")


@pytest.mark.parametrize("reply, why", [
    ('{"label": 1}', "no 'score'"), ('[0.5]', "not an object"), ('{"score": "0.8"}', "not a number"),
    ('{"score": 8}', "not in [0, 1]"), ('{"score": NaN}', "not a number"), ('{"score": true}', "not a number"),
])
def test_a_gpt_score_reply_without_a_usable_score_is_a_counted_failure_without_retry(reply, why):
    client = Replies(reply)
    value, error, calls = scorer.gpt_score(client, "Q?", "gold", "pred")  # type: ignore[arg-type]
    assert value is None and len(calls) == 1 and why in error and error.startswith("judge_parse_error")


def test_the_gpt_score_prompt_is_filled_in_one_pass():
    text = scorer.gpt_messages("What is {answer}?", "Pixel", "a {prediction}")[0]["content"]
    assert "Question: What is {answer}?\nGround truth: Pixel\nModel's prediction: a {prediction}\n" in text
    assert text.endswith('{\n    "score": <score>,\n}\n')


def test_the_gpt_score_model_is_the_judges_unless_the_official_defect_is_on():
    """Defect: evaluate_memory.py scores with qa_model, the model that answered (fails without the switch)."""
    cfg = load_config(["configs/realtalk.yaml"], ["models.judge.model=judge-m", "models.answer.model=answer-m"])
    assert cfg.role("gpt_score").model == "judge-m"
    official = load_config(["configs/realtalk.yaml"], ["models.judge.model=judge-m", "models.answer.model=answer-m",
                                                      "score.realtalk_gpt_score_model=answer"])
    assert official.role("gpt_score").model == "answer-m" and official.role("judge").model == "judge-m"


def test_make_doctor_probes_the_gpt_score_role_and_asks_it_for_json():
    from common.pipeline import doctor

    cfg = load_config(["configs/realtalk.yaml"], ["method.name=full_context"])
    assert doctor.roles_in_use(cfg) == ["answer", "judge", "gpt_score"]
    assert "gpt_score" in doctor.JSON_ROLES["realtalk"]


def test_official_sampling_sends_no_temperature_and_no_seed():
    """Defect: the official client sets no temperature (nor seed): the API's default sampling. Default here:
    temperature 0 and seed 42 (fails without the switch: the body would carry them)."""
    msgs = [{"role": "user", "content": "x"}]
    harness = load_config(["configs/realtalk.yaml"])
    official = load_config(["configs/realtalk.yaml"], ["score.realtalk_sampling=official"])
    for role in ("answer", "gpt_score"):
        body = LLMClient.request_body(harness.role(role), msgs, json_mode=False)
        assert (body["temperature"], body["seed"]) == (0.0, 42)
        body = LLMClient.request_body(official.role(role), msgs, json_mode=True)
        assert "temperature" not in body and "seed" not in body
    assert LLMClient.request_body(official.role("judge"), msgs, json_mode=True)["temperature"] == 0.0
    on_locomo = load_config(["configs/locomo.yaml"], ["score.realtalk_sampling=official"])
    assert LLMClient.request_body(on_locomo.role("answer"), msgs, json_mode=False)["temperature"] == 0.0


# --------------------------------------------------------------------------- aggregation
def _run_dir(tmp_path: Path, golds: list[Gold], answers: dict[str, str], judge: dict[str, tuple]) -> SimpleNamespace:
    d = tmp_path / "run"
    d.mkdir()
    (d / "config.resolved.yaml").write_text("benchmark: realtalk\n")
    write_jsonl(d / "01_gold.jsonl", [to_dict(g) for g in golds])
    write_jsonl(d / "07_answer.jsonl", [to_dict(AnswerRow(qid=q, memory_id=q.split(":")[0], question="?", answer=a,
                                                                  model="m", prompt_id="p"))
                                        for q, a in answers.items()])
    write_jsonl(d / "08_judge_j.jsonl", [{"qid": q, "judge": "j", "judge_model": "m", "prompt_id": "p", "label": lab,
                                          "error": "" if lab is not None else "judge_parse_error: x",
                                          "scores": {"gpt_score": s, "gpt_score_error": "" if s is not None else e,
                                                     "gpt_score_model": "m"}}
                                         for q, (lab, s, e) in judge.items()])
    return SimpleNamespace(dir=d, cfg=SimpleNamespace(run=SimpleNamespace(name="t")),
                           path=lambda name: d / {"gold": "01_gold.jsonl", "answers": "07_answer.jsonl",
                                                  "retrievals": "06_retrieve.jsonl"}[name],
                           judge_path=lambda j: d / f"08_judge_{j}.jsonl")


def test_aggregation_gives_each_categorys_mean_and_never_averages_the_three_scores(tmp_path):
    golds = [Gold("realtalk-1:q1", "realtalk-1", "pottery, sailing", 1, question_type="multi-hop"),
             Gold("realtalk-1:q2", "realtalk-1", "January 2024", 2, question_type="temporal"),
             Gold("realtalk-2:q1", "realtalk-2", "Pixel", 1, question_type="multi-hop"),
             Gold("realtalk-2:q2", "realtalk-2", "yes; it is", 3, question_type="inference")]
    answers = {"realtalk-1:q1": "pottery", "realtalk-1:q2": "in January 2024", "realtalk-2:q1": "Pixel",
               "realtalk-2:q2": "yes"}
    judge = {"realtalk-1:q1": (0, 0.5, ""), "realtalk-1:q2": (1, None, "judge_parse_error: gpt score: x"),
             "realtalk-2:q1": (1, 1.0, ""), "realtalk-2:q2": (None, 0.8, "")}
    m = scorer.aggregate(_run_dir(tmp_path, golds, answers, judge), ["j"])
    f1 = m["f1_official"]
    assert f1["by_category"]["multi-hop"]["mean"] == 0.75 and f1["by_category"]["temporal"]["mean"] == 0.8
    assert f1["by_category"]["inference"]["mean"] == 1.0 and f1["overall"]["mean"] == round((0.5 + .8 + 1 + 1) / 4, 4)
    g = m["judges"]["j"]["gpt_score"]
    assert g["by_category"]["multi-hop"]["mean"] == 0.75 and g["by_category"]["temporal"]["mean"] == 0.0
    assert g["overall"]["mean"] == round(2.3 / 4, 4) and g["clean_overall"] == round(2.3 / 3, 4)
    assert g["failures"] == {"judge_parse_error": 1}
    j = m["judges"]["j"]
    assert (j["overall"]["k"], j["overall"]["n"], j["overall"]["n_failed"]) == (2, 4, 1)
    assert j["by_category"]["multi-hop"]["k"] == 1
    assert f1["by_chat"]["realtalk-1"]["multi-hop"] == 0.5


def test_a_row_whose_gpt_score_failed_is_redone_and_one_without_an_answer_is_not():
    assert scorer.row_failed({"label": 1, "scores": {"gpt_score": None, "gpt_score_error": "timeout: x"}})
    assert not scorer.row_failed({"label": 1, "scores": {"gpt_score": 0.5, "gpt_score_error": ""}})
    assert not scorer.row_failed({"label": None, "scores": {"gpt_score": None, "gpt_score_error": "no_answer"}})


def test_no_answer_makes_no_gpt_score_call():
    client = Replies()
    row = scorer.judge_realtalk(client, "j", "judge_locomo_mem0",  # type: ignore[arg-type]
                                AnswerRow(qid="q", memory_id="m", question="Q?", answer=None, model="a", prompt_id="p",
                                          error="timeout: x"),
                                Gold("q", "m", "gold", 1))
    assert client.sent == [] and row.label is None and row.scores["gpt_score_error"] == "no_answer"
