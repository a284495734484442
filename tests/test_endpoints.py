"""Several endpoints per role (common/core/endpoints.py through common/core/llm.py).

Three fake servers with different latencies stand for replicas of one model: requests go to the
least-busy endpoint within each endpoint's own bound, a killed server loses no request, and the
cache key does not depend on which replica answered.
"""
from __future__ import annotations

import threading
import time

import pytest

from common.core.config import ConfigError, load_config
from common.core.endpoints import EndpointPool, EndpointSpec, parse_endpoints
from common.core.llm import LLMClient, ResponseCache, RetryPolicy, RoleSettings, cache_key, resolve_endpoints
from tests.fake_openai import FakeOpenAI

JUDGE = "judge_locomo_mem0"
FAST_RETRY = RetryPolicy(max_attempts=4, initial_wait=0.01, max_wait=0.05)


@pytest.fixture(autouse=True)
def clean_llm_env(monkeypatch):
    """No endpoint, key or serial switch from the caller's shell (test_batch.py imports it too)."""
    for name in ("OPENAI_API_KEY", "OPENAI_BASE_URL", "OPENAI_BASE_URLS", "HARNESS_SERIAL"):
        monkeypatch.delenv(name, raising=False)


def messages(i: int) -> list[dict[str, str]]:
    return [{"role": "user", "content": f"Question: q{i}?\nGold: g{i}\nResponse: r{i}\nCORRECT or WRONG? Reply as JSON "
                                        'with the key "label".'}]


def pooled_client(tmp_path, base_url, *, concurrency=4, cooldown=30.0, name="c.sqlite"):
    role = RoleSettings(role="judge", model="m", base_url=base_url, timeout=5.0)
    return LLMClient({"judge": role}, cache=ResponseCache(str(tmp_path / name)), retry=FAST_RETRY,
                     concurrency=concurrency, cooldown=cooldown)


def ask(client: LLMClient, n: int, start: int = 0):
    return dict(client.map(lambda i: client.complete("judge", messages(i), json_mode=True, prompt_id=JUDGE),
                           list(range(start, start + n)), progress=False))


def test_throughput_is_the_sum_of_the_endpoints_capacities(tmp_path):
    """Three replicas, 0.1/0.2/0.4 s per request, 3 slots each: capacities 30, 15 and 7.5 requests/s.

    Each server is kept full (its peak in flight is its bound, never more), so the requests split
    in proportion to the capacities and the run takes about N / 52.5 s, well under what the fastest
    server alone needs (N / 30 s)."""
    latencies, bound, n = (0.1, 0.2, 0.4), 3, 105
    servers = [FakeOpenAI(latency=lat).start() for lat in latencies]
    try:
        specs = tuple(EndpointSpec(s.base_url, bound) for s in servers)
        client = pooled_client(tmp_path, specs, concurrency=1)
        assert client.workers() == 3 * bound
        t0 = time.perf_counter()
        results = ask(client, n)
        wall = time.perf_counter() - t0
        counts = [s.request_count for s in servers]
        assert sum(counts) == n and len(results) == n and not any(c.cached for c in results.values())
        for s in servers:  # each endpoint's own bound held, and reached
            assert s.peak_in_flight["judge_locomo"] == bound
        capacity = [bound / lat for lat in latencies]
        for got, cap in zip(counts, capacity):  # shares follow capacities (4/7, 2/7, 1/7), loosely
            assert abs(got / n - cap / sum(capacity)) < 0.12, (counts, capacity)
        assert counts[0] > counts[1] > counts[2]
        ideal, fastest_alone = n / sum(capacity), n / capacity[0]
        assert wall < max(2.5 * ideal, fastest_alone), (wall, ideal)  # generous: the machine is shared
        served = client.summary()["judge"]["endpoints"]
        assert [served[s.base_url]["served"] for s in servers] == counts
    finally:
        for s in servers:
            s.stop()


def test_a_server_killed_mid_run_loses_no_request(tmp_path):
    servers = [FakeOpenAI(latency=0.1).start() for _ in range(3)]
    victim = servers[1]
    try:
        client = pooled_client(tmp_path, tuple(EndpointSpec(s.base_url, 3) for s in servers), cooldown=60.0)
        n = 90

        def killer() -> None:
            while victim.request_count < 8:
                time.sleep(0.005)
            victim.kill()  # with requests in flight: their connections are reset

        t = threading.Thread(target=killer)
        t.start()
        results = ask(client, n)
        t.join()
        assert victim.killed and len(results) == n
        assert all(c.text and not c.cached for c in results.values())
        st = client.summary()["judge"]
        assert (st["failed"], st["new"]) == (0, n)
        ep = st["endpoints"]
        assert ep[victim.base_url]["connection_failures"] >= 1  # it was set aside ...
        # ... and everything not answered before it died was answered by the others.
        survivors = sum(ep[s.base_url]["served"] for s in servers if s is not victim)
        assert survivors + ep[victim.base_url]["served"] == n
        assert survivors >= n - 8
        assert victim.base_url in client.pool("judge")[0].set_aside()
        # Every reply is in the cache: a rerun makes no request at all.
        again = pooled_client(tmp_path, tuple(EndpointSpec(s.base_url, 3) for s in servers))
        before = [s.request_count for s in servers]
        assert all(c.cached for c in ask(again, n).values())
        assert [s.request_count for s in servers] == before
    finally:
        for s in servers:
            s.stop()


