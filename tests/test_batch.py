"""The OpenAI Batch API for offline roles (common/core/batch.py through LLMClient.map).

Every request goes to the fake server's /v1/files and /v1/batches (tests/fake_openai/batches.py):
no live chat request is made for a batch role, the replies land in the same cache, an
interrupted run re-attaches to its batch, an expired batch's undone requests are sent again, and
failures are counted by cause.
"""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from common.core.batch import BatchOptions, batch_keys
from common.core.llm import LLMCallError, LLMClient, ResponseCache, RetryPolicy, RoleSettings
from tests.fake_openai import FakeOpenAI, FaultPlan
from tests.test_endpoints import clean_llm_env, messages  # noqa: F401  (clean_llm_env: an autouse fixture)

JUDGE = "judge_locomo_mem0"
FAST_RETRY = RetryPolicy(max_attempts=3, initial_wait=0.01, max_wait=0.02)


class Interrupted(Exception):
    """Stands for Ctrl-C / kill while the client waits for a batch."""


def batch_client(server: FakeOpenAI, tmp_path: Path, *, on_expiry: str = "batch", roles=("judge",),
                 max_submissions: int = 3) -> LLMClient:
    settings = {r: RoleSettings(role=r, model="m", base_url=server.base_url, timeout=5.0) for r in ("judge", "answer")}
    options = BatchOptions(tuple(roles), tmp_path / "run" / "batches", poll_seconds=0.01, on_expiry=on_expiry,
                           max_submissions=max_submissions)
    return LLMClient(settings, cache=ResponseCache(str(tmp_path / "c.sqlite")), retry=FAST_RETRY,
                     concurrency=4, batch=options)


def judge_all(client: LLMClient, n: int) -> dict[int, object]:
    def work(i: int) -> object:
        try:
            return client.complete("judge", messages(i), json_mode=True, prompt_id=JUDGE)
        except LLMCallError as exc:
            return exc.cause
    return dict(client.map(work, list(range(n)), progress=False))


def records(tmp_path: Path) -> list[dict]:
    """The batch records under tmp_path (``run/batches`` here, ``<run>/batches`` of a pipeline run)."""
    return [json.loads(p.read_text()) for p in sorted(tmp_path.glob("*/batches/*.json"))]


def test_batch_role_goes_through_files_and_batches_into_the_same_cache(tmp_path):
    with FakeOpenAI() as server:
        client = batch_client(server, tmp_path)
        got = judge_all(client, 10)
        assert server.request_count == 0  # not one live chat request
        assert (server.batch.uploads, server.batch.created) == (1, 1)
        assert all(not c.cached and c.batch and c.text for c in got.values())
        rec, = records(tmp_path)
        assert rec["collected"] and rec["status"] == "completed" and rec["batch_id"].startswith("batch_fake_")
        assert rec["outcome"] == {"answered": 10} and len(rec["answered"]) == 10
        lines = [json.loads(x) for x in (tmp_path / "run" / "batches" / rec["input"]).read_text().splitlines()]
        assert len(lines) == 10
        assert {ln["custom_id"] for ln in lines} == {f"{c.cache_key}:{JUDGE}" for c in got.values()}
        assert all(ln["url"] == "/v1/chat/completions" and ln["body"]["model"] == "m"
                   and ln["body"]["response_format"] == {"type": "json_object"} for ln in lines)
        st = client.summary()["judge"]
        assert (st["calls"], st["new"], st["cached"], st["batch"], st["failed"]) == (10, 10, 0, 10, 0)
        assert st["batches"] == {"batches": 1, "requests": 10, "answered": 10}
        assert batch_keys(tmp_path / "run" / "batches") == {c.cache_key for c in got.values()}
        # The same cache a live call fills: a live client (no batch) reads every reply from it.
        live = LLMClient({"judge": RoleSettings("judge", "m", base_url=server.base_url)},
                         cache=ResponseCache(str(tmp_path / "c.sqlite")))
        again = {i: live.complete("judge", messages(i), json_mode=True, prompt_id=JUDGE) for i in range(10)}
        assert all(c.cached and c.text == got[i].text for i, c in again.items())
        # A rerun with batching on pays nothing and submits nothing.
        rerun = judge_all(batch_client(server, tmp_path), 10)
        assert all(c.cached for c in rerun.values()) and server.batch.created == 1 and server.request_count == 0


