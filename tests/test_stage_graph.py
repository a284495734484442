"""The stage graph (``common.pipeline.graph``) is the one declaration every consumer reads."""
from __future__ import annotations

import ast
import dataclasses
import json
import subprocess
import sys
from pathlib import Path

import pytest

from common.core import artifacts
from common.core.io import read_jsonl
from common.core.schema import to_dict
from common.pipeline import cli, engine, graph, ledger
from common.pipeline.engine import Run, digest, load_questions, run_rows
from common.pipeline.graph import STAGES, Stage
from tests.conftest import REPO, STAGE_ORDER, TINY_LOCOMO, run_overrides


def test_stages_are_numbered_in_order_and_resolve():
    assert [s.number for s in STAGES] == list(range(1, len(STAGES) + 1))
    assert len({s.id for s in STAGES}) == len(STAGES)
    for s in STAGES:
        assert callable(s.resolve()), s.id
        for name in s.reads + s.writes:
            assert name in artifacts.ARTIFACTS, f"{s.id}: {name} is not an artifact of common.core.artifacts"
    assert STAGE_ORDER == [s.name for s in STAGES]


def test_every_artifact_is_written_by_exactly_one_stage():
    writers = [a for s in STAGES for a in s.writes]
    assert sorted(writers) == sorted(set(writers))
    assert set(writers) == set(artifacts.ARTIFACTS)


def test_reads_come_from_earlier_stages():
    written: set[str] = set()
    for s in STAGES:
        assert set(s.reads) <= written, f"{s.id} reads {set(s.reads) - written} before any stage writes it"
        written.update(s.writes)


def test_gold_is_declared_only_where_it_may_be_read():
    for s in STAGES:
        gold_inputs = [a for a in s.reads if artifacts.ARTIFACTS[a].gold]
        if s.reads_gold == "no":
            assert not gold_inputs, f"{s.id} declares no gold access but reads {gold_inputs}"
    method = [s for s in STAGES if 2 <= s.number <= 7]
    assert all(s.reads_gold in ("no", "oracle") for s in method)


@pytest.mark.parametrize("folder", list(graph.BENCHMARKS))
def test_numbered_scripts_follow_the_graph(folder):
    scripts = sorted(p.stem for p in (REPO / folder).glob("[0-9][0-9]_*.py"))
    assert [s for s in scripts if s != "10_ablations"] == [s.id for s in STAGES]  # 10_ablations runs groups
    for s in STAGES:
        path = REPO / folder / f"{s.id}.py"
        text = path.read_text(encoding="utf-8")
        doc = ast.get_docstring(ast.parse(text)) or ""
        assert graph.script_header(s, folder).strip() in doc, f"{path.name}: docstring out of date with the graph"
        assert f'cli.main("{s.id}"' in text


def test_write_scripts_creates_only_missing_scripts(tmp_path):
    toy = Stage(10, "wordcount", "x:y", reads=("answers",), writes=("10_wordcount.jsonl",), summary="count words")
    for folder in graph.BENCHMARKS:
        (tmp_path / folder).mkdir()
    (tmp_path / "LoCoMo" / "10_wordcount.py").write_text("kept\n")
    made = graph.write_scripts(tmp_path, (toy,))
    assert made == [tmp_path / f / "10_wordcount.py" for f in graph.BENCHMARKS if f != "LoCoMo"]
    assert (tmp_path / "LoCoMo" / "10_wordcount.py").read_text() == "kept\n"
    text = made[0].read_text()
    assert "Reads: 07_answer.jsonl" in text and "Writes: 10_wordcount.jsonl" in text
    compile(text, str(made[0]), "exec")


