"""The paper's Tables 1, 2, 3, 4, 10 and the "systems" table from the runs (``python -m common.report.tables``).

``main`` builds the wanted tables and writes them with ``common.report.tables.writers``;
``cli`` is the argument handling and error reporting it shares with ``common.report.figures``.
The first paragraph above is the ``--help`` description.

    python -m common.report.tables [--results results] [--out results/tables] [--only 1,2,3,4,10,systems] [--subset ...]
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any, Callable, Optional

from common.core.config import ConfigError, resolve_path
from common.pipeline import experiments as exp_mod
from common.report.tables.beam import beam_table
from common.report.tables.locomo_plus import locomo_plus_table
from common.report.tables.published import DEFAULT_PUBLISHED, load_published
from common.report.tables.realtalk import realtalk_table
from common.report.tables.runs import Context, MissingRun, TableError
from common.report.tables.systems import systems_table
from common.report.tables.table import Table
from common.report.tables.table1 import table1
from common.report.tables.table2 import table2
from common.report.tables.table3 import table3
from common.report.tables.table4 import table4
from common.report.tables.table10 import table10
from common.report.tables.writers import write

DEFAULT_OUT = "results/tables"
BUILDERS: dict[str, Callable[[Context], Table]] = {"1": table1, "2": table2, "3": table3, "4": table4, "10": table10,
                                                   "systems": systems_table}
BUILDERS["beam"] = beam_table  # BEAM: per ability, official and corrected scoring (common.report.tables.beam)
BUILDERS["realtalk"] = realtalk_table  # REALTALK: token F1, GPT score, judge accuracy (common.report.tables.realtalk)
BUILDERS["locomo_plus"] = locomo_plus_table  # LoCoMo-Plus: per category, both parser readings


def add_common_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--results", default="results", help="results directory holding <benchmark>/<run>/")
    parser.add_argument("--experiments", default=exp_mod.DEFAULT_PATH, help="the list of runs")
    parser.add_argument("--published", default=DEFAULT_PUBLISHED, help="the paper's transcribed rows")
    parser.add_argument("--subset", default=None, help="ablation subset file, or 'all' (default: the configured one)")
    parser.add_argument("--run", default=None,
                        help="the main run: a name under <results>/<benchmark>/ or a run directory (default: "
                             "configs/experiments.yaml's, else the newest complete run of the paper's config)")


def context(args: argparse.Namespace) -> Context:
    return Context(resolve_path(args.results), exp_mod.load(args.experiments), load_published(args.published),
                   args.subset, args.run or None)


def cli(argv: Optional[list[str]], *, prog: str, doc: str, kind: str, default_out: str,
        builders: dict[str, Callable[[Context, Path, dict[str, Any]], list[Path]]]) -> int:
    """Shared CLI of ``common.report.tables`` and ``common.report.figures``: build each wanted item from the runs that
    exist, write it, skip one whose run is missing with one line naming the command that makes it, and report every
    other failure on its own line. Exit 0 when anything was written and nothing was inconsistent; 1 when nothing
    could be written or a run disagrees with its own files (2 for a bad config)."""
    parser = argparse.ArgumentParser(prog=prog, description=doc.split("\n\n")[0])
    add_common_args(parser)
    parser.add_argument("--out", default=default_out, help=f"where the {kind} files go")
    parser.add_argument("--only", default=",".join(builders),
                        help=f"comma-separated {kind} numbers ({','.join(builders)})")
    args = parser.parse_args(argv)
    wanted = [t.strip() for t in args.only.split(",") if t.strip()]
    unknown = [t for t in wanted if t not in builders]
    if unknown:
        parser.error(f"--only: unknown {kind}(s) {unknown}; known: {', '.join(builders)}")
    try:
        ctx = context(args)
    except ConfigError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    out = resolve_path(args.out)
    meta = {"generated_by": prog, "results": str(ctx.results), "experiments": str(ctx.exp.source),
            "published": str(ctx.published.path)}
    failed = written = 0
    shown: set[str] = set()
    for t in wanted:
        try:
            paths = builders[t](ctx, out, meta)
        except MissingRun as exc:  # a run it needs does not exist: skipped, and which run would make it
            print(f"{kind} {t}: skipped: {exc}", file=sys.stderr)
            continue
        except (TableError, ConfigError) as exc:
            failed += 1
            print(f"{kind} {t}: error: {exc}", file=sys.stderr)
            continue
        for bench, why in ctx.chosen.items():  # once: which main run the tables and figures show
            if bench not in shown:
                shown.add(bench)
                print(why)
        written += 1
        print(f"{kind} {t}: " + ", ".join(str(p) for p in paths))
    if not written:
        print(f"no {kind} written: every {kind} needs a run that does not exist yet (see the lines above)",
              file=sys.stderr)
    return 1 if failed or not written else 0


def _written(build: Callable[[Context], Table]) -> Callable[[Context, Path, dict[str, Any]], list[Path]]:
    def run(ctx: Context, out: Path, meta: dict[str, Any]) -> list[Path]:
        table = build(ctx)
        for warning in table.warnings:  # on the console too, as make compare prints its own
            print(f"table {table.name}: WARNING: {warning}")
        return write(table, out, meta)
    return run


def main(argv: Optional[list[str]] = None) -> int:
    return cli(argv, prog="python -m common.report.tables", doc=__doc__ or "", kind="table", default_out=DEFAULT_OUT,
               builders={t: _written(b) for t, b in BUILDERS.items()})
