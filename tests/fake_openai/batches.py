"""The fake server's Files and Batch API: ``/v1/files`` and ``/v1/batches``, as the SDK calls them.

* ``POST /v1/files`` (multipart, ``purpose=batch``) stores a JSONL file; ``GET /v1/files/<id>/content``
  returns a stored file (inputs, and the output and error files the batches write).
* ``POST /v1/batches`` creates a batch of a stored file; ``GET /v1/batches/<id>`` reports it;
  ``GET /v1/batches`` lists them (newest first).

A batch stays ``in_progress`` for ``BatchPlan.latency`` seconds (or while ``hold`` is set), then
ends when it is next looked at. Each line is answered like a live chat request: its prompt kind
comes from the ``custom_id``'s prompt id (``<cache key>:<prompt id>``: a batch line has no headers),
and the server's ``FaultPlan`` applies (an HTTP fault becomes the line's ``status_code``).
``BatchPlan.expire`` makes the n-th batch created (0-based) expire with only its first k lines
done: the rest go to the error file with code ``batch_expired``, as the API reports them.
``BatchPlan.reject`` makes the n-th batch fail validation (status ``failed``, no output).
"""
from __future__ import annotations

import json
import threading
import time
from dataclasses import dataclass, field
from email.parser import BytesParser
from email.policy import HTTP
from typing import Any, Callable, Optional

FILE_PREFIX, BATCH_PREFIX = "file-fake-", "batch_fake_"


@dataclass
class BatchPlan:
    latency: float = 0.0  # seconds from creation until a batch ends
    hold: bool = False  # batches stay in progress until released (a client can be killed meanwhile)
    expire: dict[int, int] = field(default_factory=dict)  # n-th batch -> lines done before it expires
    reject: set[int] = field(default_factory=set)  # n-th batch fails validation


def parse_multipart(content_type: str, raw: bytes) -> dict[str, tuple[Optional[str], bytes]]:
    """Form fields of a multipart body: name -> (filename or None, bytes)."""
    msg = BytesParser(policy=HTTP).parsebytes(f"Content-Type: {content_type}\r\n\r\n".encode() + raw)
    out: dict[str, tuple[Optional[str], bytes]] = {}
    for part in msg.iter_parts():
        name = part.get_param("name", header="content-disposition")
        payload = part.get_payload(decode=True)
        if isinstance(name, str) and isinstance(payload, bytes):
            out[name] = (part.get_filename(), payload)
    return out