def test_makefile_reads_the_stage_list_from_the_graph(monkeypatch):
    # The full-pipeline targets run the graph's stages in one process (common.pipeline.run_all)...
    for target, benchmark in (("locomo", "locomo"), ("longmemeval", "longmemeval"), ("beam", "beam"),
                              ("locomo-plus", "locomo_plus")):
        out = subprocess.run(["make", "-s", "-n", target, f"PY={sys.executable}"], cwd=REPO, capture_output=True,
                             text=True, timeout=60)
        assert out.returncode == 0, out.stderr
        assert f"-m common.pipeline.run_all {benchmark} " in out.stdout, out.stdout
    # ... which takes them, in order, from the graph, for the benchmark it is given.
    from common.pipeline import run_all

    seen = []
    monkeypatch.setattr(cli, "main_stages", lambda stages, benchmark, doc=None: seen.append((stages, benchmark)))
    monkeypatch.setattr(sys, "argv", ["run_all", "longmemeval", "--limit", "1"])
    run_all.main()
    assert seen == [(STAGES, "longmemeval")] and sys.argv == ["run_all", "--limit", "1"]
    monkeypatch.setattr(sys, "argv", ["run_all", "nosuch"])
    with pytest.raises(SystemExit, match="usage: python -m common.pipeline.run_all"):
        run_all.main()
    # The per-stage targets check their stage against the graph's list, which the Makefile reads.
    listed = subprocess.run(["make", "-s", "-p", "-n", "help", f"PY={sys.executable}"], cwd=REPO,
                            capture_output=True, text=True, timeout=60).stdout
    assert "STAGES = $(shell $(PY) -m common.pipeline.graph ids)" in listed
    bad = subprocess.run(["make", "-s", "-n", "locomo-03_nosuch", f"PY={sys.executable}"], cwd=REPO,
                         capture_output=True, text=True, timeout=60)
    assert bad.returncode != 0 and "no stage '03_nosuch'" in bad.stderr


def test_docs_artifact_table_matches_the_artifacts():
    """The artifact table of docs/outputs.md: one row per artifact, in order, naming its stage."""
    page = (REPO / "docs" / "outputs.md").read_text(encoding="utf-8")
    section = page.split("<!-- artifacts:start -->")[1].split("<!-- artifacts:end -->")[0]
    rows = [line for line in section.splitlines() if line.startswith("| `")]
    files = [r.split("`")[1] for r in rows]
    assert files == [a.file for a in artifacts.ARTIFACTS.values()]
    writer = {a: s.id for s in STAGES for a in s.writes}
    for row, a in zip(rows, artifacts.ARTIFACTS.values()):
        assert f"| {writer[a.name]} |" in row, f"docs/outputs.md row for {a.file} must name the stage {writer[a.name]}"
        assert a.description in row, f"docs/outputs.md row for {a.file} must carry its description"


def test_legacy_file_names_are_read_and_resumed_in_place(tmp_path):
    (tmp_path / "07_answers.jsonl").write_text('{"qid": "q1"}\n')
    assert artifacts.path(tmp_path, "answers") == tmp_path / "07_answers.jsonl"
    assert artifacts.path(tmp_path, "plans") == tmp_path / "05_plan.jsonl"
    (tmp_path / "07_answer.jsonl").write_text('{"qid": "q1"}\n')
    assert artifacts.path(tmp_path, "answers") == tmp_path / "07_answer.jsonl"  # the current name wins


# ----------------------------------------------------------------------------- a toy stage, end to end
@dataclasses.dataclass
class WordCount:
    qid: str
    words: int
    input_digest: str = ""


def wordcount(run: Run) -> None:
    """Count the words of each answer: reads 07's artifact, writes its own, resumable."""
    answers = {r["qid"]: r for r in read_jsonl(run.path("answers"))}
    questions = load_questions(run)
    run_rows(run, TOY.id, run.path(TOY.writes[0]), "qid", questions, lambda q: q.qid,
             lambda q: WordCount(q.qid, len((answers[q.qid].get("answer") or "").split())),
             None, [run.path("answers")], lambda r: False,
             digest_fn=lambda q: digest(answers[q.qid].get("answer")))


TOY = Stage(10, "wordcount", wordcount, reads=("answers",), writes=("10_wordcount.jsonl",),
            summary="count the words of each answer")


