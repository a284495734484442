"""BEAM's official rubric scoring (common.evaluation.beam) against the official code itself.

The official ``compute_metrics.py``, ``report_results.py`` and ``prompts.py`` are read at test time
from the fetched repository (``BEAM_REPO``, default the workplace mirror) into the test's tmp dir
and their pure functions called with stub LLM objects that return recorded judge replies; their
heavy imports (nltk, rouge, sentence-transformers, langchain via src.llm) are fake modules put
into ``sys.modules`` for the test only. Nothing of the official code is vendored. The official
module imports ``json_repair`` (pinned in requirements.txt), so the test needs it installed.
"""
from __future__ import annotations

import dataclasses
import importlib
import json
import os
import subprocess
import sys
import types
from pathlib import Path
from types import SimpleNamespace

import pytest

from common.core.io import write_jsonl
from common.core.schema import AnswerRow, Gold, to_dict
from common.evaluation import beam

BEAM_REPO = Path(os.environ.get("BEAM_REPO", "/work/.mirror/mohammadtavakoli78+BEAM/repo"))
FILES = ("src/evaluation/compute_metrics.py", "src/evaluation/report_results.py", "src/prompts.py")

# Recorded replies: the rubric item a prompt holds -> the judge's reply text.
REPLIES = {
    "Says there is no information": '{"score": 1.0, "reason": "it declines"}',
    "Mentions the budget": '{\n   "score": 0.5,\n   "reason": "partly"\n}',
    # Fenced with a missing brace: the strict parse fails, json_repair repairs it.
    "Names the date": '```json\n{"score": 0.5, "reason": "half of it"\n```',
    # Single quotes after prose: the span is found but is not JSON -> repaired.
    "Gives the amount": "Here: {'score': 1, 'reason': 'single quotes'}",
    "States the deadline": '{"score": 0.0, "reason": "missing"}',
    "Core functionality": '{"score": 1.0, "reason": "first"}',
    "Transaction error handling": '{"score": 0.5, "reason": "second, vaguely"}',
    "Security and deployment": '{"score": 0.0, "reason": "absent"}',
}
# Event-ordering alignment: (reference item, system line) pairs the judge calls the same.
SAME = {("Core functionality", "2. Set up the core features"),
        ("Security and deployment", "1. Hardened security before launch"),
        ("Transaction error handling", "3. Handled transaction errors")}
EO_RUBRIC = ["Core functionality", "Transaction error handling", "Security and deployment"]
EO_ANSWER = "1. Hardened security before launch\n2. Set up the core features\n\n3. Handled transaction errors"
QUESTIONS = {
    "abstention": (["Says there is no information"], "No details were given about that."),
    "information_extraction": (["Mentions the budget", "Names the date", "Gives the amount"], "About 68k, in May."),
    "temporal_reasoning": (["Names the date", "States the deadline"], "It was in spring."),
    "event_ordering": (EO_RUBRIC, EO_ANSWER),
}


def reply_for(request) -> str:
    """The recorded reply of one request (a prompt string, or system+user messages)."""
    if isinstance(request, list):  # an alignment call
        user = request[1]["content"]
        first = user.split("First snippet: ", 1)[1].split(" \n", 1)[0]
        second = user.split("Second snippet: ", 1)[1].rsplit("\n", 1)[0]
        return "YES" if (first, second) in SAME else "NO"
    if "RUBRIC CRITERION" not in request:  # the official event-ordering fact extraction
        return "1. a fact"
    item = next(k for k in REPLIES if f"RUBRIC CRITERION (what to check): {k}\n" in request)
    return REPLIES[item]


class StubLLM:
    """The official code's ``model``: ``invoke`` returns the recorded reply and logs the request."""

    def __init__(self):
        self.requests: list = []

    def invoke(self, request):
        self.requests.append(request)
        return SimpleNamespace(content=reply_for(request))


def _fake_module(name: str, **attrs) -> types.ModuleType:
    mod = types.ModuleType(name)
    mod.__dict__.update(attrs)
    return mod


