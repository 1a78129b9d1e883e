from benchmarks.partition_quality import BENCHMARK

raise SystemExit(BENCHMARK.main())
