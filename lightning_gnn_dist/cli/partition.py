"""``partition`` and ``partition-compare``: partition a graph, print paper 000's metrics, write a
store, compare partitioners. Bad input ends with exit code 2 and one ``error: ...`` line."""

from __future__ import annotations

import argparse
import ast
import json
from collections.abc import Sequence

from rich.console import Console

from lightning_gnn_dist.cli.common import (
    LIGHTNING_COMMANDS,
    OTHER_COMMANDS,
    PROG,
    OneLineErrorParser,
    print_table,
)

PARTITION_COMMANDS = ("partition", "partition-compare")
COMPARED_EXCHANGES = ("p2p", "broadcast", "rdm")
"""Modes whose predicted epoch time ``partition-compare --widths`` prints side by side."""
# The parser's choices and defaults, written out so that ``--help`` and usage errors answer
# before torch loads (``tests/cli/test_fast_start.py`` keeps them equal to their sources).
METHODS = (
    "gnn-blocks",
    "hypergraph",
    "hypergraph-kahypar",
    "hypergraph-mtkahypar",
    "kaminpar",
    "metis",
    "random",
    "stochastic-hypergraph",
    "vertex-cut",
)
"""``--method`` choices: the names in :data:`lightning_gnn_dist.partition.PARTITIONERS`."""
DEFAULT_METHODS = ("hypergraph-mtkahypar", "hypergraph-kahypar", "metis", "random")
"""``partition-compare``'s methods: :data:`lightning_gnn_dist.partition.compare.DEFAULT_METHODS`."""
AUTO_METHODS = ("hypergraph", "metis", "random")
"""``--auto``'s methods: :data:`lightning_gnn_dist.costmodel.plan.AUTO_METHODS`."""
PLACEMENTS = ("naive", "mapped", "two-level")
"""``--placement`` choices: :data:`lightning_gnn_dist.partition.placement.PLACEMENTS`."""


