"""Tests for common/core/llm.py (cache, retries, endpoints, secrets, JSON parsing, map, stats).

Every network call goes to the local scripted server in tests/fake_openai/.
"""
from __future__ import annotations

import glob
import json
import threading
import time

import pytest

from common.core.llm import (
    OPENAI_DEFAULT_BASE_URL,
    PROMPT_ID_HEADER,
    Completion,
    EndpointNotConfigured,
    LLMCallError,
    LLMClient,
    ResponseCache,
    RetryPolicy,
    RoleSettings,
    cache_key,
    parse_json_object,
    resolve_endpoint,
)
from tests.fake_openai import FakeOpenAI, FaultPlan, approx_tokens, prompt_text, scripted_content

FAST_RETRY = RetryPolicy(max_attempts=4, initial_wait=0.01, max_wait=0.05)
SECRET = "sk-test-SECRET-7f3a9c1e5b2d4f60"


JUDGE_PROMPT = "judge_locomo_mem0"  # the X-Prompt-Id these calls are sent with (kind judge_locomo)


def judge_messages(i: int = 0) -> list[dict[str, str]]:
    return [
        {"role": "system", "content": "You grade answers."},
        {"role": "user", "content": f"Question: q{i}?\nGold: g{i}\nResponse: r{i}\nLabel it CORRECT or WRONG, as JSON "
                                    'with the key "label".'},
    ]


@pytest.fixture(autouse=True)
def _clean_env(monkeypatch):
    # The tests decide the endpoint themselves; an ambient key/URL must not leak in.
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    monkeypatch.delenv("HARNESS_SERIAL", raising=False)


@pytest.fixture
def server():
    with FakeOpenAI() as srv:
        yield srv


def make_client(base_url, tmp_path, *, mode="rw", timeout=2.0, concurrency=4, retry=FAST_RETRY, **settings):
    role = RoleSettings(role="judge", model=settings.pop("model", "m"), base_url=base_url, timeout=timeout, **settings)
    return LLMClient({"judge": role}, cache=ResponseCache(str(tmp_path / "c.sqlite"), mode=mode),
                     retry=retry, concurrency=concurrency)


# --------------------------------------------------------------------------- cache
def test_cache_miss_then_hit(server, tmp_path):
    client = make_client(server.base_url, tmp_path)
    first = client.complete("judge", judge_messages(), json_mode=True, prompt_id=JUDGE_PROMPT)
    assert isinstance(first, Completion)
    assert first.cached is False
    assert server.request_count == 1
    assert parse_json_object(first.text)["label"] in ("CORRECT", "WRONG")

    second = client.complete("judge", judge_messages(), json_mode=True, prompt_id=JUDGE_PROMPT)
    assert server.request_count == 1  # served from the cache: no new request
    assert second.cached is True
    assert (second.text, second.cache_key, second.usage) == (first.text, first.cache_key, first.usage)
    assert second.latency == first.latency  # the original call's latency, flagged cached

    # A fresh client on the same sqlite file also hits (the cache is persistent).
    again = make_client(server.base_url, tmp_path).complete("judge", judge_messages(), json_mode=True,
                                                          prompt_id=JUDGE_PROMPT)
    assert again.cached is True and again.text == first.text
    assert server.request_count == 1

    st = client.summary()["judge"]
    assert (st["calls"], st["cached"], st["new"], st["failed"]) == (2, 1, 1, 0)


def test_identical_requests_in_flight_are_paid_once(tmp_path):
    with FakeOpenAI(latency=0.3) as slow:
        client = make_client(slow.base_url, tmp_path, concurrency=8)
        distinct = [judge_messages(0)] * 6 + [judge_messages(1)] * 2
        results = [c for _, c in client.map(
            lambda m: client.complete("judge", m, json_mode=True, prompt_id=JUDGE_PROMPT), distinct)]
        assert slow.request_count == 2  # one request per distinct prompt, though all 8 were in flight
        assert sorted(c.cached for c in results) == [False, False] + [True] * 6
        assert {c.text for c in results if c.cache_key == results[0].cache_key} == {results[0].text}
        st = client.summary()["judge"]
        assert (st["calls"], st["cached"], st["new"]) == (8, 6, 2)
        assert client._inflight == {}  # nothing left behind


