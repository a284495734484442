"""The importer's declarative field maps (``common.pipeline.formats``): shapes read from YAML, not code.

Unit tests on the tiny fixtures: a user's map over nested rows, a directory of files with the
labels in a second file, LongMemEval rows carrying their own question types, validation of the
map itself, and one import by ``--format path/to/map.yaml``.
"""
from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from common.benchmarks.locomo import load_locomo
from common.benchmarks.longmemeval import load_longmemeval
from common.pipeline import formats
from common.pipeline.formats import SourceError, parse
from common.pipeline.importer import import_run, main
from tests.conftest import TINY_LOCOMO, rows
from tests.report_runs import TINY_LME

LOCOMO = load_locomo(TINY_LOCOMO)
LME = load_longmemeval(TINY_LME)


def _map(tmp_path: Path, name: str = "vendor.yaml", **doc) -> Path:
    path = tmp_path / name
    path.write_text(yaml.safe_dump(doc))
    return path


def _questions(memory: str) -> list:
    return [q for q in LOCOMO.questions if q.memory_id == memory]


def test_the_built_in_formats_are_yaml_maps():
    for name in formats.NEW_FORMATS:
        fm = formats.load_map(name)
        assert fm.file == formats.MAP_DIR / f"{name}.yaml" and fm.name == name and fm.builtin
    assert formats.load_map("hindsight").fields["excluded"] == "is_invalid"


def test_a_users_map_reads_nested_fields_and_a_values_label(tmp_path):
    qs = _questions("tiny-2")
    doc = {"results": [{"meta": {"conv": "tiny-2"}, "q": {"text": q.question}, "out": {"reply": f"r{i}"},
                        "grade": {"verdict": "CORRECT" if i % 2 == 0 else "WRONG"}} for i, q in enumerate(qs)]}
    doc["results"].reverse()  # not in question order: texts still find their questions
    (tmp_path / "res.json").write_text(json.dumps(doc))
    fm = _map(tmp_path, format="vendor", rows={"at": "results", "by": "row"},
              fields={"question": "q.text", "answer": "out.reply", "label": "grade.verdict",
                      "conversation": "meta.conv"},
              label={"kind": "values", "correct": ["CORRECT"], "wrong": ["WRONG"]})
    parsed = parse(str(fm), tmp_path / "res.json", LOCOMO.questions, LOCOMO.gold, "locomo")
    got = dict(zip(parsed.mapping.qids, [(r.answer, r.label) for r in parsed.rows]))
    assert got == {q.qid: (f"r{i}", int(i % 2 == 0)) for i, q in enumerate(qs)}
    assert parsed.fmt == "vendor" and parsed.own_accuracy()["k"] == sum(1 for i in range(len(qs)) if i % 2 == 0)


def test_a_directory_of_files_with_labels_in_a_second_file_keyed_by_question_id(tmp_path):
    src = tmp_path / "per_conversation"
    src.mkdir()
    expected = {}
    for memory in ("tiny-1", "tiny-2"):
        qs = _questions(memory)
        (src / f"{memory}.jsonl").write_text("".join(
            json.dumps({"id": q.qid, "question": q.question, "prediction": f"{q.qid}!"}) + "\n" for q in qs))
        expected |= {q.qid: n % 3 != 0 for n, q in enumerate(qs)}
    (tmp_path / "grades.json").write_text(json.dumps({"grades": [{"qid": k, "ok": v} for k, v in expected.items()]}))
    fm = _map(tmp_path, rows={"by": "row"}, fields={"question": "question", "answer": "prediction",
                                                    "question_id": "id", "conversation": "@file"},
              labels={"at": "grades", "question_id": "qid", "label": "ok"}, match="question_id")
    parsed = parse(str(fm), src, LOCOMO.questions, LOCOMO.gold, "locomo", labels=tmp_path / "grades.json")
    assert {q: r.label for q, r in zip(parsed.mapping.qids, parsed.rows)} == {k: int(v) for k, v in expected.items()}
    assert all(r.answer == f"{q}!" for q, r in zip(parsed.mapping.qids, parsed.rows))
    assert parsed.rows[0].where.startswith("tiny-1.jsonl:")
    with pytest.raises(SourceError, match=r"vendor\.yaml: labels: .*--labels"):
        parse(str(fm), src, LOCOMO.questions, LOCOMO.gold, "locomo")


