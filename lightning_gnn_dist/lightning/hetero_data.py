"""What :class:`~lightning_gnn_dist.lightning.datamodule.GraphPartitionDataModule` does for a
typed graph (a ``HeteroData`` or a typed dataset spec): one datamodule for node prediction,
whatever the graph's types, so a typed graph is passed exactly as a ``Data`` is.

* At construction: the options that do not apply to typed graphs are refused by name
  (``loader="subgraph"``, ``eval_loader="full"``, a vertex cut, ``method="auto"``), and
  ``num_neighbors`` may be PyG's dict per relation (checked against the graph's relations when
  they are known, else in ``setup``).
* In ``setup``: the full batch is the part's ``HeteroData``
  (:func:`~lightning_gnn_dist.data.hetero_local.typed_batch`), and ``loader="neighbor"`` serves
  :class:`~lightning_gnn_dist.loaders.hetero_neighbor.HeteroNeighborLoaders`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from torch_geometric.data import HeteroData

from lightning_gnn_dist.comm.messages import host_group
from lightning_gnn_dist.data.datasets import spec_is_typed
from lightning_gnn_dist.data.hetero import HeteroSchema
from lightning_gnn_dist.data.hetero_local import typed_batch
from lightning_gnn_dist.loaders.hetero_neighbor import (
    HeteroNeighborLoaders,
    TypedGraphStore,
    check_typed_fanouts,
)

_VERTEX_CUT = ("vertex-cut",)


def dataset_is_typed(dataset: Any) -> bool | None:
    """Whether ``dataset`` is a typed graph: ``True``/``False``, or ``None`` when only loading
    tells (an ``ogb:`` name)."""
    if isinstance(dataset, HeteroData):
        return True
    if isinstance(dataset, str):
        return spec_is_typed(dataset)
    return False


def check_typed_arguments(
    dataset: Any,
    target_type: str | None,
    loader: str,
    eval_loader: str,
    method: str | None,
    num_neighbors: Any,
    eval_num_neighbors: Any,
) -> bool:
    """Refuse the options a typed graph cannot take; return whether the fan-outs are a typed
    graph's (checked here with :func:`~lightning_gnn_dist.loaders.hetero_neighbor.
    check_typed_fanouts`; against the relations of an in-memory ``HeteroData``).

    Raises:
        ValueError: one line naming the option and what to use instead.
    """
    typed = dataset_is_typed(dataset)
    given_dict = isinstance(num_neighbors, Mapping) or isinstance(eval_num_neighbors, Mapping)
    if typed is False:
        if given_dict:
            raise ValueError(
                "num_neighbors as a dict per relation applies to typed graphs (HeteroData); "
                "give a list of fan-outs per hop, e.g. [25, 10]"
            )
        return False
    if typed:
        if loader == "subgraph":
            raise ValueError(
                "loader='subgraph' does not run on typed graphs; use loader='full' or "
                "loader='neighbor'"
            )
        if loader == "neighbor" and eval_loader == "full":
            raise ValueError(
                "eval_loader='full' does not run on typed graphs with loader='neighbor'; use "
                "eval_loader='neighbor' with fan-outs -1 for exact evaluation"
            )
        if method in ("vertex-cut", "auto"):
            raise ValueError(
                f"method={method!r} does not partition typed graphs; use a vertex method "
                "(hypergraph, metis, kaminpar, random)"
            )
    edge_types = dataset.edge_types if isinstance(dataset, HeteroData) else None
    for name, value in (
        ("num_neighbors", num_neighbors),
        ("eval_num_neighbors", eval_num_neighbors),
    ):
        if value is not None:
            check_typed_fanouts(name, value, edge_types)
    return True


def typed_setup(datamodule, part) -> tuple[HeteroData, HeteroNeighborLoaders | None]:
    """``(full batch, neighbour loaders or None)`` of a typed part (collective with
    ``loader="neighbor"``)."""
    if datamodule.loader == "subgraph":
        raise ValueError(
            "loader='subgraph' does not run on typed graphs; use loader='full' or 'neighbor'"
        )
    schema = HeteroSchema.from_meta(part.type_schema)
    batch = typed_batch(part, schema)
    for key in ("train_mask", "val_mask", "test_mask"):
        split = key.split("_")[0]
        batch[f"num_{split}_global"] = datamodule.global_mask_count(key)
        batch[f"num_{split}_labels_global"] = datamodule.global_label_count(key)
    if datamodule.loader != "neighbor":
        return batch, None
    if datamodule.eval_loader == "full":
        raise ValueError(
            "eval_loader='full' does not run on typed graphs with loader='neighbor'; use "
            "eval_loader='neighbor' with fan-outs -1 for exact evaluation"
        )
    options = dict(datamodule.neighbor_options)
    for name in ("num_neighbors", "eval_num_neighbors"):
        if options[name] is not None:
            options[name] = check_typed_fanouts(name, options[name], schema.edge_types)
    timeout = getattr(getattr(datamodule.trainer, "strategy", None), "_timeout", None)
    group = host_group(timeout=timeout)
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized() and options["prefetch"]:
        group = dist.new_group(backend="gloo", timeout=timeout)
    store = TypedGraphStore(part, group=group)
    return batch, HeteroNeighborLoaders(store, datamodule.store.meta["mask_counts"], **options)
