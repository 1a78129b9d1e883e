"""What a store's ``meta.json`` records about the partitioned graph, beside the partition
(docs/development.md, "The store format of wave 4"): every attribute's dtype, trailing shape and
role, the target's task, and per part the vertices and labelled targets of every mask, so no
rank needs the whole graph to know the global counts a loss divides by.

A format-2 store has none of the keys added in format 3; :func:`stored_target` and
:func:`stored_label_counts` read both.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from torch_geometric.data import Data

from lightning_gnn_dist.data.attributes import CORE_NODE_ATTRS, graph_attributes
from lightning_gnn_dist.data.targets import infer_task, labelled_per_vertex, target_info

MASKS = ("train_mask", "val_mask", "test_mask")
_ROLES = {"x": "feature", "y": "target", **dict.fromkeys(MASKS, "mask")}


def _describe(value) -> dict[str, Any]:
    return {
        "dtype": str(value.dtype).removeprefix("torch."),
        "shape": [int(size) for size in value.shape[1:]],
    }


def attribute_meta(data: Data) -> dict[str, dict[str, dict[str, Any]]]:
    """``{"node_attrs": {...}, "edge_attrs": {...}}``: ``{name: {"dtype", "shape", "role"}}``
    of every partitioned attribute (``shape`` the trailing dimensions, ``[]`` for ``[N]``)."""
    attributes = graph_attributes(data)
    node = {
        key: {**_describe(data[key]), "role": _ROLES[key]}
        for key in CORE_NODE_ATTRS
        if getattr(data, key, None) is not None
    }
    node |= {key: {**_describe(data[key]), "role": "attr"} for key in attributes.node}
    edge = {key: {**_describe(data[key]), "role": "attr"} for key in attributes.edge}
    typed = getattr(data, "hetero", None)  # a typed graph: "<type>/<name>", "<relation>/<name>"
    if typed is not None:
        for key, value in typed.node_attribute_items():
            role = "feature" if key.endswith("/x") else "attr"
            node[key] = {**_describe(value), "role": role}
        edge |= {key: {**_describe(v), "role": "attr"} for key, v in typed.edge_attribute_items()}
    return {"node_attrs": node, "edge_attrs": edge}


def task_of(data: Data) -> str:
    """The task of ``data.y``: the one :func:`~lightning_gnn_dist.data.load_dataset` recorded,
    else inferred."""
    task = getattr(data, "task", None)
    return task if isinstance(task, str) else infer_task(data.y)


def target_meta(data: Data) -> dict[str, Any]:
    """``{"num_classes": C, "target": {"task", "num_classes", "num_tasks"}}`` (``num_classes``
    at the top level for the old readers: ``0`` unless multiclass; no ``target`` without ``y``)."""
    if getattr(data, "y", None) is None:
        return {"num_classes": 0}
    info = target_info(data.y, task_of(data))
    return {"num_classes": info.num_classes, "target": info.to_dict()}


def mask_counts(data: Data, owner: np.ndarray, num_parts: int) -> dict[str, list[int]]:
    """Per mask, the vertices it selects on each part (``owner``: the part holding each vertex's
    label and masks)."""
    counts = {}
    for key in MASKS:
        mask = getattr(data, key, None)
        if mask is not None:
            counts[key] = np.bincount(owner[mask.numpy()], minlength=num_parts).tolist()
    return counts


def label_counts(data: Data, owner: np.ndarray, num_parts: int) -> dict[str, list[int]]:
    """Per mask, the labelled targets of its vertices on each part: vertices with a class id
    (multiclass), labelled ``(vertex, task)`` entries (multilabel, ``NaN`` = unlabelled) or
    finite target entries (regression) — what an exact loss divides by."""
    if getattr(data, "y", None) is None:
        return {}
    per_vertex = labelled_per_vertex(data.y, task_of(data)).numpy()
    counts = {}
    for key in MASKS:
        mask = getattr(data, key, None)
        if mask is not None:
            selected = mask.numpy()
            weights = per_vertex[selected].astype(np.float64)
            total = np.bincount(owner[selected], weights=weights, minlength=num_parts)
            counts[key] = total.astype(np.int64).tolist()
    return counts


def stored_target(meta: dict[str, Any]) -> dict[str, Any]:
    """The store's ``target`` (a format-2 store: multiclass with its ``num_classes``)."""
    target = meta.get("target")
    if target is not None:
        return dict(target)
    return {"task": "multiclass", "num_classes": int(meta.get("num_classes", 0)), "num_tasks": 1}


def stored_label_counts(meta: dict[str, Any]) -> dict[str, list[int]]:
    """The store's ``label_counts`` (a format-2 store: its ``mask_counts``, every masked vertex
    one class label)."""
    return dict(meta.get("label_counts", meta.get("mask_counts", {})))
