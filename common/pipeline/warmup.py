"""Importing the later stages' slow modules in the background of a whole-pipeline run.

``make locomo`` runs every stage in one process. Stages 02-08 mostly wait on their endpoints,
while 09 starts by importing scipy.stats, statsmodels and nltk (about 1.5 s on 2 cores, more than
its own computation). A daemon thread imports the modules the graph declares for the stages still
to come (``Stage.warm_imports``) while the first ones run, so those seconds leave the run's
critical path. A numbered script (one stage) starts nothing.

The thread only imports: it changes no state the stages read. A module that fails to import is
left alone (the stage imports it itself and reports its own error); the thread never raises.
Before a stage that declared warm imports runs, the caller waits for the thread (``join``), so
the stage never imports the same modules concurrently with it.
"""
from __future__ import annotations

import importlib
import logging
import threading
from typing import Iterable, Optional

from common.pipeline.graph import Stage

log = logging.getLogger(__name__)


def modules(stages: Iterable[Stage]) -> list[str]:
    """The declared slow imports of ``stages``, in graph order, each once."""
    return list(dict.fromkeys(m for s in stages for m in s.warm_imports))


def _import_all(names: list[str]) -> None:
    for name in names:
        try:
            importlib.import_module(name)
        except Exception:  # noqa: BLE001 - the stage's own import reports it, in its own words
            log.debug("warm import of %s failed", name, exc_info=True)


def start(later: Iterable[Stage]) -> Optional[threading.Thread]:
    """Import the slow modules of the stages in ``later`` on a daemon thread; None if there are none."""
    names = modules(later)
    if not names:
        return None
    thread = threading.Thread(target=_import_all, args=(names,), name="warm-imports", daemon=True)
    thread.start()
    return thread