def test_only_batch_roles_are_batched(tmp_path):
    with FakeOpenAI() as server:
        client = batch_client(server, tmp_path)
        out = dict(client.map(lambda i: client.complete("answer", messages(i), prompt_id="answer_user"),
                              [0, 1], progress=False))
        assert server.request_count == 2 and server.batch.created == 0 and not any(c.batch for c in out.values())


def test_an_interrupted_run_reattaches_to_its_batch_instead_of_paying_again(tmp_path):
    with FakeOpenAI() as server:
        server.batch.plan.hold = True
        client = batch_client(server, tmp_path)

        def interrupt(_: float) -> None:
            raise Interrupted

        assert client.batcher is not None
        client.batcher._sleep = interrupt
        with pytest.raises(Interrupted):
            judge_all(client, 6)
        rec, = records(tmp_path)
        assert rec["batch_id"] and not rec["collected"] and server.batch.created == 1
        server.batch.plan.hold = False
        again = batch_client(server, tmp_path)
        got = judge_all(again, 8)  # the same six and two new ones
        assert (server.batch.uploads, server.batch.created) == (2, 2)  # only the two new ones were sent
        first, second = records(tmp_path)
        assert first["collected"] and len(first["answered"]) == 6 and second["requests"] == 2
        assert len(server.batch.lines_answered) == 8 and server.request_count == 0
        assert all(c.batch and not c.cached for c in got.values())


def test_a_batch_created_but_not_recorded_is_found_by_its_file(tmp_path):
    """Killed between batches.create and the record's update: the restart lists the server's
    batches and waits for the one made from its uploaded file."""
    with FakeOpenAI() as server:
        server.batch.plan.hold = True
        client = batch_client(server, tmp_path)
        assert client.batcher is not None
        client.batcher._sleep = lambda _: (_ for _ in ()).throw(Interrupted)
        with pytest.raises(Interrupted):
            judge_all(client, 3)
        path, = (tmp_path / "run" / "batches").glob("*.json")
        data = json.loads(path.read_text())
        del data["batch_id"]
        path.write_text(json.dumps(data))
        server.batch.plan.hold = False
        got = judge_all(batch_client(server, tmp_path), 3)
        assert server.batch.created == 1 and all(c.batch for c in got.values())
        assert json.loads(path.read_text())["batch_id"] == "batch_fake_0000"


@pytest.mark.parametrize("on_expiry", ["batch", "live"])
def test_an_expired_batch_has_its_undone_requests_sent_again(tmp_path, on_expiry):
    with FakeOpenAI() as server:
        server.batch.plan.expire = {0: 4}  # the first batch expires with 4 of its 10 lines done
        client = batch_client(server, tmp_path, on_expiry=on_expiry)
        got = judge_all(client, 10)
        assert all(not isinstance(c, str) and c.text for c in got.values())  # nothing lost
        first = records(tmp_path)[0]
        assert first["status"] == "expired" and len(first["answered"]) == 4
        if on_expiry == "batch":
            assert first["outcome"] == {"answered": 4, "undone": 6, "resubmitted": 6}
            assert server.batch.created == 2 and server.request_count == 0
            assert records(tmp_path)[1]["requests"] == 6 and all(c.batch for c in got.values())
        else:
            assert first["outcome"] == {"answered": 4, "undone": 6, "sent_live": 6}
            assert server.batch.created == 1 and server.request_count == 6  # live, at the standard price
            assert sorted(c.batch for c in got.values()) == [False] * 6 + [True] * 4
        assert len(batch_keys(tmp_path / "run" / "batches")) == (10 if on_expiry == "batch" else 4)


def test_batches_that_keep_expiring_fail_with_a_counted_cause(tmp_path):
    with FakeOpenAI() as server:
        server.batch.plan.expire = {0: 1, 1: 0}
        client = batch_client(server, tmp_path, max_submissions=2)
        got = judge_all(client, 3)
        assert sorted(c for c in got.values() if isinstance(c, str)) == ["batch_expired", "batch_expired"]
        st = client.summary()["judge"]
        assert (st["failed"], st["failures"], st["batch"]) == (2, {"batch_expired": 2}, 1)
        assert server.batch.created == 2


