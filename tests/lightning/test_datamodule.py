import pytest
import pytorch_lightning as pl
import torch

from lightning_gnn_dist import GNNStrategy, GraphPartitionDataModule, NodeClassifier
from lightning_gnn_dist.partition.backends import mtkahypar as mtkahypar_backend
from lightning_gnn_dist.partition.store import PartitionStoreError
from tests.helpers import random_graph


def test_in_memory_graph_single_part(tmp_path):
    data = random_graph(60, 200, 0, features=4)
    data.name = "toy graph"
    dm = GraphPartitionDataModule(data, method="random", num_parts=1, root=str(tmp_path))
    dm.prepare_data()
    dm.setup("fit")
    assert dm.store_path.name.startswith("toy_graph-random-p1")
    batch = next(iter(dm.train_dataloader()))
    assert batch.x.shape == (60, 4) and batch.num_train_global == int(data.train_mask.sum())
    assert torch.equal(torch.sort(batch.global_ids).values, torch.arange(60))
    assert dm.num_features == 4 and dm.num_classes == int(data.y.max()) + 1


def test_parts_must_equal_world_size(tmp_path):
    dm = GraphPartitionDataModule(
        random_graph(30, 60, 1, features=2), method="random", num_parts=2, root=str(tmp_path)
    )
    dm.prepare_data()
    with pytest.raises(ValueError, match="2 parts but 1 processes"):
        dm.setup("fit")


def test_store_made_with_other_settings_is_refused(tmp_path):
    data = random_graph(30, 60, 2, features=2)
    first = GraphPartitionDataModule(data, method="random", num_parts=1, store=str(tmp_path / "s"))
    first.prepare_data()
    other = GraphPartitionDataModule(data, method="metis", num_parts=1, store=str(tmp_path / "s"))
    with pytest.raises(PartitionStoreError, match="method"):
        other.prepare_data()
    with pytest.raises(PartitionStoreError, match="method"):
        other.setup("fit")


def test_store_folder_follows_the_partitioner_settings(tmp_path, monkeypatch):
    """A partitioner whose settings changed (e.g. a library upgrade) gets a new store folder
    instead of having its old store refused."""
    dm = GraphPartitionDataModule("digits", method="hypergraph", num_parts=2, root=str(tmp_path))
    before = dm.store_path
    assert before.name.startswith("digits-hypergraph-p2-s0-e0.03-")
    # as if the tuned configuration file had been edited
    monkeypatch.setitem(mtkahypar_backend.PRESETS, "tuned", tmp_path / "edited.ini")
    assert dm.store_path != before and dm.store_path.parent == before.parent


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"method": "nope"}, "unknown partition method 'nope'"),
        ({"num_parts": 0}, "num_parts must be an integer >= 1"),
    ],
)
def test_datamodule_argument_errors(kwargs, match):
    with pytest.raises(ValueError, match=match):
        GraphPartitionDataModule("digits", **kwargs)


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"exchange": "smoke"}, "unknown exchange mode 'smoke'"),
        ({"loss_reduction": "max"}, "loss_reduction"),
        ({"timeout": -1}, "timeout must be positive"),
    ],
)
def test_strategy_argument_errors(kwargs, match):
    with pytest.raises(ValueError, match=match):
        GNNStrategy(**kwargs)


class WholeGraph(pl.LightningDataModule):
    def train_dataloader(self):
        return [random_graph(10, 20, 0, features=2)]


def test_strategy_needs_partitioned_datamodule():
    trainer = pl.Trainer(
        strategy=GNNStrategy(start_method="fork"),
        devices=2,
        accelerator="cpu",
        max_epochs=1,
        logger=False,
        enable_progress_bar=False,
        enable_checkpointing=False,
    )
    with pytest.raises(Exception, match="needs a partitioned datamodule"):
        trainer.fit(NodeClassifier(in_channels=2, num_classes=3), datamodule=WholeGraph())


def test_verify_dataset_false_never_loads_the_graph(tmp_path, monkeypatch):
    data = random_graph(30, 60, 3, features=2)
    GraphPartitionDataModule(
        data, method="random", num_parts=1, store=str(tmp_path / "s")
    ).prepare_data()

    def no_loading(*args, **kwargs):
        raise AssertionError("the dataset was loaded")

    monkeypatch.setattr("lightning_gnn_dist.data.datasets.load_dataset", no_loading)
    trusted = GraphPartitionDataModule(
        data, method="random", num_parts=1, store=str(tmp_path / "s"), verify_dataset=False
    )
    trusted.prepare_data()
    trusted.setup("fit")
    assert trusted.local_partition.num_owned == 30
    with pytest.raises(AssertionError, match="was loaded"):
        GraphPartitionDataModule(
            data, method="random", num_parts=1, store=str(tmp_path / "s")
        ).prepare_data()
