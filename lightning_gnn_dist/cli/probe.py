"""``probe``: measure the network between the ranks and fit the cost model's ``Network``.

Runs on every rank, started by a launcher, on a real cluster as on the emulated one::

    torchrun --nnodes 2 --nproc-per-node 2 ... -m lightning_gnn_dist probe --json net.json
    python -m lightning_gnn_dist emulate --nodes 2 --bandwidth 1gbit -- probe --json net.json

Rank 0 prints one row per level (between nodes, within a node, all-to-all: see
:mod:`lightning_gnn_dist.costmodel.probe`) and writes the JSON that
``Network.from_json(path, level)`` reads; the cost model takes that ``Network``
(``predict_epoch(..., network=Network.from_json("net.json"))``). Takes a few seconds.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import zlib
from collections.abc import Sequence
from datetime import timedelta
from pathlib import Path

from rich.console import Console
from rich.table import Table

from lightning_gnn_dist.cli.common import OneLineErrorParser, print_table

_LEVEL_TITLES = {
    "inter_node": "between nodes (ping-pong)",
    "intra_node": "within a node (ping-pong)",
    "all_to_all": "all-to-all (per rank)",
}


def _parser() -> argparse.ArgumentParser:
    # No defaults from costmodel.probe here: --help and usage errors answer before torch loads.
    parser = OneLineErrorParser(
        prog="python -m lightning_gnn_dist probe",
        description="Measure latency and bandwidth between the ranks (run it on every rank, "
        "e.g. with torchrun) and fit the cost model's Network.",
    )
    parser.add_argument("--json", metavar="FILE", help="rank 0 writes the measurement here")
    parser.add_argument(
        "--sizes",
        default=None,
        metavar="B1,B2,...",
        help="bytes per transfer, increasing (default: 64 B to 64 MiB, x4 steps)",
    )
    parser.add_argument(
        "--repeats", type=int, default=5, help="timed transfers per size (default: 5)"
    )
    parser.add_argument(
        "--max-seconds",
        type=float,
        default=0.25,
        help="stop growing the size once one transfer takes this long (default: 0.25)",
    )
    parser.add_argument(
        "--all-to-all-max-bytes",
        type=int,
        default=None,
        metavar="B",
        help="largest all-to-all timed, bytes one rank sends (default: 4 MiB, a halo "
        "exchange's size; larger ones reach a TCP link's full duplex rate)",
    )
    parser.add_argument(
        "--backend",
        default="gloo",
        choices=["gloo", "nccl"],
        help="torch.distributed backend (default: gloo; nccl probes GPU to GPU)",
    )
    return parser


def node_id() -> int:
    """This process's node: torchrun's ``GROUP_RANK``, else SLURM's ``SLURM_NODEID``, else a
    number made from the host name."""
    for variable in ("GROUP_RANK", "SLURM_NODEID"):
        if os.environ.get(variable, "").isdigit():
            return int(os.environ[variable])
    return zlib.crc32(socket.gethostname().encode())


def run_probe_command(argv: Sequence[str]) -> int:
    """Run ``probe`` on this rank; returns the exit code."""
    args = _parser().parse_args(argv)
    try:
        sizes = None if args.sizes is None else [int(s) for s in args.sizes.split(",")]
    except ValueError:
        raise ValueError(f"--sizes {args.sizes!r}: give comma-separated byte counts") from None
    if args.repeats < 1:
        raise ValueError(f"--repeats {args.repeats}: give a positive integer")
    if args.all_to_all_max_bytes is not None and args.all_to_all_max_bytes < 1:
        raise ValueError(
            f"--all-to-all-max-bytes {args.all_to_all_max_bytes}: give a positive byte count"
        )
    missing = [
        v for v in ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT") if v not in os.environ
    ]
    if missing:
        raise RuntimeError(
            f"probe runs on every rank of a launcher ({', '.join(missing)} not set): start it "
            "with `torchrun --nnodes N --nproc-per-node R ... -m lightning_gnn_dist probe` or "
            "`python -m lightning_gnn_dist emulate --nodes N -- probe`"
        )
    import torch
    import torch.distributed as dist

    from lightning_gnn_dist.costmodel.probe import (
        ALL_TO_ALL_MAX_BYTES,
        DEFAULT_SIZES,
        probe_network,
    )

    device = "cpu"
    if args.backend == "nccl":
        device = f"cuda:{int(os.environ.get('LOCAL_RANK', 0))}"
        torch.cuda.set_device(device)
    dist.init_process_group(args.backend, timeout=timedelta(seconds=120))
    try:
        result = probe_network(
            node_id(),
            DEFAULT_SIZES if sizes is None else sizes,
            args.repeats,
            args.max_seconds,
            device,
            all_to_all_max_bytes=args.all_to_all_max_bytes or ALL_TO_ALL_MAX_BYTES,
        )
        if dist.get_rank() == 0:
            _report(result, args.json)
    finally:
        dist.destroy_process_group()
    return 0


def _report(result, path: str | None) -> None:
    content = result.to_dict()
    table = Table(
        title=f"network probe: {content['world_size']} ranks on {content['nodes']} node(s), "
        f"{content['backend']}"
    )
    for column in ("level", "ranks", "latency (µs)", "bandwidth (MB/s)", "sizes (B)"):
        table.add_column(column, justify="left" if column in ("level", "ranks") else "right")
    for level, measured in result.levels.items():
        if measured is None:
            table.add_row(_LEVEL_TITLES[level], "-", "not measured", "", "")
            continue
        table.add_row(
            _LEVEL_TITLES[level],
            "all" if measured.ranks is None else f"{measured.ranks[0]} ↔ {measured.ranks[1]}",
            f"{measured.network.latency_s * 1e6:.1f}",
            f"{measured.network.bandwidth_bytes_per_s / 1e6:.1f}",
            f"{measured.sizes[0]}..{measured.sizes[-1]}",
        )
    print_table(Console(), table)
    network = result.network
    if network is not None:
        duplex = network.duplex_bandwidth_bytes_per_s
        print(
            f"costmodel: Network(bandwidth_bytes_per_s={network.bandwidth_bytes_per_s:.4g}, "
            f"latency_s={network.latency_s:.3g}"
            + (f", duplex_bandwidth_bytes_per_s={duplex:.4g})" if duplex is not None else ")")
        )
    if path:
        Path(path).write_text(json.dumps(content, indent=1))
        print(f"wrote {path} (read it with lightning_gnn_dist.costmodel.Network.from_json)")