def test_a_failed_call_in_flight_is_not_shared(tmp_path):
    """Failures are not cached: a waiter whose leader failed makes its own call."""
    with FakeOpenAI(faults=FaultPlan(script=["400"]), latency=0.2) as srv:
        client = make_client(srv.base_url, tmp_path, concurrency=2)
        outcomes = []
        for _, c in client.map(lambda m: _outcome(client, m), [judge_messages(0)] * 2):
            outcomes.append(c)
        assert sorted(outcomes) == ["http_400", "ok"] and srv.request_count == 2


def _outcome(client: LLMClient, messages: list[dict[str, str]]) -> str:
    try:
        client.complete("judge", messages, prompt_id=JUDGE_PROMPT)
        return "ok"
    except LLMCallError as exc:
        return exc.cause


def test_cache_key_literal_is_pinned():
    payload = {
        "base_url": "http://127.0.0.1:8000/v1",
        "model": "m",
        "messages": [{"role": "user", "content": "Is it CORRECT or WRONG?"}],
        "temperature": 0.0,
        "seed": 42,
        "response_format": {"type": "json_object"},
        "extra_body": {},
    }
    # Computed once and written here: an accidental change of the key scheme invalidates every
    # existing cache, so it must be a deliberate edit of this literal (and of CACHE_VERSION).
    assert cache_key(payload) == "cd412d859ab58f75388e3ca62b2a069afd71e1b1e128e2002539d8a6becfb19d"
    # Canonical: key order does not matter.
    assert cache_key(dict(reversed(list(payload.items())))) == cache_key(payload)


def test_complete_key_is_the_documented_payload(server, tmp_path):
    client = make_client(server.base_url, tmp_path)
    comp = client.complete("judge", judge_messages(), json_mode=True, prompt_id=JUDGE_PROMPT)
    expected = cache_key({
        "base_url": server.base_url, "model": "m", "messages": judge_messages(), "temperature": 0.0,
        "seed": 42, "response_format": {"type": "json_object"}, "extra_body": {},
    })
    assert comp.cache_key == expected
    sent = server.requests[-1]
    assert sent["response_format"] == {"type": "json_object"}
    assert sent["seed"] == 42 and sent["temperature"] == 0.0 and sent["model"] == "m"


def test_cache_key_changes_with_output_relevant_fields(server, tmp_path):
    def key(messages=None, json_mode=True, **settings):
        cli = make_client(server.base_url, tmp_path, **settings)
        return cli.complete("judge", messages or judge_messages(), json_mode=json_mode,
                            prompt_id=JUDGE_PROMPT).cache_key

    base = key()
    variants = {
        "temperature": key(temperature=0.7),
        "seed": key(seed=7),
        "no_seed": key(seed=None),
        "model": key(model="other-model"),
        "messages": key(messages=judge_messages(1)),
        "response_format": key(json_mode=False),
        "max_tokens": key(max_tokens=64),
        "top_p": key(top_p=0.5),
        "extra_body": key(extra_body={"chat_template_kwargs": {"enable_thinking": False}}),
    }
    for name, k in variants.items():
        assert k != base, f"cache key did not change with {name}"
    assert len(set(variants.values())) == len(variants)

    # Not part of the key: timeout and concurrency (they do not change the reply).
    n = server.request_count
    assert key(timeout=9.0) == base
    assert key(concurrency=1) == base
    assert server.request_count == n  # both were cache hits


