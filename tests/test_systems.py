"""Memory systems behind one interface (common/systems/): registry, results unchanged, skips."""
from __future__ import annotations

import importlib.util
import json
from urllib.parse import urlparse

import pytest

from common.core.config import ConfigError, load_config
from common.core.io import ArtifactError
from common.systems import registry
from common.systems.base import PROTOCOL_STAGES, MemorySystem
from tests import system_digests
from tests.conftest import REPO, TINY_LOCOMO, fake_vectors, rows, run_overrides, run_stages, through_the_gateway

# Found without importing it: an import before common.systems.mem0 sets MEM0_TELEMETRY=False would
# start mem0's telemetry.
HAVE_MEM0 = importlib.util.find_spec("mem0") is not None
HAVE_AMEM = importlib.util.find_spec("agentic_memory") is not None
HAVE_LANGMEM = importlib.util.find_spec("langmem") is not None
HAVE_GRAPHITI = importlib.util.find_spec("graphiti_core") is not None
HAVE_SIMPLEMEM = importlib.util.find_spec("simplemem") is not None


@pytest.mark.parametrize("system", system_digests.SYSTEMS)
def test_builtin_systems_reproduce_the_runs_recorded_before_the_registry(tmp_path, fake_server, system):
    """Digests of 02-08 and the score, recorded on the pre-registry code path (commit 7293515): rows
    exactly, their floats (scores) within a tolerance, so another CPU reproduces them."""
    recorded = json.loads(system_digests.RECORDED.read_text())[system]
    measured = system_digests.run_digests(tmp_path, fake_server.base_url, system)
    assert system_digests.differences(recorded, measured) == []


def _artifact(path, rows_):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows_))
    return system_digests.file_digest(path)


def test_system_digests_take_floats_out_and_compare_them_within_a_tolerance(tmp_path):
    row = {"qid": "q1", "selected": [{"episode_id": "e1", "route": "dense", "score": 0.229795}], "latency": 0.5}
    other = {"qid": "q2", "selected": [{"episode_id": "e2", "route": "lexical", "score": 1.916291}]}
    recorded = {"06.jsonl": _artifact(tmp_path / "a.jsonl", [row, other])}
    assert recorded["06.jsonl"]["floats"] == [0.229795, 1.916291]

    def measured(*rows_):
        return {"06.jsonl": _artifact(tmp_path / "b.jsonl", list(rows_))}

    def with_(r, **changes):
        return {**r, "selected": [{**r["selected"][0], **changes}]}

    # Another CPU: the last decimals of a score, the row order in the file and a latency differ.
    assert system_digests.differences(recorded, measured(other, {**with_(row, score=0.229797), "latency": 9})) == []
    # Beyond the tolerance, or anything that is not a float: a difference.
    assert "float #0 is 0.2299" in system_digests.differences(recorded, measured(with_(row, score=0.2299), other))[0]
    for changed in (with_(row, route="lexical"), with_(row, episode_id="e3"), with_(row, score=1)):
        assert "rows differ beyond their floats" in system_digests.differences(recorded, measured(changed, other))[0]
    swapped = {**row, "selected": row["selected"] + other["selected"]}
    reordered = {**row, "selected": other["selected"] + row["selected"]}
    assert system_digests.differences({"f": _artifact(tmp_path / "c.jsonl", [swapped])},
                                      {"f": _artifact(tmp_path / "d.jsonl", [reordered])})
    assert system_digests.differences({"f": None, "overall": {"k": 4}}, {"f": None, "overall": {"k": 5}}) == [
        "overall: recorded {'k': 4}, measured {'k': 5}"]


def test_every_registered_name_is_a_config_choice_and_a_system():
    assert set(registry.registered_names()) == set(registry.REGISTERED)
    for name in registry.REGISTERED:
        if name == "mem0" and not HAVE_MEM0:
            continue
        cls = registry.system_class(name)
        assert issubclass(cls, MemorySystem) and cls.stages >= PROTOCOL_STAGES


