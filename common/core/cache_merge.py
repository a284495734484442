"""Move cache rows between stores: ``make cache-merge FROM=<path or url> TO=<path or url>``.

A location is a ``postgresql://user@host:port/dbname`` URL (both caches in one database), a
SQLite file (whichever of the two tables it holds: a run's ``llm.sqlite``, a worker's shard), or a
directory laid out as ``.cache/`` is (``llm.sqlite`` and ``embeddings.sqlite``). Rows are merged
by key and an existing key is never overwritten (the keys are content hashes: the same key means
the same request), so a merge can be repeated, or run while workers write, without changing any
reply a run has already read. ``--cache llm|embeddings`` moves one of the two caches only.
"""
from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Optional, Sequence

from common.core import cache_store
from common.core.progress import bar

# The cache names of the command line, their tables and their file names in a cache directory.
CACHES = {"llm": ("responses", "llm.sqlite"), "embeddings": ("embeddings", "embeddings.sqlite")}


@dataclass(frozen=True)
class MergeResult:
    table: str
    source: str
    target: str
    copied: int  # rows written to the target
    present: int  # rows whose key the target already held (left as they were)

    def line(self) -> str:
        return (f"{self.table}: {self.copied} copied, {self.present} already present "
                f"({self.source} -> {self.target})")


def _is_dir(location: str) -> bool:
    return location.endswith(("/", "\\")) or Path(location).is_dir()


def resolve(location: str, cache: str) -> str:
    """Where the ``cache`` ("llm" | "embeddings") of a location lives: the URL, the file, or the
    file of that cache inside a cache directory."""
    if cache_store.is_url(location) or not _is_dir(location):
        return location
    return str(Path(location) / CACHES[cache][1])


def _source_table(location: str, table: str) -> Optional[cache_store.Table]:
    """The table at a source location, or None when the location does not hold it."""
    if cache_store.is_url(location):
        pg = cache_store.PgTable(location, cache_store.TABLES[table], create=False, where="FROM")
        if pg.exists():
            return pg
        pg.close()
        return None
    if not Path(location).is_file():
        return None  # never created by opening it: a source is only read
    lite = cache_store.SqliteTable(location, cache_store.TABLES[table], create=False)
    if lite.exists():
        return lite
    lite.close()
    return None


def merge_table(source: cache_store.Table, target: cache_store.Table, *, batch: int = 2000,
                progress: bool = True) -> MergeResult:
    """Copy every row of ``source`` whose key ``target`` lacks; keys already there are kept."""
    copied = present = 0
    with bar(total=source.count(), desc=f"merge {source.spec.name}", unit="row", enabled=progress) as b:
        for rows in source.scan(batch):
            written = target.insert(rows, replace=False)
            copied += written
            present += len(rows) - written
            b.update(len(rows))
    return MergeResult(source.spec.name, source.location, target.location, copied, present)


def merge(source: str, target: str, caches: Sequence[str] = ("llm", "embeddings"),
          *, progress: bool = True) -> list[MergeResult]:
    """Merge the selected caches from ``source`` into ``target`` (``CacheStoreError`` or
    ``ValueError`` in one line for an unusable location or a source holding none of them)."""
    for where, loc in (("FROM", source), ("TO", target)):
        if cache_store.is_url(loc):
            cache_store.parse_url(loc, where)
    if not cache_store.is_url(source) and not Path(source).exists():
        raise ValueError(f"FROM: {source} does not exist")
    results: list[MergeResult] = []
    for cache in caches:
        table = CACHES[cache][0]
        src_loc, dst_loc = resolve(source, cache), resolve(target, cache)
        if not cache_store.is_url(src_loc) and not cache_store.is_url(dst_loc) \
                and Path(src_loc).resolve() == Path(dst_loc).resolve():
            raise ValueError(f"FROM and TO are the same file: {src_loc}")
        src = _source_table(src_loc, table)
        if src is None:
            continue
        dst = cache_store.open_table(dst_loc, table)
        try:
            results.append(merge_table(src, dst, progress=progress))
        finally:
            src.close()
            dst.close()
    if not results:
        raise ValueError(f"FROM: {source} holds no {' or '.join(CACHES[c][0] for c in caches)} table")
    return results


def main(argv: Optional[Sequence[str]] = None) -> int:
    ap = argparse.ArgumentParser(prog="cache-merge", description=__doc__.split("\n\n")[0] if __doc__ else None)
    ap.add_argument("source", help="FROM: a SQLite file, a cache directory or a postgresql:// URL")
    ap.add_argument("target", help="TO: the same kinds; created when missing")
    ap.add_argument("--cache", choices=("all", *CACHES), default="all", help="which cache (default: both)")
    a = ap.parse_args(argv)
    caches = tuple(CACHES) if a.cache == "all" else (a.cache,)
    try:
        results = merge(a.source, a.target, caches)
    except (cache_store.CacheStoreError, ValueError) as exc:
        print(f"cache-merge: {cache_store.redact(str(exc))}", file=sys.stderr)
        return 2
    for r in results:
        print(r.line())
    return 0


if __name__ == "__main__":
    sys.exit(main())