class FakeBatches:
    """Stored files and batches of one fake server (thread-safe)."""

    def __init__(self, answer_line: Callable[[dict[str, Any]], tuple[int, dict[str, Any]]]):
        self.plan = BatchPlan()
        self._answer = answer_line  # a batch line -> (status, response body), as a live call
        self._lock = threading.Lock()
        self.files: dict[str, dict[str, Any]] = {}  # id -> {purpose, filename, data}
        self.batches: dict[str, dict[str, Any]] = {}  # id -> the batch object (+ private fields)
        self.lines_answered: list[dict[str, Any]] = []  # every batch line answered (its custom_id)
        self.uploads = 0

    # ---- files
    def upload(self, fields: dict[str, tuple[Optional[str], bytes]]) -> tuple[int, dict[str, Any]]:
        if "file" not in fields or "purpose" not in fields:
            return 400, _error("multipart fields 'file' and 'purpose' are required")
        filename, data = fields["file"]
        with self._lock:
            self.uploads += 1
            fid = f"{FILE_PREFIX}{len(self.files):04d}"
            self.files[fid] = {"purpose": fields["purpose"][1].decode(), "filename": filename or "upload", "data": data}
        return 200, self._file_object(fid)

    def _file_object(self, fid: str) -> dict[str, Any]:
        f = self.files[fid]
        return {"id": fid, "object": "file", "bytes": len(f["data"]), "created_at": int(time.time()),
                "filename": f["filename"], "purpose": f["purpose"], "status": "processed"}

    def content(self, fid: str) -> Optional[bytes]:
        with self._lock:
            f = self.files.get(fid)
        return None if f is None else f["data"]

    def _store(self, purpose: str, name: str, data: bytes) -> str:
        fid = f"{FILE_PREFIX}{len(self.files):04d}"
        self.files[fid] = {"purpose": purpose, "filename": name, "data": data}
        return fid

    # ---- batches
    def create(self, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        fid = body.get("input_file_id")
        with self._lock:
            if fid not in self.files:
                return 400, _error(f"input_file_id {fid!r} not found")
            if body.get("endpoint") != "/v1/chat/completions":
                return 400, _error("endpoint must be /v1/chat/completions")
            n = len(self.batches)
            bid = f"{BATCH_PREFIX}{n:04d}"
            lines = [json.loads(x) for x in self.files[fid]["data"].decode().splitlines() if x.strip()]
            self.batches[bid] = {
                "id": bid, "object": "batch", "endpoint": body["endpoint"], "input_file_id": fid,
                "completion_window": body.get("completion_window", "24h"), "status": "in_progress",
                "created_at": int(time.time()), "output_file_id": None, "error_file_id": None,
                "errors": None, "metadata": body.get("metadata"),
                "request_counts": {"total": len(lines), "completed": 0, "failed": 0},
                "_n": n, "_lines": lines, "_started": time.monotonic(),
            }
            return 200, self._public(bid)

    def retrieve(self, bid: str) -> tuple[int, dict[str, Any]]:
        with self._lock:
            if bid not in self.batches:
                return 404, _error(f"No batch found with id '{bid}'.")
            b = self.batches[bid]
            due = time.monotonic() - b["_started"] >= self.plan.latency
            if b["status"] == "in_progress" and due and not self.plan.hold:
                self._finish(b)
            return 200, self._public(bid)

    def list(self) -> dict[str, Any]:
        with self._lock:
            data = [self._public(b) for b in reversed(list(self.batches))]
        return {"object": "list", "data": data, "first_id": data[0]["id"] if data else None,
                "last_id": data[-1]["id"] if data else None, "has_more": False}

    def _public(self, bid: str) -> dict[str, Any]:
        return {k: v for k, v in self.batches[bid].items() if not k.startswith("_")}

    def _finish(self, b: dict[str, Any]) -> None:
        """Answer the batch's lines (under ``_lock``) and write its output and error files."""
        lines, n = b["_lines"], b["_n"]
        if n in self.plan.reject:
            b.update(status="failed", errors={"object": "list", "data": [
                {"code": "invalid_request", "message": "rejected by the fake server (BatchPlan.reject)",
                 "param": None, "line": 1}]})
            return
        done_upto = self.plan.expire.get(n, len(lines))
        out: list[dict[str, Any]] = []
        err: list[dict[str, Any]] = []
        for i, line in enumerate(lines):
            rid = f"batch_req_{n:04d}_{i:05d}"
            if i >= done_upto:
                err.append({"id": rid, "custom_id": line["custom_id"], "response": None, "error": {
                    "code": "batch_expired",
                    "message": "This request could not be executed before the completion window expired."}})
                continue
            status, body = self._answer(line)
            self.lines_answered.append({"batch": b["id"], "custom_id": line["custom_id"], "status": status})
            entry = {"id": rid, "custom_id": line["custom_id"], "error": None,
                     "response": {"status_code": status, "request_id": rid, "body": body}}
            (out if status == 200 else err).append(entry)
        dump = lambda rows: "".join(json.dumps(r) + "\n" for r in rows).encode()  # noqa: E731
        b["output_file_id"] = self._store("batch_output", f"{b['id']}_output.jsonl", dump(out)) if out else None
        b["error_file_id"] = self._store("batch_output", f"{b['id']}_error.jsonl", dump(err)) if err else None
        b["request_counts"] = {"total": len(lines), "completed": len(out), "failed": len(err)}
        b["status"] = "expired" if n in self.plan.expire else "completed"

    @property
    def created(self) -> int:
        with self._lock:
            return len(self.batches)


def _error(message: str) -> dict[str, Any]:
    return {"error": {"message": message, "type": "invalid_request_error", "param": None, "code": None}}
