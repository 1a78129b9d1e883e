"""The benchmark on each rank of the emulated cluster (``torchrun`` starts it in every node).

    python -m lightning_gnn_dist emulate --nodes 2 --cpus-per-node 1 -- \\
        benchmarks/emulated_cluster/worker.py --plan PLAN.json --out RESULTS.jsonl

Runs the plan's blocks in order. A block sets every node's link to its bandwidth when it
changes (each node's first rank shapes its own link: ``testing.cluster.shape_own_link``),
optionally probes the network (``costmodel.probe``) or measures the compute costs on the bare
link just before (:func:`measure_costs`: ``costmodel.calibrate`` on every rank, and the fixed
seconds of a step),
then fits each of its variants with the Lightning
Trainer in this process (the process group is made once and reused by every fit). Rank 0 appends one JSON line
per fit to ``--out``: epoch wall times, every rank's CPU seconds per epoch, the halo bytes per
epoch (measured and predicted), every rank's compute and exchange-wait seconds
(``CommunicationMonitor``), the neighbour loader's remote-exchange seconds, test accuracy for
accuracy fits, and the load average.
"""

# ruff: noqa: E402  (the environment must be set before torch is imported)
from __future__ import annotations

import os

os.environ.setdefault("LGD_PROGRESS", "0")

import argparse
import gc
import importlib
import json
import logging
import statistics
import sys
import time
import warnings
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

import pytorch_lightning as pl
import torch
import torch.distributed as dist

from lightning_gnn_dist import GNNStrategy, GraphPartitionDataModule, NodeClassifier
from lightning_gnn_dist.costmodel import ComputeCosts, calibrate, predict_epoch
from lightning_gnn_dist.costmodel.probe import probe_network
from lightning_gnn_dist.lightning.callbacks import CommunicationMonitor
from lightning_gnn_dist.loaders.graph_store import PartitionedGraphStore
from lightning_gnn_dist.partition.store import PartitionStore
from lightning_gnn_dist.testing.cluster import shape_own_link


def _quiet() -> None:
    torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "1")))
    warnings.filterwarnings("ignore")
    for name in ("pytorch_lightning", "lightning_fabric", "lightning.pytorch"):
        logging.getLogger(name).setLevel(logging.ERROR)


class _ExchangeClock:
    """Seconds this rank spends in the neighbour loader's remote exchanges (sampling requests
    and feature fetches: ``PartitionedGraphStore._all_to_all``), per epoch."""

    seconds = 0.0
    _original = PartitionedGraphStore._all_to_all

    @classmethod
    def install(cls) -> None:
        original = cls._original

        def timed(self, *args, **kwargs):
            start = time.perf_counter()
            try:
                return original(self, *args, **kwargs)
            finally:
                cls.seconds += time.perf_counter() - start

        PartitionedGraphStore._all_to_all = timed


class EpochRecorder(pl.Callback):
    """Every rank: wall and CPU seconds of each training epoch, and the neighbour loader's
    remote-exchange seconds. First in the callback list (the monitor's gather stays outside)."""

    def __init__(self) -> None:
        self.wall: list[float] = []
        self.cpu: list[float] = []
        self.fetch: list[float] = []

    def on_train_epoch_start(self, trainer, pl_module) -> None:
        self._wall, self._cpu = time.perf_counter(), time.process_time()
        self._fetch = _ExchangeClock.seconds

    def on_train_epoch_end(self, trainer, pl_module) -> None:
        self.wall.append(time.perf_counter() - self._wall)
        self.cpu.append(time.process_time() - self._cpu)
        self.fetch.append(_ExchangeClock.seconds - self._fetch)


def _load_average() -> float:
    with open("/proc/loadavg") as handle:
        return float(handle.read().split()[0])


