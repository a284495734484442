"""BEAM data: the adapter on the shared 100K tier, bad input, make data-beam, the oracle, the answer
prompt, evidence recall over source_chat_ids (no network: downloads go to file:// or a refused port)."""
from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
import sys
from collections import Counter
from pathlib import Path
from typing import Any, Callable

import pytest

from common.benchmarks import beam, beam_data
from common.benchmarks.base import DataError
from common.core import prompts
from common.core.config import load_config
from common.core.schema import Gold, Question, RetrievalRow
from common.evaluation.metrics import gold_evidence_recall
from common.method import answer, baselines
from common.method.render import MemoryView
from common.pipeline import dryrun
from common.pipeline.cli import main
from tests.conftest import REPO, run_overrides

SHARED = REPO.parent / "shared" / "data" / "beam"
TIER = SHARED / "100K"
pytestmark = pytest.mark.skipif(not TIER.exists(), reason=f"shared BEAM data not at {TIER}")


@pytest.fixture(scope="module")
def tier() -> Any:
    return beam.load_beam(TIER)


def tiny_tier(root: Path, chats: tuple[str, ...] = ("1", "2"), groups: int = 3) -> Path:
    """A small tier folder from the shared data: the first ``groups`` turn groups of each batch."""
    out = root / "100K"
    for n in chats:
        src = TIER / n
        chat = json.loads(beam.chat_file(src).read_text(encoding="utf-8"))
        for batch in chat:
            batch["turns"] = batch["turns"][:groups]
        (out / n / "probing_questions").mkdir(parents=True)
        (out / n / beam.chat_file(src).name).write_text(json.dumps(chat), encoding="utf-8")
        shutil.copy(src / beam.QUESTIONS_FILE, out / n / beam.QUESTIONS_FILE)
    return out


# ----------------------------------------------------------------------------- the shared tier
def test_adapter_on_the_shared_100k_tier(tier):
    assert len(tier.memory_ids) == 20 and tier.memory_ids[:2] == ["beam-100K-1", "beam-100K-2"]
    assert len(tier.questions) == 400
    assert Counter(g.question_type for g in tier.gold) == {a: 40 for a in beam.ABILITIES}
    assert sum(len(s.turns) for s in tier.sessions) == 5094
    assert all(s.date_time for s in tier.sessions)  # every batch has a time anchor in its messages
    # Only the question text reaches a Question; ids name no ability.
    assert all(set(vars(q)) == {"qid", "memory_id", "question", "question_date"} and not q.question_date
               for q in tier.questions)
    assert not any(a in q.qid for q in tier.questions for a in beam.ABILITIES)
    turn_ids = {(s.memory_id, t.dia_id) for s in tier.sessions for t in s.turns}
    gold = {g.qid: g for g in tier.gold}
    for g in tier.gold:
        assert g.answer and g.rubric and all(isinstance(r, str) for r in g.rubric)
        assert all((g.memory_id, e) in turn_ids for e in g.evidence)  # ids of the file read
        assert g.abstention == (g.question_type == "abstention")
        assert "question" not in g.details and "rubric" not in g.details and "difficulty" in g.details
    assert not any(g.evidence for g in tier.gold if g.abstention)  # no source_chat_ids there
    # The chat with a truncated file is read from it (the official runner's choice).
    assert beam.chat_file(TIER / "5").name == "chat_trunecated.json"
    assert beam.chat_file(TIER / "1").name == "chat.json"
    # Nested lists and the {first_..., second_...} mappings are flattened in order.
    ku = next(g for g in tier.gold if g.question_type == "knowledge_update")
    raw = ku.details["source_chat_ids"]
    assert ku.evidence == [str(i) for i in raw["original_info"] + raw["updated_info"]]
    assert gold["beam-100K-1:q1"].question_type == "abstention"


def test_committed_100k_checksums_agree_with_the_shared_copy():
    shared = set((SHARED / "SHA256SUMS").read_text().splitlines())
    ours = [f"{sha}  {rel}" for sha, rel in beam_data.checksums("100K")]
    assert len(ours) == 40 and set(ours) <= shared
    tier = TIER.parent
    assert [rel for _, rel in beam_data.checksums("100K")] == \
        [str(p.relative_to(tier)) for p in beam.data_files(TIER)]  # exactly the files the adapter reads
    big = beam_data.checksums("500K")
    assert len(big) == 70 and len({rel.split("/")[1] for _, rel in big}) == 35