def test_longmemeval_rows_carry_their_own_question_type_and_a_score_threshold(tmp_path):
    doc = [{"question_id": q.qid, "question": q.question, "hypothesis": "h", "type": g.question_type,
            "rubric": {"score": 0.25 * n}} for n, (q, g) in enumerate(zip(LME.questions, LME.gold))]
    doc[1]["type"] = "multi-session"  # a row stating another type than the benchmark's: listed
    (tmp_path / "lme.jsonl").write_text("".join(json.dumps(r) + "\n" for r in doc))
    fm = _map(tmp_path, rows={"by": "row"}, benchmarks=["longmemeval"],
              fields={"question": "question", "answer": "hypothesis", "question_id": "question_id",
                      "question_type": "type", "label": "rubric.score", "score": "rubric.score"},
              label={"kind": "threshold", "threshold": 0.5})
    parsed = parse(str(fm), tmp_path / "lme.jsonl", LME.questions, LME.gold, "longmemeval")
    assert parsed.mapping.qids == [q.qid for q in LME.questions]
    assert [r.label for r in parsed.rows] == [int(0.25 * n >= 0.5) for n in range(len(doc))]
    assert [r.score for r in parsed.rows] == [0.25 * n for n in range(len(doc))]
    (differs,) = parsed.mapping.category_differs
    assert differs.startswith("line 2 -> assist_0001: multi-session vs single-session-assistant")
    with pytest.raises(SourceError, match="format vendor is not a locomo format"):
        parse(str(fm), tmp_path / "lme.jsonl", LOCOMO.questions, LOCOMO.gold, "locomo")


@pytest.mark.parametrize("doc,key", [
    ({"rows": {"by": "row"}, "fields": {"question": "q", "answer": "a", "label": "l", "conversation": "c"},
      "label": {"kind": "fuzzy"}}, "label.kind"),
    ({"rows": {"by": "row"}, "fields": {"question": "q", "answer": "a", "label": "l", "conversation": "c",
                                        "speaker": "s"}}, "fields.speaker"),
    ({"rows": {"by": "key"}, "fields": {"question": "q", "label": "l"}}, "fields.answer"),
    ({"rows": {"by": "item"}, "fields": {"question": "q", "answer": "a", "label": "l"}}, "rows.item_conversation"),
    ({"rows": {"by": "row"}, "fields": {"question": "q", "answer": "a", "label": "l", "conversation": "c"},
      "label": {"kind": "values", "correct": []}}, "label.correct"),
])
def test_a_bad_map_is_one_line_naming_the_map_file_and_key(tmp_path, doc, key):
    fm = _map(tmp_path, "bad.yaml", **doc)
    with pytest.raises(SourceError) as err:
        formats.load_map(str(fm))
    assert str(err.value).startswith(f"{fm}: {key}: ") and "\n" not in str(err.value)


def test_a_label_that_reads_as_neither_is_an_error_naming_the_row(tmp_path):
    (tmp_path / "r.json").write_text(json.dumps({"tiny-1": [{"question": _questions("tiny-1")[0].question,
                                                             "answer": "x", "verdict": "maybe"}]}))
    fm = _map(tmp_path, rows={"by": "key"}, fields={"question": "question", "answer": "answer", "label": "verdict"},
              label={"kind": "values", "correct": ["yes"], "wrong": ["no"]})
    with pytest.raises(SourceError, match=r"r\.json: tiny-1\[0\]\.verdict: expected 'yes' or 'no', got 'maybe'"):
        parse(str(fm), tmp_path / "r.json", LOCOMO.questions, LOCOMO.gold, "locomo")


def test_an_import_by_a_map_file_writes_a_run_with_the_maps_labels(tmp_path, capsys):
    qs = [q for q in LOCOMO.questions if q.qid in {g.qid for g in LOCOMO.gold if g.category != 5}]
    (tmp_path / "res.json").write_text(json.dumps(
        {"tiny-1": [{"question": q.question, "answer": "a", "ok": n % 2} for n, q in enumerate(qs)
                    if q.memory_id == "tiny-1"]}))
    fm = _map(tmp_path, format="vendor", rows={"by": "key"},
              fields={"question": "question", "answer": "answer", "label": "ok"},
              label={"kind": "values", "correct": [1], "wrong": [0]}, ordered=True)
    run_dir = import_run(tmp_path / "res.json", "v", fmt=str(fm), aggregate=False,  # 09: tested elsewhere
                         overrides=(f"run.results_dir={tmp_path / 'results'}", f"data.path={TINY_LOCOMO}"))
    judged = rows(run_dir / "08_judge_published.jsonl")
    mine = [q for q in qs if q.memory_id == "tiny-1"]
    assert [(r["qid"], r["label"]) for r in judged] == [(q.qid, n % 2) for n, q in enumerate(mine)]
    assert judged[0]["prompt_id"] == "published:vendor"
    fp = json.loads((run_dir / "fingerprint.json").read_text())["run"]["components"]["imported"]
    assert fp["format"] == "vendor" and fp["format_map"]["file"] == str(fm)
    assert main([str(tmp_path / "res.json"), "--format", "nonsense", "--run", "w"]) == 2
    assert "unknown format 'nonsense'" in capsys.readouterr().err