def fit(variant: dict, plan: dict, epochs: int, accuracy: bool) -> dict:
    """One Lightning fit of ``variant``; every rank returns the same summary (gathered)."""
    world = dist.get_world_size()
    nodes = int(os.environ["GROUP_WORLD_SIZE"])
    data = GraphPartitionDataModule(
        dataset=plan["dataset"],
        method=variant["method"],
        num_parts=world,
        store=plan["stores"][variant.get("store", variant["method"])],
        verify_dataset=False,
        **variant.get("data", {}),
    )
    torch.manual_seed(variant.get("seed", 0))
    if "module" in variant:  # a user's LightningModule, e.g. the neighbour example's
        module_name, _, class_name = variant["module"].rpartition(".")
        module_class = getattr(importlib.import_module(module_name), class_name)
        dims = plan["dims"]
        model = module_class(in_channels=dims[0], out_channels=dims[-1], **variant.get("model", {}))
    else:
        model = NodeClassifier(**{**plan["model"], **variant.get("model", {})})
    recorder = EpochRecorder()
    callbacks: list[pl.Callback] = [recorder]
    monitor = None
    if variant.get("data", {}).get("loader", "full") == "full":
        monitor = CommunicationMonitor()
        callbacks.append(monitor)
    trainer = pl.Trainer(
        strategy=GNNStrategy(timeout=600, **variant.get("strategy", {})),
        accelerator="cpu",
        devices=world // nodes,
        num_nodes=nodes,
        max_epochs=epochs,
        callbacks=callbacks,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        num_sanity_val_steps=0,
        limit_val_batches=0,
        log_every_n_steps=1,
        **variant.get("trainer", {}),
    )
    load = _load_average()
    trainer.fit(model, datamodule=data)
    test_acc = None
    if accuracy:
        metrics = trainer.test(model, datamodule=data, verbose=False)
        test_acc = float(metrics[0]["test_acc"])
    del trainer, model, data  # nothing of this fit may stay alive into the next one
    gc.collect()
    with open("/proc/self/statm") as handle:
        rss = int(handle.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    mine = {"wall": recorder.wall, "cpu": recorder.cpu, "fetch": recorder.fetch, "rss": rss}
    ranks: list[dict] = [{} for _ in range(world)]
    dist.all_gather_object(ranks, mine)
    summary = {
        "epoch_seconds": ranks[0]["wall"],
        "cpu_seconds": [r["cpu"] for r in ranks],
        "fetch_seconds": [r["fetch"] for r in ranks],
        "rss_bytes": [r["rss"] for r in ranks],
        "test_acc": test_acc,
        "load_average": [load, _load_average()],
    }
    if monitor is not None:
        bytes_, predicted = [0.0] * epochs, [0.0] * epochs
        for row in monitor.history:
            if row["direction"] != "control":
                bytes_[row["epoch"]] += row["bytes_total"]
                predicted[row["epoch"]] += row["predicted_bytes_total"]
        summary.update(
            bytes=bytes_,
            predicted_bytes=predicted,
            compute_seconds=[r["compute_seconds"].tolist() for r in monitor.rank_history],
            wait_seconds=[r["wait_seconds"].tolist() for r in monitor.rank_history],
        )
    return summary


def measure_costs(plan: dict) -> list[dict]:
    """Every rank's compute costs (``costmodel.calibrate`` on its own core(s)), with the fixed
    seconds of a training step: a fit of the same model on a tiny graph (its compute negligible)
    minus its predicted compute, the same on every rank. Collective."""
    costs = calibrate(plan["dims"])
    per_rank: list = [None] * dist.get_world_size()
    dist.all_gather_object(per_rank, vars(costs))
    tiny_plan = {**plan, "dataset": plan["tiny_dataset"], "stores": {"random": plan["tiny_store"]}}
    tiny = fit({"method": "random", "strategy": {"exchange": "p2p"}}, tiny_plan, 4, False)
    median = ComputeCosts(
        **{k: statistics.median(c[k] for c in per_rank) for k in per_rank[0] if k != "step_seconds"}
    )
    metrics = PartitionStore.open(plan["tiny_store"]).metrics
    compute = predict_epoch(metrics, plan["dims"], median, "loopback").compute_seconds.max()
    step = max(0.0, statistics.median(tiny["epoch_seconds"][1:]) - float(compute))
    return [{**c, "step_seconds": step} for c in per_rank]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--plan", type=Path, required=True)
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args(argv)
    _quiet()
    _ExchangeClock.install()
    plan = json.loads(args.plan.read_text())
    dist.init_process_group("gloo")
    rank, local_rank = dist.get_rank(), int(os.environ["LOCAL_RANK"])
    node = int(os.environ["GROUP_RANK"])

    def emit(record: dict) -> None:
        if rank == 0:
            with args.out.open("a") as handle:
                handle.write(json.dumps(record) + "\n")

    emit({"kind": "calibration", "costs": measure_costs(plan)})
    link: str | None = None  # the cluster starts unshaped

    def set_link(bandwidth: str | None) -> None:
        nonlocal link
        if bandwidth != link:
            if local_rank == 0:
                shape_own_link(bandwidth)
            link = bandwidth
        dist.barrier()

    for block in plan["blocks"]:
        costs_now = None
        if block.get("calibrate"):
            # on the bare link: the fixed seconds of a step are the loop's own work, not the
            # tiny fit's messages (nor a retransmission stall of the shaped link, ~0.2 s)
            set_link(None)
            costs_now = measure_costs(plan)
        set_link(block["bandwidth"])
        if block.get("probe"):
            probe = probe_network(node, max_seconds=plan.get("probe_seconds", 0.2))
            emit({"kind": "probe", "bandwidth": block["bandwidth"], **probe.to_dict()})
        for name in block["variants"]:
            variant = plan["variants"][name]
            accuracy = block.get("accuracy", False)
            epochs = plan["accuracy_epochs"] if accuracy else plan["epochs"]
            result = fit(variant, plan, epochs, accuracy)
            emit(
                {
                    "kind": "fit",
                    "round": block["round"],
                    "bandwidth": block["bandwidth"],
                    "variant": name,
                    "accuracy": accuracy,
                    "costs": costs_now,
                    **result,
                }
            )
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
