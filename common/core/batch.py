"""The OpenAI Batch API for the offline roles (``llm.batch``): half price, same cache.

With batching on for a role, ``LLMClient.map`` runs a stage's rows in rounds. In a round, a call
of a batch role that is not in the cache does not go out: ``Batcher.defer`` queues the request and
raises ``BatchDeferred``, and the row is put back. After the round, ``Batcher.flush``:

1. writes the queued requests as JSONL (one ``{custom_id, method, url, body}`` line each; the
   ``custom_id`` is ``<cache key>:<prompt id>``) to ``<run>/batches/<name>.input.jsonl``,
2. uploads it (``files.create(purpose="batch")``), records the file id in ``<name>.json``, creates
   the batch (``batches.create``) and records its id there too, before waiting for anything,
3. polls until the batch ends, then writes every reply into the LLM cache, exactly as a live call
   would (same key, request and usage), and marks the record collected.

The rows are then run again and find their replies in the cache (a row whose reply needs a
second call, a JSON repair, defers once more). Nothing is paid twice: a run interrupted while its
batch is in flight re-attaches to it on restart (the records name every request they carry; a
record with a file id but no batch id is matched to the server's batch of that file), and a
request already in the cache never goes into a batch.

Failures are counted by the client's causes: a line answered with an HTTP error is
``http_<status>`` (429/5xx/408/409 are resubmitted like a live retry, up to the retry budget),
a reply without a completion ``bad_response``, a batch the API rejected ``batch_failed``.
Requests a batch left undone (status ``expired`` or ``cancelled``) are resubmitted in a NEW batch
by default (``llm.batch_on_expiry: batch``): the run was asked to pay the batch price, and an
expiry means the provider lacked capacity in the window, when live calls would meet the same
rate limits at twice the price. ``live`` sends them as live calls instead (finish sooner).
After the retry budget an undone request fails with cause ``batch_expired``.

This module never imports ``openai``: the client hands it an SDK client per endpoint and a
function that retries one SDK call.
"""
from __future__ import annotations

import json
import logging
import os
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Optional, TypeVar

log = logging.getLogger(__name__)

TERMINAL = ("completed", "failed", "expired", "cancelled")
UNDONE = ("expired", "cancelled")
RETRYABLE_STATUS = {408, 409, 429}
CHAT_URL = "/v1/chat/completions"
MAX_FILE_BYTES = 190 * 2**20  # the API takes batch input files up to 200 MB
T = TypeVar("T")


class BatchDeferred(Exception):
    """A batch role's call was queued for the next batch; the row is run again after the flush.

    Not an ``LLMCallError``: stage code must let it pass (it catches only ``LLMCallError`` and
    ``ValueError``), so the row is not written as failed.
    """


@dataclass(frozen=True)
class BatchOptions:
    roles: tuple[str, ...]
    directory: Path  # <run>/batches: input files and records
    poll_seconds: float = 30.0
    completion_window: str = "24h"
    max_requests: int = 50000
    on_expiry: str = "batch"  # "batch": a new batch; "live": live calls
    max_submissions: int = 6  # a request sent this many times and still undone fails


@dataclass
class Request:
    role: str
    key: str
    prompt_id: Optional[str]
    url: str  # the endpoint the batch goes to (the role's first endpoint)
    body: dict[str, Any]  # what is sent: the request body with extra_body merged in
    cached_request: dict[str, Any]  # what the cache stores as the request, as a live call does

    def line(self) -> dict[str, Any]:
        cid = f"{self.key}:{self.prompt_id}" if self.prompt_id else self.key
        return {"custom_id": cid, "method": "POST", "url": CHAT_URL, "body": self.body}


@dataclass
class Result:
    text: str
    usage: dict[str, int]
    batch_id: str


@dataclass
class _Record:
    path: Path
    data: dict[str, Any] = field(default_factory=dict)

    def save(self) -> None:
        tmp = self.path.with_suffix(".json.tmp")
        tmp.write_text(json.dumps(self.data, indent=1, sort_keys=True), encoding="utf-8")
        os.replace(tmp, self.path)


