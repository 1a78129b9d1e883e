from benchmarks.full_batch import BENCHMARK

raise SystemExit(BENCHMARK.main())
