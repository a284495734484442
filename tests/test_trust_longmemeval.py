"""Issue 12 on LongMemEval: repeated judging, imports of official eval-results files, the gold audit."""
from __future__ import annotations

import json

from common.pipeline import audit
from common.pipeline.importer import main
from tests.conftest import REPO, rows, run_overrides, run_stages

TINY = REPO / "tests" / "fixtures" / "lme_tiny.json"


def _eval_results(tmp_path, labels_of) -> tuple:
    qids = [q["question_id"] for q in json.loads(TINY.read_text())]
    path = tmp_path / "hyp.jsonl.eval-results-gpt-4o"  # the official file name pattern
    lines = []
    for i, q in enumerate(qids):
        labels = labels_of(i)
        row = {"question_id": q, "hypothesis": f"answer {i}"}
        if len(labels) == 1:
            row["autoeval_label"] = {"model": "gpt-4o-2024-08-06", "label": bool(labels[0])}
        else:
            row["autoeval_labels"] = [{"model": "gpt-4o-2024-08-06", "label": bool(x)} for x in labels]
        lines.append(json.dumps(row))
    path.write_text("\n".join(lines) + "\n")
    return path, qids


def _import(tmp_path, path, name):
    assert main([str(path), "--run", name, "--benchmark", "longmemeval", "--set", f"run.results_dir={tmp_path}",
                 "--set", f"data.path={TINY}"]) == 0
    return tmp_path / "longmemeval" / name


def test_an_official_eval_results_file_imports_with_its_judge_model(tmp_path):
    path, qids = _eval_results(tmp_path, lambda i: [i % 2])
    run_dir = _import(tmp_path, path, "official")
    judged = rows(run_dir / "08_judge_gpt-4o-2024-08-06.jsonl")
    assert [r["label"] for r in judged] == [i % 2 for i in range(len(qids))]
    assert rows(run_dir / "07_answer.jsonl")[0]["answer"] == "answer 0"
    metrics = json.loads((run_dir / "metrics.json").read_text())
    m = metrics["judges"]["gpt-4o-2024-08-06"]
    assert m["overall"]["k"] == sum(i % 2 for i in range(len(qids))) and "runs" not in m


def test_several_label_runs_per_answer_give_the_runs_block(tmp_path):
    # 7 questions; runs: (1,1,0) majority 1 on even i, (0,0,1) majority 0 on odd i.
    path, qids = _eval_results(tmp_path, lambda i: [1, 1, 0] if i % 2 == 0 else [0, 0, 1])
    run_dir = _import(tmp_path, path, "three")
    block = json.loads((run_dir / "metrics.json").read_text())["judges"]["gpt-4o-2024-08-06"]["runs"]
    even = (len(qids) + 1) // 2
    assert [r["k"] for r in block["overall"]["per_run"]] == [even, even, len(qids) - even]
    assert block["overall"]["majority"]["k"] == even
    assert block["overall"]["flips"]["k"] == len(qids)
    assert set(block["by_type"]) >= {"single-session-user", "temporal-reasoning"}


def test_judge_runs_on_longmemeval(tmp_path, fake_server, monkeypatch):
    monkeypatch.setenv("OPENAI_BASE_URL", fake_server.base_url)
    sets = run_overrides(tmp_path, TINY, **{"method.name": "no_memory", "judge.runs": 2})
    run = run_stages("configs/longmemeval.yaml", sets)
    seeds = sorted(r.get("seed") for r in fake_server.requests_of_kind("judge_lme"))
    assert seeds == sorted([42, 43] * 7)
    block = json.loads(run.path("metrics").read_text())["judges"][run.cfg.judge.name]["runs"]
    assert block["n_runs"] == 2 and block["overall"]["majority"]["n"] == 7


def test_the_gold_audit_on_longmemeval(tmp_path, fake_server, monkeypatch):
    from tests.fake_openai import scripted

    monkeypatch.setattr(scripted, "judge_label", lambda text: "CORRECT")
    args = ["--config", "configs/longmemeval.yaml", "--set", f"data.path={TINY}",
            "--set", f"models.default.base_url={fake_server.base_url}",
            "--set", f"llm.cache_path={tmp_path / 'c.sqlite'}", "--out", str(tmp_path / "audit")]
    assert audit.main(args) == 0
    report = json.loads((tmp_path / "audit" / "gpt-4o-mini" / "audit.json").read_text())
    assert [s["set"] for s in report["sets"]] == ["gold"]
    assert report["sets"][0]["accept"]["k"] == 7 and report["sets"][0]["accept"]["n"] == 7
    assert audit.main(args[:-2] + ["--sets", "ap-v1", "--out", str(tmp_path / "a")]) == 2  # LoCoMo only