@pytest.fixture(scope="module")
def official(tmp_path_factory):
    if not (BEAM_REPO / "HEAD").exists() and not (BEAM_REPO / ".git").exists():
        pytest.skip(f"the official BEAM repository is not at {BEAM_REPO} (set BEAM_REPO to a clone)")
    root = tmp_path_factory.mktemp("beam_official")
    for f in FILES:
        text = subprocess.run(["git", "-C", str(BEAM_REPO), "show", f"HEAD:{f}"], check=True,
                              capture_output=True, text=True).stdout
        (root / f).parent.mkdir(parents=True, exist_ok=True)
        (root / f).write_text(text, encoding="utf-8")
    for pkg in ("src", "src/evaluation"):
        (root / pkg / "__init__.py").write_text("", encoding="utf-8")
    fakes = {
        "nltk": _fake_module("nltk", download=lambda *a, **k: True, word_tokenize=str.split),
        "nltk.translate": _fake_module("nltk.translate"),
        "nltk.translate.bleu_score": _fake_module("nltk.translate.bleu_score", sentence_bleu=None,
                                                  SmoothingFunction=None),
        "rouge_score": _fake_module("rouge_score", rouge_scorer=None),
        "sentence_transformers": _fake_module("sentence_transformers", SentenceTransformer=None, util=None),
        "src.llm": _fake_module("src.llm"),  # langchain clients with API keys: never built here
    }
    saved = {k: sys.modules.get(k) for k in [*fakes, "src", "src.evaluation", "src.prompts",
                                             "src.evaluation.compute_metrics", "src.evaluation.report_results"]}
    sys.modules.update(fakes)
    for k in ("src", "src.evaluation", "src.prompts"):
        sys.modules.pop(k, None)
    sys.path.insert(0, str(root))
    try:
        cm = importlib.import_module("src.evaluation.compute_metrics")
        rr = importlib.import_module("src.evaluation.report_results")
        prompts_mod = importlib.import_module("src.prompts")
        yield SimpleNamespace(cm=cm, rr=rr, prompts=prompts_mod)
    finally:
        sys.path.remove(str(root))
        for k, v in saved.items():
            if v is None:
                sys.modules.pop(k, None)
            else:
                sys.modules[k] = v


def harness_scores(ability, rubric, response, question="Q?", fill=False):
    sent: list = []

    def call(messages, prompt_id):
        sent.append((prompt_id, messages))
        return reply_for(messages[0]["content"] if prompt_id == beam.RUBRIC_PROMPT else messages)

    return beam.question_scores(call, ability, rubric, response, question, fill), sent


def test_prompts_are_the_official_strings(official):
    from common.core import prompts

    assert prompts.load(beam.RUBRIC_PROMPT) == official.prompts.unified_llm_judge_base_prompt
    msgs = beam.align_messages("A {second}", "B")
    stub = StubLLM()
    official.cm.llm_equivalence("A {second}", "B", stub)
    assert stub.requests == [msgs]


@pytest.mark.parametrize("ability", sorted(QUESTIONS))
def test_scores_and_requests_equal_the_official_functions(official, ability):
    rubric, response = QUESTIONS[ability]
    stub = StubLLM()
    ref = getattr(official.cm, f"evaluate_{ability}")(rubric=rubric, llm_response=response,
                                                        probing_question="Q?", model=stub)
    ours, sent = harness_scores(ability, rubric, response)
    official_requests = stub.requests
    if ability == "event_ordering":
        # The official scorer's fact-extraction call (its result is overwritten before use) is not made.
        assert "RUBRIC CRITERION" not in official_requests[0]
        official_requests = official_requests[1:]
        for key in ("precision", "recall", "f1", "tau_norm", "final_score"):
            assert ours["ordering"][key] == pytest.approx(ref[key])
        assert ours["official"] == pytest.approx(ref["tau_norm"])
        assert ours["rubric_judge"]["float"] == pytest.approx(ref["llm_judge_score"])
    else:
        assert ours["official"] == pytest.approx(ref["llm_judge_score"])
    assert [r["score"] for r in ref["llm_judge_responses"]] == [i["score"] for i in ours["items"]]
    ours_requests = [m[0]["content"] if pid == beam.RUBRIC_PROMPT else m for pid, m in sent]
    assert ours_requests == official_requests  # byte-identical prompts, in the same order


