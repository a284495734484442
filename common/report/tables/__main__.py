"""``python -m common.report.tables``: see ``common.report.tables.command``."""
from __future__ import annotations

import sys

from common.report.tables.command import main

if __name__ == "__main__":
    sys.exit(main())
