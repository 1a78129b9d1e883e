"""Datasets, graph helpers and (later) per-rank data for distributed GNN training."""

from .datasets import (
    DATASET_KINDS,
    DatasetError,
    DatasetKind,
    DatasetSpec,
    load_dataset,
    load_digits_graph,
    parse_dataset_spec,
    register_dataset_kind,
)
from .formats import read_edgelist, read_metis, read_mtx
from .graph import canonicalize
from .graph_store import LocalGraphStore, PartitionedGraphStore
from .neighbor_loader import NeighborLoader
from .ogb import load_ogb
from .synthetic import add_synthetic_features, random_split_masks, rmat, rmat_edge_index, sbm

__all__ = [
    "DATASET_KINDS",
    "DatasetError",
    "DatasetKind",
    "DatasetSpec",
    "LocalGraphStore",
    "NeighborLoader",
    "PartitionedGraphStore",
    "add_synthetic_features",
    "canonicalize",
    "load_dataset",
    "load_digits_graph",
    "load_ogb",
    "parse_dataset_spec",
    "random_split_masks",
    "read_edgelist",
    "read_metis",
    "read_mtx",
    "register_dataset_kind",
    "rmat",
    "rmat_edge_index",
    "sbm",
]
