"""Seeded synthetic targets and edge attributes for any graph, and an ogbn-proteins-shaped graph.

The spec options ``targets``, ``edge_features`` and ``edge_weights`` of the synthetic and file
kinds (:data:`ATTRIBUTE_OPTIONS`) call :func:`add_synthetic_attributes`:

* ``targets=multiclass`` keeps the kind's class labels; ``targets=regression[:k]`` replaces them
  by ``k`` (default 1) real "teacher" targets ``Â Â x W`` (``Â`` the mean over each vertex and
  its in-neighbours, ``W ~ N(0, I)``), standardised per column, ``[N]`` for ``k = 1`` else
  ``[N, k]``; ``targets=multilabel:k`` by ``k`` (default 8) binary tasks, each teacher column
  thresholded at its median (``[N, k]`` of 0 and 1). A 2-layer GNN represents them exactly.
* ``edge_features=d`` adds ``edge_attr [E, d] float32``, i.i.d. uniform in ``[0, 1)`` per edge
  (parallel edges get their own values).
* ``edge_weights=KIND`` adds ``edge_weight [E] float32``: ``ones`` (every edge 1), ``uniform``
  (uniform in ``(0, 1]``), ``count`` (integers ``1, 2, ...``, geometric with mean 2, as
  co-occurrence counts) or ``degree`` (``1 / in-degree`` of the target, so a weighted sum is the
  mean over in-neighbours).

Every value depends on ``seed`` only (its own ``numpy`` stream per quantity), and on the graph.
:func:`proteins` is a small stand-in for ogbn-proteins (8 edge features, 112 binary tasks, a
species per vertex) for tests, benchmarks and docs, where OGB's data cannot be downloaded.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
from torch import Tensor
from torch_geometric.data import Data

from .errors import DatasetError
from .graph import canonicalize, sorted_unique
from .synthetic import _check_int, _mean_aggregation, _rng, random_split_masks, sbm

__all__ = [
    "ATTRIBUTE_OPTIONS",
    "EDGE_WEIGHTS",
    "add_synthetic_attributes",
    "parse_targets",
    "proteins",
]

#: Spec options of :func:`add_synthetic_attributes` (name -> (type, default)).
ATTRIBUTE_OPTIONS: dict[str, tuple[type, Any]] = {
    "targets": (str, "multiclass"),
    "edge_features": (int, 0),
    "edge_weights": (str, None),
}

EDGE_WEIGHTS: tuple[str, ...] = ("ones", "uniform", "count", "degree")
_DEFAULT_COLUMNS = {"regression": 1, "multilabel": 8}

# Streams of default_rng((seed, stream)), apart from those of synthetic.py.
_STREAM_TARGETS = 11
_STREAM_EDGE_FEATURES = 12
_STREAM_EDGE_WEIGHTS = 13


def parse_targets(text: str, source: str = "targets") -> tuple[str, int]:
    """``"multiclass"``, ``"regression[:k]"`` or ``"multilabel[:k]"`` → ``(task, k)``.

    Raises:
        DatasetError: another task or a ``k`` that is not an integer >= 1.
    """
    task, _, columns = str(text).strip().lower().partition(":")
    if task not in ("multiclass", "regression", "multilabel") or (task == "multiclass" and columns):
        raise DatasetError(
            f"{source}: option targets={text!r} must be multiclass, regression[:k] or "
            "multilabel[:k] (k columns)"
        )
    if not columns:
        return task, _DEFAULT_COLUMNS.get(task, 1)
    if not columns.isdigit() or int(columns) < 1:
        raise DatasetError(f"{source}: option targets={text!r}: k must be an integer >= 1")
    return task, int(columns)


def _teacher_scores(data: Data, columns: int, seed: int) -> np.ndarray:
    """``Â Â x W``: ``[N, columns] float64`` (``W ~ N(0, I)``)."""
    x = data.x.detach().cpu().to(torch.float32).reshape(data.num_nodes, -1).numpy()
    weight = _rng(seed, _STREAM_TARGETS).standard_normal((x.shape[1], columns))
    projected = (x @ weight.astype(np.float32)).astype(np.float64)
    return _mean_aggregation(projected, data.edge_index, data.num_nodes, hops=2)


def _synthetic_targets(data: Data, task: str, columns: int, seed: int) -> Tensor:
    scores = _teacher_scores(data, columns, seed)
    if task == "multilabel":
        median = np.median(scores, axis=0, keepdims=True)
        return torch.from_numpy((scores > median).astype(np.float32))
    spread = scores.std(axis=0, keepdims=True)
    scores = (scores - scores.mean(axis=0, keepdims=True)) / np.where(spread > 0, spread, 1.0)
    y = torch.from_numpy(scores.astype(np.float32))
    return y[:, 0].contiguous() if columns == 1 else y


def _edge_weights(kind: str, edge_index: Tensor, num_nodes: int, seed: int) -> Tensor:
    num_edges = edge_index.size(1)
    rng = _rng(seed, _STREAM_EDGE_WEIGHTS)
    if kind == "ones":
        return torch.ones(num_edges)
    if kind == "uniform":
        return torch.from_numpy((1.0 - rng.random(num_edges)).astype(np.float32))
    if kind == "count":
        return torch.from_numpy(rng.geometric(0.5, num_edges).astype(np.float32))
    in_degree = torch.bincount(edge_index[1], minlength=num_nodes).to(torch.float32)
    return 1.0 / in_degree[edge_index[1]]


def add_synthetic_attributes(
    data: Data,
    targets: str = "multiclass",
    edge_features: int = 0,
    edge_weights: str | None = None,
    seed: int = 0,
    source: str = "graph",
) -> Data:
    """``data`` (canonical, with ``x``) with synthetic targets and edge attributes (see the
    module docstring); ``targets="multiclass"``, ``edge_features=0`` and ``edge_weights=None``
    change nothing.

    Raises:
        DatasetError: an unknown ``targets`` or ``edge_weights``, or ``edge_features < 0``; a
            graph that already has the ``edge_attr`` or ``edge_weight`` asked for.
    """
    task, columns = parse_targets(targets, source)
    if not isinstance(edge_features, int) or edge_features < 0:
        raise DatasetError(f"{source}: option edge_features={edge_features!r} must be >= 0")
    if edge_weights is not None and edge_weights not in EDGE_WEIGHTS:
        raise DatasetError(
            f"{source}: option edge_weights={edge_weights!r} must be one of "
            f"{', '.join(EDGE_WEIGHTS)}"
        )
    for key, wanted in (("edge_attr", edge_features > 0), ("edge_weight", edge_weights)):
        if wanted and getattr(data, key, None) is not None:
            raise DatasetError(f"{source}: the graph has its own {key}; drop the spec option")
    if task == "multiclass" and not edge_features and edge_weights is None:
        return data
    data = data.clone()
    if task != "multiclass":
        data.y = _synthetic_targets(data, task, columns, seed)
    num_edges = data.edge_index.size(1)
    if edge_features:
        rng = _rng(seed, _STREAM_EDGE_FEATURES)
        values = rng.random((num_edges, edge_features), dtype=np.float32)
        data.edge_attr = torch.from_numpy(values)
    if edge_weights is not None:
        data.edge_weight = _edge_weights(edge_weights, data.edge_index, data.num_nodes, seed)
    return data


def proteins(
    num_nodes: int = 2000,
    avg_degree: float = 20.0,
    edge_features: int = 8,
    tasks: int = 112,
    species: int = 8,
    seed: int = 0,
) -> Data:
    """A graph shaped like ogbn-proteins: protein associations within species, ``edge_features``
    association scores per edge, ``tasks`` binary protein functions, a species per protein.

    The graph is an undirected :func:`~lightning_gnn_dist.data.synthetic.sbm` whose blocks are
    the species (edges stay inside a species, as in ogbn-proteins). Each edge has
    ``edge_features`` scores uniform in ``[0, 1)``, the same in both directions (OGB adds the
    inverse edges with the same features). As in PyG's ogbn-proteins example, the node features
    are the sum of the in-edges' features (``x [N, edge_features]``); the targets are
    :func:`add_synthetic_attributes` multi-label teacher targets over them (``y [N, tasks]`` of
    0 and 1); ``node_species [N, 1] int64``; a seeded random 60/20/20 split.

    Args:
        num_nodes (int): proteins ``N``. (default: ``2000``)
        avg_degree (float): expected average degree. (default: ``20.0``)
        edge_features (int): scores per edge (ogbn-proteins: 8). (default: ``8``)
        tasks (int): binary tasks (ogbn-proteins: 112). (default: ``112``)
        species (int): species (ogbn-proteins: 8). (default: ``8``)
        seed (int): seed of everything. (default: ``0``)

    Returns:
        A canonical ``Data`` with ``x``, ``y``, ``edge_index``, ``edge_attr``, ``node_species``,
        the masks and ``name = "proteins"``.
    """
    num_nodes = _check_int("num_nodes", num_nodes, 1)
    edge_features = _check_int("edge_features", edge_features, 1)
    tasks = _check_int("tasks", tasks, 1)
    species = _check_int("species", species, 1, num_nodes)
    graph = sbm(num_nodes, species, avg_degree, p_ratio=1e9, features=1, seed=seed, noise=0.0)
    src, dst = graph.edge_index.numpy()
    # One draw per unordered pair: both directions of an association carry the same scores.
    pair = np.minimum(src, dst) * num_nodes + np.maximum(src, dst)
    pairs = sorted_unique(pair)
    scores = _rng(seed, _STREAM_EDGE_FEATURES).random((pairs.size, edge_features), np.float32)
    edge_attr = torch.from_numpy(scores[np.searchsorted(pairs, pair)])
    x = torch.zeros(num_nodes, edge_features).index_add_(0, graph.edge_index[1], edge_attr)
    train, val, test = random_split_masks(num_nodes, seed)
    data = Data(
        x=x,
        edge_index=graph.edge_index,
        edge_attr=edge_attr,
        node_species=graph.y.view(-1, 1).clone(),
        train_mask=train,
        val_mask=val,
        test_mask=test,
        num_nodes=num_nodes,
    )
    data.y = _synthetic_targets(data, "multilabel", tasks, seed)
    data = canonicalize(data, source="proteins")
    data.name = "proteins"
    return data
