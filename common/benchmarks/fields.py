"""Checked access to benchmark JSON: every error is one line naming the file and the field."""
from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from common.benchmarks.base import DataError

_REPR_LIMIT = 60


@dataclass(frozen=True)
class Loc:
    """Where we are in the file, so every error names file, sample and field on one line."""

    file: str
    sample: str = ""
    field: str = ""

    def at(self, part: str) -> Loc:
        """Descend into a key (``"qa"``) or a list index (``"[12]"``)."""
        if not self.field or part.startswith("["):
            return Loc(self.file, self.sample, self.field + part)
        return Loc(self.file, self.sample, f"{self.field}.{part}")

    def error(self, message: str) -> DataError:
        parts = [p for p in (self.file, self.sample, self.field) if p] + [message]
        # repr() already escapes newlines in values; this guards the file name as well.
        return DataError(" ".join(": ".join(parts).splitlines()))


def show(value: Any) -> str:
    """A short, single-line rendering of an offending value for error messages."""
    text = repr(value)
    return text if len(text) <= _REPR_LIMIT else text[: _REPR_LIMIT - 3] + "..."


def type_name(types: type | tuple[type, ...]) -> str:
    if isinstance(types, tuple):
        return " or ".join(t.__name__ for t in types)
    return types.__name__


def is_instance(value: Any, types: type | tuple[type, ...]) -> bool:
    # bool is a subclass of int in Python, but `true` is never a valid id, count or answer here.
    if isinstance(value, bool) and bool not in (types if isinstance(types, tuple) else (types,)):
        return False
    return isinstance(value, types)


def required(obj: dict[str, Any], key: str, types: type | tuple[type, ...], loc: Loc) -> Any:
    """Return the required ``obj[key]``, checked against ``types``."""
    where = loc.at(key)
    if key not in obj:
        raise where.error("missing required field")
    value = obj[key]
    if not is_instance(value, types):
        raise where.error(f"expected {type_name(types)}, got {show(value)}")
    return value


def optional(obj: dict[str, Any], key: str, types: type | tuple[type, ...], loc: Loc) -> Any:
    """Return ``obj[key]`` checked against ``types``, or None when the key is absent."""
    return required(obj, key, types, loc) if key in obj else None


def read_json(path: Path) -> Any:
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise DataError(f"{path}: cannot read file: {exc}") from exc
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        # A truncated download is the usual cause; the position tells how far the file got.
        raise DataError(f"{path}: invalid JSON (truncated download?): {exc}") from exc


def iter_items(path: Path, kind: str, id_key: str) -> Iterator[tuple[dict[str, Any], str, Loc]]:
    """The objects of a JSON-list file with their unique string id and an error locator."""
    raw = read_json(path)
    root = Loc(str(path))
    if not isinstance(raw, list):
        raise root.error(f"expected a JSON list of {kind}s, got {type(raw).__name__}")
    if not raw:
        # An empty list would make a run of zero questions that reports nothing; say so instead.
        raise root.error(f"no {kind}s in the file (an empty JSON list)")
    first_seen: dict[str, int] = {}
    for i, item in enumerate(raw):
        loc = Loc(root.file, f"{kind}[{i}]")
        if not isinstance(item, dict):
            raise loc.error(f"expected an object, got {show(item)}")
        ident = required(item, id_key, str, loc)
        loc = Loc(root.file, f"{kind}[{i}] ({ident})")
        if ident in first_seen:
            raise loc.at(id_key).error(f"duplicate {ident!r} (first used by {kind}[{first_seen[ident]}])")
        first_seen[ident] = i
        yield item, ident, loc