def test_a_toy_stage_registered_in_the_graph_runs_through_the_engine(tmp_path, fake_server, monkeypatch, capsys):
    monkeypatch.setenv("OPENAI_BASE_URL", fake_server.base_url)
    from common.core.config import load_config

    cfg = load_config(["configs/locomo.yaml"], run_overrides(tmp_path, TINY_LOCOMO))
    run = Run(cfg, progress=False)
    engine.run_pipeline(run, STAGES + (TOY,))
    out = read_jsonl(run.path("10_wordcount.jsonl"))
    answers = {r["qid"]: r["answer"] for r in read_jsonl(run.path("answers"))}
    assert [r["qid"] for r in out] == list(answers)
    assert all(r["words"] == len((answers[r["qid"]] or "").split()) for r in out)
    manifest = json.loads(artifacts.manifest_path(run.dir, TOY.id).read_text())
    assert manifest["rows"] == len(out) and manifest["new_rows"] == len(out)
    # Resumed: a second run of the toy makes no new row, and nothing upstream is paid again.
    paid = fake_server.request_count
    engine.run_stage(run, TOY)
    manifest = json.loads(artifacts.manifest_path(run.dir, TOY.id).read_text())
    assert manifest["resumed_rows"] == len(out) and manifest["new_rows"] == 0
    assert fake_server.request_count == paid
    # The ledger reads LLM stages from the graph: the toy has no role, so it adds no ledger row.
    assert TOY.id not in [e["stage"] for e in ledger.ledger(run.dir)["stages"]]
    assert to_dict(WordCount("q", 1)) == {"qid": "q", "words": 1, "input_digest": ""}


def test_a_run_made_with_the_old_file_names_resumes_without_a_call(tmp_path, fake_server, monkeypatch):
    """Runs made before the stage-named files keep their names and resume in place, paying nothing."""
    from tests.conftest import run_stages

    monkeypatch.setenv("OPENAI_BASE_URL", fake_server.base_url)
    sets = run_overrides(tmp_path, TINY_LOCOMO)
    run = run_stages("configs/locomo.yaml", sets)
    for name, old in artifacts.LEGACY.items():
        artifacts.path(run.dir, name).rename(run.dir / old)
    metrics = json.loads(run.path("metrics").read_text())
    paid = fake_server.request_count
    run = run_stages("configs/locomo.yaml", sets)
    assert fake_server.request_count == paid
    for name, old in artifacts.LEGACY.items():
        assert (run.dir / old).exists() and not (run.dir / artifacts.ARTIFACTS[name].file).exists()
        manifest = [m for m in run.dir.glob("*.manifest.json") if old in m.read_text()]
        assert manifest, f"no manifest names {old}"
    assert json.loads(run.path("metrics").read_text())["judges"] == metrics["judges"]


def test_per_memory_stages_model_use_and_prompt_kinds_are_read_from_the_graph():
    """Which stages run per memory, load the model and send which prompts are properties of a stage:
    the engine and the benches read them from the graph, none spells the list again."""
    import re

    from bench import beam_scale, pipeline, ray_bench
    from common.pipeline import engine
    from common.pipeline.graph import STAGES, memory_stages

    per_memory = tuple(s.id for s in memory_stages())
    assert per_memory == ("02_episodes", "03_extract", "04_index", "05_plan", "06_retrieve", "07_answer")
    assert engine.MEMORY_STAGES == ray_bench.MEMORY_STAGES == per_memory
    assert pipeline.MODEL_STAGES == tuple(s.id for s in STAGES if s.loads_model) == ("04_index", "06_retrieve")
    assert set(pipeline.LLM_STAGE_KINDS) == {"02_episodes", "03_extract", "05_plan", "07_answer", "08_judge"}
    assert beam_scale.STAGES == ("01_preprocess",) + per_memory[:5]
    for module in (engine, ray_bench, beam_scale, pipeline):
        source = Path(module.__file__).read_text(encoding="utf-8")
        assert not re.search(r'"0\d_[a-z]+", "0\d_[a-z]+"', source), f"{module.__name__} spells a stage list"