def _partition_parser() -> argparse.ArgumentParser:
    parser = OneLineErrorParser(
        prog=PROG,
        description="Partition graphs and train on them. fit/validate/test/predict are the "
        "LightningCLI (`COMMAND --help` lists their options); partition and partition-compare "
        "partition a graph and print paper 000's metrics; emulate runs a multi-node command on "
        "an emulated cluster on this machine; probe measures the network between ranks. Bad "
        "input ends with exit code 2 and one `error: ...` line.",
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for command, text in {**LIGHTNING_COMMANDS, **OTHER_COMMANDS}.items():
        # Listed for --help only: main() hands these to their own parsers before this one.
        sub.add_parser(command, help=text, add_help=False)
    common = OneLineErrorParser(add_help=False)
    common.add_argument(
        "--dataset",
        default="digits",
        help="dataset spec, e.g. digits, metis:PATH, sbm?num_nodes=5000 (default: digits)",
    )
    common.add_argument("--num-parts", "-p", type=int, required=True, help="number of parts P")
    common.add_argument("--seed", type=int, default=0, help="partitioner seed (default: 0)")
    common.add_argument(
        "--epsilon", type=float, default=0.03, help="allowed imbalance (default: 0.03)"
    )
    common.add_argument("--json", action="store_true", help="print JSON instead of a table")
    common.add_argument(
        "--option",
        "-o",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="partitioner option, repeatable (e.g. --option vertex_weight=work "
        "--option widths=64,16,8); VALUE is a Python literal or else a string. "
        "partition-compare gives it to every method that takes it",
    )
    common.add_argument(
        "--nodes",
        type=int,
        default=1,
        help="nodes the P ranks run on (P/nodes per node, rank r on node r // (P/nodes)): add "
        "the halo rows per SpMM that cross nodes (p2p and hierarchical) and that stay inside "
        "one. partition --out records the placement in the store; partition-compare adds a row "
        "per placed variant of each method (METHOD/mapped, hypergraph/two-level) when a node "
        "has several ranks, and --widths prices each level; --auto adds the hierarchical "
        "exchange and the placements to the candidates (default: 1)",
    )

    one = sub.add_parser(
        "partition",
        parents=[common],
        help="partition a graph, print metrics, optionally write a store",
    )
    one.add_argument(
        "--method",
        "-m",
        default="hypergraph",
        choices=METHODS,
        help="(default: hypergraph)",
    )
    one.add_argument(
        "--out", help="partition store directory to write (reused if it matches and is intact)"
    )
    one.add_argument(
        "--placement",
        default="naive",
        choices=list(PLACEMENTS),
        help="with --nodes N > 1, which parts share a node: naive (part p on rank p), mapped "
        "(parts renumbered so that parts exchanging many rows share a node) or two-level "
        "(hypergraph only: into nodes, then each node into its ranks) (default: naive)",
    )
    one.add_argument(
        "--force",
        action="store_true",
        help="rebuild the --out store even if it exists (replaced atomically once complete)",
    )
    cmp = sub.add_parser(
        "partition-compare", parents=[common], help="compare partitioners (paper 000 Table 2)"
    )
    cmp.add_argument(
        "--methods",
        nargs="+",
        default=None,
        choices=METHODS,
        help=f"(default: {' '.join(DEFAULT_METHODS)}; with --auto: {' '.join(AUTO_METHODS)})",
    )
    cmp.add_argument(
        "--auto",
        action="store_true",
        help="print the automatic plan's table (method='auto' / exchange='auto'): every "
        "method x exchange mode predicted with the cost model, the pick marked; needs --widths",
    )
    cmp.add_argument(
        "--allow-stale",
        action="store_true",
        help="with --auto: also the approximate plans (cached, lossy codecs)",
    )
    cmp.add_argument(
        "--cores",
        type=int,
        help="with --auto: cores the ranks share on one machine (compute slows by P / cores)",
    )
    cmp.add_argument(
        "--widths",
        metavar="D0,D1,...",
        help="GCN layer widths (e.g. 64,16,8): add the cost model's predicted epoch time, "
        "compute calibrated on this machine (lightning_gnn_dist.costmodel)",
    )
    cmp.add_argument(
        "--network",
        default=None,
        help="network of the predicted epoch time: a preset (infiniband: 12.5 GB/s, 2 µs; "
        "loopback) or the JSON file of `probe --json` (default: infiniband; with --auto: "
        "loopback, as GraphPartitionDataModule(method='auto'))",
    )
    cmp.add_argument(
        "--exchange",
        default="p2p",
        choices=["p2p", "broadcast", "cached", "rdm"],
        help="exchange mode of the 'pred. epoch ms' column; p2p, broadcast and rdm (paper 003, "
        "the cost model's order) are also printed beside it (default: p2p)",
    )
    cmp.add_argument(
        "--plot",
        metavar="FILE.png",
        help="also draw the methods side by side per rank, and with --nodes each method's "
        "(and placed variant's) halo rows per node (FILE-nodes-METHOD.png, "
        "FILE-nodes-METHOD-PLACEMENT.png) (needs the 'plot' extra)",
    )
    return parser


def _ranks_per_node(args: argparse.Namespace) -> int | None:
    """``--nodes``: ranks per node (``None`` on one node)."""
    if args.nodes < 1 or args.num_parts % args.nodes:
        raise ValueError(f"--nodes {args.nodes}: give a divisor of --num-parts {args.num_parts}")
    return args.num_parts // args.nodes if args.nodes > 1 else None


def _plot_node_traffic(metrics: dict, topology, title: str, path: str) -> None:
    """Each vertex partition's halo rows per node, to other nodes and inside the node, as
    ``FILE-nodes-METHOD.png`` (a placed variant: ``FILE-nodes-METHOD-PLACEMENT.png``) beside
    ``--plot FILE.png`` (a vertex cut has no rank-pair rows). ``metrics``: partition label
    (:func:`~lightning_gnn_dist.partition.placement.partition_label`) → metrics."""
    from pathlib import Path

    from lightning_gnn_dist.costmodel.plan import store_folder
    from lightning_gnn_dist.partition.metrics import PartitionMetrics
    from lightning_gnn_dist.plots import node_traffic_figure, save_figure

    plot = Path(path)
    for label, m in metrics.items():
        if isinstance(m, PartitionMetrics):
            figure = node_traffic_figure(
                m.peer_rows,
                None,
                topology,
                f"{title}: {label}",
                unit="rows per exchange",
                measured_label="p2p, from the partition",
            )
            save_figure(figure, plot.with_name(f"{plot.stem}-nodes-{store_folder(label)}.png"))


def _row_label(row: dict) -> str:
    """A ``partition-compare`` row's partition: ``method`` or ``method/placement``."""
    from lightning_gnn_dist.partition.placement import partition_label

    return partition_label(row["method"], row.get("placement", "naive"))


def _topology(args: argparse.Namespace):
    """``--nodes``: the :class:`~lightning_gnn_dist.partition.placement.Topology` (``None`` on
    one node)."""
    from lightning_gnn_dist.partition.placement import Topology

    per_node = _ranks_per_node(args)
    return None if per_node is None else Topology(args.nodes, per_node)


def _add_predicted_epoch(rows: list[dict], metrics: dict, args: argparse.Namespace) -> None:
    """``predicted_epoch_seconds`` (``--exchange``), ``predicted_epoch_seconds_by_exchange``
    (p2p, broadcast, rdm) and ``rdm_order`` per row from the cost model (``None`` for a vertex
    cut)."""
    from lightning_gnn_dist.costmodel import calibrate, predict_epoch, rdm_pick
    from lightning_gnn_dist.costmodel.plan import resolve_network
    from lightning_gnn_dist.partition.metrics import PartitionMetrics

    dims = _widths(args.widths)
    costs = calibrate(dims)
    network = resolve_network(args.network)
    topology = _topology(args)  # several nodes: each level priced (one preset for both)
    modes = list(dict.fromkeys([args.exchange, *COMPARED_EXCHANGES]))
    if topology is not None:
        modes.append("hierarchical")
    for row in rows:
        m = metrics[_row_label(row)]
        if not isinstance(m, PartitionMetrics):
            row["predicted_epoch_seconds"] = None
            continue
        seconds = {
            mode: predict_epoch(m, dims, costs, network, mode, topology=topology).epoch_seconds
            for mode in modes
        }
        row["predicted_epoch_seconds"] = seconds[args.exchange]
        row["predicted_epoch_seconds_by_exchange"] = seconds
        row["rdm_order"] = rdm_pick(m, dims, costs, network)


def _widths(text: str) -> list[int]:
    try:
        return [int(w) for w in text.split(",")]
    except ValueError:
        raise ValueError(
            f"--widths {text!r}: give comma-separated integers, e.g. 64,16,8"
        ) from None


def _print_auto_plan(data, args: argparse.Namespace, options: dict, title: str) -> None:
    """``partition-compare --auto``: the plan table of ``method="auto"`` without training."""
    from lightning_gnn_dist.costmodel import calibrate
    from lightning_gnn_dist.costmodel.plan import (
        AUTO_METHODS,
        partition_candidates,
        plan_from_metrics,
    )

    if not args.widths:
        raise ValueError("--auto predicts epochs: give the model's --widths, e.g. 64,16,8")
    if options:
        raise ValueError("--auto uses each method's defaults; drop --option")
    if args.cores is not None and args.cores < 1:
        raise ValueError(f"--cores must be >= 1 (got {args.cores})")
    dims = _widths(args.widths)
    methods = args.methods or list(AUTO_METHODS)
    topology = _topology(args)
    metrics, sources = partition_candidates(
        data, args.num_parts, methods, seed=args.seed, epsilon=args.epsilon, topology=topology
    )
    plan = plan_from_metrics(
        metrics,
        dims,
        calibrate(dims),
        args.network or "loopback",
        allow_stale=args.allow_stale,
        cores=args.cores,
        sources=sources,
        topology=topology,
    )
    if args.json:
        print(json.dumps(plan.to_dict(), indent=1))
    else:
        print_table(Console(), plan.table(f"automatic plan: {title}"))


def _partition(data, partitioner, args: argparse.Namespace) -> dict:
    """``partition``: partition (with ``--out`` into a store, with ``--nodes`` placed by
    ``--placement``) and return the summary row (metrics, seconds, store, node rows)."""
    import time

    from lightning_gnn_dist.partition.metrics import PartitionMetrics, partition_metrics
    from lightning_gnn_dist.partition.placement import node_rows_summary
    from lightning_gnn_dist.partition.store import partition_to_store, placed_assignment

    topology = _topology(args)
    if args.out:
        store = partition_to_store(
            data,
            partitioner,
            args.num_parts,
            args.out,
            dataset=args.dataset,
            force=args.force,
            topology=topology,
            placement=args.placement,
        )
        metrics, seconds, extra = store.metrics, store.meta["seconds"], {"store": str(store.path)}
    else:
        start = time.perf_counter()
        assignment, _ = placed_assignment(
            data, partitioner, args.num_parts, topology, args.placement
        )
        seconds = time.perf_counter() - start
        if topology is not None and partitioner.kind == "vertex":
            metrics = partition_metrics(data, assignment, args.num_parts, topology.ranks_per_node)
        else:
            metrics = partitioner.metrics(data, assignment, args.num_parts)
        extra = {}
    summary = {"method": args.method, **metrics.summary(), "seconds": seconds, **extra}
    if topology is not None:
        summary["placement"] = args.placement
        if isinstance(metrics, PartitionMetrics):
            summary.update(
                node_rows_summary(metrics.peer_rows, metrics.hierarchical_peer_rows, topology)
            )
    return summary


def parse_options(items: Sequence[str]) -> dict[str, object]:
    """``--option KEY=VALUE`` items as keyword arguments: ``VALUE`` read by
    ``ast.literal_eval`` (``3``, ``0.1``, ``False``, ``64,16,8`` → a tuple), else kept as a
    string (``work``).

    Raises:
        ValueError: an item without ``=`` or with a key that is not an identifier.
    """
    options: dict[str, object] = {}
    for item in items:
        key, sep, text = item.partition("=")
        key = key.strip()
        if not sep or not key.isidentifier():
            raise ValueError(
                f"--option {item!r}: write KEY=VALUE with a Python name as KEY, "
                "e.g. --option vertex_weight=work"
            )
        try:
            options[key] = ast.literal_eval(text)
        except (ValueError, SyntaxError):
            options[key] = text
    return options


def run_partition_command(argv: Sequence[str]) -> int:
    """Run ``partition`` or ``partition-compare``; returns the exit code."""
    args = _partition_parser().parse_args(argv)
    if getattr(args, "force", False) and not args.out:
        raise ValueError("--force rebuilds the store given by --out; add --out DIR")
    options = parse_options(args.option)
    clash = sorted(set(options) & {"seed", "epsilon"})
    if clash:
        raise ValueError(f"--option {clash[0]}=...: use --{clash[0]} instead")
    _ranks_per_node(args)  # a bad --nodes ends before the graph is loaded
    # The usage errors above come before torch and the partitioners load (seconds).
    from lightning_gnn_dist.data import load_dataset
    from lightning_gnn_dist.partition import get_partitioner
    from lightning_gnn_dist.partition.compare import compare_partitioners
    from lightning_gnn_dist.partition.report import comparison_table, metrics_table
    from lightning_gnn_dist.partition.store import check_placement

    if args.command == "partition":
        partitioner = get_partitioner(args.method, seed=args.seed, epsilon=args.epsilon, **options)
        check_placement(partitioner, args.placement)
        if args.placement != "naive" and args.nodes == 1:
            raise ValueError(
                f"--placement {args.placement} decides which parts share a node: add --nodes N "
                "(N > 1 nodes of --num-parts / N ranks each)"
            )
    console = Console()
    data = load_dataset(args.dataset)
    title = f"{args.dataset}: {data.num_nodes} vertices, {data.edge_index.size(1)} edges, P = {args.num_parts}"
    if args.command == "partition-compare" and args.auto:
        _print_auto_plan(data, args, options, title)
        return 0
    if args.command == "partition-compare":
        if args.allow_stale or args.cores is not None:
            raise ValueError("--allow-stale and --cores apply to --auto only")
        args.network = args.network or "infiniband"
        rows = compare_partitioners(
            data,
            args.num_parts,
            args.methods or list(DEFAULT_METHODS),
            seed=args.seed,
            epsilon=args.epsilon,
            keep_metrics=True,
            options=options,
            ranks_per_node=_ranks_per_node(args),
        )
        metrics = {_row_label(row): row.pop("metrics") for row in rows}
        if args.widths:
            _add_predicted_epoch(rows, metrics, args)
        if args.plot:
            from lightning_gnn_dist.plots import partition_comparison_figure, save_figure

            save_figure(partition_comparison_figure(metrics, title), args.plot)
            topology = _topology(args)
            if topology is not None:
                _plot_node_traffic(metrics, topology, title, args.plot)
        if args.json:
            print(json.dumps(rows, indent=1))
        else:
            print_table(console, comparison_table(rows, title))
        return 0

    summary = _partition(data, partitioner, args)
    refinement = getattr(partitioner, "last_refinement", None)
    if refinement is not None and summary.get("placement") != "two-level":  # not one node's
        summary.update(refinement.summary())
    if args.json:
        print(json.dumps(summary, indent=1))
    else:
        print_table(console, metrics_table(summary, title))
    return 0