def test_failed_batch_lines_are_counted_by_cause(tmp_path):
    # Distinct judge bodies in first-arrival order: a 400 (fails at once), a 500 on every try (resent
    # until the budget is spent), a body without choices, and the rest fine.
    plan = FaultPlan(pinned={"judge_locomo": ["400", "500", "no_choices"]})
    with FakeOpenAI(faults=plan) as server:
        client = batch_client(server, tmp_path, max_submissions=2)
        got = judge_all(client, 5)
        causes = sorted(c for c in got.values() if isinstance(c, str))
        assert causes == ["bad_response", "http_400", "http_500"]
        st = client.summary()["judge"]
        assert st["failures"] == {"bad_response": 1, "http_400": 1, "http_500": 1} and st["batch"] == 2
        assert server.batch.created == 2  # the 500 was sent once more, then counted
        assert server.request_count == 0


def test_a_rejected_batch_fails_its_requests_as_batch_failed(tmp_path):
    with FakeOpenAI() as server:
        server.batch.plan.reject = {0}
        got = judge_all(batch_client(server, tmp_path), 2)
        assert set(got.values()) == {"batch_failed"}
        assert records(tmp_path)[0]["status"] == "failed"


def test_a_repair_call_goes_into_the_next_batch(tmp_path):
    """A row needing two calls in sequence (a reply, then its JSON repair) defers twice."""
    with FakeOpenAI() as server:
        client = batch_client(server, tmp_path)

        def work(i: int) -> str:
            first = client.complete("judge", messages(i), json_mode=True, prompt_id=JUDGE)
            second = client.complete("judge", messages(100 + i), json_mode=True, prompt_id=JUDGE)
            return first.text + second.text

        out = dict(client.map(work, [0, 1, 2], progress=False))
        assert len(out) == 3 and server.batch.created == 2
        assert [r["requests"] for r in records(tmp_path)] == [3, 3]


# --------------------------------------------------------------------------- the pipeline
def test_pipeline_with_llm_batch_sends_02_03_08_as_batches_and_prices_them_at_the_batch_rate(
        tmp_path, monkeypatch):
    from common.core.config import load_config
    from common.pipeline import dryrun
    from tests.conftest import TINY_LOCOMO, rows, run_overrides, run_stages

    sets = run_overrides(tmp_path, TINY_LOCOMO, **{"llm.batch": "true", "llm.batch_poll_seconds": 0.01})
    with FakeOpenAI() as server:
        monkeypatch.setenv("OPENAI_BASE_URL", server.base_url)
        run = run_stages("configs/locomo.yaml", sets)
        live = server.counts_by_kind()
        # 02, 03 and 08 made no live request; 05, 06 and 07 (online roles) did.
        assert not {"partition", "partition_repair", "extract", "extract_repair", "judge_locomo"} & set(live)
        assert live["plan"] == 11 and live["answer"] == 11
        recs = records(tmp_path / "results" / "locomo")  # <run>/batches under results/locomo/t
        assert {r["role"] for r in recs} == {"partition", "extract", "judge"} and all(r["collected"] for r in recs)
        judged = rows(run.judge_path())
        assert len(judged) == 9 and all(r["label"] in (0, 1) for r in judged)
        led = json.loads((run.dir / "ledger.json").read_text())
        by = {e["stage"]: e for e in led["stages"]}
        for stage in ("02_episodes", "03_extract", "08_judge_gpt-4o-mini"):
            e = by[stage]
            assert e["batch"] == e["paid"] == e["calls"] > 0 and e["latency_mean"] is None, stage
            prices = ledger_prices()
            full = sum(ledger_cost(e["models"][0], e["paid_prompt_tokens"], e["paid_completion_tokens"], prices))
            assert e["cost_paid_usd"] == pytest.approx(full / 2, abs=1e-6)  # half the standard rate
        assert by["07_answer"]["batch"] == 0 and by["07_answer"]["paid"] == 11
        manifest = json.loads((run.dir / "08_judge_gpt-4o-mini.manifest.json").read_text())
        assert manifest["llm"]["batch"] == 9 and manifest["llm"]["batches"]["answered"] == 9
        n_batches = server.batch.created
        # A rerun of the finished run submits nothing.
        run_stages("configs/locomo.yaml", sets)
        assert server.batch.created == n_batches
    # The dry run shows both prices and the total as configured.
    cfg = load_config(["configs/locomo.yaml"], sets + ["run.name=fresh"])
    est = dryrun.estimate(cfg)
    judge = next(s for s in est["stages"] if s["stage"].startswith("08_judge"))
    answer = next(s for s in est["stages"] if s["stage"].startswith("07_answer"))
    assert judge["batch"] and judge["cost_batch_usd"] == pytest.approx(judge["cost_usd"] / 2, abs=1e-4)
    assert not answer["batch"] and answer["cost_batch_usd"] is None  # online: never batched
    assert est["total"]["cost_configured_usd"] == est["total"]["cost_batch_usd"] <= est["total"]["cost_usd"]
    text = dryrun.format_estimate(est)
    assert "est. $ live | est. $ batch" in text and "As configured (llm.batch: extract, judge, partition)" in text