@pytest.mark.parametrize("name, message", [
    ("tests.test_systems:NotASystem", "not a subclass"),
    ("tests.test_systems:NoProtocol", "leaves out protocol stages"),
    ("tests.no_such_module:X", "cannot import"),
])
def test_a_bad_import_path_is_one_line_naming_method_name(name, message):
    with pytest.raises(ConfigError, match=f"method.name: .*{message}"):
        registry.system_class(name)


def test_config_accepts_an_import_path_and_rejects_other_names():
    cfg = load_config(["configs/locomo.yaml"], ["method.name=my_pkg.memory:Mine"])
    assert cfg.method.name == "my_pkg.memory:Mine"
    with pytest.raises(ConfigError, match="method.name: 'nope' is not one of ensimem"):
        load_config(["configs/locomo.yaml"], ["method.name=nope"])


class NotASystem:
    pass


class NoProtocol(MemorySystem):
    stages = frozenset({"retrieve"})


def test_stages_a_system_does_not_declare_are_skipped(tmp_path, fake_server, monkeypatch):
    monkeypatch.setenv("OPENAI_BASE_URL", fake_server.base_url)
    sets = run_overrides(tmp_path, TINY_LOCOMO, **{"method.name": "tests.test_systems:WithPlanOnly"})
    run = run_stages("configs/locomo.yaml", sets, ["preprocess", "episodes"])
    assert json.loads((run.dir / "02_episodes.manifest.json").read_text())["skipped"] == (
        "method=tests.test_systems:WithPlanOnly")
    # 05 runs (the system declares it): it fails loudly for lack of 04's index instead of skipping.
    with pytest.raises(ArtifactError, match="04_index"):
        run_stages("configs/locomo.yaml", sets, ["plan"])
    assert not (run.dir / "05_plan.manifest.json").exists()


class WithPlanOnly(MemorySystem):
    stages = PROTOCOL_STAGES | {"plan"}


def test_rows_of_a_system_are_rendered_evidence(tmp_path):
    from common.core.schema import Question
    from common.systems.base import Evidence, Found, Spent, render

    found = Found([Evidence("Ann adopted a cat", ["D1:1"], "8 May 2023", 0.9, "Ann"),
                   Evidence("Bob likes rain", ["D1:2", "D1:1"], "", 0.5, "Bob")], Spent(calls=1, seconds=0.5))
    row = render(Question("q", "m", "?"), "mine", found, 2.0)
    assert row.buffer_text == "Memories of Ann:\n- 8 May 2023: Ann adopted a cat\n\nMemories of Bob:\n- Bob likes rain"
    assert row.dia_ids == ["D1:1", "D1:2"] and row.seconds == 0.5 and row.mode == "mine"
    assert row.method_info["evidence"][0]["score"] == 0.9 and row.method_info["spent"]["calls"] == 1


def docs_example(tmp_path, monkeypatch) -> str:
    """The example system of docs/memory-systems.md, written to a module on sys.path: its import path."""
    page = (REPO / "docs" / "memory-systems.md").read_text(encoding="utf-8")
    block = page.split("<!-- bm25-example:start -->", 1)[1].split("<!-- bm25-example:end -->", 1)[0]
    code = block.split("```python\n", 1)[1].split("```", 1)[0]
    assert len(code.splitlines()) < 60, "the docs promise a complete system in under 60 lines"
    (tmp_path / "pkg_example").mkdir(exist_ok=True)
    (tmp_path / "pkg_example" / "bm25_turns.py").write_text(code, encoding="utf-8")
    monkeypatch.syspath_prepend(str(tmp_path / "pkg_example"))
    return "bm25_turns:BM25Turns"


