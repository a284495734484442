"""The command line of every numbered script and of ``make locomo`` / ``longmemeval`` / ``beam``.

It parses the options and calls ``common.pipeline.api.evaluate``, the one way a run starts, and turns
what stops a run into one line and an exit status: the API's ``RunError`` as it says, anything
else as ``error: <kind>: <what>`` (``-v`` prints the traceback), so no option or ``--set`` value
ends in a traceback.
"""
from __future__ import annotations

import argparse
import logging
import sys
from typing import Optional

from common.pipeline import api
from common.pipeline.graph import Stage, by_name

log = logging.getLogger("harness")


def arguments(doc: str, benchmark: str, argv: Optional[list[str]] = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--config", action="append", default=None,
                   help=f"YAML config (repeatable; later files win). Default: configs/{benchmark}.yaml")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                   help="override one config key, e.g. --set retrieve.mode=dense_only")
    p.add_argument("--limit", type=int, default=None,
                   help="data.question_limit: N questions of each memory, drawn across its categories (seeded; "
                        "LoCoMo: per conversation; LongMemEval, one question per memory: N questions of the file "
                        "across question types; BEAM: N of each chat across abilities; LoCoMo-Plus: N questions "
                        "in all across its six categories); data.limit_rule=first "
                        "takes the first N in file order; 0 runs nothing")
    p.add_argument("--memories", "--conversations", dest="memories", default=None,
                   help="data.memories: comma-separated memory ids (LoCoMo conversation ids, LongMemEval question ids)")
    p.add_argument("--run", default=None, help="run name (run.name): results/<benchmark>/<run>/")
    p.add_argument("--force", action="store_true", help="recompute this stage instead of resuming")
    p.add_argument("--dry-run", action="store_true",
                   help="estimate the whole run's calls, tokens and dollars, make no call, write nothing")
    p.add_argument("-v", "--verbose", action="store_true")
    return p.parse_args(argv)


def _quiet(verbose: bool) -> None:
    logging.basicConfig(level=logging.DEBUG if verbose else logging.WARNING,
                        format="%(levelname)s %(name)s: %(message)s", force=True)
    # Keep third-party HTTP chatter out of stage output; our own summary line says what happened.
    for noisy in ("httpx", "openai", "sentence_transformers"):
        logging.getLogger(noisy).setLevel(logging.WARNING)


def main(stage: str, benchmark: str, doc: Optional[str] = None) -> None:
    """Entry point of every numbered script: one stage of the graph."""
    main_stages((by_name(stage),), benchmark, doc)


def main_stages(stages: tuple[Stage, ...], benchmark: str, doc: Optional[str] = None,
                argv: Optional[list[str]] = None) -> None:
    """Run ``stages`` in order in this one process (a numbered script: one stage; the full-pipeline
    targets: the whole graph, ``common.pipeline.run_all``) through ``api.evaluate``; one-line errors."""
    args = arguments(doc or "", benchmark, argv)
    _quiet(args.verbose)
    try:
        api.evaluate(benchmark, config=args.config, run=args.run, limit=args.limit, memories=args.memories,
                     overrides=args.set, dry_run=args.dry_run, force=args.force, stages=stages)
    except api.RunError as exc:
        if exc.exit_code == 130:  # Ctrl-C: the line saying where it stopped is printed already
            sys.exit(130)
        sys.exit(str(exc))
    except Exception as exc:  # noqa: BLE001 - the last resort: one line, never a traceback
        log.debug("run failed", exc_info=True)
        hint = "" if args.verbose else " (-v prints the traceback)"
        sys.exit(f"error: {type(exc).__name__}: {' '.join(str(exc).split())}{hint}")
