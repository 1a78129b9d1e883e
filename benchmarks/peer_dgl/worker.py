"""Worker side of :mod:`benchmarks.peer_dgl`: one variant in this interpreter, timings as JSON.

Runs in this project's venv (``ours``, ``ours+prefetch``, ``pyg``) or in DGL's own venv
(``dgl``), which cannot import this package: everything is imported inside the functions.

    python benchmarks/peer_dgl/worker.py --worker SYSTEM:TASK --data G.npz --parts DIR --out R.json
"""

# ruff: noqa: E402  (the environment must be set before torch is imported)
from __future__ import annotations

import os

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")

import argparse
import json
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))  # stdlib-only helpers of the benchmarks package, in DGL's venv too
# Peaks from VmHWM, not ru_maxrss: a child of the harness would report the harness's peak.
from benchmarks.common.processes import peak_rss_bytes, rss_bytes  # noqa: I001


def _timed(fn, clock):
    start = clock()
    value = fn()
    return value, clock() - start


class Phases:
    """CPU and wall seconds per named phase, summed over an epoch."""

    def __init__(self):
        self.cpu, self.wall = {}, {}

    def __call__(self, name, fn):
        c, w = time.process_time(), time.perf_counter()
        value = fn()
        self.cpu[name] = self.cpu.get(name, 0.0) + time.process_time() - c
        self.wall[name] = self.wall.get(name, 0.0) + time.perf_counter() - w
        return value


def train(args, data, model, batches, epochs, server_cpu=None):
    """Run ``epochs`` epochs of ``batches(phases)`` (yields ``(forward, target)``: a closure
    giving the step's output, and its labels) and return per-epoch CPU/wall seconds, phases and
    steps. ``server_cpu``: a function giving the cumulative CPU seconds of a process that works
    for this one (DistDGL's graph server); its CPU over each epoch is added to the epoch's and
    recorded as the ``server`` phase."""
    import torch
    import torch.nn.functional as F

    optimizer = torch.optim.Adam(model.parameters(), lr=0.01)
    records = []
    for _ in range(epochs):
        phases = Phases()
        c, w = time.process_time(), time.perf_counter()
        served = server_cpu() if server_cpu is not None else 0.0
        model.train()
        steps = 0
        for forward, target in batches(phases):
            steps += 1
            out = phases("forward", forward)

            def backward(out=out, target=target):
                loss = F.cross_entropy(out, target)
                optimizer.zero_grad()
                loss.backward()
                optimizer.step()

            phases("backward", backward)
        if server_cpu is not None:
            phases.cpu["server"] = served = server_cpu() - served
        records.append(
            {
                "cpu": time.process_time() - c + served,
                "wall": time.perf_counter() - w,
                "start": w,
                "phases_cpu": phases.cpu,
                "phases_wall": phases.wall,
                "steps": steps,
                "peak_rss_bytes": peak_rss_bytes(),
            }
        )
    return records


def worker(args) -> dict:
    started = time.perf_counter()
    import numpy as np
    import torch

    torch.set_num_threads(1)
    system, task = args.worker.split(":")
    if system == "dgl":
        import dgl  # noqa: F401
    else:
        import torch_geometric  # noqa: F401

        import lightning_gnn_dist  # noqa: F401
    torch.manual_seed(0)
    after_imports = args.after_imports = rss_bytes()
    data = None
    if system in ("dgl", "pyg"):  # a rank of this project loads its part only
        arrays = np.load(args.data)
        data = {k: torch.from_numpy(arrays[k]) for k in arrays.files}
    runner = {
        "dgl": run_dgl,
        "ours": run_ours,
        "ours+prefetch": run_ours,
        "pyg": run_pyg,
        "lightning": run_lightning,
        "lightning+prefetch": run_lightning,
    }[system]
    args.prefetch = system.endswith("+prefetch")
    records, accuracy = runner(args, task, data)
    return {
        "records": records,
        "startup_s": records[0]["start"] - started if records else None,
        "accuracy": accuracy,
        "data_memory_bytes": peak_rss_bytes() - after_imports,
        # ranks > 0 of the user's path have no records (they write their own memory)
        "train_memory_bytes": records[-1]["peak_rss_bytes"] - after_imports if records else None,
        "torch": torch.__version__,
    }


def accuracy_of(logits, y):
    return float((logits.argmax(-1) == y).float().mean())