def test_the_docs_example_runs_end_to_end_as_an_import_path_system(tmp_path, fake_server, monkeypatch):
    monkeypatch.setenv("OPENAI_BASE_URL", fake_server.base_url)
    name = docs_example(tmp_path, monkeypatch)
    sets = run_overrides(tmp_path, TINY_LOCOMO, **{"method.name": name, "method.options": "{k: 3}"})
    run = run_stages("configs/locomo.yaml", sets)
    for stage in ("02_episodes", "03_extract", "04_index", "05_plan"):
        assert json.loads((run.dir / f"{stage}.manifest.json").read_text())["skipped"] == f"method={name}"
    rets = rows(run.path("retrievals"))
    assert len(rets) == 11 and {r["mode"] for r in rets} == {name}
    assert all(len(r["method_info"]["evidence"]) == 3 and len(r["dia_ids"]) <= 3 for r in rets)
    q = next(r for r in rets if r["question"] == "How many hours did the Eiger trail take?")
    assert q["method_info"]["evidence"][0]["dia_ids"] == ["D2:6"]  # "The Eiger trail, it took us six hours."
    assert (run.dir / "06_retrieve" / "memory" / "tiny-1" / "turns.json").exists()
    ingest = json.loads((run.dir / "06_retrieve.manifest.json").read_text())["ingest"]
    assert ingest["memories"] == 2 and ingest["new"] == 2
    answers = rows(run.path("answers"))
    assert {a["prompt_id"] for a in answers} == {"answer_baseline_user"}
    metrics = json.loads((run.dir / "metrics.json").read_text())
    assert metrics["judges"]["gpt-4o-mini"]["overall"]["n"] == 9
    # A rerun ingests nothing and makes no request.
    paid = fake_server.request_count
    run_stages("configs/locomo.yaml", sets, ["retrieve", "answer", "judge"])
    assert fake_server.request_count == paid
    again = json.loads((run.dir / "06_retrieve.manifest.json").read_text())["ingest"]
    assert again["resumed"] == 2 and again["new"] == 0


def _poison_locomo(path, out):
    """Change every gold-side field of the fixture; nothing a system may see."""
    data = json.loads(path.read_text())
    for item in data:
        for n, qa in enumerate(item["qa"]):
            qa["answer"] = f"POISON-ANSWER-{n}"
            qa["evidence"] = ["D9:9"] if qa.get("evidence") != ["D9:9"] else ["D1:1"]
            qa["category"] = {1: 2, 2: 3, 3: 4, 4: 1, 5: 5}[qa["category"]]
            if "adversarial_answer" in qa:
                qa["adversarial_answer"] = "POISON-ADVERSARIAL"
    out.write_text(json.dumps(data))
    return out


# SimpleMem imports LanceDB and pandas (20 s on a loaded machine): make test-slow runs it.
SYSTEMS_UNDER_POISON = [pytest.param(n, marks=pytest.mark.systems) if n == "simplemem" else n
                        for n in registry.REGISTERED if n != "oracle"] + ["docs example", "docs model example"]