def test_the_cache_key_does_not_depend_on_which_endpoint_answered(tmp_path):
    with FakeOpenAI(latency=0.05) as a, FakeOpenAI(latency=0.05) as b, FakeOpenAI() as c:
        single = pooled_client(tmp_path, a.base_url, name="single.sqlite")
        alone = ask(single, 6)
        pooled = pooled_client(tmp_path, (EndpointSpec(a.base_url), EndpointSpec(b.base_url)), concurrency=1,
                               name="pool.sqlite")
        both = ask(pooled, 6)
        assert a.request_count + b.request_count == 12 and b.request_count >= 2  # the pool used both ...
        # ... and every key is the one-endpoint key, named by the first endpoint of the list.
        assert {i: x.cache_key for i, x in both.items()} == {i: x.cache_key for i, x in alone.items()}
        assert both[0].cache_key == cache_key({
            "base_url": a.base_url, "model": "m", "messages": messages(0), "temperature": 0.0, "seed": 42,
            "response_format": {"type": "json_object"}, "extra_body": {}})
        # A run that grows from one server to three keeps its cache: no request is paid again.
        grown = pooled_client(tmp_path, (EndpointSpec(a.base_url), EndpointSpec(b.base_url),
                                         EndpointSpec(c.base_url)), name="single.sqlite")
        assert all(x.cached for x in ask(grown, 6).values())
        assert a.request_count + b.request_count == 12 and c.request_count == 0


def test_pool_prefers_the_fewest_in_flight_and_sets_failing_endpoints_aside():
    now = [0.0]
    pool = EndpointPool((EndpointSpec("http://a/v1", 2), EndpointSpec("http://b/v1", 1)), 8, cooldown=10.0,
                        clock=lambda: now[0])
    assert [pool.acquire() for _ in range(3)] == ["http://a/v1", "http://b/v1", "http://a/v1"]
    got: list[str] = []
    waiter = threading.Thread(target=lambda: got.append(pool.acquire()))
    waiter.start()
    time.sleep(0.15)
    assert got == []  # every endpoint at its bound: the request waits
    pool.release("http://b/v1", ok=False, connection_error=True)  # b fails: set aside for 10 s
    time.sleep(0.15)
    assert got == []  # a slot of b is free, but b is set aside
    pool.release("http://a/v1", ok=True)
    waiter.join(1)
    assert got == ["http://a/v1"] and pool.set_aside() == {"http://b/v1": 10.0}
    now[0] = 10.5  # the cooldown ends: b is used again
    assert pool.acquire() == "http://b/v1"
    # Everything set aside: the endpoint whose cooldown ends first is probed (a pool of one
    # behaves like the single endpoint it is).
    one = EndpointPool((EndpointSpec("http://x/v1"),), 1, cooldown=10.0, clock=lambda: now[0])
    one.release(one.acquire(), ok=False, connection_error=True)
    assert one.acquire() == "http://x/v1"


def test_endpoint_lists_from_the_config_and_the_environment(monkeypatch):
    cfg = load_config(["configs/locomo.yaml"], [
        "models.default.base_url=[http://a:8000/v1/, {url: http://b:8000/v1, concurrency: 32}]",
        "models.judge.base_url=http://j:9000/v1"])
    specs = cfg.role("extract").base_url
    assert specs == (EndpointSpec("http://a:8000/v1"), EndpointSpec("http://b:8000/v1", 32))
    assert cfg.role("judge").base_url == "http://j:9000/v1"
    for bad, msg in [("[]", r"models\.default\.base_url: expected a URL"),
                     ("[{url: http://a/v1, slots: 2}]", r"models\.default\.base_url\[0\]: unknown field"),
                     ("[http://a/v1, {url: http://b/v1, concurrency: 0}]",
                      r"models\.default\.base_url\[1\]\.concurrency: must be an integer >= 1"),
                     ("[http://a/v1, http://a/v1/]", "endpoint listed twice"),
                     ("7", r"models\.default\.base_url: expected str or list")]:
        with pytest.raises(ConfigError, match=msg):
            load_config(["configs/locomo.yaml"], [f"models.default.base_url={bad}"])
    monkeypatch.setenv("OPENAI_BASE_URL", "http://single:1/v1")
    monkeypatch.setenv("OPENAI_BASE_URLS", " http://r1:1/v1, http://r2:1/v1/ ,")
    urls = [s.url for s in resolve_endpoints(RoleSettings("judge", "m"))[0]]
    assert urls == ["http://r1:1/v1", "http://r2:1/v1"]  # the list wins over the single URL
    # The config's base_url wins over both.
    assert resolve_endpoints(RoleSettings("judge", "m", base_url="http://cfg:1/v1"))[0] == (
        EndpointSpec("http://cfg:1/v1"),)
    assert parse_endpoints("http://x/v1/", "w") == (EndpointSpec("http://x/v1"),)


def test_a_pipeline_run_spreads_over_openai_base_urls(tmp_path, monkeypatch):
    import json

    from tests.conftest import TINY_LOCOMO, run_overrides, run_stages

    with FakeOpenAI(latency=0.05) as a, FakeOpenAI(latency=0.05) as b:
        monkeypatch.setenv("OPENAI_BASE_URLS", f"{a.base_url},{b.base_url}")
        run = run_stages("configs/locomo.yaml", run_overrides(tmp_path, TINY_LOCOMO, **{"llm.concurrency": 2}),
                         ["preprocess", "episodes", "extract"])
        assert a.request_count > 0 and b.request_count > 0
        m = json.loads((run.dir / "03_extract.manifest.json").read_text())
        served = m["llm"]["endpoints"]  # one pool for every role on these servers: 02's and 03's calls
        assert set(served) == {a.base_url, b.base_url} and all(v["bound"] == 2 for v in served.values())
        assert [served[s.base_url]["served"] for s in (a, b)] == [a.request_count, b.request_count]
