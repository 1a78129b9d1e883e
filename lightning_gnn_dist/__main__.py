"""``python -m lightning_gnn_dist``: see :mod:`lightning_gnn_dist.cli`."""

import sys

from lightning_gnn_dist.cli import main

if __name__ == "__main__":
    sys.exit(main())