def test_the_int_defect_and_its_correction():
    rubric, response = QUESTIONS["information_extraction"]
    ours, _ = harness_scores("information_extraction", rubric, response)
    assert [i["float"] for i in ours["items"]] == [0.5, 0.5, 1.0]
    assert ours["official"] == pytest.approx(1 / 3)  # int(0.5) == 0
    assert ours["float"] == pytest.approx(2 / 3)


def test_the_placeholder_defect_and_its_correction(official):
    rubric, response = QUESTIONS["temporal_reasoning"]
    stub = StubLLM()
    official.cm.evaluate_temporal_reasoning(rubric=rubric, llm_response=response, probing_question="When?",
                                           model=stub)
    assert all("QUESTION (what the user asked): <question>\n" in p for p in stub.requests)
    ours, sent = harness_scores("temporal_reasoning", rubric, response, question="When <llm_response>?", fill=True)
    filled = [m[0]["content"] for _, m in sent[len(rubric):]]
    assert len(sent) == 2 * len(rubric)  # the correction needs its own calls
    assert all("QUESTION (what the user asked): When <llm_response>?\n" in p for p in filled)
    assert ours["filled"] == pytest.approx(0.0) and ours["corrected"] == pytest.approx(0.25)


def test_unscorable_replies_are_errors():
    with pytest.raises(ValueError):
        beam.item_scores(beam.parse_reply('{"reason": "no score"}'))
    with pytest.raises(ValueError):
        beam.item_scores({"score": "0.5"})  # int("0.5") fails officially too
    with pytest.raises(ValueError):
        beam.item_scores({"score": 2})
    assert beam.item_scores(beam.parse_reply('{"score": 1, "reason": "x"')) == (1, 1.0)


def test_aggregation_equals_report_results(official, tmp_path, monkeypatch):
    """Two chats' official result files through report_results.py and through official_report()."""
    import pandas as pd

    results = {"0": {}, "1": {}}
    triples = []
    for chat, shift in (("0", 0.0), ("1", 0.25)):
        for k, a in enumerate(beam.ABILITIES):
            objs = [{"llm_judge_score": min(1.0, 0.1 * k + shift), "tau_norm": 0.5 + shift},
                    {"llm_judge_score": 0.5, "tau_norm": 0.75}]
            results[chat][a] = objs
            key = "tau_norm" if a == "event_ordering" else "llm_judge_score"
            triples += [(chat, a, o[key]) for o in objs]
    for chat, data in results.items():
        (tmp_path / chat).mkdir()
        (tmp_path / chat / "evaluation-results-x.json").write_text(json.dumps(data), encoding="utf-8")
    captured = {}
    monkeypatch.setattr(pd.DataFrame, "to_excel", lambda self, path, index: captured.update(df=self))
    official.rr.report_llms_accuracies(str(tmp_path), ["evaluation-results-x.json"], "out.xlsx")
    row = captured["df"].iloc[0]
    ours = beam.official_report(triples)
    for a in beam.ABILITIES:
        assert ours[a] == pytest.approx(float(row[a]))
    assert beam.overall(ours) == pytest.approx(sum(float(row[a]) for a in beam.ABILITIES) / 10)


# --------------------------------------------------------------------------- through the harness
def _gold(qid, chat, ability, rubric):
    return Gold(qid=qid, memory_id=chat, answer="ideal", category=0, question_type=ability, rubric=rubric,
                evidence=["1"], details={"difficulty": "easy"})


