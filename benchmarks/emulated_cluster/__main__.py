"""``python -m benchmarks.emulated_cluster``: see :mod:`benchmarks.emulated_cluster`."""

import sys

from benchmarks.emulated_cluster.driver import main

if __name__ == "__main__":
    sys.exit(main())
