"""Typed graphs through Lightning (issue 33): ``GraphPartitionDataModule(HeteroData)`` and
``HeteroNodeClassifier`` train full batch on 2 ranks exactly as one process trains on the whole
``HeteroData`` (losses per epoch, parameters, the featureless types' embedding tables, which the
checkpoint holds whole), every relation's bytes equal its prediction; bad input is refused at
construction with one line each."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from torch_geometric.data import Data, HeteroData

from lightning_gnn_dist import GraphPartitionDataModule, HeteroNodeClassifier
from lightning_gnn_dist.data.hetero import typed_graph
from lightning_gnn_dist.data.hetero_sources import mag
from lightning_gnn_dist.lightning.callbacks import CommunicationMonitor
from lightning_gnn_dist.lightning.compat import LightningNeutral
from tests.helpers import fit_quietly

EPOCHS, HIDDEN, LR = 3, 8, 0.02


def small_mag() -> HeteroData:
    return mag(0.0015, features=12, classes=4, seed=2)


class Recorder(LightningNeutral, lightning_base="Callback"):
    """Rank 0 writes the initial parameters, per-epoch losses, final parameters and the
    monitor's rows."""

    def __init__(self, path, monitor):
        self.path, self.monitor, self.losses, self.traffic = path, monitor, [], []

    def on_train_start(self, trainer, pl_module):
        self.initial = {k: v.tolist() for k, v in pl_module.model.state_dict().items()}

    def on_train_epoch_end(self, trainer, pl_module):
        self.losses.append(float(trainer.callback_metrics["train_loss"]))
        self.traffic.append(self.monitor.last_epoch())

    def on_train_end(self, trainer, pl_module):
        if trainer.is_global_zero:
            final = {k: v.tolist() for k, v in pl_module.model.state_dict().items()}
            self.path.write_text(
                json.dumps(
                    {
                        "initial": self.initial,
                        "final": final,
                        "losses": self.losses,
                        "traffic": self.traffic,
                    }
                )
            )


def reference(model_name: str, data: HeteroData, initial: dict):
    """One process on the whole HeteroData, from the distributed run's initial parameters
    (embeddings start alike by construction)."""
    view = typed_graph(data)
    schema = view.hetero.schema
    sizes = dict(zip(schema.node_types, schema.num_nodes, strict=True))
    module = HeteroNodeClassifier(
        model_name,
        hidden_channels=HIDDEN,
        dropout=0.0,
        lr=LR,
        metadata=schema.metadata(),
        target_type="paper",
        in_channels={"paper": 12},
        num_nodes={t: n for t, n in sizes.items() if t != "paper"},
        num_classes=4,
    )
    state = {k: torch.tensor(v) for k, v in initial.items() if "embeddings" not in k}
    missing, unexpected = module.model.load_state_dict(state, strict=False)
    assert not unexpected and all("embeddings" in k for k in missing)
    optimizer = torch.optim.Adam(module.parameters(), lr=LR)
    batch = data.clone()
    store = batch["paper"]
    losses = []
    for _ in range(EPOCHS):
        optimizer.zero_grad()
        out = module(batch)
        loss = torch.nn.functional.cross_entropy(out[store.train_mask], store.y[store.train_mask])
        loss.backward()
        optimizer.step()
        losses.append(float(loss))
    return losses, module.model.state_dict()


