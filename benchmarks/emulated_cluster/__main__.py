"""``python -m benchmarks.emulated_cluster``: see :mod:`benchmarks.emulated_cluster`."""

from benchmarks.emulated_cluster import BENCHMARK

if __name__ == "__main__":
    raise SystemExit(BENCHMARK.main())