def ledger_prices() -> dict:
    from common.pipeline.ledger import load_prices

    return load_prices()


def ledger_cost(model: str, prompt_tokens: int, completion_tokens: int, prices: dict) -> list[float]:
    from common.pipeline.ledger import cost

    value = cost(model, prompt_tokens, completion_tokens, prices)
    assert value is not None
    return [value]


def test_ledger_prices_batch_calls_at_the_batch_rate():
    from common.pipeline import ledger

    prices = {"models": {"m": {"input": 1.0, "output": 2.0}, "own": {"input": 1.0, "output": 2.0,
                                                                    "batch_input": 0.1, "batch_output": 0.2}}}
    assert ledger.cost("m", 1_000_000, 1_000_000, prices, batch=True) == pytest.approx(1.5)  # default 50%
    assert ledger.cost("m", 1_000_000, 0, {**prices, "batch_discount": 0.25}, batch=True) == pytest.approx(0.25)
    assert ledger.cost("own", 1_000_000, 1_000_000, prices, batch=True) == pytest.approx(0.3)
    call = lambda key, lat, **kw: {"model": "m", "cache_key": key, "cached": False, "latency": lat,  # noqa: E731
                                   "usage": {"prompt_tokens": 1000, "completion_tokens": 0}, **kw}
    rs = [{"id": "a", "llm_calls": [call("k1", 0.0), call("k2", 2.0)]},
          {"id": "b", "llm_calls": [call("k3", 0.0, batch=True)]},
          # a single-call (judge) row answered by a batch: known by its cache key
          {"qid": "c", "judge_model": "m", "cache_key": "k4", "cached": False, "latency": 0.0, "label": 1,
           "usage": {"prompt_tokens": 1000, "completion_tokens": 0}}]
    e = ledger.stage_entry("x", "judge", rs, prices, {"k1", "k4"})
    assert (e["calls"], e["paid"], e["batch"]) == (4, 4, 3)
    assert e["cost_paid_usd"] == pytest.approx((3 * 1000 * 0.5 + 1000) / 1e6)
    assert e["latency_mean"] == pytest.approx(2.0)  # the live call only


def test_a_killed_stage_reattaches_to_its_batch_on_restart(tmp_path, monkeypatch):
    """kill -9 stage 02 while its batch is in flight; the restart waits for that batch, pays for
    nothing again and writes every row."""
    import os
    import subprocess
    import sys
    import time

    from tests.conftest import REPO, TINY_LOCOMO, rows, run_overrides, run_stages

    sets = run_overrides(tmp_path, TINY_LOCOMO, **{"llm.batch": "[partition]", "llm.batch_poll_seconds": 0.05})
    with FakeOpenAI() as server:
        monkeypatch.setenv("OPENAI_BASE_URL", server.base_url)
        run = run_stages("configs/locomo.yaml", sets, ["preprocess"])
        server.batch.plan.hold = True
        cmd = [sys.executable, "-m", "LoCoMo.02_episodes", *[a for s in sets for a in ("--set", s)]]
        proc = subprocess.Popen(cmd, cwd=REPO, env={**os.environ, "OPENAI_BASE_URL": server.base_url},
                                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        deadline = time.monotonic() + 120
        while not (records(tmp_path / "results" / "locomo") and records(tmp_path / "results" / "locomo")[0]
                   .get("batch_id")) and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)
        time.sleep(0.2)  # it is polling the held batch now
        proc.kill()
        _, err = proc.communicate()
        assert proc.returncode == -9, err.decode()[-500:]
        out = run.dir / "02_episodes.jsonl"
        assert server.batch.created == 1 and (not out.exists() or rows(out) == [])  # no row written
        server.batch.plan.hold = False
        run_stages("configs/locomo.yaml", sets, ["episodes"])
        assert (server.batch.uploads, server.batch.created) == (1, 1)  # re-attached, nothing sent again
        assert server.request_count == 0 and len(server.batch.lines_answered) == 4
        assert len(rows(run.dir / "02_episodes.jsonl")) == 4
        rec, = records(tmp_path / "results" / "locomo")
        assert rec["collected"] and len(rec["answered"]) == 4