def test_judge_and_aggregate_through_the_fake_server(fake_server, tmp_path, monkeypatch):
    monkeypatch.setattr(beam, "N_RESAMPLES", 300)  # the CIs' precision is not the point here
    from tests.conftest import make_client

    golds, answers = [], []
    for c in range(2):
        for k, a in enumerate(beam.ABILITIES):
            rubric = EO_RUBRIC if a == "event_ordering" else [f"item {a} {j} of chat {c}" for j in range(3)]
            golds.append(_gold(f"q{c}-{k}", f"beam-100K-{c}", a, rubric))
            answers.append(AnswerRow(qid=f"q{c}-{k}", memory_id=f"beam-100K-{c}", question=f"question {k}?",
                                     answer=EO_ANSWER if a == "event_ordering" else f"answer {k} {c}",
                                     model="m", prompt_id="answer_user"))
    cfg = SimpleNamespace(score=SimpleNamespace(beam_float_scores=False, beam_fill_question=True),
                          run=SimpleNamespace(name="t"), method=SimpleNamespace(name="ensimem"))
    client = make_client(fake_server, tmp_path, "judge")
    ev = beam.Beam(beam.options(cfg))
    rows = [ev.judge(client, "j", "judge_beam_rubric", a, g) for a, g in zip(answers, golds)]
    assert all(r.label is not None and r.error == "" for r in rows)
    items = sum(len(g.rubric) for g in golds)
    align_calls = sum(1 for r in rows for c in r.llm_calls if c["prompt_id"] == beam.ALIGN_USER)
    assert sum(len(r.llm_calls) for r in rows) == 2 * items + align_calls and align_calls > 0
    # The dry run's count: exact for the rubric calls, an upper bound for the alignment calls.
    bound = beam.judge_calls(golds, fill_question=True)
    assert bound["rubric"] == 2 * items and 0 < align_calls <= bound["align_max"] == 2 * len(EO_RUBRIC) ** 2
    assert beam.judge_calls(golds, fill_question=False)["rubric"] == items
    halves = [i for r in rows for i in r.scores["items"] if i["float"] == 0.5]
    assert halves  # the fake judge gives 0.5 to some items
    eo = next(r for r in rows if r.scores["ability"] == "event_ordering")
    assert eo.scores["ordering"]["tau_norm"] is not None
    # Rerun: every call from the cache.
    again = [ev.judge(client, "j", "judge_beam_rubric", a, g) for a, g in zip(answers, golds)]
    assert all(r.cached for r in again)

    run_dir = tmp_path / "run"
    run_dir.mkdir()
    write_jsonl(run_dir / "gold.jsonl", [to_dict(g) for g in golds])
    write_jsonl(run_dir / "judge.jsonl", [to_dict(r) for r in rows])
    run = SimpleNamespace(cfg=cfg, dir=run_dir, path=lambda name: run_dir / f"{name}.jsonl",
                          judge_path=lambda j: run_dir / "judge.jsonl")
    m = ev.aggregate(run, ["j"])["judges"]["j"]
    off, flo = m["variants"]["official"], m["variants"]["float"]
    assert set(m["variants"]) == set(beam.VARIANTS) and "by_ability" in m["variants"]["corrected"]
    assert off["overall"] < flo["overall"]  # 0.5 replies: int() loses them
    ie = off["by_ability"]["information_extraction"]
    assert ie["n"] == 2 and ie["n_clusters"] == 2 and ie["ci_cluster"]["n_clusters"] == 2
    assert m["rubric_items_with_half_score"] == len(halves)
    assert m["overall"]["n"] == len(golds)
    md = ev.write_tables(SimpleNamespace(dir=run_dir, cfg=cfg), {"run": "t", "judges": {"j": m}})[0].read_text()
    assert "official (int, <question> unfilled)" in md and "both corrected" in md and "(sum " in md


def test_fill_question_is_in_the_judge_fingerprint():
    from common.core import fingerprint
    from common.core.config import load_config

    base = load_config(["configs/locomo.yaml"])
    beam_cfg = dataclasses.replace(base, benchmark="beam")
    fixed = dataclasses.replace(beam_cfg, score=dataclasses.replace(base.score, beam_fill_question=True))
    a = fingerprint.judge_components(beam_cfg, "r", "p")
    b = fingerprint.judge_components(fixed, "r", "p")
    assert a["beam_scoring"] != b["beam_scoring"] and fingerprint.short(a) != fingerprint.short(b)
    assert set(a["judge_prompts"]) >= set(beam.PROMPT_IDS)
    assert "beam_scoring" not in fingerprint.judge_components(base, "r", "p")


