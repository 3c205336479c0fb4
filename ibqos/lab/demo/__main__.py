"""``python -m ibqos.lab.demo``: the demo (:mod:`ibqos.lab.demo`)."""

import sys

from ibqos.lab.demo.story import main

if __name__ == "__main__":
    sys.exit(main())