def key_of(custom_id: str) -> str:
    return custom_id.split(":", 1)[0]


def reply_of(body: Any) -> Optional[tuple[str, dict[str, int]]]:
    """(text, usage) of a chat completion body, or None when it holds no completion."""
    choices = body.get("choices") if isinstance(body, dict) else None
    if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
        return None
    message = choices[0].get("message")
    if not isinstance(message, dict):
        return None
    usage = body.get("usage") or {}
    return message.get("content") or "", {"prompt_tokens": int(usage.get("prompt_tokens") or 0),
                                          "completion_tokens": int(usage.get("completion_tokens") or 0)}


def batch_keys(directory: Path) -> set[str]:
    """Cache keys answered through a batch of a run (the ledger prices them at the batch rate)."""
    out: set[str] = set()
    for p in sorted(directory.glob("*.json")) if directory.is_dir() else []:
        out.update(json.loads(p.read_text(encoding="utf-8")).get("answered", []))
    return out


class Batcher:
    """Queue, submit, wait for and collect batches; remembers this run's batch outcomes."""

    def __init__(self, options: BatchOptions, *, sdk: Callable[[str, str], Any],
                 call: Callable[[Callable[[], Any]], Any],
                 store: Callable[[str, dict[str, Any], str, dict[str, int]], None],
                 sleep: Callable[[float], None] = time.sleep):
        self.options = options
        self.roles = frozenset(options.roles)
        self._sdk = sdk  # (role, url) -> an openai.OpenAI for that endpoint
        self._call = call  # runs one SDK call with the client's retry policy
        self._store = store  # (key, request, text, usage) -> the LLM cache
        self._sleep = sleep
        self.results: dict[str, Result] = {}
        self.failures: dict[str, tuple[str, str]] = {}  # key -> (cause, message)
        self.live: set[str] = set()  # undone requests to send live (on_expiry: live)
        self.submissions: Counter[str] = Counter()
        self.queue: dict[str, Request] = {}
        # role -> batches, requests, answered, failed_<cause>, undone, resubmitted, sent_live
        self.counts: dict[str, Counter[str]] = {}
        self._awaiting: Optional[dict[str, Path]] = None  # key -> record of an uncollected batch
        self._needed: set[Path] = set()

    # ---- during a round (worker threads; the caller holds no lock, so this takes none: dict and
    # set operations below are atomic under the GIL and each key is handled by one thread at a time)
    def defer(self, request: Request) -> None:
        awaiting = self._load_awaiting()
        record = awaiting.get(request.key)
        if record is not None:
            self._needed.add(record)  # already in a batch of this run: wait for it, do not resend
        else:
            self.queue.setdefault(request.key, request)
        raise BatchDeferred(request.key)

    # ---- between rounds (the map's thread)
    def flush(self) -> None:
        """Submit the queue, wait for every batch a deferred request is in, collect the replies."""
        while self.queue or self._needed:
            for record in self._submit_queue():
                self._needed.add(record)
            for path in sorted(self._needed):
                self._collect(path)
            self._needed = set()

    def _load_awaiting(self) -> dict[str, Path]:
        if self._awaiting is None:
            awaiting: dict[str, Path] = {}
            d = self.options.directory
            for p in sorted(d.glob("*.json")) if d.is_dir() else []:
                data = json.loads(p.read_text(encoding="utf-8"))
                if data.get("collected") or data.get("role") not in self.roles:
                    continue
                for line in _read_lines(d / data["input"]):
                    awaiting[key_of(line["custom_id"])] = p
            self._awaiting = awaiting
        return self._awaiting

    def _submit_queue(self) -> list[Path]:
        queued, self.queue = list(self.queue.values()), {}
        groups: dict[tuple[str, str], list[Request]] = {}
        for r in queued:
            groups.setdefault((r.role, r.url), []).append(r)
        paths = []
        for (role, url), reqs in groups.items():
            chunk: list[Request] = []
            size = 0
            for r in reqs:  # split at the request limit and at the file-size limit
                n = len(json.dumps(r.line(), ensure_ascii=False).encode("utf-8")) + 1
                if chunk and (len(chunk) >= self.options.max_requests or size + n > MAX_FILE_BYTES):
                    paths.append(self._submit(role, url, chunk))
                    chunk, size = [], 0
                chunk.append(r)
                size += n
            if chunk:
                paths.append(self._submit(role, url, chunk))
        return paths

    def _submit(self, role: str, url: str, reqs: list[Request]) -> Path:
        d = self.options.directory
        d.mkdir(parents=True, exist_ok=True)
        name = f"{time.strftime('%Y%m%dT%H%M%S')}-{role}-{len(list(d.glob('*.json'))):04d}"
        data = "".join(json.dumps(r.line(), ensure_ascii=False, sort_keys=True) + "\n" for r in reqs)
        (d / f"{name}.input.jsonl").write_text(data, encoding="utf-8")
        record = _Record(d / f"{name}.json", {"role": role, "endpoint": url, "input": f"{name}.input.jsonl",
                                              "requests": len(reqs), "collected": False,
                                              "submitted": time.time()})
        sdk = self._sdk(role, url)
        uploaded = self._call(lambda: sdk.files.create(file=(f"{name}.jsonl", data.encode("utf-8")),
                                                         purpose="batch"))
        record.data["input_file_id"] = uploaded.id
        record.save()  # from here on a restart finds this file's batch instead of paying again
        self._create(sdk, record)
        for r in reqs:
            self.submissions[r.key] += 1
        counts = self.counts.setdefault(role, Counter())
        counts["batches"] += 1
        counts["requests"] += len(reqs)
        log.info("batch %s: %d %s requests submitted", record.data["batch_id"], len(reqs), role)
        return record.path

    def _create(self, sdk: Any, record: _Record) -> None:
        b = self._call(lambda: sdk.batches.create(
            input_file_id=record.data["input_file_id"], endpoint=CHAT_URL,
            completion_window=self.options.completion_window,
            metadata={"harness_record": record.path.stem}))
        record.data["batch_id"] = b.id
        record.save()

    def _collect(self, path: Path) -> None:
        record = _Record(path, json.loads(path.read_text(encoding="utf-8")))
        if record.data.get("collected"):
            return
        sdk = self._sdk(record.data["role"], record.data["endpoint"])
        if not record.data.get("batch_id"):
            self._reattach_or_create(sdk, record)
        bid = record.data["batch_id"]
        while True:
            b = self._call(lambda: sdk.batches.retrieve(bid))
            if b.status in TERMINAL:
                break
            self._sleep(self.options.poll_seconds)
        requests = {key_of(line["custom_id"]): line for line in _read_lines(path.parent / record.data["input"])}
        outcome = self._ingest(sdk, record, b, requests)
        record.data.update(collected=True, status=b.status, outcome=dict(outcome), collected_at=time.time())
        record.save()
        if self._awaiting is not None:
            for k in requests:
                self._awaiting.pop(k, None)

    def _reattach_or_create(self, sdk: Any, record: _Record) -> None:
        """A record with an uploaded file but no batch id: the process died between the two calls.
        The server's batch of that file, if it was created, is the one to wait for."""
        fid = record.data["input_file_id"]
        for b in self._call(lambda: sdk.batches.list(limit=100)):
            if getattr(b, "input_file_id", None) == fid:
                record.data["batch_id"] = b.id
                record.save()
                return
        self._create(sdk, record)

    def _ingest(self, sdk: Any, record: _Record, b: Any, requests: dict[str, dict[str, Any]]) -> Counter[str]:
        outcome: Counter[str] = Counter()
        answered: list[str] = []
        seen: set[str] = set()
        role, url = record.data["role"], record.data["endpoint"]
        lines: list[dict[str, Any]] = []
        for fid in (getattr(b, "output_file_id", None), getattr(b, "error_file_id", None)):
            if fid:
                text = self._call(lambda: sdk.files.content(fid).text)  # noqa: B023 - called at once
                lines.extend(json.loads(x) for x in text.splitlines() if x.strip())
        undone: list[tuple[str, str]] = []  # (key, the cause it fails with once the budget is spent)
        for line in lines:
            key = key_of(str(line.get("custom_id", "")))
            if key not in requests or key in seen:
                continue
            seen.add(key)
            resp, err = line.get("response") or {}, line.get("error")
            status = int(resp.get("status_code") or 0) if isinstance(resp, dict) else 0
            if status == 200:
                reply = reply_of(resp.get("body"))
                if reply is None:
                    self._fail(key, "bad_response", "batch line without a chat completion", outcome)
                    continue
                text, usage = reply
                self._store(key, _cached_request(url, requests[key]["body"]), text, usage)
                self.results[key] = Result(text, usage, b.id)
                answered.append(key)
                outcome["answered"] += 1
            elif isinstance(err, dict) and err.get("code") == "batch_expired":
                undone.append((key, "batch_expired"))
            elif status:
                message = _error_message(resp.get("body")) or f"HTTP {status}"
                if status in RETRYABLE_STATUS or status >= 500:
                    undone.append((key, f"http_{status}"))  # retried as a live call would be
                    outcome[f"retried_http_{status}"] += 1
                else:
                    self._fail(key, f"http_{status}", message, outcome)
            else:
                self._fail(key, "bad_response", f"batch line without a response: {err!r}"[:200], outcome)
        missing = [k for k in requests if k not in seen]
        if b.status == "failed":
            errors = getattr(getattr(b, "errors", None), "data", None) or []
            detail = "; ".join(str(getattr(e, "message", e)) for e in errors)[:200] or "rejected by the API"
            for k in missing:
                self._fail(k, "batch_failed", f"batch {b.id} failed: {detail}", outcome)
        else:
            lost = f"batch_{b.status}" if b.status in UNDONE else "batch_missing"  # no line for it
            undone.extend((k, lost) for k in missing)
        for key, cause in undone:
            self._undone(key, cause, role, url, requests[key], b, outcome)
        record.data["answered"] = answered
        self.counts.setdefault(role, Counter()).update(outcome)
        return outcome

    def _undone(self, key: str, cause: str, role: str, url: str, line: dict[str, Any], b: Any,
                outcome: Counter[str]) -> None:
        outcome["undone"] += 1
        if self.submissions[key] >= self.options.max_submissions:
            self._fail(key, cause, f"still undone after {self.submissions[key]} batches (last {b.id}, {b.status})",
                       outcome)
        elif self.options.on_expiry == "live" and cause.startswith("batch_"):
            self.live.add(key)
            outcome["sent_live"] += 1
        else:
            cid = str(line["custom_id"])
            self.queue[key] = Request(role, key, cid.split(":", 1)[1] if ":" in cid else None, url, line["body"],
                                      _cached_request(url, line["body"]))
            outcome["resubmitted"] += 1

    def _fail(self, key: str, cause: str, message: str, outcome: Counter[str]) -> None:
        self.failures[key] = (cause, message)
        outcome[f"failed_{cause}"] += 1

    def summary(self, role: str) -> dict[str, int]:
        return dict(self.counts.get(role, {}))


def _cached_request(url: str, body: dict[str, Any]) -> dict[str, Any]:
    return {"base_url": url, **body}


def _error_message(body: Any) -> str:
    err = body.get("error") if isinstance(body, dict) else None
    return " ".join(str(err.get("message", "")).split())[:200] if isinstance(err, dict) else ""


def _read_lines(path: Path) -> list[dict[str, Any]]:
    with path.open(encoding="utf-8") as f:
        return [json.loads(x) for x in f if x.strip()]
