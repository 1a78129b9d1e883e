"""``gnn_ddp`` with ``loader="neighbor"``: a plain PyG module, DDP mean-gradient semantics.

Each rank records the batches it trained on; replaying them in one process (the mean over
ranks of each step's gradients, plain SGD) must give the parameters the ranks ended with.
"""

import json
import os

import pytest
import pytorch_lightning as pl
import torch
import torch.nn.functional as F
from torch_geometric.nn import GCNConv, SAGEConv
from torch_geometric.nn.models import GraphSAGE
from torchmetrics.classification import MulticlassAccuracy

from lightning_gnn_dist import CommunicationMonitor, GraphPartitionDataModule, NodeClassifier
from lightning_gnn_dist.data import load_dataset
from lightning_gnn_dist.nn import build_model
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


class UserSAGE(PlainSAGE):
    """The neighbour guide's module: PyG's ``GraphSAGE`` model, called untrimmed. Under the
    strategy it computes the seeds' rows only (``nn.trim``), recorded per step."""

    def __init__(self) -> None:
        super().__init__()
        del self.conv1, self.conv2
        self.gnn = GraphSAGE(12, 16, 2, 4)
        self.rows = []

    def forward(self, x, edge_index):
        out = self.gnn(x, edge_index)
        self.rows.append(out.size(0))
        return out


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
        rows = getattr(pl_module, "rows", None)
        if rows is not None:
            (self.folder / f"rows-{rank}.json").write_text(json.dumps(rows))


@pytest.mark.parametrize(
    ("world_size", "model", "prefetch"),
    [(1, PlainSAGE, False), (2, PlainSAGE, False), (2, UserSAGE, True)],
)
def test_neighbor_loader_training_averages_gradients_over_ranks(
    world_size, model, prefetch, tmp_path, monkeypatch
):
    """Also the guide's PyG ``GraphSAGE``, which runs trimmed per hop: each step's output holds
    the seeds' rows only, and training equals the untrimmed replay. Prefetching, every rank
    begins the second epoch's batches as the first epoch's last step starts (not the third's:
    none follows), and the epoch takes them."""
    from lightning_gnn_dist.loaders.stepping import SteppedLoader

    begin = SteppedLoader.start_next_epoch

    def recorded(loader):  # the forked ranks inherit this
        if loader.prefetch:
            (tmp_path / f"early-{os.getpid()}-{loader.epoch}").touch()
        begin(loader)

    monkeypatch.setattr(SteppedLoader, "start_next_epoch", recorded)
    pl.seed_everything(0)
    module = model()
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
        prefetch=prefetch,
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
    early = sorted(path.name.rsplit("-", 1)[1] for path in tmp_path.glob("early-*"))
    assert early == (["1"] * world_size if prefetch else [])

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

    if model is UserSAGE:  # trimmed: the seeds' rows only
        rows = [json.loads((tmp_path / f"rows-{r}.json").read_text()) for r in range(world_size)]
        assert rows == [[b["batch_size"] for b in rank_batches] for rank_batches in batches]
    graph = load_dataset(DATASET)
    reference = model()  # outside the strategy: PyG's untrimmed model
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


# Issue 29, items 2 and 3: the project's own module and models in neighbour mode, on a graph
# with an odd feature width (7, as in item 1's report) so the fetch's packing runs unaligned.
TINY = "sbm?num_nodes=120&num_classes=3&avg_degree=6&features=7&seed=1"
MODELS = {"sage_trimmed": ("sage", True), "sage": ("sage", False), "gat_trimmed": ("gat", True)}


def _tiny_datamodule(tmp_path, **kwargs):
    return GraphPartitionDataModule(
        TINY, method="metis", num_parts=2, root=str(tmp_path / "stores"), loader="neighbor",
        num_neighbors=[3, 2], batch_size=16, **kwargs,
    )  # fmt: skip


def _trainer(recorder):
    """2 ranks, 2 epochs, validation every epoch and the sanity check (as the CLI runs)."""
    return pl.Trainer(
        strategy="gnn_ddp_fork", accelerator="cpu", devices=2, max_epochs=2, logger=False,
        callbacks=[recorder], enable_checkpointing=False, enable_progress_bar=False,
        enable_model_summary=False,
    )  # fmt: skip


