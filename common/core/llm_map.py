"""Running a stage's rows through the client concurrently: at most ``workers()`` in flight, rows
whose calls were queued for a Batch API round run again once that batch has answered, and Ctrl-C
drops the rows not yet started while the calls in flight (paid) still reach the cache.

A mixin of ``common.core.llm.LLMClient`` (its bound, lock and batcher); kept apart because how rows
are scheduled is a concern of its own, beside how one call is made.
"""
from __future__ import annotations

import os
import threading
from concurrent.futures import ThreadPoolExecutor, as_completed
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, Callable, Iterator, Optional, TypeVar

from common.core.batch import BatchDeferred
from common.core.progress import bar as progress_bar

if TYPE_CHECKING:
    from common.core.batch import Batcher

T = TypeVar("T")
R = TypeVar("R")


class ConcurrentMap:
    """``map``: apply a row function to items with the client's concurrency bound."""

    _lock: threading.Lock
    _rounds: int
    batcher: Optional["Batcher"]

    def workers(self) -> int:
        raise NotImplementedError

    def abandon_waiters(self, on: bool) -> None:
        raise NotImplementedError

    def row_threads(self) -> int:
        """Rows run at once: the requests kept in flight (``workers``) and a quarter more. A thread
        whose row is between calls (building its prompt, reading its reply, writing the cache) leaves
        its endpoint slot to a thread already waiting with its request ready, so the endpoint stays at
        its bound; the pools still never send more than their bounds."""
        n = self.workers()
        return n if n == 1 else n + max(1, -(-n // 4))

    def map(
        self, fn: Callable[[T], R], items: list[T], *, desc: str = "", progress: bool = True
    ) -> Iterator[tuple[T, R]]:
        """Apply ``fn`` to items with at most ``workers()`` in flight; yield as completed.

        Exceptions raised by ``fn`` propagate: stage functions turn call failures into
        recorded failure rows themselves, so an exception here is a bug, not a bad reply.
        With batch roles, items whose calls were queued for a batch (``BatchDeferred``) are run
        again once the batch has answered, until every item has yielded.
        """
        bar = progress_bar(total=len(items), desc=desc, enabled=progress)
        todo = list(items)
        try:
            while todo:
                deferred: list[T] = []
                with self._in_rounds():
                    for item, out in self._round(fn, todo):
                        if isinstance(out, BatchDeferred):
                            deferred.append(item)
                            continue
                        yield item, out
                        bar.update(1)
                if deferred:
                    assert self.batcher is not None  # only batch roles defer
                    self.batcher.flush()
                todo = deferred
        finally:
            bar.close()

    @contextmanager
    def _in_rounds(self) -> Iterator[None]:
        with self._lock:
            self._rounds += 1
        try:
            yield
        finally:
            with self._lock:
                self._rounds -= 1

    def _round(self, fn: Callable[[T], R], items: list[T]) -> Iterator[tuple[T, Any]]:
        def run(item: T) -> Any:
            try:
                return fn(item)
            except BatchDeferred as deferred:
                return deferred

        if self.workers() == 1 or os.environ.get("HARNESS_SERIAL") == "1":
            for item in items:
                yield item, run(item)
            return
        try:
            with ThreadPoolExecutor(max_workers=self.row_threads()) as pool:
                futures = {pool.submit(run, item): item for item in items}
                try:
                    for fut in as_completed(futures):
                        yield futures[fut], fut.result()
                except BaseException:
                    # Ctrl-C, or the consumer stopped: drop the rows not yet started, and the requests
                    # still waiting for a slot give up unsent, so leaving the pool waits only for the
                    # calls in flight (paid, so their replies still reach the cache).
                    pool.shutdown(wait=False, cancel_futures=True)
                    self.abandon_waiters(True)
                    raise
        finally:
            self.abandon_waiters(False)
