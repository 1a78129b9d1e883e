"""Section (d)'s measurement process: ``python -m benchmarks.full_batch.worker KIND ...``.

A fresh interpreter (never a fork of a process that held the graph, so copy-on-write pages
cannot hide or double-count memory) trains and writes ``rank<r>.json`` with its RSS readings:

* ``single``: the plain PyG loop on the whole graph, one process;
* ``dist``: ``GNNStrategy(start_method="popen")`` on prebuilt stores (``prepare_data`` skipped);
* ``dist-stock``: the same with the stock ``GraphPartitionDataModule``.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import sys
import time
from pathlib import Path

from benchmarks.common.fits import make_trainer, quiet
from benchmarks.common.processes import peak_rss_bytes, rss_bytes
from benchmarks.common.stores import PrebuiltPartitionDataModule
from benchmarks.full_batch.model import make_module, plain_epochs
from lightning_gnn_dist.data import load_dataset
from lightning_gnn_dist.lightning.datamodule import GraphPartitionDataModule
from lightning_gnn_dist.lightning.strategy import GNNStrategy
from lightning_gnn_dist.partition.store import PartitionStore

#: RSS once torch, Lightning, PyG and the package are imported, before any graph data exists.
RSS_AFTER_IMPORTS = rss_bytes()


def rss_report() -> dict:
    """Peak RSS (``VmHWM``), after-import RSS and current RSS of this process, MiB.
    ``ru_maxrss`` is recorded but not used (see :func:`common.processes.peak_rss_bytes`)."""
    peak = peak_rss_bytes()
    return {
        "pid": os.getpid(),
        "peak_rss_mib": peak / 2**20,
        "baseline_rss_mib": RSS_AFTER_IMPORTS / 2**20,
        "end_rss_mib": rss_bytes() / 2**20,
        "peak_above_baseline_mib": (peak - RSS_AFTER_IMPORTS) / 2**20,
        "ru_maxrss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
    }


def exit_now() -> None:
    """End once the report is written: tearing down torch and Lightning takes seconds on a
    loaded machine and measures nothing."""
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("kind", choices=["single", "dist", "dist-stock"])
    parser.add_argument("--dataset", required=True)
    parser.add_argument("--world", type=int, default=1)
    parser.add_argument("--epochs", type=int, required=True)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--root", help="partition store root")
    parser.add_argument("--store", help="the store's folder")
    args = parser.parse_args()
    quiet()
    if args.kind == "single":
        data = load_dataset(args.dataset)
        module = make_module(data.x.size(1), int(data.y.max()) + 1)
        state = {k: v.clone() for k, v in module.model.state_dict().items()}
        del module
        plain_epochs(data, state, args.epochs)
        (args.out / "rank0.json").write_text(json.dumps({"rank": 0, **rss_report()}))
        exit_now()
    store = PartitionStore.open(args.store)
    module = make_module(int(store.meta["num_features"]), int(store.meta["num_classes"]))
    cls = GraphPartitionDataModule if args.kind == "dist-stock" else PrebuiltPartitionDataModule
    datamodule = cls(args.dataset, method="hypergraph", num_parts=args.world, root=args.root)
    strategy = GNNStrategy(exchange="p2p", start_method="popen", timeout=600)
    trainer = make_trainer(strategy, args.world, args.epochs, [], limit_val_batches=0)
    trainer.fit(module, datamodule=datamodule)
    rank = trainer.global_rank
    report = {"rank": rank, "world_size": trainer.world_size, **rss_report()}
    (args.out / f"rank{rank}.json").write_text(json.dumps(report))
    # The launcher ends every rank when rank 0 exits: wait for the others' reports first.
    deadline = time.monotonic() + 120
    while rank == 0 and len(list(args.out.glob("rank*.json"))) < trainer.world_size:
        if time.monotonic() > deadline:
            break
        time.sleep(0.1)
    exit_now()


if __name__ == "__main__":
    main()