def test_select_keeps_chats_by_id_or_number_and_n_questions_of_each(tier):
    kept = beam.select(tier, [1, "beam-100K-3"], 2)
    assert kept.memory_ids == ["beam-100K-1", "beam-100K-3"]
    assert Counter(q.memory_id for q in kept.questions) == {"beam-100K-1": 2, "beam-100K-3": 2}
    assert {g.qid for g in kept.gold} == {q.qid for q in kept.questions}
    with pytest.raises(ValueError, match=r"unknown BEAM chat\(s\) \['99'\]"):
        beam.select(tier, [99])


def test_limit_draws_each_chats_questions_across_abilities_seeded(tier):
    """The first N questions of a chat are all abstention (the file lists abilities in blocks):
    LIMIT=N draws across the abilities instead, the same draw for a chat whichever chats run."""
    first = {g.question_type for g in tier.gold if g.memory_id == "beam-100K-1"}
    assert len(first) == 10
    kept = beam.select(tier, None, 2)
    abilities = {g.question_type for g in kept.gold}
    assert len(kept.questions) == 40 and len(abilities) >= 8  # not 1 of 10 (abstention)
    for chat in {g.memory_id for g in kept.gold}:  # two abilities per chat
        assert len({g.question_type for g in kept.gold if g.memory_id == chat}) == 2
    ten = beam.select(tier, [1], 10)
    assert sorted(g.question_type for g in ten.gold) == sorted(beam.ABILITIES)  # one of each
    again = beam.select(tier, [1, 2], 2)
    assert [q.qid for q in again.questions if q.memory_id == "beam-100K-1"] == \
        [q.qid for q in kept.questions if q.memory_id == "beam-100K-1"]
    order = [q.qid for q in tier.questions]
    assert [q.qid for q in kept.questions] == sorted((q.qid for q in kept.questions), key=order.index)
    assert len(beam.select(tier, [1], 0).questions) == 0 and len(beam.select(tier, [1], 99).questions) == 20


def test_a_limited_beam_run_records_what_was_sampled(tmp_path, monkeypatch, capsys):
    root = tiny_tier(tmp_path, chats=("1",), groups=1)
    sets = run_overrides(tmp_path, root, **{"data.question_limit": 3})
    monkeypatch.setattr(sys, "argv", ["01_preprocess"] + [a for s in sets for a in ("--set", s)])
    main("01_preprocess", "beam")
    out = capsys.readouterr().out
    m = json.loads((tmp_path / "results" / "beam" / "t" / "01_preprocess.manifest.json").read_text())
    selection = m["selection"]
    assert selection["question_limit"] == 3
    assert "across its abilities" in selection["rule"] and "seed 42" in selection["rule"]
    assert sum(selection["by_category"].values()) == 3 and len(selection["by_category"]) == 3
    assert f"LIMIT=3: {selection['rule']}" in out


# ----------------------------------------------------------------------------- bad input
def _edit_chat(fn: Callable[[Any], None]) -> Callable[[Path], Path]:
    def mutate(root: Path) -> Path:
        path = beam.chat_file(root / "1")
        data = json.loads(path.read_text())
        fn(data)
        path.write_text(json.dumps(data))
        return path
    return mutate


def _edit_questions(fn: Callable[[Any], None]) -> Callable[[Path], Path]:
    def mutate(root: Path) -> Path:
        path = root / "2" / beam.QUESTIONS_FILE
        data = json.loads(path.read_text())
        fn(data)
        path.write_text(json.dumps(data))
        return path
    return mutate


