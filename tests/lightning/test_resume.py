"""Resume = uninterrupted: 20 epochs + resume to 40 equals 40 straight, with dropout, at 2 ranks;
a checkpoint is refused against another dataset, partition or world size (issue 8, item 2)."""

import json

import pytest
import pytorch_lightning as pl
import torch
from pytorch_lightning.callbacks import ModelCheckpoint

from lightning_gnn_dist import GraphPartitionDataModule, NodeClassifier
from lightning_gnn_dist.lightning.resume import CHECKPOINT_KEY, ResumeMismatchError, check_same_run
from lightning_gnn_dist.partition.store import PartitionStore

DATASET = "sbm?num_nodes=240&num_classes=3&avg_degree=6&features=8&seed=1"
OTHER_DATASET = "sbm?num_nodes=240&num_classes=3&avg_degree=6&features=8&seed=2"


class SaveParams(pl.Callback):
    """Rank 0 writes the final parameters (as lists) to a file: fork workers return nothing."""

    def __init__(self, path):
        self.path = path

    def on_train_end(self, trainer, pl_module):
        if trainer.is_global_zero:
            state = {k: v.tolist() for k, v in pl_module.state_dict().items()}
            self.path.write_text(json.dumps(state))


def _fit(tmp_path, stores, epochs, name, dataset=DATASET, ckpt_path=None, method="metis"):
    pl.seed_everything(0)
    out = tmp_path / f"{name}.json"
    trainer = pl.Trainer(
        strategy="gnn_ddp_fork",
        accelerator="cpu",
        devices=2,
        max_epochs=epochs,
        callbacks=[
            ModelCheckpoint(dirpath=tmp_path / name, save_last=True, save_top_k=0),
            SaveParams(out),
        ],
        logger=False,
        enable_progress_bar=False,
        enable_model_summary=False,
    )
    module = NodeClassifier(dropout=0.5, in_channels=8, num_classes=3)
    datamodule = GraphPartitionDataModule(dataset, method=method, root=str(stores))
    trainer.fit(module, datamodule=datamodule, ckpt_path=ckpt_path)
    return out, tmp_path / name / "last.ckpt"


@pytest.fixture(scope="module")
def interrupted(tmp_path_factory):
    """(stores, params after 40 straight epochs, checkpoint after 20 epochs)."""
    tmp = tmp_path_factory.mktemp("resume")
    stores = tmp / "stores"
    straight, _ = _fit(tmp, stores, 40, "straight")
    _, checkpoint = _fit(tmp, stores, 20, "first_half")
    return tmp, json.loads(straight.read_text()), checkpoint


def test_resume_equals_uninterrupted_run_with_dropout(interrupted, tmp_path):
    tmp, straight, checkpoint = interrupted
    saved = torch.load(checkpoint, weights_only=True)[CHECKPOINT_KEY]
    assert len(saved["ranks"]) == 2
    # The two ranks hold parts of different sizes, so their generators have diverged: one
    # process-wide state (what Lightning's launchers restore) could not continue both.
    assert not torch.equal(saved["ranks"][0]["rng"]["torch"], saved["ranks"][1]["rng"]["torch"])

    resumed, _ = _fit(tmp_path, tmp / "stores", 40, "resumed", ckpt_path=checkpoint)
    resumed = json.loads(resumed.read_text())
    assert resumed.keys() == straight.keys()
    for key, value in straight.items():
        torch.testing.assert_close(
            torch.tensor(resumed[key]), torch.tensor(value), rtol=0, atol=1e-6, msg=key
        )


@pytest.mark.parametrize(
    ("dataset", "method", "differs"),
    [(OTHER_DATASET, "metis", "fingerprint"), (DATASET, "random", "partition")],
)
def test_resume_against_other_data_or_partition_is_refused(
    interrupted, tmp_path, dataset, method, differs
):
    tmp, _, checkpoint = interrupted
    stores = tmp / "stores"
    with pytest.raises(Exception, match="cannot resume") as error:
        _fit(tmp_path, stores, 40, "refused", dataset=dataset, ckpt_path=checkpoint, method=method)
    saved = torch.load(checkpoint, weights_only=True)[CHECKPOINT_KEY]["run"]
    current = GraphPartitionDataModule(dataset, method=method, num_parts=2, root=str(stores))
    meta = PartitionStore.open(current.store_path).meta
    message = str(error.value)
    assert f"{differs}: checkpoint" in message
    for fingerprint in (saved["fingerprint"], meta["fingerprint"]):
        assert fingerprint in message
    for partition in (saved["partition"], meta["files"]["assignment.npy"]):
        assert partition in message


def test_resume_with_another_world_size_is_refused():
    saved = {
        "dataset": "d",
        "fingerprint": "f1",
        "partition": "a1",
        "settings": {},
        "world_size": 2,
    }
    with pytest.raises(ResumeMismatchError, match="world_size: checkpoint 2, this run 4"):
        check_same_run(saved, {**saved, "world_size": 4}, "last.ckpt")
    check_same_run(saved, dict(saved), "last.ckpt")  # the same run resumes


def test_validate_takes_only_the_weights_of_another_runs_checkpoint(interrupted):
    tmp, _, checkpoint = interrupted
    trainer = pl.Trainer(
        strategy="gnn_ddp_fork",
        accelerator="cpu",
        devices=2,
        logger=False,
        enable_progress_bar=False,
        enable_model_summary=False,
    )
    module = NodeClassifier(dropout=0.5, in_channels=8, num_classes=3)
    datamodule = GraphPartitionDataModule(OTHER_DATASET, method="metis", root=str(tmp / "stores"))
    (metrics,) = trainer.validate(module, datamodule=datamodule, ckpt_path=checkpoint)
    assert 0 <= metrics["val_acc"] <= 1
