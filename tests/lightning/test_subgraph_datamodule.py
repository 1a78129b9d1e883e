"""``GraphPartitionDataModule(loader="subgraph")``: options, single-process batches, SHP stores."""

import numpy as np
import pytest
import torch

from lightning_gnn_dist import GraphPartitionDataModule
from lightning_gnn_dist.data import load_dataset
from lightning_gnn_dist.data.local import build_local_partitions
from lightning_gnn_dist.data.subgraph_sampler import make_sampler
from lightning_gnn_dist.loaders.subgraph import SubgraphLoader

DATASET = "sbm?num_nodes=200&num_classes=3&avg_degree=6&features=5&seed=1"


def test_options_are_validated():
    with pytest.raises(ValueError, match="undefined loader option 'nope'"):
        GraphPartitionDataModule(DATASET, loader="nope")
    with pytest.raises(ValueError, match="needs subgraph_size"):
        GraphPartitionDataModule(DATASET, loader="subgraph")
    with pytest.raises(ValueError, match="steps_per_epoch must be an integer >= 1"):
        GraphPartitionDataModule(DATASET, loader="subgraph", subgraph_size=10, steps_per_epoch=0)


@pytest.mark.parametrize("sampler", ["uniform", "edge", "random-walk"])
def test_single_process_batches_are_the_sampled_subgraphs(sampler, tmp_path):
    dm = GraphPartitionDataModule(
        DATASET,
        method="random",
        num_parts=1,
        root=str(tmp_path),
        loader="subgraph",
        subgraph_sampler=sampler,
        subgraph_size=0.25,
        subgraph_seed=4,
    )
    dm.prepare_data()
    dm.setup("fit")
    loader = dm.train_dataloader()
    assert isinstance(loader, SubgraphLoader) and len(loader) == 4  # ceil(200 / 50)
    data = load_dataset(DATASET)
    expected = make_sampler(sampler, 200, 50, seed=4, edge_index=data.edge_index)
    for step, batch in enumerate(loader):
        ids = expected.sample(step)
        assert torch.equal(batch.global_ids, ids)
        assert torch.equal(batch.x, data.x[ids])
        assert batch.num_train_global == int(data.train_mask[ids].sum())
    assert isinstance(dm.val_dataloader().batch.x, torch.Tensor)  # evaluation: the whole part
    assert "loader='subgraph'" in repr(dm)


def test_structure_samplers_are_refused_on_several_parts(tmp_path):
    data = load_dataset(DATASET)
    dm = GraphPartitionDataModule(
        DATASET, num_parts=2, loader="subgraph", subgraph_sampler="edge", subgraph_size=20
    )
    dm.local_partition = next(build_local_partitions(data, np.arange(200) % 2, 2))
    dm._store = type("Store", (), {"meta": {"num_nodes": 200}})()
    with pytest.raises(ValueError, match="use 'uniform'"):
        dm.train_dataloader()


def test_stochastic_hypergraph_store_depends_on_the_sampler(tmp_path):
    def module(sampler):
        return GraphPartitionDataModule(
            DATASET,
            method="stochastic-hypergraph",
            num_parts=2,
            root=str(tmp_path),
            loader="subgraph",
            subgraph_sampler=sampler,
            subgraph_size=0.1,
        )

    uniform, edge = module("uniform"), module("edge")
    assert uniform.partitioner.settings()["sampler"] == "uniform"
    assert uniform.store_path != edge.store_path