@pytest.mark.parametrize("name", SYSTEMS_UNDER_POISON)
def test_no_system_prompt_depends_on_gold_fields(tmp_path, fake_server, monkeypatch, name):
    """Every registered system (the oracle is the labelled exception) and the example of docs/memory-systems.md."""
    if name == "mem0" and not HAVE_MEM0:
        pytest.skip("mem0ai not installed (make install installs requirements-systems.txt)")
    if name == "amem" and not HAVE_AMEM:
        pytest.skip("a-mem not installed (make install installs requirements-systems.txt)")
    if name == "langmem" and not HAVE_LANGMEM:
        pytest.skip("langmem not installed (make install installs requirements-systems.txt)")
    if name == "graphiti":
        if not HAVE_GRAPHITI:
            pytest.skip("graphiti-core not installed (requirements-systems.txt)")
        attempts, ports = through_the_gateway(monkeypatch, fake_server.base_url)  # no other socket
    if name == "simplemem":
        if not HAVE_SIMPLEMEM:
            pytest.skip("simplemem not installed (requirements-systems.txt)")
        attempts, ports = through_the_gateway(monkeypatch, fake_server.base_url)  # no other socket
    if name == "docs example":
        name = docs_example(tmp_path, monkeypatch)
    if name == "docs model example":  # docs/memory-systems.md's system that calls a model
        from tests.test_firstday_four import _notes_example

        name = _notes_example(tmp_path, monkeypatch)
    monkeypatch.setenv("OPENAI_BASE_URL", fake_server.base_url)
    poisoned = _poison_locomo(TINY_LOCOMO, tmp_path / "poisoned.json")
    sent = []
    for label, data in (("clean", TINY_LOCOMO), ("poisoned", poisoned)):
        start = len(fake_server.requests)
        # LangMem: the fake server's embeddings (through the gateway); its model is not the point.
        fast = {"embedding.backend": "openai"} if name in ("langmem", "graphiti", "simplemem") else {}
        # graphiti: one conversation, every session, one question (its search reranks per candidate)
        # A fixed question (LIMIT's draw across categories reads the gold categories the poison changes).
        few = ({"data.question_limit": 1, "data.limit_rule": "first", "data.memories": "[tiny-1]"}
               if name == "graphiti" else {})
        sets = run_overrides(tmp_path / label, data, **{"method.name": name, **fast, **few})
        run_stages("configs/locomo.yaml", sets, ["preprocess", "episodes", "extract", "index", "plan", "retrieve",
                                                 "answer"])
        # (The embedding backend probes its dimension once per process: not a request of the system.)
        sent.append(sorted(json.dumps(b, sort_keys=True) for b in fake_server.requests[start:]
                           if b.get("input") != ["dimension probe"]))
    assert sent[0] and sent[0] == sent[1], f"a gold field changed what {name} sent to the model"
    assert "POISON" not in json.dumps(sent[1])
    if name in ("graphiti", "simplemem"):  # through the real gateway only
        fake = (urlparse(fake_server.base_url).hostname, urlparse(fake_server.base_url).port)
        assert ports and set(attempts) <= {fake} | {("127.0.0.1", p) for p in ports}, set(attempts)


TINY_PLUS = REPO / "tests" / "fixtures" / "locomo_plus_tiny.json"


def _poison_locomo_plus(path, out):
    """Every gold-side field of the LoCoMo-Plus items (relation type, generation scores and ranks);
    the cue, trigger and time gap, which build the memory and the question, stay."""
    items = json.loads(path.read_text())
    kinds = ["causal", "state", "goal", "value"]
    for n, item in enumerate(items):
        item["relation_type"] = kinds[(kinds.index(item["relation_type"]) + 1) % 4]
        item["model_name"], item["final_similarity_score"] = "POISON-MODEL", -1.0
        item["scores"], item["ranks"] = {"combined": -1.0, "poison": n}, {"combined": 999}
    out.write_text(json.dumps(items))
    return out


@pytest.mark.parametrize("name", ["ensimem", "full_context", "rag_turns", "docs example",
                                  pytest.param("mem0", marks=pytest.mark.skipif(not HAVE_MEM0,
                                                                               reason="mem0ai not installed"))])
