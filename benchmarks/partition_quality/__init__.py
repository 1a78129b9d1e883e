"""Partition quality: HP (Mt-KaHyPar, KaHyPar), GP (METIS) and RP, like paper 000 Table 2.

    python -m benchmarks.partition_quality            # full configuration, stops after 25 min
    python -m benchmarks.partition_quality --resume --budget 1200   # run the cells left over
    python -m benchmarks.partition_quality --quick    # smoke configuration (< 2 min)
    python -m benchmarks.partition_quality --graphs copter2,rmat --parts 16 --methods metis,random

Every cell (graph x P x method) is one call of
``lightning_gnn_dist.partition.compare.compare_partitioners(data, P, methods=[method],
options={"vertex_weight": "nnz"})`` (paper 000's vertex weight, not the library's default): the
metrics are computed exactly from the assignment (the numbers training measures), and volumes and
message counts are normalised to random partitioning (RP, seed 0) like paper 000 Table 2. The
``seconds`` column is the partitioner's own time (hypergraph or graph construction included),
measured inside the cell.

Each cell runs in a forked child process in a process group of its own, so a cell that exceeds its
time limit is killed together with KaHyPar's worker process and recorded as ``null`` metrics with
``"timeout after N s"``. A method that timed out on a graph is not run at larger P on that graph
(both hypergraph partitioners get slower with P); those cells are recorded as skipped. A run-wide
``--budget`` caps every cell's limit by the time left, so the whole run ends in about that time;
cells it leaves out are recorded as such, and ``--resume`` runs them later, keeping every result
(and every timeout at a limit no smaller than the current one) of the existing JSON.

On a 2-core machine the full configuration takes about 15 minutes: Mt-KaHyPar cells take 15 s to
80 s each, and KaHyPar finishes only on ``copter2`` within its 120 s limit (its timeouts at P = 4
skip the larger P of that graph). The METIS example meshes come from ``libmetis-doc``; graphs
whose file is absent are skipped and listed.

Cells run cheapest method first over all graphs (RP, METIS, Mt-KaHyPar, then KaHyPar), so a run
that hits its budget loses KaHyPar cells rather than Mt-KaHyPar ones. The JSON and the markdown
are rewritten after every cell (``"finished": false`` until the end), so a long run is not lost;
``"complete"`` says whether every cell has a result or a timeout of its own.
"""

from __future__ import annotations

import argparse

from benchmarks.harness import Benchmark, Run, csv
from benchmarks.partition_quality.config import FULL, GRAPHS, LIMITS, METHODS, QUICK
from benchmarks.partition_quality.render import render


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--graphs",
        type=csv(),
        help=f"comma-separated names ({', '.join(GRAPHS)}) or dataset specs "
        f"(default: {','.join(FULL['graphs'])}; --quick: {','.join(QUICK['graphs'])})",
    )
    parser.add_argument("--parts", type=csv(int), help="P values (default: 4,16,64)")
    parser.add_argument(
        "--methods",
        type=csv(),
        help=f"comma-separated subset of {','.join(METHODS)} (default: all)",
    )
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--epsilon", type=float, default=0.03)
    parser.add_argument(
        "--timeout-kahypar", type=float, help="seconds per KaHyPar cell (120; quick 20)"
    )
    parser.add_argument(
        "--timeout-mtkahypar", type=float, help="seconds per Mt-KaHyPar cell (900; quick 30)"
    )
    parser.add_argument("--budget", type=float, help="seconds for the whole run (1500; quick 100)")
    parser.add_argument(
        "--resume",
        action="store_true",
        help="keep the results (and timeouts at a limit >= the current one) of the existing JSON "
        "and run only the other cells, e.g. after a stopped run or with a larger --budget",
    )


def run(r: Run) -> None:
    from benchmarks.partition_quality.cells import run as run_cells  # torch: not for --render

    args = r.args
    preset = QUICK if r.quick else FULL
    args.graphs = args.graphs or preset["graphs"]
    args.parts = args.parts or preset["parts"]
    args.methods = args.methods or list(METHODS)
    unknown = [m for m in args.methods if m not in METHODS]
    if unknown:
        raise SystemExit(f"unknown methods {unknown}; choose from {', '.join(METHODS)}")
    if any(p < 1 for p in args.parts):
        raise SystemExit(f"every P must be >= 1 (got {args.parts})")
    kahypar, mtkahypar, budget = LIMITS["quick" if r.quick else "full"]
    args.timeout_kahypar = args.timeout_kahypar or kahypar
    args.timeout_mtkahypar = args.timeout_mtkahypar or mtkahypar
    args.budget = args.budget or budget
    run_cells(r)


BENCHMARK = Benchmark(
    "partition_quality",
    __doc__,
    run,
    render,
    add_arguments,
    packages=("pymetis", "mtkahypar", "kahypar"),
)