def test_audit_with_known_wrong_answers_through_the_fake_server(fake_server, tmp_path):
    from common.pipeline.audit_beam import run_audit
    from tests.conftest import make_client

    golds = [_gold(f"q{c}-{k}", f"beam-100K-{c}", a, [f"rubric {a} {c} {j}" for j in range(2)])
             for c in range(2) for k, a in enumerate(("abstention", "summarization"))]
    golds = [dataclasses.replace(g, answer=f"ideal answer of {g.qid}") for g in golds]
    wrong = beam.wrong_answers(golds)
    assert all(wrong[g.qid] != g.answer and wrong[g.qid].startswith("ideal answer of q") for g in golds)
    assert wrong["q0-0"] == "ideal answer of q1-0"  # same ability, the other chat
    rows = run_audit(make_client(fake_server, tmp_path, "judge"), "j", golds, beam.Options())
    report = beam.audit_report(rows)["overall"]
    items = [i["float"] for r in rows for i in r.scores["items"]]
    assert report["items"] == len(items) == 8 and report["failed"] == 0
    assert report["verdicts"]["0.5"] == items.count(0.5) and report["verdicts"]["1.0"] == items.count(1.0)
    assert report["share_full"] == pytest.approx(items.count(1.0) / 8)
    assert "| overall | 4 (0) | 8 |" in beam.audit_markdown("j", beam.audit_report(rows))


# --------------------------------------------------------------------------- tables and figures
def _scored_row(qid, ability, floats, fill):
    items = [{"item": f"i{k}", "score": f, "reason": "", "int": int(f), "float": f} for k, f in enumerate(floats)]
    scores = {"ability": ability, "items": items, "official": sum(int(f) for f in floats) / len(floats),
              "float": sum(floats) / len(floats), "filled": None, "corrected": None, "headline": "official"}
    if fill:
        scores["filled"], scores["corrected"] = scores["official"], scores["float"]
    return {"qid": qid, "judge": "j", "judge_model": "gpt-4.1-mini", "prompt_id": beam.RUBRIC_PROMPT,
            "label": int(scores["official"] == 1.0), "scores": scores, "llm_calls": []}


def test_beam_table_and_figure_from_a_run(tmp_path, monkeypatch):
    monkeypatch.setattr(beam, "N_RESAMPLES", 300)
    from common.report import figures
    from common.report.tables import command

    run_dir = tmp_path / "results" / "beam" / "r1"
    run_dir.mkdir(parents=True)
    golds, rows = [], []
    for c in range(2):
        for a, floats in (("abstention", [1.0]), ("summarization", [0.5, 1.0]), ("temporal_reasoning", [0.5])):
            qid = f"{a}-{c}"
            golds.append(_gold(qid, f"beam-100K-{c}", a, [f"i{k}" for k in range(len(floats))]))
            rows.append(_scored_row(qid, a, floats, fill=False))
    write_jsonl(run_dir / "01_gold.jsonl", [to_dict(g) for g in golds])
    write_jsonl(run_dir / "08_judge_j.jsonl", rows)
    write_jsonl(run_dir / "07_answer.jsonl", [{"qid": g.qid, "model": "gpt-4.1-mini"} for g in golds])
    cfg = SimpleNamespace(run=SimpleNamespace(name="r1"), method=SimpleNamespace(name="ensimem"))
    handle = SimpleNamespace(cfg=cfg,
                             dir=run_dir,
                             path=lambda n: run_dir / {"gold": "01_gold.jsonl"}[n],
                             judge_path=lambda j: run_dir / f"08_judge_{j}.jsonl")
    metrics = beam.aggregate(handle, ["j"])
    (run_dir / "metrics.json").write_text(json.dumps(metrics), encoding="utf-8")
    out = tmp_path / "tables"
    assert command.main(["--results", str(tmp_path / "results"), "--out", str(out), "--only", "beam"]) == 0
    md = (out / "table_beam.md").read_text(encoding="utf-8")
    official = next(line for line in md.splitlines() if "r1/j/official" in line)
    floats = next(line for line in md.splitlines() if "r1/j/float" in line)
    assert "| 50.0 " in official and "| 75.0 " in floats  # SUM: int() loses the 0.5 verdicts
    assert "r1/j/filled" not in md and "not transcribed" in md
    fig_out = tmp_path / "figures"
    assert figures.main(["--results", str(tmp_path / "results"), "--out", str(fig_out), "--only", "beam"]) == 0
    assert (fig_out / "figure_beam.png").read_bytes().startswith(b"\x89PNG")
    # A metrics.json that disagrees with the per-question files is refused.
    metrics["judges"]["j"]["variants"]["float"]["by_ability"]["summarization"]["score"] = 0.9
    (run_dir / "metrics.json").write_text(json.dumps(metrics), encoding="utf-8")
    assert command.main(["--results", str(tmp_path / "results"), "--out", str(out), "--only", "beam"]) == 1


