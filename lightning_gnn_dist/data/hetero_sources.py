"""Heterogeneous graphs to train on: a synthetic graph shaped like ogbn-mag at any size, and
OGB's heterogeneous node datasets (``ogbn-mag``) as ``HeteroData``.

Both return a PyG ``HeteroData``; :func:`~lightning_gnn_dist.data.load_dataset` turns it into
the homogeneous view that is partitioned (:func:`~lightning_gnn_dist.data.hetero.typed_graph`).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import torch
from torch_geometric.data import HeteroData

from .errors import DatasetError

__all__ = ["MAG_SIZES", "mag", "ogb_hetero"]

#: ogbn-mag's vertices per type and edges per relation (OGB, version 2): what ``scale=1``
#: generates, and the mean degrees every scale keeps.
MAG_SIZES: dict[str, int] = {
    "paper": 736_389,
    "author": 1_134_649,
    "institution": 8_740,
    "field_of_study": 59_965,
    "cites": 5_416_271,
    "writes": 7_145_660,
    "has_topic": 7_505_078,
    "affiliated_with": 1_043_998,
}
MAG_NODE_TYPES = ("paper", "author", "institution", "field_of_study")
MAG_RELATIONS = (
    ("author", "affiliated_with", "institution"),
    ("author", "writes", "paper"),
    ("paper", "cites", "paper"),
    ("paper", "has_topic", "field_of_study"),
)
_REVERSE = {
    "affiliated_with": "rev_affiliated_with",
    "writes": "rev_writes",
    "has_topic": "rev_has_topic",
}


def _rng(seed: int, stream: int) -> np.random.Generator:
    return np.random.default_rng((int(seed), 0x4D4147, stream))


def _popularity(rng: np.random.Generator, n: int, alpha: float = 1.2) -> np.ndarray:
    """Power-law (Pareto) popularity of ``n`` items: hubs and a long tail."""
    return rng.pareto(alpha, n) + 1.0


def _degrees(rng: np.random.Generator, n: int, mean: float) -> np.ndarray:
    """``[n] int64`` power-law out-degrees (log-normal, heavy tail) of mean about ``mean``."""
    sigma = 1.0
    raw = rng.lognormal(math.log(max(mean, 1e-3)) - sigma**2 / 2, sigma, n)
    return np.floor(raw + rng.random(n)).astype(np.int64)


def _draw_by_class(
    rng: np.random.Generator,
    item_class: np.ndarray,
    weight: np.ndarray,
    wanted_class: np.ndarray,
    homophily: float,
    num_classes: int,
) -> np.ndarray:
    """For every entry of ``wanted_class``, an item drawn with probability ``weight``: with
    probability ``homophily`` among the items of that class (when it has any), else among
    all. Vectorised: one cumulative weight table over the items sorted by class."""
    order = np.argsort(item_class, kind="stable")
    cumulative = np.cumsum(weight[order])
    class_end = np.searchsorted(item_class[order], np.arange(num_classes), side="right")
    class_start = np.concatenate([[0], class_end[:-1]])
    low = np.where(class_start > 0, cumulative[np.maximum(class_start - 1, 0)], 0.0)
    high = np.where(class_end > 0, cumulative[np.maximum(class_end - 1, 0)], 0.0)
    same = (rng.random(wanted_class.size) < homophily) & (high > low)[wanted_class]
    u = rng.random(wanted_class.size)
    value = np.where(
        same,
        low[wanted_class] + u * (high - low)[wanted_class],
        u * cumulative[-1],
    )
    position = np.minimum(np.searchsorted(cumulative, value, side="right"), order.size - 1)
    return order[position]


def mag(
    scale: float = 0.01,
    features: int = 128,
    classes: int = 32,
    homophily: float = 0.7,
    signal: float = 0.6,
    reverse: bool = True,
    seed: int = 0,
) -> HeteroData:
    """A seeded synthetic graph shaped like ogbn-mag, at any size.

    Four node types (``paper``, ``author``, ``institution``, ``field_of_study``) of ogbn-mag's
    sizes times ``scale`` and its four relations with its mean degrees: ``author writes
    paper``, ``paper cites paper``, ``paper has_topic field_of_study``, ``author
    affiliated_with institution``. Out-degrees are log-normal and targets are drawn by
    Pareto popularity, so both degree distributions are heavy-tailed (power-law). Papers carry
    ``x [n, features]`` (a class centroid times ``signal`` plus unit noise), ``y`` (one of
    ``classes`` venues), ``year`` and OGB's time split (train before 2018, validation 2018,
    test 2019); the other types are featureless, as in ogbn-mag. Citations, authorships and
    topics prefer the paper's class with probability ``homophily``, so the graph carries the
    label beyond the features.

    Args:
        scale: share of ogbn-mag's size (``1`` = 736,389 papers, 21 M edges; ``0.05`` ≈ 1.06 M
            edges).
        features: paper feature width.
        classes: venues (``y`` classes).
        homophily: probability that an edge's far end is drawn from the paper's class.
        signal: centroid scale of the features (``0``: features carry no label).
        reverse: add the reverse relations ``rev_writes``, ``rev_has_topic``,
            ``rev_affiliated_with`` and make ``cites`` symmetric (PyG's ``ToUndirected``), so
            every type receives messages.
        seed: seed of every random choice (equal arguments give identical graphs).

    Returns:
        A ``HeteroData``.
    """
    if not (isinstance(scale, int | float) and 0 < scale <= 16):
        raise DatasetError(f"mag: option scale={scale!r} must be in (0, 16]")
    for key, value, low in (("features", features, 1), ("classes", classes, 2)):
        if not isinstance(value, int) or value < low:
            raise DatasetError(f"mag: option {key}={value!r} must be an integer >= {low}")
    if not 0 <= homophily <= 1:
        raise DatasetError(f"mag: option homophily={homophily!r} must be in [0, 1]")
    count = {t: max(4, round(MAG_SIZES[t] * scale)) for t in MAG_NODE_TYPES}
    papers, authors = count["paper"], count["author"]
    rng = _rng(seed, 1)
    paper_class = rng.integers(0, classes, papers)
    author_class = rng.integers(0, classes, authors)
    field_class = rng.integers(0, classes, count["field_of_study"])
    centroids = rng.standard_normal((classes, features)).astype(np.float32)
    x = signal * centroids[paper_class] + rng.standard_normal((papers, features)).astype(np.float32)
    year = np.where(
        rng.random(papers) < 0.8,
        rng.integers(2010, 2018, papers),
        2018 + (rng.random(papers) < 0.5),
    )

    data = HeteroData()
    data["paper"].x = torch.from_numpy(x.astype(np.float32))
    data["paper"].y = torch.from_numpy(paper_class.astype(np.int64))
    data["paper"].year = torch.from_numpy(year.astype(np.int64))
    data["paper"].train_mask = torch.from_numpy(year < 2018)
    data["paper"].val_mask = torch.from_numpy(year == 2018)
    data["paper"].test_mask = torch.from_numpy(year == 2019)
    for t in ("author", "institution", "field_of_study"):
        data[t].num_nodes = count[t]

    def edges(stream, num_src, mean, targets_of):
        local = _rng(seed, stream)
        out = _degrees(local, num_src, mean)
        src = np.repeat(np.arange(num_src, dtype=np.int64), out)
        return src, targets_of(local, src)

    per_paper = {key: MAG_SIZES[key] / MAG_SIZES["paper"] for key in ("cites", "has_topic")}
    popularity = {
        "paper": _popularity(_rng(seed, 2), papers),
        "author": _popularity(_rng(seed, 3), authors),
        "institution": _popularity(_rng(seed, 4), count["institution"]),
        "field_of_study": _popularity(_rng(seed, 5), count["field_of_study"]),
    }
    src, dst = edges(
        6,
        papers,
        per_paper["cites"],
        lambda g, s: _draw_by_class(
            g, paper_class, popularity["paper"], paper_class[s], homophily, classes
        ),
    )
    keep = src != dst
    cites = np.stack([src[keep], dst[keep]])
    src, dst = edges(
        7,
        papers,
        MAG_SIZES["writes"] / MAG_SIZES["paper"],
        lambda g, s: _draw_by_class(
            g, author_class, popularity["author"], paper_class[s], homophily, classes
        ),
    )
    writes = np.stack([dst, src])  # author -> paper
    src, dst = edges(
        8,
        papers,
        per_paper["has_topic"],
        lambda g, s: _draw_by_class(
            g, field_class, popularity["field_of_study"], paper_class[s], homophily, classes
        ),
    )
    has_topic = np.stack([src, dst])
    src, dst = edges(
        9,
        authors,
        MAG_SIZES["affiliated_with"] / MAG_SIZES["author"],
        lambda g, s: g.choice(
            count["institution"],
            size=s.size,
            p=popularity["institution"] / popularity["institution"].sum(),
        ),
    )
    affiliated = np.stack([src, dst])
    relations = dict(zip(MAG_RELATIONS, (affiliated, writes, cites, has_topic), strict=True))
    for (source, rel, target), index in relations.items():
        if reverse and rel == "cites":
            index = np.concatenate([index, index[::-1]], axis=1)
        data[source, rel, target].edge_index = torch.from_numpy(index.astype(np.int64))
        if reverse and rel in _REVERSE:
            data[target, _REVERSE[rel], source].edge_index = torch.from_numpy(
                index[::-1].astype(np.int64).copy()
            )
    data["name"] = f"mag-{scale:g}"
    return data


def ogb_hetero(dataset, name: str, split: dict[str, Any]) -> HeteroData:
    """OGB's processed heterogeneous graph (``ogb``'s ``PygNodePropPredDataset`` item with
    ``edge_index_dict``, ``x_dict``, ``y_dict``, ``num_nodes_dict``, ``node_year``, ...) and
    its per-type split as a ``HeteroData``: ``x`` and ``y`` (class ids, ``-1`` where OGB has
    none) on the types that have them, the additional node files (``node_year`` as ``year``)
    and edge files (``edge_reltype``) as attributes, masks from the split."""
    graph = dataset
    data = HeteroData()
    for node_type, count in graph.num_nodes_dict.items():
        data[node_type].num_nodes = int(count)
    for node_type, x in (getattr(graph, "x_dict", None) or {}).items():
        data[node_type].x = x.float()
    for node_type, y in (getattr(graph, "y_dict", None) or {}).items():
        y = y.reshape(y.size(0), -1)[:, 0]
        if y.is_floating_point():
            y = torch.where(torch.isnan(y), torch.full_like(y, -1), y)
        data[node_type].y = y.long()
    year = getattr(graph, "node_year", None)
    for node_type, values in (year or {}).items():
        data[node_type].year = torch.as_tensor(values).reshape(-1).long()
    for edge_type, index in graph.edge_index_dict.items():
        data[tuple(edge_type)].edge_index = index.long()
    reltype = getattr(graph, "edge_reltype", None)
    for edge_type, values in (reltype or {}).items():
        data[tuple(edge_type)].edge_reltype = torch.as_tensor(values).reshape(-1).long()
    for key, mask_name in (("train", "train_mask"), ("valid", "val_mask"), ("test", "test_mask")):
        for node_type, index in split[key].items():
            mask = torch.zeros(data[node_type].num_nodes, dtype=torch.bool)
            mask[torch.as_tensor(index).long()] = True
            if "y" in data[node_type]:
                mask &= data[node_type].y >= 0
            data[node_type][mask_name] = mask
    data["name"] = name
    return data
