"""``python -m common.import_run FILE --run NAME``: a published result file as a run directory.

A thin entry point kept stable whatever the package layout becomes; the work is in
``common.pipeline.importer``.
"""
from __future__ import annotations

import sys

from common.pipeline.importer import main

if __name__ == "__main__":
    sys.exit(main())