def test_coverage_of_a_beam_run_depends_on_its_selection():
    from common.evaluation.scoring import coverage

    assert coverage("beam", 400, {})["complete"] is True
    partial = coverage("beam", 20, {"question_limit": 1})
    assert partial["complete"] is False and "covers 20 of all the scored beam questions" in partial["warning"]
    assert coverage("locomo", 1540, {})["complete"] and not coverage("locomo", 20, {})["complete"]


def test_a_partial_beam_run_is_marked_in_its_table_and_on_every_figure(tmp_path, monkeypatch):
    """A BEAM run cut by its selection (LIMIT): PARTIAL in the table's Coverage column, in the title of the
    per-ability figure, and in the main-run figure (per ability, with the bootstrap-over-chats CI)."""
    monkeypatch.setattr(beam, "N_RESAMPLES", 300)
    import argparse

    from common.evaluation.scoring import coverage
    from common.report import run_figures
    from common.report.tables import command
    from common.report.tables.beam import beam_figure

    run_dir = tmp_path / "results" / "beam" / "try"
    run_dir.mkdir(parents=True)
    golds, rows = [], []
    for c in range(2):
        for a, floats in (("abstention", [1.0]), ("summarization", [0.5, 1.0]), ("temporal_reasoning", [0.5])):
            golds.append(_gold(f"{a}-{c}", f"beam-100K-{c}", a, [f"i{k}" for k in range(len(floats))]))
            rows.append(_scored_row(f"{a}-{c}", a, floats, fill=False))
    write_jsonl(run_dir / "01_gold.jsonl", [to_dict(g) for g in golds])
    write_jsonl(run_dir / "08_judge_j.jsonl", rows)
    write_jsonl(run_dir / "07_answer.jsonl", [{"qid": g.qid, "model": "gpt-4.1-mini"} for g in golds])
    cfg = SimpleNamespace(run=SimpleNamespace(name="try"), method=SimpleNamespace(name="ensimem"))
    handle = SimpleNamespace(cfg=cfg, dir=run_dir, path=lambda n: run_dir / {"gold": "01_gold.jsonl"}[n],
                             judge_path=lambda j: run_dir / f"08_judge_{j}.jsonl")
    metrics = beam.aggregate(handle, ["j"])
    metrics["coverage"] = coverage("beam", len(golds), {"question_limit": 3})  # as 09_aggregate records it
    (run_dir / "metrics.json").write_text(json.dumps(metrics), encoding="utf-8")
    out = tmp_path / "tables"
    assert command.main(["--results", str(tmp_path / "results"), "--out", str(out), "--only", "beam"]) == 0
    assert "| PARTIAL 6 questions |" in (out / "table_beam.md").read_text(encoding="utf-8")
    ctx = command.context(argparse.Namespace(results=str(tmp_path / "results"), experiments="configs/experiments.yaml",
                                             published="configs/published.yaml", subset=None, run=None))
    fig, series = beam_figure(ctx)
    assert "PARTIAL runs: try PARTIAL 6 questions" in fig.axes[0].get_title()
    assert all("[PARTIAL 6 questions]" in s["label"] for s in series)
    fig, side = run_figures.main_figure(ctx, "beam")
    assert "PARTIAL 6 questions" in fig.axes[0].get_title() and side["run"] == "try"
    drawn = {p["group"]: p for p in side["points"]}
    assert drawn[beam.SHORT_NAMES["summarization"]]["value"] == pytest.approx(0.5)  # official: int(0.5) = 0
