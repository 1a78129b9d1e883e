"""Datasets, formats, graph helpers, per-rank views and samplers (no Lightning, no communication).

A graph's attributes (:mod:`.attributes`), its targets of every task (:mod:`.targets`) and the
contract a graph meets before it is partitioned (:mod:`.contract`) are checked here once; a
heterogeneous graph becomes its homogeneous view with type vectors (:mod:`.hetero`,
:mod:`.hetero_local`).

:class:`~lightning_gnn_dist.data.local.LocalPartition` is a rank's part of a vertex partition and
:class:`~lightning_gnn_dist.data.vertex_cut.VertexCutPart` its part of a vertex cut; the samplers
draw mini-batches that :mod:`lightning_gnn_dist.loaders` turns into steps.
"""

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
from .hetero import HeteroSchema, typed_graph
from .hetero_sources import mag
from .ogb import load_ogb
from .synthetic import add_synthetic_features, random_split_masks, rmat, rmat_edge_index, sbm
from .synthetic_attrs import add_synthetic_attributes, proteins
from .targets import TASKS

__all__ = [
    "DATASET_KINDS",
    "DatasetError",
    "DatasetKind",
    "DatasetSpec",
    "HeteroSchema",
    "TASKS",
    "add_synthetic_attributes",
    "add_synthetic_features",
    "canonicalize",
    "load_dataset",
    "load_digits_graph",
    "load_ogb",
    "mag",
    "parse_dataset_spec",
    "proteins",
    "random_split_masks",
    "read_edgelist",
    "read_metis",
    "read_mtx",
    "register_dataset_kind",
    "rmat",
    "rmat_edge_index",
    "sbm",
    "typed_graph",
]
