"""``gnn_ddp`` with ``loader="neighbor"``: a plain PyG module, DDP mean-gradient semantics.

Each rank records the batches it trained on; replaying them in one process (the mean over
ranks of each step's gradients, plain SGD) must give the parameters the ranks ended with.
"""

import json

import pytest
import pytorch_lightning as pl
import torch
import torch.nn.functional as F
from torch_geometric.nn import GCNConv, SAGEConv
from torchmetrics.classification import MulticlassAccuracy

from lightning_gnn_dist import CommunicationMonitor, GraphPartitionDataModule
from lightning_gnn_dist.data import load_dataset
from tests.helpers import fit_quietly

DATASET = "sbm?num_nodes=400&num_classes=4&avg_degree=8&features=12&seed=3"
LR = 0.5


class PlainSAGE(pl.LightningModule):
    """Single-process PyG code: seeds' predictions are ``out[:batch.batch_size]``."""

    def __init__(self) -> None:
        super().__init__()
        self.conv1, self.conv2 = SAGEConv(12, 16), SAGEConv(16, 4)

    def forward(self, x, edge_index):
        return self.conv2(self.conv1(x, edge_index).relu(), edge_index)

    def training_step(self, batch, batch_idx):
        out = self(batch.x, batch.edge_index)[: batch.batch_size]
        loss = F.cross_entropy(out, batch.y[: batch.batch_size])
        self.log("train_loss", loss, batch_size=batch.batch_size, sync_dist=True)
        return loss

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=LR)


class BatchRecorder(pl.Callback):
    """Every rank writes the batches it saw; rank 0 also the final parameters."""

    def __init__(self, folder):
        self.folder, self.batches = folder, []

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx):
        self.batches.append(
            {
                "n_id": batch.n_id.tolist(),
                "edge_index": batch.edge_index.tolist(),
                "batch_size": batch.batch_size,
            }
        )

    def on_train_end(self, trainer, pl_module):
        rank = trainer.global_rank
        (self.folder / f"batches-{rank}.json").write_text(json.dumps(self.batches))
        if rank == 0:
            params = {k: v.tolist() for k, v in pl_module.state_dict().items()}
            (self.folder / "params.json").write_text(json.dumps(params))