def test_llm_batch_config_names_offline_roles_only():
    from common.core.config import ROLES, ConfigError, load_config

    assert load_config(["configs/locomo.yaml"], ["llm.batch=true"]).llm.batch_roles(
        ("partition", "extract", "plan", "bridge", "answer", "judge")) == ("partition", "extract", "judge")
    assert load_config(["configs/locomo.yaml"], ["llm.batch=[judge]"]).llm.batch_roles(("judge",)) == ("judge",)
    with pytest.raises(ConfigError, match=r"llm\.batch\[0\]: role 'answer' is online"):
        load_config(["configs/locomo.yaml"], ["llm.batch=[answer]"])
    # a memory system's ingestion (role memory) runs in order outside LLMClient.map: never batched
    assert "memory" not in load_config(["configs/locomo.yaml"], ["llm.batch=true"]).llm.batch_roles(ROLES)
    with pytest.raises(ConfigError, match=r"llm\.batch\[0\]: role 'memory' is online \(a memory system's"):
        load_config(["configs/locomo.yaml"], ["llm.batch=[memory]"])
    with pytest.raises(ConfigError, match=r"llm\.batch\[1\]: unknown role 'juge'"):
        load_config(["configs/locomo.yaml"], ["llm.batch=[judge, juge]"])
    with pytest.raises(ConfigError, match=r"llm\.batch_on_expiry: 'later' is not one of batch, live"):
        load_config(["configs/locomo.yaml"], ["llm.batch_on_expiry=later"])


def test_a_queue_larger_than_the_request_limit_is_split_into_several_batches(tmp_path):
    with FakeOpenAI() as server:
        client = batch_client(server, tmp_path)
        assert client.batcher is not None
        client.batcher.options = BatchOptions(("judge",), tmp_path / "run" / "batches", poll_seconds=0.01,
                                              max_requests=4)
        got = judge_all(client, 10)
        assert all(c.batch for c in got.values())
        assert sorted(r["requests"] for r in records(tmp_path)) == [2, 4, 4] and server.batch.created == 3


def test_fake_files_and_batches_speak_the_sdk_protocol():
    """The fake's Batch API as the official SDK sees it: upload, create, retrieve, list, content."""
    import openai

    with FakeOpenAI() as server:
        sdk = openai.OpenAI(base_url=server.base_url, api_key="test", max_retries=0)
        line = {"custom_id": f"k1:{JUDGE}", "method": "POST", "url": "/v1/chat/completions",
                "body": {"model": "m", "messages": messages(1)}}
        unknown = {**line, "custom_id": "k2"}  # no prompt id: the kind is unknown, like a live call
        up = sdk.files.create(file=("in.jsonl", (json.dumps(line) + "\n" + json.dumps(unknown) + "\n").encode()),
                              purpose="batch")
        assert up.purpose == "batch" and sdk.files.content(up.id).text.count("\n") == 2
        b = sdk.batches.create(input_file_id=up.id, endpoint="/v1/chat/completions", completion_window="24h")
        assert b.status == "in_progress" and b.input_file_id == up.id
        b = sdk.batches.retrieve(b.id)
        assert b.status == "completed" and b.request_counts.completed == 1 and b.request_counts.failed == 1
        out = [json.loads(x) for x in sdk.files.content(b.output_file_id).text.splitlines()]
        err = [json.loads(x) for x in sdk.files.content(b.error_file_id).text.splitlines()]
        assert out[0]["custom_id"] == f"k1:{JUDGE}" and out[0]["response"]["status_code"] == 200
        assert "label" in out[0]["response"]["body"]["choices"][0]["message"]["content"]
        assert err[0]["response"]["status_code"] == 400
        assert [x.id for x in sdk.batches.list()] == [b.id]
        with pytest.raises(openai.BadRequestError):
            sdk.batches.create(input_file_id="file-nope", endpoint="/v1/chat/completions", completion_window="24h")
        with pytest.raises(openai.NotFoundError):
            sdk.batches.retrieve("batch_nope")