class ReferenceModels(pl.LightningModule):
    """``build_model``'s GraphSAGE called trimmed per hop and untrimmed, and GAT trimmed,
    trained side by side on the same batches: the step's loss is the sum of theirs, so each
    model's gradients are those of its own loss."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.models = torch.nn.ModuleDict(
            {name: build_model(kind, 7, 8, 3, dropout=0.0) for name, (kind, _) in MODELS.items()}
        )
        self.models["sage_trimmed"].load_state_dict(self.models["sage"].state_dict())
        self.losses = []

    def seeds_out(self, batch, name):
        trim = MODELS[name][1] and "num_sampled_nodes" in batch  # not on eval_loader="full"
        counts = (batch.num_sampled_nodes, batch.num_sampled_edges) if trim else ()
        return self.models[name](batch.x, batch.edge_index, *counts)[: batch.batch_size]

    def training_step(self, batch, batch_idx):
        y = batch.y[: batch.batch_size]
        losses = {name: F.cross_entropy(self.seeds_out(batch, name), y) for name in MODELS}
        self.losses.append({name: float(loss) for name, loss in losses.items()})
        return sum(losses.values())

    def validation_step(self, batch, batch_idx):
        for name in MODELS:
            out = self.seeds_out(batch, name)
            self.log(f"val_sum_{name}", out.sum(), reduce_fx="sum", sync_dist=True, batch_size=1)

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=LR)


class StepRecorder(BatchRecorder):
    """Also the losses each rank computed, the strategy's and the loader's traffic, and rank
    0's last validation metrics."""

    def on_train_end(self, trainer, pl_module):
        super().on_train_end(trainer, pl_module)
        counters = trainer.strategy.comm_counters
        record = {
            "losses": pl_module.losses,
            "train": counters["train"].as_dicts(),
            "validate": counters["validate"].as_dicts(),
            "fetch": trainer.datamodule.neighbor_loaders.store.counter.as_dicts(),
            "metrics": {k: float(v) for k, v in trainer.callback_metrics.items()},
        }
        (self.folder / f"steps-{trainer.global_rank}.json").write_text(json.dumps(record))


def test_reference_models_trimmed_or_not_train_as_one_process(tmp_path, monkeypatch):
    """Item 3: under GNNStrategy a neighbour step runs in a complete batch's context: the
    trimmed models (bipartite layer inputs) were refused, the untrimmed ones ran with an empty
    halo. Both now give every rank's losses and the final parameters of a one-process replay
    of the same batches (mean gradients, SGD), with no halo-exchange byte in training; the
    exact evaluation of ``eval_loader="full"`` still runs the halo exchange and equals a
    full-graph forward pass. Every rank's process kept its freed memory (issue 31)."""
    import lightning_gnn_dist.lightning.strategy as strategy_module

    def retained():  # the forked ranks inherit this
        (tmp_path / f"retained-{os.getpid()}").touch()

    monkeypatch.setattr(strategy_module, "retain_freed_memory", retained)
    pl.seed_everything(0)
    module = ReferenceModels()
    initial = {k: v.clone() for k, v in module.state_dict().items()}
    _trainer(StepRecorder(tmp_path)).fit(
        module, datamodule=_tiny_datamodule(tmp_path, shuffle=True, eval_loader="full")
    )
    batches = [json.loads((tmp_path / f"batches-{r}.json").read_text()) for r in range(2)]
    steps = [json.loads((tmp_path / f"steps-{r}.json").read_text()) for r in range(2)]
    final = json.loads((tmp_path / "params.json").read_text())
    graph = load_dataset(TINY)
    assert len(list(tmp_path.glob("retained-*"))) == 2
    assert [s["train"] for s in steps] == [[], []]  # nothing exchanged inside the model
    fetched = {(t["layer"], t["direction"]): t for t in steps[0]["fetch"]}
    assert fetched[("features", "response")]["rows_received"] > 0  # remote rows were needed
    exchanged = {t["layer"] for t in steps[0]["validate"] if t["bytes_sent"] > 0}
    assert exchanged >= {f"models.{name}.convs.0" for name in MODELS}  # eval_loader="full"
    for name, (kind, _) in MODELS.items():
        reference = build_model(kind, 7, 8, 3, dropout=0.0)  # untrimmed, no graph context
        prefix = f"models.{name}."
        reference.load_state_dict(
            {k[len(prefix) :]: v for k, v in initial.items() if k.startswith(prefix)}
        )
        for step in range(len(batches[0])):
            grads = []
            for rank in range(2):
                b = batches[rank][step]
                n_id, n = torch.tensor(b["n_id"]), b["batch_size"]
                reference.zero_grad()
                out = reference(graph.x[n_id], torch.tensor(b["edge_index"]))[:n]
                loss = F.cross_entropy(out, graph.y[n_id[:n]])
                loss.backward()
                recorded = steps[rank]["losses"][step][name]
                assert recorded == pytest.approx(float(loss.detach()), abs=1e-5)
                grads.append([p.grad.clone() for p in reference.parameters()])
            with torch.no_grad():
                for i, p in enumerate(reference.parameters()):
                    p -= LR * torch.stack([g[i] for g in grads]).mean(0)
        final_keys = reference.state_dict().keys()
        for key, value in reference.state_dict().items():
            torch.testing.assert_close(
                torch.tensor(final[prefix + key]), value, rtol=1e-5, atol=1e-5
            )
        reference.load_state_dict({k: torch.tensor(final[prefix + k]) for k in final_keys})
        with torch.no_grad():  # the last validation ran with the final parameters
            expected = reference(graph.x, graph.edge_index)[graph.val_mask].sum()
        assert steps[0]["metrics"][f"val_sum_{name}"] == pytest.approx(float(expected), rel=1e-5)