def test_no_locomo_plus_request_depends_on_gold_fields(tmp_path, fake_server, monkeypatch, name):
    """LoCoMo-Plus as LoCoMo: its items' gold side and the LoCoMo file's answers, evidence and
    categories poisoned, stages 01-07 send byte-identical requests (the category never reaches them)."""
    if name == "docs example":
        name = docs_example(tmp_path, monkeypatch)
    monkeypatch.setenv("OPENAI_BASE_URL", fake_server.base_url)
    clean = (TINY_PLUS, TINY_LOCOMO)
    poisoned = (_poison_locomo_plus(TINY_PLUS, tmp_path / "plus.json"),
                _poison_locomo(TINY_LOCOMO, tmp_path / "locomo.json"))
    sent = []
    for label, (plus, locomo) in (("clean", clean), ("poisoned", poisoned)):
        start = len(fake_server.requests)
        # One memory at a time: stitched memories share sessions, so memories ingested side by side
        # race for the same cache entries and the requests that reach the server vary in number.
        sets = run_overrides(tmp_path / label, plus, **fake_vectors(fake_server.base_url),
                             **{"method.name": name, "data.stitch.locomo_path": str(locomo),
                                "systems.ingest_concurrency": 1})
        run_stages("configs/locomo_plus.yaml", sets, ["preprocess", "episodes", "extract", "index", "plan",
                                                      "retrieve", "answer"])
        sent.append(sorted(json.dumps(b, sort_keys=True) for b in fake_server.requests[start:]
                           if b.get("input") != ["dimension probe"]))
    assert sent[0] and sent[0] == sent[1], f"a gold field changed what {name} sent to the model on LoCoMo-Plus"
    text = json.dumps(sent[1])
    assert "POISON" not in text and "Cognitive" not in text and "relation_type" not in text


def test_only_the_oracle_declares_gold_access():
    readers = [n for n in registry.REGISTERED if n != "mem0" and registry.system_class(n).reads_gold]
    assert readers == ["oracle"]


def test_systems_table_lists_every_finished_run_and_compare_works_between_any_two(tmp_path, fake_server,
                                                                                   monkeypatch, capsys):
    from common.report import compare
    from common.report.tables import command

    monkeypatch.setenv("OPENAI_BASE_URL", fake_server.base_url)
    example = docs_example(tmp_path, monkeypatch)
    for run_name, system in (("bm25", example), ("closed", "no_memory")):
        run_stages("configs/locomo.yaml", run_overrides(tmp_path, TINY_LOCOMO, **{"method.name": system,
                                                                                   "run.name": run_name}))
    results = tmp_path / "results"
    assert command.main(["--results", str(results), "--out", str(results / "tables"), "--only", "systems"]) == 0
    table = (results / "tables" / "systems.md").read_text()
    lines = [line for line in table.splitlines() if line.startswith("| S")]
    assert len(lines) == 2
    by_run = {line.split(" | ")[2]: line for line in lines}
    assert example in by_run["bm25"] and "no_memory" in by_run["closed"]
    for run_name, line in by_run.items():
        metrics = json.loads((results / "locomo" / run_name / "metrics.json").read_text())
        overall = metrics["judges"]["gpt-4o-mini"]["overall"]
        assert f"({overall['k']}/{overall['n']})" in line and metrics["fingerprint"]["run"] in line
        assert "harness" in line and "gpt-4o-mini" in line
    sources = json.loads((results / "tables" / "systems.sources.json").read_text())
    assert len(sources["cells"]) == 2
    capsys.readouterr()
    assert compare.main([str(results / "locomo" / "bm25"), str(results / "locomo" / "closed")]) == 0
    out = capsys.readouterr().out
    assert "McNemar" in out or "mcnemar" in out.lower()


class CallsWithoutEstimate(MemorySystem):
    role = "memory"

    def ingest(self, view, state_dir):  # pragma: no cover - the dry run never ingests
        raise AssertionError("the dry run makes no call")


def test_dry_run_lists_an_ingesting_system_without_an_estimate(tmp_path):
    from common.pipeline import dryrun

    cfg = load_config(["configs/locomo.yaml"], run_overrides(tmp_path, TINY_LOCOMO, **{
        "method.name": "tests.test_systems:CallsWithoutEstimate"}))
    row = next(s for s in dryrun.estimate(cfg)["stages"] if s["stage"] == "06_retrieve")
    assert row["role"] == "memory" and row["calls"] == 0 and "declares no estimate_ingest" in row["basis"]