def test_prompt_id_is_a_header_and_not_in_the_cache_key(server, tmp_path):
    """Two calls that differ only in prompt_id share one cache entry; the id rides in X-Prompt-Id."""
    client = make_client(server.base_url, tmp_path)
    first = client.complete("judge", judge_messages(), json_mode=True, prompt_id="judge_locomo_mem0")
    other = client.complete("judge", judge_messages(), json_mode=True, prompt_id="judge_locomo_paper")
    assert server.request_count == 1 and not first.cached and other.cached
    assert other.cache_key == first.cache_key and other.text == first.text
    # A fresh client (persistent cache) with yet another id, and one without any, hit the same entry.
    again = make_client(server.base_url, tmp_path)
    assert again.complete("judge", judge_messages(), json_mode=True, prompt_id="plan_user").cached
    assert again.complete("judge", judge_messages(), json_mode=True).cache_key == first.cache_key
    assert server.request_count == 1
    # The key is the documented body-only payload, exactly as before prompt ids existed.
    assert first.cache_key == cache_key({
        "base_url": server.base_url, "model": "m", "messages": judge_messages(), "temperature": 0.0,
        "seed": 42, "response_format": {"type": "json_object"}, "extra_body": {},
    })
    assert server.request_headers[0][PROMPT_ID_HEADER.lower()] == "judge_locomo_mem0"
    assert "prompt_id" not in json.dumps(server.requests[0])  # not in the body either


def test_prompt_id_is_optional_and_sends_no_header(tmp_path):
    """Third-party callers without a prompt id still work: no header is sent (the fake server,
    which needs it, refuses such a call with a 400 naming the header)."""
    with FakeOpenAI() as srv:
        client = make_client(srv.base_url, tmp_path, retry=RetryPolicy(max_attempts=1))
        with pytest.raises(LLMCallError) as ei:
            client.complete("judge", judge_messages())
        assert ei.value.cause == "http_400" and PROMPT_ID_HEADER in str(ei.value)
        assert PROMPT_ID_HEADER.lower() not in srv.request_headers[0]
        assert client.complete("judge", judge_messages(), prompt_id=JUDGE_PROMPT).cached is False
        assert srv.request_headers[1][PROMPT_ID_HEADER.lower()] == JUDGE_PROMPT


def test_role_json_mode_off_sends_no_response_format(server, tmp_path):
    client = make_client(server.base_url, tmp_path, json_mode=False)
    client.complete("judge", judge_messages(), json_mode=True, prompt_id=JUDGE_PROMPT)
    assert "response_format" not in server.requests[-1]


def test_cache_mode_ro_miss_raises_without_request(server, tmp_path):
    client = make_client(server.base_url, tmp_path, mode="ro")
    with pytest.raises(LLMCallError) as ei:
        client.complete("judge", judge_messages(), prompt_id=JUDGE_PROMPT)
    assert ei.value.cause == "cache_miss"
    assert server.request_count == 0
    st = client.summary()["judge"]
    assert (st["calls"], st["failed"], st["new"], st["failures"]) == (1, 1, 0, {"cache_miss": 1})

    # Filled by an rw client, the same request is then served read-only without a request.
    text = make_client(server.base_url, tmp_path).complete("judge", judge_messages(), prompt_id=JUDGE_PROMPT).text
    assert server.request_count == 1
    hit = client.complete("judge", judge_messages(), prompt_id=JUDGE_PROMPT)
    assert hit.cached and hit.text == text
    assert server.request_count == 1


def test_cache_mode_off_never_writes(server, tmp_path):
    client = make_client(server.base_url, tmp_path, mode="off")
    a = client.complete("judge", judge_messages(), prompt_id=JUDGE_PROMPT)
    b = client.complete("judge", judge_messages(), prompt_id=JUDGE_PROMPT)
    assert not a.cached and not b.cached
    assert server.request_count == 2
    assert glob.glob(str(tmp_path / "c.sqlite*")) == []  # no file at all


def test_cache_mode_refresh_calls_and_rewrites(server, tmp_path):
    make_client(server.base_url, tmp_path).complete("judge", judge_messages(), prompt_id=JUDGE_PROMPT)
    refresh = make_client(server.base_url, tmp_path, mode="refresh")
    assert refresh.complete("judge", judge_messages(), prompt_id=JUDGE_PROMPT).cached is False
    assert server.request_count == 2
    assert make_client(server.base_url, tmp_path).complete("judge", judge_messages(),
                                                           prompt_id=JUDGE_PROMPT).cached is True
    assert server.request_count == 2


