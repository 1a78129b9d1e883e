"""Worker side of :mod:`benchmarks.link_prediction`: one link-prediction variant in this
interpreter, per-epoch CPU seconds and the validation MRR as JSON.

Runs in this project's venv (``ours``) or in DGL's own venv (``dgl``), which cannot import this
package: everything system-specific is imported inside the functions.

    python benchmarks/link_worker.py --worker SYSTEM:TASK --data G.npz --store DIR --out R.json

``TASK`` is ``full`` (full-batch GraphSAGE 2×64, dot decoder, BCE with ``k`` uniform negatives
per positive) or ``mini`` (the same on sampled mini-batches: fan-out 10 then 5, batch 1024,
each batch's positive edges excluded from its sampled graph).
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

REPO = Path(__file__).resolve().parents[1]
HIDDEN, FANOUT, BATCH = 64, [10, 5], 1024


def _mrr(pos, neg):
    """ogbl-citation2's MRR (ties count half) of ``pos [m]`` against ``neg [m, K]``."""
    pos = pos.view(-1, 1)
    rank = 0.5 * ((neg > pos).sum(1) + (neg >= pos).sum(1)) + 1
    return float((1.0 / rank.float()).mean())


def _bce(pos, neg):
    import torch
    import torch.nn.functional as F

    scores = torch.cat([pos, neg])
    labels = torch.cat([torch.ones_like(pos), torch.zeros_like(neg)])
    return F.binary_cross_entropy_with_logits(scores, labels)


def _epochs(epochs, step_epoch):
    records = []
    for epoch in range(epochs):
        c, w = time.process_time(), time.perf_counter()
        steps = step_epoch(epoch)
        records.append(
            {"cpu": time.process_time() - c, "wall": time.perf_counter() - w, "steps": steps}
        )
    return records


