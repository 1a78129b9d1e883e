"""``GraphPartitionDataModule(loader="neighbor")`` without a Trainer: one part, no process group."""

import pytest
import torch

from lightning_gnn_dist import GraphPartitionDataModule
from lightning_gnn_dist.data import load_dataset

DATASET = "sbm?num_nodes=300&num_classes=3&avg_degree=6&features=5&seed=1"


def test_one_part_serves_pyg_layout_batches(tmp_path):
    datamodule = GraphPartitionDataModule(
        DATASET,
        method="random",
        num_parts=1,
        root=str(tmp_path),
        loader="neighbor",
        num_neighbors=[3, 2],
        batch_size=64,
        shuffle=True,
    )
    datamodule.prepare_data()
    datamodule.setup("fit")
    graph = load_dataset(DATASET)
    train = datamodule.train_dataloader()
    batches = list(train)
    assert len(batches) == len(train) == -(-int(graph.train_mask.sum()) // 64)
    seeds = torch.cat([b.n_id[: b.batch_size] for b in batches])
    assert sorted(seeds.tolist()) == graph.train_mask.nonzero().view(-1).tolist()
    for b in batches:
        assert torch.equal(b.x, graph.x[b.n_id]) and torch.equal(b.y, graph.y[b.n_id])
        assert b.num_sampled_nodes[0] == b.batch_size and sum(b.num_sampled_edges) == b.num_edges
    # A new epoch reshuffles; validation is not shuffled and visits every val vertex once.
    assert not torch.equal(seeds, torch.cat([b.n_id[: b.batch_size] for b in train]))
    val = torch.cat([b.n_id[: b.batch_size] for b in datamodule.val_dataloader()])
    assert val.tolist() == graph.val_mask.nonzero().view(-1).tolist()


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"loader": "xyz"}, "undefined loader option 'xyz'"),
        ({"loader": "neighbor"}, "needs num_neighbors"),
        ({"loader": "neighbor", "num_neighbors": [2], "eval_loader": "x"}, "eval_loader"),
    ],
)
def test_bad_loader_options(kwargs, message):
    with pytest.raises(ValueError, match=message):
        GraphPartitionDataModule(DATASET, **kwargs)


@pytest.mark.parametrize("eval_loader", ["neighbor", "full"])
def test_node_classifier_predicts_the_seeds_of_neighbor_batches(eval_loader, tmp_path):
    """Issue 29, item 2: ``NodeClassifier.predict_step`` read ``batch.global_ids``, which
    seeds-first batches do not have; it returns the seeds' dataset ids and logits."""
    from lightning_gnn_dist import NodeClassifier

    datamodule = GraphPartitionDataModule(
        DATASET, method="random", num_parts=1, root=str(tmp_path), loader="neighbor",
        num_neighbors=[-1, -1], batch_size=64, eval_loader=eval_loader,
    )  # fmt: skip
    datamodule.prepare_data()
    datamodule.setup("predict")
    torch.manual_seed(0)
    module = NodeClassifier("sage", hidden_channels=8, in_channels=5, num_classes=3).eval()
    graph = load_dataset(DATASET)
    with torch.no_grad():
        expected = module(graph.x, graph.edge_index)
        predicted = [
            module.predict_step(b, i) for i, b in enumerate(datamodule.predict_dataloader())
        ]
    ids = torch.cat([p["global_ids"] for p in predicted])
    assert sorted(ids.tolist()) == list(range(graph.num_nodes))
    logits = torch.cat([p["logits"] for p in predicted])
    torch.testing.assert_close(logits, expected[ids], rtol=1e-5, atol=1e-5)