def _cut(root: Path) -> Path:
    path = beam.chat_file(root / "2")
    text = path.read_text()
    path.write_text(text[: len(text) // 2])
    return path


def _no_chat(root: Path) -> Path:
    beam.chat_file(root / "2").unlink()
    return root / "2" / "chat.json"


BAD = [
    ("role", _edit_chat(lambda d: d[0]["turns"][0][0].pop("role")), "batch[0]: turns[0][0].role: missing"),
    ("id", _edit_chat(lambda d: d[1]["turns"][1][0].update(id="7")), "batch[1]: turns[1][0].id: expected int"),
    ("batch", _edit_chat(lambda d: d[2].pop("batch_number")), "batch[2]: batch_number: missing"),
    ("dup-id", _edit_chat(lambda d: d[1]["turns"][0][0].update(id=d[0]["turns"][0][0]["id"])), "duplicate message id"),
    ("ability", _edit_questions(lambda d: d.update(memory_magic=[])), "memory_magic: unknown ability"),
    ("rubric", _edit_questions(lambda d: d["event_ordering"][1].update(rubric="all of it")),
     "event_ordering[1]: rubric: expected list"),
    ("answer", _edit_questions(lambda d: d["summarization"][0].pop("ideal_summary")),
     "summarization[0]: missing required field (one of answer"),
    ("source-ids", _edit_questions(lambda d: d["temporal_reasoning"][0].update(source_chat_ids="12")),
     "temporal_reasoning[0]: source_chat_ids: expected message ids"),
    ("truncated", _cut, "invalid JSON"),
    ("no-chat", _no_chat, "chat file not found"),
]


def _preprocess(monkeypatch, capsys, tmp_path: Path, root: Path) -> tuple[object, str]:
    monkeypatch.setattr(sys, "argv", ["BEAM.01_preprocess", "--config", "configs/beam.yaml",
                                      *[x for s in run_overrides(tmp_path, root) for x in ("--set", s)]])
    with pytest.raises(SystemExit) as exc:
        main("preprocess", "beam")
    return exc.value.code, capsys.readouterr().err


@pytest.mark.parametrize(("what", "mutate", "field"), BAD, ids=[b[0] for b in BAD])
def test_bad_chat_or_question_file_is_one_line_naming_file_and_field(tmp_path, what, mutate, field):
    root = tiny_tier(tmp_path)
    path = mutate(root)
    with pytest.raises(DataError) as exc:
        beam.load_beam(root)
    message = str(exc.value)
    assert "\n" not in message and str(path) in message and field in message, message


def test_bad_file_through_01_keeps_the_earlier_run(tmp_path, monkeypatch, capsys):
    root = tiny_tier(tmp_path)
    monkeypatch.setattr(sys, "argv", ["BEAM.01_preprocess", "--config", "configs/beam.yaml",
                                      *[x for s in run_overrides(tmp_path, root) for x in ("--set", s)]])
    main("preprocess", "beam")
    capsys.readouterr()
    run_dir = tmp_path / "results" / "beam" / "t"
    before = {p.name: p.read_bytes() for p in run_dir.iterdir()}
    assert {"01_sessions.jsonl", "01_questions.jsonl", "01_gold.jsonl"} <= set(before)
    path = BAD[5][1](root)
    code, err = _preprocess(monkeypatch, capsys, tmp_path, root)
    assert isinstance(code, str) and code.startswith("error: ") and "\n" not in code and err == ""
    assert str(path) in code and "rubric" in code
    assert {p.name: p.read_bytes() for p in run_dir.iterdir()} == before


# ----------------------------------------------------------------------------- make data-beam
@pytest.mark.parametrize("size", ["2K", "1m", "20M"])
def test_data_beam_refuses_unknown_tiers_in_one_line(tmp_path, capsys, size):
    assert beam_data.main(["--size", size, "--out", str(tmp_path), "--base-url", "http://127.0.0.1:9"]) == 1
    err = capsys.readouterr().err
    assert len(err.splitlines()) == 1 and "unknown BEAM tier; expected 100K, 500K, 1M or 10M" in err
    assert f"SIZE={size}" in err
    assert not any(tmp_path.iterdir())


def test_the_1m_and_10m_lists_name_every_chat_of_the_pinned_tree():
    """1M: 35 chats (16 with chat_trunecated.json, which the official runner prefers); 10M: 10 chats,
    each read from chat_trunecated.json. Each file once, with a sha256 or a git blob id."""
    for size, chats, truncated in (("1M", 35, 16), ("10M", 10, 10)):
        rows = beam_data.checksums(size)
        by_chat: dict[str, list[str]] = {}
        for digest, rel in rows:
            tier, chat, *rest = rel.split("/")
            assert tier == size and len(digest) in (40, 64)
            by_chat.setdefault(chat, []).append("/".join(rest))
        assert sorted(by_chat, key=int) == [str(i) for i in range(1, chats + 1)]
        for files in by_chat.values():
            assert len(files) == 2 and files[1] == "probing_questions/probing_questions.json"
            assert files[0] in ("chat.json", "chat_trunecated.json")
        assert sum(f[0] == "chat_trunecated.json" for f in by_chat.values()) == truncated
        # The probing questions were all hashed; only chat files too large for the snapshot keep a blob id.
        assert all(len(d) == 64 for d, rel in rows if rel.endswith("probing_questions.json"))
    assert sum(len(d) == 40 for d, _ in beam_data.checksums("1M")) == 26
    assert all(len(d) == 40 for d, rel in beam_data.checksums("10M") if "chat" in rel.split("/")[2])


def test_a_git_blob_id_checks_a_file_as_git_does(tmp_path):
    f = tmp_path / "x"
    f.write_bytes(b"hello\n")  # `git hash-object` of this content
    assert beam_data.file_digest(f, "git blob id") == "ce013625030ba8dba906f756967f9e9ca394464a"
    assert beam_data.digest_kind("ce013625030ba8dba906f756967f9e9ca394464a") == "git blob id"
    assert beam_data.file_digest(f, "sha256") == hashlib.sha256(b"hello\n").hexdigest()


def test_data_beam_checks_files_listed_by_git_blob_id(tmp_path, capsys, monkeypatch):
    mirror = tmp_path / "mirror" / "1M" / "4"
    mirror.mkdir(parents=True)
    (mirror / "chat.json").write_bytes(b"[]\n")
    blob = hashlib.sha1(b"blob 3\0[]\n").hexdigest()
    monkeypatch.setattr(beam_data, "checksums", lambda size: [(blob, "1M/4/chat.json")])
    out = tmp_path / "data"
    assert beam_data.main(["--size", "1M", "--out", str(out), "--base-url", f"file://{tmp_path / 'mirror'}"]) == 0
    assert "1 file(s) downloaded" in capsys.readouterr().out and (out / "1M/4/chat.json").read_bytes() == b"[]\n"
    assert beam_data.download("1M", out, "file:///nonexistent") == 0  # kept: its blob id matches
    (mirror / "chat.json").write_bytes(b"{}\n")
    (out / "1M/4/chat.json").unlink()
    with pytest.raises(beam_data.DownloadError, match=rf"git blob id [0-9a-f]{{40}} differs from {blob}"):
        beam_data.download("1M", out, f"file://{tmp_path / 'mirror'}")
    assert not (out / "1M/4/chat.json").exists()


def test_data_beam_offline_fails_with_one_clear_line(tmp_path, capsys):
    """A refused port on 127.0.0.1 stands for no network; nothing is left behind."""
    assert beam_data.main(["--size", "100K", "--out", str(tmp_path), "--base-url", "http://127.0.0.1:9"]) == 1
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1 and err[0].startswith("data-beam: cannot download http://127.0.0.1:9/100K/1/chat.json")
    assert "(offline?)" in err[0]
    assert not [p for p in tmp_path.rglob("*") if p.is_file()]


def test_make_data_beam_is_wired_to_the_downloader(tmp_path):
    proc = subprocess.run(["make", "-s", "data-beam", "SIZE=2K", f"PY={sys.executable}"], cwd=REPO,
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode != 0
    ours = [line for line in proc.stderr.splitlines() if not line.startswith("make")]
    assert ours == ["data-beam: SIZE=2K: unknown BEAM tier; expected 100K, 500K, 1M or 10M"]


def test_data_beam_checks_every_sha256_and_keeps_good_files(tmp_path, capsys, monkeypatch):
    first_chats = beam_data.checksums("100K")[:6]  # chats 1, 10 (with its truncated file) and 11
    monkeypatch.setattr(beam_data, "checksums", lambda size: first_chats)
    base = f"file://{TIER.parent}"
    assert beam_data.main(["--size", "100K", "--out", str(tmp_path), "--base-url", base]) == 0
    assert "6 file(s) downloaded" in capsys.readouterr().out
    for _, rel in first_chats:
        assert (tmp_path / rel).read_bytes() == (TIER.parent / rel).read_bytes()
    assert beam_data.download("100K", tmp_path, base) == 0  # everything already there and checked
    # A file that changed upstream (or a corrupt mirror) is refused in one line and not kept.
    bad = tmp_path / "mirror"
    shutil.copytree(TIER / "1", bad / "100K" / "1")
    (bad / "100K" / "1" / "chat.json").write_text("[]")
    (tmp_path / "100K" / "1" / "chat.json").unlink()
    with pytest.raises(beam_data.DownloadError, match=r"sha256 [0-9a-f]{64} differs from ea71efd5"):
        beam_data.download("100K", tmp_path, f"file://{bad}")
    assert not (tmp_path / "100K" / "1" / "chat.json").exists()
    assert not list((tmp_path / "100K" / "1").glob("*.part"))


# ----------------------------------------------------------------------------- method side
def test_oracle_reads_source_chat_ids_and_says_when_there_are_none(tier):
    sessions = [s for s in tier.sessions if s.memory_id == "beam-100K-1"]
    view = MemoryView("beam-100K-1", sessions)
    golds = {g.qid: g for g in tier.gold if g.memory_id == "beam-100K-1"}
    qs = {q.qid: q for q in tier.questions if q.memory_id == "beam-100K-1"}
    ku = next(g for g in golds.values() if g.question_type == "knowledge_update")
    row = baselines.oracle(qs[ku.qid], view, ku, False)
    assert row.method_info["evidence_source"] == "evidence_turns" and row.dia_ids == sorted(
        set(ku.evidence), key=lambda d: view.position[d])
    abstain = next(g for g in golds.values() if g.abstention)
    empty = baselines.oracle(qs[abstain.qid], view, abstain, False)
    assert empty.method_info["evidence_source"] == "none" and empty.buffer_text == ""


OFFICIAL_RAG_PROMPT_SHA256 = "ed89b98d1024432a46bd297345961cf89d2429746daec37befb50db46e0c914a"


def test_beam_answer_prompt_is_the_official_template():
    """The reproduced template with its two slots written back as the official ``<...>`` markers."""
    text = prompts.load("answer_beam_user").replace("{context}", "<context>").replace("{question}", "<question>")
    assert hashlib.sha256(text.encode("utf-8")).hexdigest() == OFFICIAL_RAG_PROMPT_SHA256
    q = Question(qid="beam-100K-1:q3", memory_id="beam-100K-1", question="When did I start?")
    ret = RetrievalRow(qid=q.qid, memory_id=q.memory_id, question=q.question, mode="rag_turns", scope="",
                       reasoning_type="", selected=[], episode_ids=[], dia_ids=["4"], coverage={},
                       buffer_text="[4] user: I started in March.", buffer_tokens=9, seconds=0.0)
    messages = answer.answer_messages(q, None, ret, style="beam")
    assert [m["role"] for m in messages] == ["user"]
    assert "CONTEXT:\n[4] user: I started in March.\n\nQUESTION:\nWhen did I start?\n" in messages[0]["content"]
    assert answer.prompt_family(None, ret, "beam") == "answer_beam"


def test_evidence_recall_over_gold_evidence_is_benchmark_agnostic():
    golds = [Gold(qid="a", memory_id="m", answer="", category=0, evidence=["1", "2"], question_type="x"),
             Gold(qid="b", memory_id="m", answer="", category=0, evidence=["3"], question_type="y"),
             Gold(qid="c", memory_id="m", answer="", category=0, evidence=[], question_type="y"),
             Gold(qid="d", memory_id="m", answer="", category=0, evidence=["9"], question_type="x")]
    out = gold_evidence_recall(golds, {"a": ["2", "5"], "b": ["3"], "c": ["1"]}, lambda g: g.question_type)
    assert out["n"] == 3 and out["sum"] == pytest.approx(1.5) and out["recall"] == pytest.approx(0.5)
    assert out["no_gold_evidence"] == 1 and out["missing_retrieval"] == 1  # d counts 0, not dropped
    assert out["by_category"]["x"] == {"recall": 0.25, "sum": 0.5, "n": 2, "no_gold_evidence": 0}
    assert out["by_category"]["y"] == {"recall": 1.0, "sum": 1.0, "n": 1, "no_gold_evidence": 1}


def test_dry_run_counts_one_judge_call_per_rubric_item(tmp_path):
    root = tiny_tier(tmp_path, chats=("1",), groups=1)
    cfg = load_config(["configs/beam.yaml"], run_overrides(tmp_path, root, **{"method.name": "no_memory"}))
    judge = next(s for s in dryrun.estimate(cfg)["stages"] if s["role"] == "judge")
    golds = beam.load_beam(root).gold
    items = sum(len(g.rubric) for g in golds)
    align = sum(len(g.rubric) ** 2 for g in golds if g.question_type == "event_ordering")  # the R*R bound
    assert judge["calls"] == items + align and items > 20 and align > 0
    assert f"{items} rubric-item calls + at most {align} event-ordering alignment calls" in judge["basis"]