def run_dgl(args, task, data):
    import dgl
    import dgl.function as fn
    import torch
    from dgl.nn import SAGEConv

    n_nodes = int(data["num_nodes"])
    src, dst = data["edge_index"]
    g = dgl.graph((src, dst), num_nodes=n_nodes)
    x = data["x"]
    pairs = data["train_pairs"]
    n, k = pairs.size(1), args.negatives

    class Net(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.convs = torch.nn.ModuleList(
                [SAGEConv(x.size(1), HIDDEN, "mean"), SAGEConv(HIDDEN, HIDDEN, "mean")]
            )

        def forward(self, graphs, h):
            for i, conv in enumerate(self.convs):
                h = conv(graphs[i] if isinstance(graphs, list) else graphs, h)
                if i == 0:
                    h = torch.relu(h)
            return h

    def dot(graph, h):
        with graph.local_scope():
            graph.ndata["h"] = h
            graph.apply_edges(fn.u_dot_v("h", "h", "score"))
            return graph.edata["score"].view(-1)

    model = Net()
    optimizer = torch.optim.Adam(model.parameters(), lr=0.01)
    negative_sampler = dgl.dataloading.negative_sampler.Uniform(k)
    pos_graph = dgl.graph((pairs[0], pairs[1]), num_nodes=n_nodes)
    if task == "full":

        def step_epoch(epoch):
            h = model(g, x)
            neg_src, neg_dst = negative_sampler(pos_graph, torch.arange(n))
            neg_graph = dgl.graph((neg_src, neg_dst), num_nodes=n_nodes)
            loss = _bce(dot(pos_graph, h), dot(neg_graph, h))
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            return 1

    else:
        # the supervision edges of g: the pairs, then their reverses (exclude="reverse_id")
        train_g = dgl.graph(
            (torch.cat([pairs[0], pairs[1]]), torch.cat([pairs[1], pairs[0]])), num_nodes=n_nodes
        )
        reverse = torch.cat([torch.arange(n) + n, torch.arange(n)])
        sampler = dgl.dataloading.as_edge_prediction_sampler(
            dgl.dataloading.NeighborSampler(list(reversed(FANOUT))),
            exclude="reverse_id",
            reverse_eids=reverse,
            negative_sampler=negative_sampler,
        )
        loader = dgl.dataloading.DataLoader(
            train_g, torch.arange(n), sampler, batch_size=BATCH, shuffle=True, drop_last=False
        )

        def step_epoch(epoch):
            steps = 0
            for input_nodes, pair_graph, neg_graph, blocks in loader:
                h = model(blocks, x[input_nodes])
                loss = _bce(dot(pair_graph, h), dot(neg_graph, h))
                optimizer.zero_grad()
                loss.backward()
                optimizer.step()
                steps += 1
            return steps

    records = _epochs(args.epochs, step_epoch)
    with torch.no_grad():
        h = model(g, x)
        return records, _eval(h, data)


def _eval(h, data):
    vs, vd = data["val_pairs"]
    neg = data["val_negatives"]
    pos = (h[vs] * h[vd]).sum(1)
    scores = (h[vs].unsqueeze(1) * h[neg]).sum(2)
    return _mrr(pos, scores)


def run_ours(args, task, data):
    import torch

    sys.path.insert(0, str(REPO))
    from lightning_gnn_dist.comm.score import VertexDirectory
    from lightning_gnn_dist.loaders.graph_store import PartitionedGraphStore
    from lightning_gnn_dist.loaders.link import FullLinkLoader, LinkPairs, NegativeSampler
    from lightning_gnn_dist.loaders.link_neighbor import LinkNeighborLoader
    from lightning_gnn_dist.nn.link import link_loss, make_decoder, pair_scores
    from lightning_gnn_dist.nn.models import build_model
    from lightning_gnn_dist.partition.store import PartitionStore

    store = PartitionStore.open(args.store)
    part = store.load_part(0)
    meta = store.meta["link"]
    num_nodes = part.num_nodes_global
    model = build_model("sage", part.x.size(1), HIDDEN, HIDDEN, num_layers=2, dropout=0.0)
    decoder = make_decoder("dot", HIDDEN)
    optimizer = torch.optim.Adam(model.parameters(), lr=0.01)
    pairs = LinkPairs.of_part(part, "train", meta)
    pairs.counts = meta["counts"]["train"]
    sampler = NegativeSampler("global", args.negatives, num_nodes, seed=0)
    directory = VertexDirectory.from_owner(store.assignment(), 1)

    def train_on(scores, n, k):
        total, terms = link_loss("bce", scores[:n], scores[n:].view(n, k))
        loss = total / terms
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()

    if task == "full":
        from torch_geometric.data import Data

        base = Data(x=part.x, edge_index=part.edge_index, num_nodes=part.num_owned)
        loader = FullLinkLoader(base, pairs, sampler, "train", directory)

        def step_epoch(epoch):
            batch = loader.make_batch(epoch)
            h = model(batch.x, batch.edge_index)
            scores = pair_scores(decoder, h, batch.edge_label_index, directory)
            train_on(scores, batch.num_positives, batch.num_negatives)
            return 1

    else:
        graph_store = PartitionedGraphStore(part)
        loader = LinkNeighborLoader(
            graph_store, FANOUT, pairs, sampler, directory, batch_size=BATCH, shuffle=True
        )

        def step_epoch(epoch):
            steps = 0
            loader.set_epoch(epoch)
            for batch in loader:
                h = model(batch.x, batch.edge_index, batch.num_sampled_nodes,
                          batch.num_sampled_edges)  # fmt: skip
                scores = pair_scores(decoder, h, batch.edge_label_index)
                train_on(scores, batch.num_positives, batch.num_negatives)
                steps += 1
            return steps

    records = _epochs(args.epochs, step_epoch)
    with torch.no_grad():
        h = model(part.x, part.edge_index)
        order = torch.argsort(part.global_ids)  # one part: rows are dataset ids already
        return records, _eval(h[order], data)


def run_lightning(args, task, data):
    """The user's path: ``LinkDataModule`` + ``LinkPredictor`` under ``Trainer(strategy=
    "gnn_ddp")``, as the link-prediction guide shows, on one process; the same split (the
    datamodule makes it from the spec with the benchmark's ratios and seed), model and
    negatives as ``ours``. Per epoch: the process's CPU and wall seconds between Lightning's
    epoch hooks (no validation, logger, checkpoint or progress bar)."""
    import torch

    sys.path.insert(0, str(REPO))
    from benchmarks.peer_dgl.user_path import EpochTimer, timed_trainer  # peer_dgl's user path
    from lightning_gnn_dist import LinkDataModule, LinkPredictor

    options = {"loader": "full"}
    if task == "mini":
        options = {"loader": "neighbor", "num_neighbors": FANOUT, "batch_size": BATCH,
                   "shuffle": True}  # fmt: skip
    datamodule = LinkDataModule(
        args.spec, method="random", num_parts=1, root=str(Path(args.out).parent / "stores"),
        val_ratio=0.1, test_ratio=0.2, split_seed=0, negatives="global",
        num_negatives=args.negatives, verify_dataset=False, **options,
    )  # fmt: skip
    module = LinkPredictor("sage", hidden_channels=HIDDEN, num_layers=2, dropout=0.0,
                           decoder="dot", loss="bce", lr=0.01)  # fmt: skip
    timer = EpochTimer()
    trainer = timed_trainer(1, args.epochs, timer, Path(args.out).parent)
    trainer.fit(module, datamodule=datamodule)
    part = datamodule.local_partition
    with torch.no_grad():
        h = module.encoder(part.x, part.edge_index)
        return timer.records, _eval(h[torch.argsort(part.global_ids)], data)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--worker", required=True)
    parser.add_argument("--data", required=True)
    parser.add_argument("--store", default="")
    parser.add_argument("--spec", default="", help="the dataset spec (the user's path)")
    parser.add_argument("--epochs", type=int, default=5)
    parser.add_argument("--negatives", type=int, default=1)
    parser.add_argument("--out", required=True)
    args = parser.parse_args()
    import numpy as np
    import torch

    torch.set_num_threads(1)
    torch.manual_seed(0)
    system, task = args.worker.split(":")
    arrays = np.load(args.data)
    data = {k: torch.from_numpy(arrays[k]) for k in arrays.files}
    runner = {"dgl": run_dgl, "ours": run_ours, "lightning": run_lightning}[system]
    records, mrr = runner(args, task, data)
    Path(args.out).write_text(
        json.dumps({"records": records, "mrr": mrr, "torch": torch.__version__})
    )


if __name__ == "__main__":
    main()