@pytest.mark.parametrize("model_name, exchange", [("rgcn", "p2p"), ("sage", "broadcast")])
def test_typed_training_equals_single_process(lightning, model_name, exchange, tmp_path):
    pl = lightning
    from lightning_gnn_dist import GNNStrategy

    data = small_mag()
    pl.seed_everything(0)
    module = HeteroNodeClassifier(model_name, hidden_channels=HIDDEN, dropout=0.0, lr=LR)
    datamodule = GraphPartitionDataModule(data, method="metis", root=str(tmp_path / "stores"))
    monitor = CommunicationMonitor()
    out = tmp_path / "result.json"
    checkpoint = pl.callbacks.ModelCheckpoint(dirpath=tmp_path / "ckpt", save_last=True)
    fit_quietly(
        pl.Trainer,
        module,
        datamodule,
        strategy=GNNStrategy(exchange=exchange, start_method="fork"),
        devices=2,
        epochs=EPOCHS,
        callbacks=[monitor, Recorder(out, monitor), checkpoint],
        checkpointing=True,
    )
    result = json.loads(out.read_text())
    losses, params = reference(model_name, data, result["initial"])
    np.testing.assert_allclose(result["losses"], losses, rtol=1e-5, atol=1e-5)
    for key, value in params.items():
        if "embeddings" not in key:  # rank 0 holds its own rows only (the checkpoint: all)
            np.testing.assert_allclose(
                np.array(result["final"][key]), value.numpy(), rtol=1e-5, atol=1e-5, err_msg=key
            )
    saved = torch.load(tmp_path / "ckpt" / "last.ckpt", weights_only=False)["state_dict"]
    for key, value in params.items():
        if "embeddings" in key:  # the whole table, in dataset-id order. Adam divides by the
            # gradient's magnitude: rows whose gradient is near zero amplify its rounding.
            np.testing.assert_allclose(saved[f"model.{key}"].numpy(), value.numpy(), atol=1e-4)
    relations = set()
    for epoch_rows in result["traffic"]:
        for row in epoch_rows:
            assert row["bytes_total"] == row["predicted_bytes_total"], row
            relations.add(row["relation"])
    if model_name == "sage":  # to_hetero: one record per relation and layer
        assert {"paper__cites__paper", "author__writes__paper"} <= relations
    else:  # RGCN exchanges the homogeneous view's rows
        assert relations == {None}


def _hetero(**changes) -> HeteroData:
    data = HeteroData()
    data["a"].x = torch.randn(6, 3)
    data["a"].y = torch.tensor([0, 1, 0, 1, 0, 1])
    data["b"].num_nodes = 4
    data["a", "r", "a"].edge_index = torch.tensor([[0, 1, 2], [1, 2, 3]])
    data["b", "s", "a"].edge_index = torch.tensor([[0, 3], [5, 4]])
    for key, value in changes.items():
        if value is None:
            del data[key]
    return data


def _no_labels():
    data = _hetero()
    del data["a"].y
    return data


def _missing_type():
    data = _hetero()
    data["c", "t", "a"].edge_index = torch.tensor([[0], [1]])
    return data


@pytest.mark.parametrize(
    "dataset, options, message",
    [
        (_no_labels, {}, r"no node type has labels y"),
        (_hetero, {"target_type": "b"}, r"the target type 'b' has no labels y"),
        (_hetero, {"target_type": "paper"}, r"unknown target_type 'paper'; the node types are"),
        (_missing_type, {}, r"relation \('c', 't', 'a'\) connects node type 'c', which the graph"),
        (
            _hetero,
            {"loader": "neighbor", "num_neighbors": {("a", "x", "a"): [2]}},
            r"names relation 'a__x__a', which the graph does not have; its relations are",
        ),
        (
            _hetero,
            {
                "loader": "neighbor",
                "num_neighbors": {("a", "r", "a"): [2], ("b", "s", "a"): [1, 1]},
            },
            r"different numbers of hops",
        ),
        (_hetero, {"loader": "subgraph", "subgraph_size": 3}, r"loader='subgraph' does not run"),
        (
            lambda: Data(x=torch.ones(3, 2), edge_index=torch.tensor([[0], [1]])),
            {"target_type": "a"},
            r"target_type='a' names a node type of a heterogeneous graph",
        ),
        (
            lambda: "digits",
            {"loader": "neighbor", "num_neighbors": {("a", "r", "a"): [2]}},
            r"num_neighbors as a dict per relation applies to typed graphs",
        ),
    ],
)
def test_bad_typed_input_is_refused_at_construction(dataset, options, message, tmp_path):
    with pytest.raises(ValueError, match=message) as error:
        GraphPartitionDataModule(dataset(), root=str(tmp_path), **options)
    assert "\n" not in str(error.value)