@pytest.mark.parametrize("mode,stored", [("rw", True), ("refresh", True), ("ro", False)])
def test_cache_put_respects_mode(tmp_path, mode, stored):
    ResponseCache(str(tmp_path / "c.sqlite"))  # create the table
    cache = ResponseCache(str(tmp_path / "c.sqlite"), mode=mode)
    cache.put("k1", {"model": "m"}, "reply", {"prompt_tokens": 3, "completion_tokens": 1}, 0.25)
    got = ResponseCache(str(tmp_path / "c.sqlite")).get("k1")
    assert got == (("reply", {"prompt_tokens": 3, "completion_tokens": 1}, 0.25) if stored else None)


def test_a_cache_made_before_latency_was_kept_still_reads(tmp_path):
    import sqlite3

    path = tmp_path / "old.sqlite"
    con = sqlite3.connect(path)
    con.execute("CREATE TABLE responses (key TEXT PRIMARY KEY, request TEXT, response TEXT, usage TEXT, created REAL)")
    con.execute("INSERT INTO responses VALUES ('k', '{}', 'r', '{}', 0)")
    con.commit()
    con.close()
    assert ResponseCache(str(path)).get("k") == ("r", {}, 0.0)


def test_invalid_cache_mode_rejected(tmp_path):
    with pytest.raises(ValueError, match="cache_mode"):
        ResponseCache(str(tmp_path / "c.sqlite"), mode="write")


# --------------------------------------------------------------------------- retries
def test_retries_on_429_and_500_then_succeeds(tmp_path):
    with FakeOpenAI(faults=FaultPlan(script=["429", "500", "503"])) as srv:
        client = make_client(srv.base_url, tmp_path)
        comp = client.complete("judge", judge_messages(), prompt_id=JUDGE_PROMPT)
        assert srv.request_count == 4
        assert [f for _, _, f in srv.faults_injected] == ["429", "500", "503"]
    assert comp.cached is False and parse_json_object(comp.text)["label"] in ("CORRECT", "WRONG")
    st = client.summary()["judge"]
    assert (st["retries"], st["failed"], st["new"], st["failures"]) == (3, 0, 1, {})


def test_retries_on_timeout_then_succeeds(tmp_path):
    with FakeOpenAI(faults=FaultPlan(script=["timeout"], timeout_seconds=1.5)) as srv:
        client = make_client(srv.base_url, tmp_path, timeout=0.3)
        t0 = time.perf_counter()
        comp = client.complete("judge", judge_messages(), prompt_id=JUDGE_PROMPT)
        elapsed = time.perf_counter() - t0
        assert srv.request_count == 2
    assert comp.cached is False
    assert elapsed < 1.4  # the client gave up after its own timeout, not the server's delay
    assert client.summary()["judge"]["retries"] == 1


def test_timeouts_exhausting_attempts_name_the_cause(tmp_path):
    with FakeOpenAI(faults=FaultPlan(script=["timeout", "timeout"], timeout_seconds=1.0)) as srv:
        client = make_client(srv.base_url, tmp_path, timeout=0.2,
                             retry=RetryPolicy(max_attempts=2, initial_wait=0.01, max_wait=0.02))
        with pytest.raises(LLMCallError) as ei:
            client.complete("judge", judge_messages(), prompt_id=JUDGE_PROMPT)
        assert srv.request_count == 2
    assert ei.value.cause == "timeout"
    assert client.summary()["judge"]["failures"] == {"timeout": 1}


def test_400_fails_fast(tmp_path):
    with FakeOpenAI(faults=FaultPlan(script=["400"])) as srv:
        client = make_client(srv.base_url, tmp_path)
        with pytest.raises(LLMCallError) as ei:
            client.complete("judge", judge_messages(), prompt_id=JUDGE_PROMPT)
        assert srv.request_count == 1
    assert ei.value.cause == "http_400"
    assert "\n" not in str(ei.value)
    st = client.summary()["judge"]
    assert (st["failed"], st["retries"], st["failures"]) == (1, 0, {"http_400": 1})


