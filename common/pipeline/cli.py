"""The command line shared by every numbered script."""
from __future__ import annotations

import argparse
import logging
import os

from common.core.config import Config, ConfigError, load_config
from common.pipeline import dryrun


def parse(doc: str, benchmark: str) -> tuple[Config, argparse.Namespace]:
    p = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--config", action="append", default=None,
                   help=f"YAML config (repeatable; later files win). Default: configs/{benchmark}.yaml")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                   help="override one config key, e.g. --set retrieve.mode=dense_only")
    p.add_argument("--limit", type=int, default=None,
                   help="data.question_limit: first N questions of each memory (LoCoMo: per conversation; "
                        "LongMemEval, one question per memory: the first N questions of the file; BEAM: N "
                        "questions of each chat drawn across its abilities, seeded; LoCoMo-Plus: N questions in all, "
                        "drawn across its six categories); 0 runs nothing")
    p.add_argument("--memories", "--conversations", dest="memories", default=None,
                   help="data.memories: comma-separated memory ids (LoCoMo conversation ids, LongMemEval question ids)")
    p.add_argument("--run", default=None, help="run name (run.name): results/<benchmark>/<run>/")
    p.add_argument("--force", action="store_true", help="recompute this stage instead of resuming")
    p.add_argument("--dry-run", action="store_true",
                   help="estimate the whole run's calls, tokens and dollars, make no call, write nothing")
    p.add_argument("-v", "--verbose", action="store_true")
    args = p.parse_args()
    # Model-loading progress bars and warnings would drown the one summary line per stage.
    for var, value in (("TOKENIZERS_PARALLELISM", "false"), ("TRANSFORMERS_VERBOSITY", "error"),
                       ("HF_HUB_DISABLE_PROGRESS_BARS", "1")):
        os.environ.setdefault(var, value)
    logging.basicConfig(level=logging.DEBUG if args.verbose else logging.WARNING,
                        format="%(levelname)s %(name)s: %(message)s", force=True)
    # Keep third-party HTTP chatter out of stage output; our own summary line says what happened.
    for noisy in ("httpx", "openai", "sentence_transformers"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
    overrides = list(args.set)
    if args.limit is not None:
        overrides.append(f"data.question_limit={args.limit}")
    if args.memories:
        overrides.append(f"data.memories=[{args.memories}]")
    if args.run:
        overrides.append(f"run.name={args.run}")
    try:
        cfg = load_config(args.config or [f"configs/{benchmark}.yaml"], overrides)
    except ConfigError as exc:
        raise SystemExit(f"config error: {exc}") from None
    if cfg.benchmark != benchmark:
        raise SystemExit(f"config error: benchmark: the config is for {cfg.benchmark!r}, this script is {benchmark!r}")
    if args.dry_run:
        try:
            print(dryrun.format_estimate(dryrun.estimate(cfg)))
        except (ConfigError, ValueError, FileNotFoundError) as exc:
            raise SystemExit(f"error: {' '.join(str(exc).split())}") from None
        raise SystemExit(0)
    return cfg, args