def run_dgl(args, task, data):
    import dgl
    import torch
    from dgl.nn import GraphConv, SAGEConv

    src, dst = data["edge_index"]
    num_nodes = data["x"].size(0)
    graph = dgl.graph((src, dst), num_nodes=num_nodes)
    x, y = data["x"], data["y"]
    train_mask, test_mask = data["train_mask"], data["test_mask"]
    model_name, mode = task.split("-")
    if mode == "full":
        graph = dgl.add_self_loop(dgl.remove_self_loop(graph)) if model_name == "gcn" else graph
        conv = (
            (lambda i, o: GraphConv(i, o))
            if model_name == "gcn"
            else (lambda i, o: SAGEConv(i, o, "mean"))
        )
        model = _DGLStack(conv, [x.size(1), args.hidden, 16], args.dropout)

        def batches(phases):
            yield (lambda: model(graph, x)[train_mask]), y[train_mask]

        records = train(args, data, model, batches, args.epochs)
        model.eval()
        with torch.no_grad():
            return records, accuracy_of(model(graph, x)[test_mask], y[test_mask])
    if model_name != "sage":  # GCN and GAT take self loops as PyG's layers add them
        graph = dgl.add_self_loop(dgl.remove_self_loop(graph))
    sampler = dgl.dataloading.NeighborSampler(list(reversed(args.fanout)))
    seeds = train_mask.nonzero().view(-1)
    loader = dgl.dataloading.DataLoader(
        graph, seeds, sampler, batch_size=args.batch_size, shuffle=True
    )
    model = _DGLStack(
        dgl_mini_conv(model_name, args), [x.size(1), args.mini_hidden, 16], args.dropout
    )

    records = train(args, data, model, dgl_batches(loader, model, x, y), args.mini_epochs)
    model.eval()
    with torch.no_grad():  # full-neighbourhood inference, layer by layer on the whole graph
        return records, accuracy_of(model(graph, x)[test_mask], y[test_mask])


def dgl_mini_conv(model_name, args):
    """DGL's layer equivalent to PyG's ``GraphSAGE``/``GCN``/``GAT`` model layers: mean SAGE,
    ``GraphConv`` (symmetric normalisation, on a graph with self loops), one-head ``GATConv``
    with attention dropout (PyG's ``GAT`` passes its dropout to the attention)."""
    from dgl.nn import GATConv, GraphConv, SAGEConv

    if model_name == "sage":
        return lambda i, o: SAGEConv(i, o, "mean")
    if model_name == "gcn":
        return lambda i, o: GraphConv(i, o, allow_zero_in_degree=True)
    return lambda i, o: GATConv(i, o, 1, attn_drop=args.dropout, allow_zero_in_degree=True)


def dgl_batches(loader, model, features, labels):
    """``batches(phases)`` for :func:`train` over a DGL block loader (``DataLoader`` or
    DistDGL's ``DistNodeDataLoader``): sampling, then gathering the input rows and the seeds'
    labels from ``features``/``labels`` (tensors, or a ``DistGraph``'s ``ndata``)."""

    def batches(phases):
        iterator = iter(loader)
        while True:
            try:
                input_nodes, seeds, blocks = phases("sample", lambda: next(iterator))
            except StopIteration:
                return
            x = phases("gather", lambda n=input_nodes: features[n])
            y = phases("gather", lambda n=seeds: labels[n])
            yield (lambda x=x, blocks=blocks: model(blocks, x)), y

    return batches