class ModuleRecorder(pl.Callback):
    def __init__(self, folder):
        self.folder = folder

    def on_train_end(self, trainer, pl_module):
        if trainer.global_rank == 0:
            params = {k: v.tolist() for k, v in pl_module.model.state_dict().items()}
            metrics = {k: float(v) for k, v in trainer.callback_metrics.items()}
            (self.folder / "module.json").write_text(json.dumps([params, metrics]))


@pytest.mark.parametrize(("model", "eval_loader"), [("sage", "neighbor"), ("gcn", "full")])
def test_node_classifier_fits_validates_and_tests_on_neighbor_batches(model, eval_loader, tmp_path):
    """Item 2: the CLI's default module read ``batch.val_mask``, which neighbour batches do not
    have (their seeds come first). Through the strategy, with the sanity check: its validation
    and test losses and accuracies (exact evaluation: fan-out -1 or the full part) equal a
    full-graph forward pass of the trained model."""
    pl.seed_everything(0)
    module = NodeClassifier(model, hidden_channels=8, in_channels=7, num_classes=3)
    datamodule = _tiny_datamodule(
        tmp_path, shuffle=True, eval_num_neighbors=[-1, -1], eval_loader=eval_loader
    )
    trainer = _trainer(ModuleRecorder(tmp_path))
    trainer.fit(module, datamodule=datamodule)
    params, metrics = json.loads((tmp_path / "module.json").read_text())
    module.model.load_state_dict({k: torch.tensor(v) for k, v in params.items()})
    (tested,) = trainer.test(module, datamodule=datamodule, verbose=False)
    graph = load_dataset(TINY)
    module.eval()
    with torch.no_grad():
        out = module(graph.x, graph.edge_index)
    assert metrics["train_loss"] > 0
    for split, result in (("val", metrics), ("test", tested)):
        mask = getattr(graph, f"{split}_mask")
        accuracy = float((out[mask].argmax(1) == graph.y[mask]).float().mean())
        assert result[f"{split}_acc"] == pytest.approx(accuracy, abs=1e-6)
        loss = float(F.cross_entropy(out[mask], graph.y[mask]))
        assert result[f"{split}_loss"] == pytest.approx(loss, abs=1e-5)


def test_another_epoch_follows_by_the_limits_every_rank_shares():
    """The strategy begins the next epoch's batches only while ``max_epochs`` and
    ``max_steps`` allow another epoch (values every rank holds alike)."""
    from types import SimpleNamespace

    from lightning_gnn_dist.lightning.epochs import another_epoch_follows

    def follows(max_epochs, max_steps, epoch=1, step=10):
        trainer = SimpleNamespace(
            max_epochs=max_epochs, max_steps=max_steps, current_epoch=epoch, global_step=step
        )
        return another_epoch_follows(trainer)

    assert follows(3, -1) and not follows(2, -1)
    assert follows(-1, -1, epoch=99) and follows(None, 12)
    assert not follows(None, 11) and not follows(5, 11)