def test_exhausted_attempts_raise_and_count_cause(tmp_path):
    with FakeOpenAI(faults=FaultPlan(script=["500", "429", "503", "500"])) as srv:
        client = make_client(srv.base_url, tmp_path)
        with pytest.raises(LLMCallError) as ei:
            client.complete("judge", judge_messages(), prompt_id=JUDGE_PROMPT)
        assert srv.request_count == 4  # max_attempts, not one more
        assert ei.value.cause == "http_500"  # the last failure names the cause
        st = client.summary()["judge"]
        assert (st["calls"], st["failed"], st["new"], st["retries"]) == (1, 1, 0, 3)
        assert st["failures"] == {"http_500": 1}

        # The failure was not cached: the same request goes out again (and now succeeds).
        comp = client.complete("judge", judge_messages(), prompt_id=JUDGE_PROMPT)
        assert comp.cached is False and srv.request_count == 5
    assert client.summary()["judge"]["new"] == 1


def test_connection_refused_is_a_connection_failure(tmp_path):
    srv = FakeOpenAI().start()
    url = srv.base_url
    srv.stop()  # nothing listens on that port any more
    client = make_client(url, tmp_path, retry=RetryPolicy(max_attempts=2, initial_wait=0.01, max_wait=0.02))
    with pytest.raises(LLMCallError) as ei:
        client.complete("judge", judge_messages(), prompt_id=JUDGE_PROMPT)
    assert ei.value.cause == "connection"
    assert client.summary()["judge"]["retries"] == 1


# --------------------------------------------------------------------------- endpoints and secrets
def test_no_endpoint_raises_one_line(tmp_path):
    client = make_client(None, tmp_path)
    for call in (lambda: client.check_endpoints(["judge"]),
                 lambda: client.complete("judge", judge_messages(), prompt_id=JUDGE_PROMPT)):
        with pytest.raises(EndpointNotConfigured) as ei:
            call()
        msg = str(ei.value)
        assert "\n" not in msg
        assert "'judge'" in msg and "OPENAI_BASE_URL" in msg


def test_unknown_role_is_named(tmp_path):
    client = make_client("http://127.0.0.1:9/v1", tmp_path)
    with pytest.raises(KeyError, match="answer"):
        client.complete("answer", judge_messages())


def test_openai_base_url_env_is_honoured(server, tmp_path, monkeypatch):
    monkeypatch.setenv("OPENAI_BASE_URL", server.base_url + "/")
    client = make_client(None, tmp_path)
    client.check_endpoints(["judge"])
    comp = client.complete("judge", judge_messages(), prompt_id=JUDGE_PROMPT)
    assert server.request_count == 1 and not comp.cached
    assert resolve_endpoint(client.settings("judge")) == (server.base_url, "EMPTY")


