"""``python -m common.demo``: the offline demo (see ``common.demo.app``)."""
import sys

from common.demo.app import main

if __name__ == "__main__":
    sys.exit(main())
