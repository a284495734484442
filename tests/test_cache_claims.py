"""Claims on the run's cache (no cluster): one request per key in flight across workers, a waiter
served by the holder's reply, a holder that failed or died replaced by the waiter."""
from __future__ import annotations

import os
import subprocess
import sys
import threading
import time

from common.core.cache_claims import ClaimingResponseCache, ClaimingStore, Claims, Holder


def _store(tmp_path, **kw) -> ClaimingStore:
    return ClaimingStore(str(tmp_path / "run.sqlite"), **kw)


def _worker(tmp_path, name: str, store: ClaimingStore, **kw) -> ClaimingResponseCache:
    return ClaimingResponseCache(str(tmp_path / f"{name}.sqlite"), "rw", store, 50, **kw)


def test_a_claim_is_one_holders_until_released_expired_or_its_process_is_gone():
    claims = Claims(lease=10.0, node="n")
    a, b = Holder("a", "n", os.getpid()), Holder("b", "n", os.getpid())
    assert claims.take("k", a, now=0.0) and not claims.take("k", b, now=1.0)
    assert claims.take("k", a, now=2.0)  # the holder's own claim stays its own
    assert claims.release(["k"], "b") == 0 and not claims.take("k", b, now=3.0)  # only the holder releases
    assert claims.release(["k"], "a") == 1 and claims.take("k", b, now=3.0)
    # a holder that stops renewing loses the claim when its lease ends; renewing keeps it
    assert claims.renew(["k"], "b", now=12.0) == 1 and not claims.take("k", a, now=20.0)
    assert claims.take("k", a, now=22.1) and claims.expired == 1
    # a holder on the store's node whose process is gone loses it at once
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    gone = Holder("gone", "n", int(dead.stdout))
    assert claims.take("j", gone, now=0.0) and claims.take("j", a, now=0.1)
    elsewhere = Holder("far", "other-node", int(dead.stdout))  # another node: only the lease tells
    assert claims.take("i", elsewhere, now=0.0) and not claims.take("i", a, now=0.1)


def test_a_second_worker_waits_for_the_first_ones_reply_instead_of_sending_its_own(tmp_path):
    store = _store(tmp_path)
    first, second = _worker(tmp_path, "w1", store), _worker(tmp_path, "w2", store)
    assert first.get("k") is None  # a miss: the first worker holds the claim and sends
    got: dict[str, object] = {}
    waiter = threading.Thread(target=lambda: got.update(reply=second.get("k")))
    waiter.start()
    time.sleep(0.3)
    assert waiter.is_alive(), "the second worker must wait while the first one's request is in flight"
    first.put("k", {"q": 1}, "the reply", {"prompt_tokens": 3, "completion_tokens": 1}, 0.5)
    waiter.join(5)
    assert got["reply"] == ("the reply", {"prompt_tokens": 3, "completion_tokens": 1}, 0.5)
    assert store.get("k")[2] == "the reply"  # merged at once, not after flush_every replies
    assert store.claim_counts() == {"taken": 1, "expired": 0, "held": 0}
    assert second.get("k")[0] == "the reply"  # from its shard now


def test_a_failed_request_gives_the_key_up_and_the_waiter_sends_it_itself(tmp_path):
    store = _store(tmp_path)
    first, second = _worker(tmp_path, "w1", store), _worker(tmp_path, "w2", store)
    assert first.get("k") is None
    got: dict[str, object] = {}
    waiter = threading.Thread(target=lambda: got.update(reply=second.get("k")))
    waiter.start()
    time.sleep(0.2)
    first.give_up("k")  # its request failed: no reply will come
    waiter.join(5)
    assert not waiter.is_alive() and got["reply"] is None  # the waiter now holds the claim: it sends
    assert store.claims.held["k"][0].id == second.holder.id


def test_a_holder_that_died_is_replaced_once_its_lease_ends(tmp_path):
    store = _store(tmp_path, lease=0.5)
    first = _worker(tmp_path, "w1", store, renew_every=60.0)  # never renews in time: as if it died
    second = _worker(tmp_path, "w2", store)
    assert first.get("k") is None
    started = time.monotonic()
    assert second.get("k") is None  # it waited for the lease to end, then claimed the key itself
    assert 0.4 <= time.monotonic() - started < 5 and store.claims.expired == 1
    # a live holder renews: its claim outlives the lease
    keeper, other = _worker(tmp_path, "w3", store, renew_every=0.1), _worker(tmp_path, "w4", store)
    assert keeper.get("j") is None
    blocked: dict[str, object] = {}
    t = threading.Thread(target=lambda: blocked.update(reply=other.get("j")))
    t.start()
    time.sleep(1.2)
    assert t.is_alive(), "a renewed claim must not lapse"
    keeper.put("j", {}, "J", {})
    t.join(5)
    assert blocked["reply"][0] == "J"
    first.close(), second.close(), keeper.close(), other.close()


def test_closing_a_worker_cache_gives_back_its_claims(tmp_path):
    store = _store(tmp_path)
    first = _worker(tmp_path, "w1", store)
    assert first.get("a") is None and first.get("b") is None
    first.close()
    assert store.claim_counts()["held"] == 0


def test_read_only_and_refresh_modes_claim_nothing(tmp_path):
    store = _store(tmp_path)
    ro = ClaimingResponseCache(str(tmp_path / "ro.sqlite"), "ro", store, 50)
    refresh = ClaimingResponseCache(str(tmp_path / "rf.sqlite"), "refresh", store, 50)
    assert ro.get("k") is None and refresh.get("k") is None
    assert store.claim_counts()["taken"] == 0


def test_a_reply_merged_between_the_read_and_the_claim_is_read_not_sent_again(tmp_path):
    store = _store(tmp_path)
    assert store.claim("k", Holder("h")) == (None, True)
    real_get = store.get

    def read_before_the_merge(key):  # the waiter reads, then the holder merges and releases
        store.get = real_get
        store.put_many([("k", "{}", "R", "{}", 0.0, 0.0)], "h")
        return None

    store.get = read_before_the_merge
    row, mine = store.claim("k", Holder("w"))
    assert row is not None and row[2] == "R" and not mine
    assert store.claim_counts()["held"] == 0