def test_endpoint_precedence(monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", SECRET)
    assert resolve_endpoint(RoleSettings("judge", "m")) == (OPENAI_DEFAULT_BASE_URL, SECRET)
    monkeypatch.setenv("OPENAI_BASE_URL", "http://env-host:1/v1")
    assert resolve_endpoint(RoleSettings("judge", "m"))[0] == "http://env-host:1/v1"
    assert resolve_endpoint(RoleSettings("judge", "m", base_url="http://cfg-host:2/v1/"))[0] == "http://cfg-host:2/v1"


def test_api_key_never_reaches_the_cache(server, tmp_path, monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", SECRET)
    client = make_client(server.base_url, tmp_path)
    comp = client.complete("judge", judge_messages(), json_mode=True, prompt_id=JUDGE_PROMPT)
    assert SECRET not in repr(comp.record("judge_prompt"))
    client.cache._conn().execute("PRAGMA wal_checkpoint(FULL)")
    blob = b"".join(open(p, "rb").read() for p in glob.glob(str(tmp_path / "c.sqlite*")))
    # The check is meaningful only if the cache really holds this request and reply.
    assert comp.text.encode() in blob and b"Label it CORRECT or WRONG" in blob
    assert SECRET.encode() not in blob
    assert b"SECRET" not in blob


# --------------------------------------------------------------------------- JSON replies
@pytest.mark.parametrize("text", [
    '```json\n{"label": "CORRECT", "n": 1}\n```',
    'Sure, here is the verdict: {"label": "CORRECT", "n": 1} -- hope it helps.',
    '<think>maybe {"label": "WRONG"} ... no.</think>\n{"label": "CORRECT", "n": 1}',
    '<think>x</think>```json\n{"label": "CORRECT", "n": 1}\n```',
    'I think {not json} but {"label": "CORRECT", "n": 1}',
])
def test_parse_json_object_tolerates_wrappers(text):
    assert parse_json_object(text) == {"label": "CORRECT", "n": 1}


@pytest.mark.parametrize("text", ["no object here", "[1, 2, 3]", '{"label": ', ""])
def test_parse_json_object_fails_without_object(text):
    with pytest.raises(ValueError):
        parse_json_object(text)


# --------------------------------------------------------------------------- map and stats
def _run_map(client, n):
    lock = threading.Lock()
    state = {"inflight": 0, "peak": 0, "threads": set()}

    def fn(i):
        with lock:
            state["inflight"] += 1
            state["peak"] = max(state["peak"], state["inflight"])
            state["threads"].add(threading.get_ident())
        try:
            return client.complete("judge", judge_messages(i), prompt_id=JUDGE_PROMPT).text
        finally:
            with lock:
                state["inflight"] -= 1

    out = dict(client.map(fn, list(range(n)), progress=False))
    return out, state


def test_map_concurrent_returns_every_item(tmp_path):
    with FakeOpenAI(latency=0.05) as srv:
        client = make_client(srv.base_url, tmp_path, concurrency=4)
        out, state = _run_map(client, 12)
        assert srv.request_count == 12
        # The endpoint never holds more than the bound; the map runs a quarter more rows than that
        # (row_threads: a row between calls leaves its slot to one waiting with its request ready).
        assert srv.peak_in_flight_total == 4
    assert sorted(out) == list(range(12))
    assert all(parse_json_object(t)["label"] in ("CORRECT", "WRONG") for t in out.values())
    assert client.workers() == 4 and client.row_threads() == 5
    assert 2 <= state["peak"] <= client.row_threads()
    assert threading.get_ident() not in state["threads"]


def test_the_endpoint_stays_at_its_bound_while_rows_work_between_calls(tmp_path, monkeypatch):
    """Each row works 30 ms (its prompt, its reply) before and after its call. With one row per slot
    a slot stays empty during that work; the spare rows keep the endpoint at its bound, and the
    latency a call records is the endpoint's, not its wait for a slot. Both ways run here, back to
    back on the same server, so the machine's load slows both alike."""
    n, bound, latency, work = 40, 4, 0.1, 0.03
    with FakeOpenAI(latency=latency) as srv:
        walls = {}
        for spare in (False, True):
            client = make_client(srv.base_url, tmp_path / str(spare), concurrency=bound)
            client.complete("judge", judge_messages(-1), prompt_id=JUDGE_PROMPT)  # the SDK's first-call set-up
            if not spare:
                monkeypatch.setattr(client, "row_threads", client.workers)

            def row(i, client=client):
                time.sleep(work)
                done = client.complete("judge", judge_messages(i), prompt_id=JUDGE_PROMPT)
                time.sleep(work)
                return done

            t0 = time.perf_counter()
            out = dict(client.map(row, list(range(n)), progress=False))
            walls[spare] = time.perf_counter() - t0
            assert len(out) == n and not any(c.cached for c in out.values())
            if spare:
                assert max(c.latency for c in out.values()) < latency + 0.15  # the slot wait is not in it
        assert srv.peak_in_flight_total == bound
    # one row per slot: n / bound x (L + 2 x work) = 1.6 s; with one spare row about 1.3 s
    assert walls[True] < 0.92 * walls[False], walls


def test_map_serial_with_env(tmp_path, monkeypatch):
    monkeypatch.setenv("HARNESS_SERIAL", "1")
    with FakeOpenAI() as srv:
        client = make_client(srv.base_url, tmp_path, concurrency=4)
        out, state = _run_map(client, 6)
        order = [i for i, _ in client.map(lambda i: i * i, [3, 1, 2], progress=False)]
    assert sorted(out) == list(range(6))
    assert state["peak"] == 1 and state["threads"] == {threading.get_ident()}
    assert order == [3, 1, 2]  # serial mode keeps input order


def test_map_propagates_exceptions(tmp_path):
    client = make_client("http://127.0.0.1:9/v1", tmp_path)

    def boom(i):
        raise RuntimeError(f"bug {i}")

    with pytest.raises(RuntimeError, match="bug"):
        list(client.map(boom, [1, 2], progress=False))


def test_summary_token_sums_match_server_usage(server, tmp_path):
    client = make_client(server.base_url, tmp_path)
    comps = [client.complete("judge", judge_messages(i), json_mode=True, prompt_id=JUDGE_PROMPT) for i in range(3)]
    client.complete("judge", judge_messages(0), json_mode=True, prompt_id=JUDGE_PROMPT)  # cached: adds no tokens

    # What the fake server reports for each request, recomputed from its own rules.
    exp_prompt = exp_completion = 0
    for body in server.requests:
        text = prompt_text(body["messages"])
        exp_prompt += approx_tokens(text)
        exp_completion += approx_tokens(scripted_content("judge_locomo", text))
    assert server.request_count == 3
    st = client.summary()["judge"]
    assert st["prompt_tokens"] == exp_prompt == sum(c.usage["prompt_tokens"] for c in comps)
    assert st["completion_tokens"] == exp_completion == sum(c.usage["completion_tokens"] for c in comps)
    assert exp_prompt > 0 and exp_completion > 0
    assert (st["calls"], st["cached"], st["new"]) == (4, 1, 3)
    assert st["latency_mean"] is not None and st["latency_p50"] <= st["latency_p95"]


def test_parse_json_object_reports_a_truncated_reply_as_truncated():
    # A reply cut by max_tokens must not yield a complete object nested inside it.
    with pytest.raises(ValueError, match="truncated"):
        parse_json_object('{"records": [{"entity": "Nadia", "property": "adopt"}, {"entity": "To')


def test_a_stopped_map_sends_no_request_that_was_still_waiting_for_a_slot(tmp_path):
    """Ctrl-C (here: the consumer raising) lets the calls in flight finish, paid and cached, and sends
    nothing more: rows that were working towards their call give up at the slot, unsent and uncounted."""
    class Stop(Exception):
        pass

    with FakeOpenAI(latency=0.3) as srv:
        client = make_client(srv.base_url, tmp_path, concurrency=2)
        client.complete("judge", judge_messages(-1), prompt_id=JUDGE_PROMPT)  # the SDK's first-call set-up
        before = srv.request_count

        def row(i):
            time.sleep(0.2)  # the row's own work before its call
            return client.complete("judge", judge_messages(i), prompt_id=JUDGE_PROMPT)

        rows = client.map(row, list(range(10)), progress=False)
        next(rows)  # the first reply (t = 0.5 s): rows 0 and 1 answered, row 2 takes a freed slot
        time.sleep(0.1)  # row 2 in flight; rows 3 and 4 (started on the freed threads) still working
        with pytest.raises(Stop):
            rows.throw(Stop)  # what Ctrl-C does in the stage's wait for the next row
        sent = srv.request_count - before
        assert sent == 3, sent  # rows 0, 1 and 2; never rows 3 and 4, which reached their slot after the stop
        stat = client.stats["judge"]
        assert stat.calls - stat.cached - stat.failed == 1 + 3  # the set-up call and the three sent: none abandoned
        assert stat.failed == 0
        assert client.complete("judge", judge_messages(2), prompt_id=JUDGE_PROMPT).cached  # row 2's paid reply kept
        # the client is usable again: its pools no longer turn requests away
        assert not client.complete("judge", judge_messages(99), prompt_id=JUDGE_PROMPT).cached
