from benchmarks.peer_dgl import BENCHMARK

raise SystemExit(BENCHMARK.main())