class _DGLStack:  # built lazily so the class body needs no torch import
    def __new__(cls, conv, dims, dropout):
        import torch
        import torch.nn.functional as F

        class Stack(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.convs = torch.nn.ModuleList(
                    conv(dims[i], dims[i + 1]) for i in range(len(dims) - 1)
                )

            def forward(self, graphs, h):
                for i, layer in enumerate(self.convs):
                    graph = graphs[i] if isinstance(graphs, list) else graphs
                    h = layer(graph, h)
                    h = h.flatten(1) if h.dim() == 3 else h  # GAT's heads
                    if i < len(self.convs) - 1:
                        h = F.dropout(F.relu(h), dropout, self.training)
                return h

        return Stack()


def run_lightning(args, task, data):
    from benchmarks.peer_dgl.user_path import run_lightning as run

    return run(args, task, data)


def _ours_model(args, task, in_channels):
    from lightning_gnn_dist.nn import build_model

    model_name, mode = task.split("-")
    hidden = args.hidden if mode == "full" else args.mini_hidden
    return build_model(model_name, in_channels, hidden, 16, dropout=args.dropout)


def run_ours(args, task, data):
    import torch
    import torch.distributed as dist

    from lightning_gnn_dist.comm import make_exchange
    from lightning_gnn_dist.data.local import LocalPartition
    from lightning_gnn_dist.nn import GraphContext, use_graph_context

    world_size = int(os.environ.get("WORLD_SIZE", "1"))
    if world_size > 1:
        dist.init_process_group("gloo", rank=int(os.environ["RANK"]), world_size=world_size)
    rank = dist.get_rank() if world_size > 1 else 0
    part = LocalPartition.load(Path(args.parts) / f"{world_size}" / f"part{rank}.pt")
    del data  # a rank holds its part only
    model = _ours_model(args, task, part.x.size(1))
    if task.endswith("full"):
        context = GraphContext(part, make_exchange("p2p", part))
        mask = part.train_mask

        def batches(phases):
            def forward():
                with use_graph_context(context):
                    return model(part.x, part.edge_index)[mask]

            yield forward, part.y[mask]

        records = train(args, None, _Synced(model, world_size), batches, args.epochs)
        for record in records:
            record["phases_cpu"]["exchange_wait"] = context.exchange.counter.total("seconds") / len(
                records
            )
        model.eval()
        with torch.no_grad(), use_graph_context(context):
            out = model(part.x, part.edge_index)
        return records, _global_accuracy(out, part, world_size)
    from lightning_gnn_dist.loaders import NeighborLoader
    from lightning_gnn_dist.loaders.graph_store import PartitionedGraphStore

    # A prefetching loader samples in a thread: on 2 ranks it needs its own process group.
    group = dist.new_group(backend="gloo") if args.prefetch and world_size > 1 else None
    store = PartitionedGraphStore(part, group=group)
    count = torch.tensor([int(part.train_mask.sum())])
    if world_size > 1:  # every rank runs the same number of steps
        dist.all_reduce(count, op=dist.ReduceOp.MAX)
    steps = args.steps or -(-int(count) // args.batch_size)
    loader = NeighborLoader(
        store,
        args.fanout,
        part.train_mask,
        batch_size=args.batch_size,
        shuffle=True,
        num_steps=steps,
        prefetch=args.prefetch,
    )
    # What GNNStrategy runs for the neighbour loader: DDP, whose bucketed all-reduce overlaps the
    # backward (the full-batch rows' per-parameter hooks each wait for the other rank).
    net = torch.nn.parallel.DistributedDataParallel(model) if world_size > 1 else model

    def step(batch):
        b = batch.batch_size
        return lambda: net(batch.x, batch.edge_index, **_trim_args(batch))[:b], batch.y[:b]

    def batches(phases):
        if args.prefetch:  # the wait for the next batch is what sampling still costs the step
            iterator = iter(loader)
            for _ in range(len(loader)):
                yield step(phases("sample+gather", lambda: next(iterator)))
            return
        for number, positions in enumerate(loader.batches()):
            yield step(
                phases(
                    "sample+gather",
                    lambda positions=positions, n=number: loader.make_batch(positions, n),
                )
            )
        loader.epoch += 1

    records = train(args, None, net, batches, args.mini_epochs)
    model.eval()
    context = GraphContext(part, make_exchange("p2p", part))
    with torch.no_grad(), use_graph_context(context):
        out = model(part.x, part.edge_index)
    return records, _global_accuracy(out, part, world_size)


def _trim_args(batch):
    return {
        "num_sampled_nodes": batch.num_sampled_nodes,
        "num_sampled_edges": batch.num_sampled_edges,
    }


def _Synced(model, world_size):
    """The model with gradients summed over ranks after every backward (full-batch exactness:
    the loss is each rank's mean, so the sum over ranks is a mean of means; fine for timing)."""
    import torch.distributed as dist

    if world_size > 1:
        for p in model.parameters():
            p.register_hook(lambda g: (dist.all_reduce(g), g / world_size)[1])
    return model


def _global_accuracy(out, part, world_size):
    import torch
    import torch.distributed as dist

    mask = part.test_mask
    counts = torch.tensor([float((out[mask].argmax(-1) == part.y[mask]).sum()), float(mask.sum())])
    if world_size > 1:
        dist.all_reduce(counts)
    return float(counts[0] / counts[1])


def run_pyg(args, task, data):
    import torch
    from torch_geometric.nn import GCNConv, SAGEConv

    conv = GCNConv if task.startswith("gcn") else SAGEConv
    x, y, edge_index = data["x"], data["y"], data["edge_index"]
    train_mask, test_mask = data["train_mask"], data["test_mask"]

    class Stack(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.convs = torch.nn.ModuleList([conv(x.size(1), args.hidden), conv(args.hidden, 16)])

        def forward(self, x, edge_index):
            h = torch.nn.functional.dropout(
                self.convs[0](x, edge_index).relu(), args.dropout, self.training
            )
            return self.convs[1](h, edge_index)

    model = Stack()

    def batches(phases):
        yield (lambda: model(x, edge_index)[train_mask]), y[train_mask]

    records = train(args, data, model, batches, args.epochs)
    model.eval()
    with torch.no_grad():
        return records, accuracy_of(model(x, edge_index)[test_mask], y[test_mask])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    for name in ("--worker", "--data", "--parts", "--out"):
        parser.add_argument(name, required=True)
    parser.add_argument("--epochs", type=int, default=12)
    parser.add_argument("--mini-epochs", type=int, default=3)
    parser.add_argument("--steps", type=int, default=None)
    parser.add_argument("--hidden", type=int, default=64)
    parser.add_argument("--mini-hidden", type=int, default=256)
    parser.add_argument("--dropout", type=float, default=0.5)
    parser.add_argument("--batch-size", type=int, default=1024)
    parser.add_argument("--fanout", type=int, nargs="+", default=[25, 10])
    parser.add_argument("--ranks", type=int, default=1, help="lightning: devices")
    parser.add_argument("--dataset", default="", help="lightning: the dataset spec")
    parser.add_argument("--stores", default="", help="lightning: the partition stores' root")
    parser.add_argument("--in-channels", type=int, default=100)
    args = parser.parse_args()
    args.prefetch = False
    result = worker(args)
    # Lightning's launcher runs this script again for ranks > 0; they wrote <out>.rank<r>.
    if os.environ.get("LOCAL_RANK", "0") == "0":
        Path(args.out).write_text(json.dumps(result))


if __name__ == "__main__":
    main()
