"""docs/adding-a-benchmark.md: its example adapter and scorer run as they stand, and every place it
says a benchmark is registered exists."""
from __future__ import annotations

import importlib
import json
import re
import sys
import types
from pathlib import Path

import pytest

from common.benchmarks.base import DataError
from common.core import artifacts
from common.core.config import load_config
from common.core.io import write_jsonl
from common.core.schema import to_dict
from tests.conftest import REPO

PAGE = REPO / "docs" / "adding-a-benchmark.md"


def block(name: str) -> str:
    text = PAGE.read_text(encoding="utf-8")
    found = re.search(rf"<!-- {name}:start -->\s*```\w+\n(.*?)```\s*<!-- {name}:end -->", text, re.S)
    assert found, f"no {name} block in {PAGE}"
    return found.group(1)


@pytest.fixture
def tinyqa(monkeypatch):
    """The page's adapter and scorer as the modules it names."""
    mods = {}
    for name, key in (("common.benchmarks.tinyqa", "tinyqa-adapter"), ("common.evaluation.tinyqa", "tinyqa-scorer")):
        mod = types.ModuleType(name)
        monkeypatch.setitem(sys.modules, name, mod)
        exec(compile(block(key), f"{PAGE}:{key}", "exec"), mod.__dict__)  # noqa: S102 - the page's own code
        mods[key] = mod
    return mods["tinyqa-adapter"], mods["tinyqa-scorer"]


def test_the_example_adapter_loads_the_example_file_and_names_bad_fields(tinyqa, tmp_path):
    adapter, _ = tinyqa
    path = tmp_path / "tinyqa.json"
    path.write_text(block("tinyqa-data"), encoding="utf-8")
    data = adapter.ADAPTER.load(path)
    assert data.memory_ids == ["m1"] and len(data.sessions) == 2 and len(data.questions) == 2
    assert [t.dia_id for s in data.sessions for t in s.turns] == ["1:1", "1:2", "1:3", "2:1"]
    assert [q.qid for q in data.questions] == ["m1:q1", "m1:q2"]
    assert {adapter.ADAPTER.category(g) for g in data.gold} == set(adapter.ADAPTER.categories)
    assert data.gold[1].evidence == ["1:3", "2:1"]
    cfg = load_config(["configs/locomo.yaml"], ["data.question_limit=1"])
    assert [q.qid for q in adapter.ADAPTER.select(data, cfg).questions] == ["m1:q1"]
    bad = json.loads(block("tinyqa-data"))
    bad[0]["questions"][1]["type"] = "trick"
    path.write_text(json.dumps(bad), encoding="utf-8")
    with pytest.raises(DataError) as err:
        adapter.ADAPTER.load(path)
    assert str(err.value).startswith(f"{path}: [0]: questions[1].type: expected one of single, multi")


def test_the_example_scorer_counts_a_missing_judgment_as_a_failure(tinyqa, tmp_path):
    adapter, scorer = tinyqa
    path = tmp_path / "tinyqa.json"
    path.write_text(block("tinyqa-data"), encoding="utf-8")
    data = adapter.ADAPTER.load(path)
    run_dir = tmp_path / "run"
    write_jsonl(artifacts.path(run_dir, "gold"), (to_dict(g) for g in data.gold))
    write_jsonl(artifacts.judge_path(run_dir, "j"), [{"qid": "m1:q1", "label": 1, "judge_model": "m"}])
    run = types.SimpleNamespace(dir=run_dir, cfg=load_config(["configs/locomo.yaml"], ["run.name=tiny"]),
                                path=lambda name: artifacts.path(run_dir, name),
                                judge_path=lambda name: artifacts.judge_path(run_dir, name))
    metrics = scorer.aggregate(run, ["j"])
    block_ = metrics["judges"]["j"]
    assert (block_["overall"]["k"], block_["overall"]["n"]) == (1, 2)
    assert block_["failures"] == {"missing_judgment": 1}
    (table,) = [p for p in scorer.write_tables(run, metrics) if p.suffix == ".md"]
    text = table.read_text(encoding="utf-8")
    assert "| single | multi | Overall |" in text and "50.0 (1/2)" in text


def test_every_registration_point_the_page_names_exists():
    text = PAGE.read_text(encoding="utf-8")
    rows = re.findall(r"^\| `([\w/]+\.py)` `([\w.]+)` \|", text, re.M)
    assert len(rows) >= 8
    for path, symbol in rows:
        module = importlib.import_module(str(Path(path).with_suffix("")).replace("/", "."))
        obj = module
        for part in symbol.split("."):
            obj = getattr(obj, part, None) if not isinstance(obj, type) else obj.__dataclass_fields__.get(part)
            assert obj is not None, f"{path}: no {symbol}"
    assert "| `Makefile` |" in text