@pytest.mark.parametrize("world_size", [1, 2])
def test_neighbor_loader_training_averages_gradients_over_ranks(world_size, tmp_path):
    pl.seed_everything(0)
    module = PlainSAGE()
    initial = {k: v.clone() for k, v in module.state_dict().items()}
    datamodule = GraphPartitionDataModule(
        DATASET,
        method="metis",
        num_parts=world_size,
        root=str(tmp_path / "stores"),
        loader="neighbor",
        num_neighbors=[4, 3],
        batch_size=50,
        shuffle=True,
    )
    fit_quietly(
        pl.Trainer,
        module,
        datamodule,
        strategy="gnn_ddp_fork",
        devices=world_size,
        epochs=2,
        callbacks=[BatchRecorder(tmp_path)],
    )

    batches = [json.loads((tmp_path / f"batches-{r}.json").read_text()) for r in range(world_size)]
    counts = datamodule.store.meta["mask_counts"]["train_mask"]
    steps = -(-max(counts) // 50)
    assert [len(b) for b in batches] == [2 * steps] * world_size  # same steps on every rank
    for rank, rank_batches in enumerate(batches):  # every owned training vertex once per epoch
        for epoch in range(2):
            seeds = [
                s
                for b in rank_batches[epoch * steps : (epoch + 1) * steps]
                for s in b["n_id"][: b["batch_size"]]
            ]
            assert len(seeds) == len(set(seeds)) == counts[rank]

    graph = load_dataset(DATASET)
    reference = PlainSAGE()
    reference.load_state_dict(initial)
    for step in range(2 * steps):
        grads = []
        for rank in range(world_size):
            b = batches[rank][step]
            n_id, n = torch.tensor(b["n_id"]), b["batch_size"]
            reference.zero_grad()
            out = reference(graph.x[n_id], torch.tensor(b["edge_index"]))[:n]
            F.cross_entropy(out, graph.y[n_id[:n]]).backward()
            grads.append([p.grad.clone() for p in reference.parameters()])
        with torch.no_grad():
            for i, p in enumerate(reference.parameters()):
                p -= LR * torch.stack([g[i] for g in grads]).mean(0)
    final = json.loads((tmp_path / "params.json").read_text())
    for key, value in reference.state_dict().items():
        torch.testing.assert_close(torch.tensor(final[key]), value, rtol=1e-5, atol=1e-5)
    if world_size > 1:  # the ranks' batches differ, so the mean is not any single rank's update
        assert batches[0][0]["n_id"] != batches[1][0]["n_id"]


class EvalSAGE(PlainSAGE):
    """Validation as in PyG's example: predictions of the batch's seeds only."""

    def __init__(self) -> None:
        super().__init__()
        self.val_acc = MulticlassAccuracy(4, average="micro")

    def validation_step(self, batch, batch_idx):
        out = self(batch.x, batch.edge_index)[: batch.batch_size]
        self.val_acc.update(out, batch.y[: batch.batch_size])
        self.log("val_acc", self.val_acc, batch_size=batch.batch_size)
        self.log("val_logit_sum", out.sum(), reduce_fx="sum", sync_dist=True, batch_size=1)


class EvalGCN(EvalSAGE):
    """GCN normalises by source degrees: with fan-out -1 the last hop's vertices have no
    in-edges in the batch, so exact evaluation needs the global degrees (issue 18, item 5)."""

    def __init__(self) -> None:
        super().__init__()
        self.conv1, self.conv2 = GCNConv(12, 16), GCNConv(16, 4)


@pytest.mark.parametrize(
    ("eval_loader", "world_size", "model"),
    [
        ("full", 1, EvalSAGE),
        ("full", 3, EvalSAGE),
        ("neighbor", 2, EvalSAGE),
        ("neighbor", 2, EvalGCN),
    ],
)
def test_exact_evaluation_equals_full_graph(eval_loader, world_size, model, tmp_path):
    """Layer-wise inference with the halo exchange, or sampled batches with fan-out -1: the
    synchronised accuracy and logits equal one full-graph forward pass."""
    pl.seed_everything(0)
    module = model()
    graph = load_dataset(DATASET)
    with torch.no_grad():
        out = module(graph.x, graph.edge_index)[graph.val_mask]
    expected_acc = float((out.argmax(1) == graph.y[graph.val_mask]).float().mean())
    datamodule = GraphPartitionDataModule(
        DATASET,
        method="metis",
        num_parts=world_size,
        root=str(tmp_path / "stores"),
        loader="neighbor",
        num_neighbors=[4, 3],
        eval_num_neighbors=[-1, -1],
        eval_loader=eval_loader,
        batch_size=30,
    )
    trainer = pl.Trainer(
        strategy="gnn_ddp_fork",
        accelerator="cpu",
        devices=world_size,
        logger=False,
        enable_progress_bar=False,
        enable_model_summary=False,
    )
    (metrics,) = trainer.validate(module, datamodule=datamodule, verbose=False)
    assert metrics["val_acc"] == pytest.approx(expected_acc, abs=1e-6)
    assert metrics["val_logit_sum"] == pytest.approx(float(out.sum()), abs=1e-3)


class NormSAGE(PlainSAGE):
    def __init__(self) -> None:
        super().__init__()
        self.norm = torch.nn.BatchNorm1d(16)

    def forward(self, x, edge_index):
        return self.conv2(self.norm(self.conv1(x, edge_index)).relu(), edge_index)


class NormRecorder(pl.Callback):
    def __init__(self, folder):
        self.folder = folder

    def on_train_end(self, trainer, pl_module):
        buffers = {k: v.tolist() for k, v in pl_module.norm.state_dict().items()}
        (self.folder / f"norm-{trainer.global_rank}.json").write_text(json.dumps(buffers))
        (monitor,) = [c for c in trainer.callbacks if isinstance(c, CommunicationMonitor)]
        traffic = {"logged": monitor.last_logged, "rows": monitor.last_epoch()}
        (self.folder / f"comm-{trainer.global_rank}.json").write_text(json.dumps(traffic))


def test_neighbor_batchnorm_statistics_are_synchronised(tmp_path):
    """Item 6: BatchNorm in neighbour mode takes its batch statistics over every rank's batch
    (SyncBatchNorm semantics), so the running statistics agree on every rank. Item 18: the
    CommunicationMonitor reports the loader's traffic (it crashed), rows counted once."""
    pl.seed_everything(0)
    datamodule = GraphPartitionDataModule(
        DATASET,
        method="metis",
        num_parts=2,
        root=str(tmp_path / "stores"),
        loader="neighbor",
        num_neighbors=[4, 3],
        batch_size=50,
        shuffle=True,
        cache_size=20,
    )
    monitor = CommunicationMonitor(print_table=True, plot_dir=str(tmp_path / "plots"))
    fit_quietly(
        pl.Trainer,
        NormSAGE(),
        datamodule,
        strategy="gnn_ddp_fork",
        devices=2,
        epochs=3,
        callbacks=[NormRecorder(tmp_path), monitor],
    )
    ranks = [json.loads((tmp_path / f"norm-{r}.json").read_text()) for r in range(2)]
    assert ranks[0]["num_batches_tracked"] == 3 * -(
        -max(datamodule.store.meta["mask_counts"]["train_mask"]) // 50
    )
    for key in ("running_mean", "running_var"):
        torch.testing.assert_close(torch.tensor(ranks[1][key]), torch.tensor(ranks[0][key]))
    traffic = json.loads((tmp_path / "comm-0.json").read_text())
    rows = {(r["layer"], r["direction"]): r for r in traffic["rows"]}
    assert {("sampling", "request"), ("sampling", "response"), ("features", "response")} <= set(
        rows
    )
    assert rows[("features", "response")]["width"] == 12  # the feature rows, counted once
    assert rows[("features.ids", "response")]["width"] == 2  # their ids and labels
    assert all(r["predicted_bytes_total"] == -1 for r in traffic["rows"])  # sampled: none
    assert traffic["logged"]["comm/features/cache_hit_rows_total"] > 0
    assert {p.name for p in (tmp_path / "plots").iterdir()} >= {
        "balance.png",
        "comm_vs_compute.png",
    }
