from benchmarks.hetero import BENCHMARK

raise SystemExit(BENCHMARK.main())
