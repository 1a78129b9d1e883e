"""Seeded synthetic graphs, features, labels and splits.

* :func:`sbm` — a stochastic block model with planted classes and class-informative features.
* :func:`rmat` / :func:`rmat_edge_index` — a directed R-MAT (power-law) graph with skewed
  degrees, the regime where the hypergraph model gains most over graph partitioning (paper 000
  Table 2).
* :func:`add_synthetic_features` — features, labels and masks for a graph that has none (paper
  000 evaluates such graphs with random features and labels).
* :func:`random_split_masks` — a seeded train/val/test split.

All generators are vectorised (no Python loop over vertices or edges, no ``O(N^2)`` memory) and
deterministic: the same arguments give bit-identical tensors. Each random quantity has its own
``numpy`` stream ``default_rng((seed, stream))``, so e.g. changing the feature width does not
change the graph.
"""

from __future__ import annotations

import math

import numpy as np
import scipy.sparse as sp
import torch
from torch import Tensor
from torch_geometric.data import Data

from lightning_gnn_dist.data.graph import canonicalize, distinct_edges, sorted_unique
from lightning_gnn_dist.data.limits import check_graph_fits

__all__ = [
    "add_synthetic_features",
    "random_split_masks",
    "rmat",
    "rmat_edge_index",
    "sbm",
]

# Independent random streams (the second entropy word of ``default_rng((seed, stream))``).
_STREAM_SPLIT = 1
_STREAM_FEATURES = 2
_STREAM_TEACHER = 3
_STREAM_GRAPH = 4
_STREAM_PERMUTATION = 5


def _rng(seed: int, stream: int) -> np.random.Generator:
    if not isinstance(seed, int | np.integer) or seed < 0:
        raise ValueError(f"seed must be an integer >= 0 (got {seed!r})")
    return np.random.default_rng((int(seed), stream))


def _check_int(name: str, value: int, low: int, high: int | None = None) -> int:
    ok = isinstance(value, int | np.integer) and not isinstance(value, bool)
    if not ok or value < low or (high is not None and value > high):
        bound = f">= {low}" if high is None else f"in [{low}, {high}]"
        raise ValueError(f"{name} must be an integer {bound} (got {value!r})")
    return int(value)


def _check_finite(**values: float) -> None:
    for name, value in values.items():
        if not isinstance(value, int | float | np.integer | np.floating) or not math.isfinite(
            value
        ):
            raise ValueError(f"{name} must be a finite number (got {value!r})")


def random_split_masks(
    num_nodes: int, seed: int = 0, train: float = 0.6, val: float = 0.2
) -> tuple[Tensor, Tensor, Tensor]:
    """A seeded random split of the vertices into disjoint train/val/test sets.

    ``round(train * num_nodes)`` vertices go to train, ``round(val * num_nodes)`` to val and the
    rest to test; which ones is a seeded permutation.

    Args:
        num_nodes (int): number of vertices ``N``.
        seed (int): seed of the permutation. (default: ``0``)
        train (float): share of training vertices. (default: ``0.6``)
        val (float): share of validation vertices; ``train + val <= 1``. (default: ``0.2``)

    Returns:
        ``(train_mask, val_mask, test_mask)``, each ``[N] bool``; every vertex is in exactly one.
    """
    num_nodes = _check_int("num_nodes", num_nodes, 0)
    if not (0.0 <= train <= 1.0 and 0.0 <= val <= 1.0 and train + val <= 1.0 + 1e-12):
        raise ValueError(
            f"train and val must be shares in [0, 1] with train + val <= 1 (got train={train}, "
            f"val={val}); the test share is 1 - train - val"
        )
    num_train = int(round(train * num_nodes))
    num_val = min(int(round(val * num_nodes)), num_nodes - num_train)
    order = _rng(seed, _STREAM_SPLIT).permutation(num_nodes)
    split = np.full(num_nodes, 2, dtype=np.int64)
    split[order[:num_train]] = 0
    split[order[num_train : num_train + num_val]] = 1
    split = torch.from_numpy(split)
    return split == 0, split == 1, split == 2


def _class_features(
    y: np.ndarray, num_classes: int, features: int, noise: float, rng: np.random.Generator
) -> Tensor:
    """``x = centroid[y] + noise * N(0, I)`` with centroids ``~ N(0, I)``: ``[N, features]``.

    Vertices with ``y < 0`` (unlabelled) get a zero centroid.
    """
    centroids = rng.standard_normal((num_classes + 1, features))
    centroids[-1] = 0.0  # row used by y = -1
    x = centroids[np.where(y < 0, num_classes, y)]
    x += noise * rng.standard_normal((y.size, features))
    return torch.from_numpy(x.astype(np.float32))


def _mean_aggregation(h: np.ndarray, edge_index: Tensor, num_nodes: int, hops: int) -> np.ndarray:
    """Apply ``D̃⁻¹ (A + I)`` ``hops`` times to ``h`` (``[N, k] float64``).

    Row ``i`` of ``D̃⁻¹ (A + I)`` averages vertex ``i`` and its in-neighbours ``j -> i``;
    ``edge_index`` is canonical (coalesced), self loops in it are ignored.
    """
    src, dst = edge_index.numpy()
    keep = src != dst
    src, dst = src[keep], dst[keep]
    if src.size > 1 and not (src[1:] >= src[:-1]).all():
        order = np.argsort(src, kind="stable")
        src, dst = src[order], dst[order]
    # A[dst, src] = 1 as CSC (columns = sources): built directly, no sort of the edges.
    indptr = np.zeros(num_nodes + 1, dtype=np.int64)
    np.cumsum(np.bincount(src, minlength=num_nodes), out=indptr[1:])
    adjacency = sp.csc_matrix(
        (np.ones(src.size, dtype=np.float64), dst, indptr), shape=(num_nodes, num_nodes)
    )
    inverse_degree = 1.0 / (np.bincount(dst, minlength=num_nodes) + 1.0)
    for _ in range(hops):
        h = inverse_degree[:, None] * (adjacency @ h + h)
    return h


def add_synthetic_features(
    data: Data,
    features: int = 32,
    classes: int = 8,
    seed: int = 0,
    noise: float = 3.0,
) -> Data:
    """Fill in the missing ``x``, ``y`` and masks of ``data`` with seeded synthetic ones.

    What is present is kept. What is missing is generated as follows:

    * ``x`` and ``y`` both missing: ``x ~ N(0, I)`` (``[N, features]``) and ``y`` are "teacher"
      labels ``y = argmax(Â Â x W)`` with ``W ~ N(0, I)`` (``[features, classes]``) and ``Â``
      the mean over each vertex and its in-neighbours. So labels depend on the features of the
      2-hop in-neighbourhood and a 2-layer GNN can represent them exactly; classes are balanced
      in expectation.
    * only ``y`` missing: teacher labels from the given ``x`` (as above).
    * only ``x`` missing: class-informative ``x = centroid[y] + noise * N(0, I)`` with
      centroids ``~ N(0, I)`` for integer class labels (``classes`` is ignored); ``x ~ N(0, I)``
      for multi-label or real-valued targets.
    * all three masks missing: :func:`random_split_masks` 60/20/20 with ``seed``; vertices with
      ``y < 0`` (unlabelled classes) or without any known target (a row of ``NaN``) are left
      out of all masks.

    Args:
        data (Data): a canonical graph (see :func:`~lightning_gnn_dist.data.graph.canonicalize`).
        features (int): feature width ``d`` of generated features. (default: ``32``)
        classes (int): number of classes of generated labels. (default: ``8``)
        seed (int): seed of everything generated. (default: ``0``)
        noise (float): standard deviation of the noise around class centroids (only used when
            ``y`` is given and ``x`` is not). (default: ``3.0``)

    Returns:
        A copy of ``data`` with ``x`` ``[N, d] float32``, ``y`` (``[N] int64`` when generated)
        and ``train_mask``,
        ``val_mask``, ``test_mask`` ``[N] bool``.

    Raises:
        ValueError: only some of the three masks are present, or a bad argument.
    """
    num_nodes = _check_int("num_nodes", data.num_nodes, 1)
    features = _check_int("features", features, 1)
    classes = _check_int("classes", classes, 1)
    mask_keys = ("train_mask", "val_mask", "test_mask")
    present = [getattr(data, key, None) is not None for key in mask_keys]
    if any(present) and not all(present):
        have = ", ".join(key for key, p in zip(mask_keys, present, strict=True) if p)
        raise ValueError(
            f"the graph has {have} but not all of train_mask, val_mask, test_mask; "
            "give all three masks or none (then a seeded 60/20/20 split is made)"
        )
    data = data.clone()
    x = getattr(data, "x", None)
    y = getattr(data, "y", None)
    if y is not None and y.size(0) != num_nodes:
        raise ValueError(
            f"y must hold one row per vertex, shape [{num_nodes}] or [{num_nodes}, k] "
            f"(got {tuple(y.shape)})"
        )
    classes_given = y is not None and y.numel() == num_nodes
    if classes_given and y.is_floating_point():  # integral floats (NaN = unlabelled) are classes
        known = y[~torch.isnan(y)]
        classes_given = bool((known == known.round()).all())
    if x is None and (y is None or not classes_given):
        rng = _rng(seed, _STREAM_FEATURES)
        x = torch.from_numpy(rng.standard_normal((num_nodes, features), dtype=np.float32))
    if y is None:
        edge_index = data.edge_index
        if edge_index is None:
            edge_index = torch.empty(2, 0, dtype=torch.long)
        x_np = x.detach().cpu().to(torch.float32).reshape(num_nodes, -1).numpy()
        weight = _rng(seed, _STREAM_TEACHER).standard_normal((x_np.shape[1], classes))
        projected = (x_np @ weight.astype(np.float32)).astype(np.float64)  # [N, classes]
        scores = _mean_aggregation(projected, edge_index, num_nodes, hops=2)
        y = torch.from_numpy(np.argmax(scores, axis=1).astype(np.int64))
    elif x is None:
        labels = torch.nan_to_num(y.detach().cpu().reshape(-1).double(), nan=-1.0).long().numpy()
        num_classes = max(int(labels.max()) + 1, 1)
        x = _class_features(labels, num_classes, features, noise, _rng(seed, _STREAM_FEATURES))
    data.x, data.y = x, y

    if not any(present):
        if y.is_floating_point():  # a vertex without any known target (all NaN) is unlabelled
            labelled = ~torch.isnan(y.reshape(num_nodes, -1)).all(1)
        else:
            labelled = y.reshape(num_nodes, -1)[:, 0] >= 0  # False for -1
        train, val, test = random_split_masks(num_nodes, seed)
        data.train_mask, data.val_mask, data.test_mask = (
            train & labelled,
            val & labelled,
            test & labelled,
        )
    return data


def sbm(
    num_nodes: int = 1000,
    num_classes: int = 4,
    avg_degree: float = 10.0,
    p_ratio: float = 10.0,
    features: int = 32,
    seed: int = 0,
    noise: float = 3.0,
) -> Data:
    """An undirected stochastic block model (planted partition) with class-informative features.

    Vertex ``v`` belongs to class ``y[v]`` (balanced classes, sizes differ by at most one,
    randomly placed ids). ``round(num_nodes * avg_degree / 2)`` edge draws are made: a uniform
    endpoint ``u`` and a second endpoint drawn from ``u``'s class with weight ``p_ratio`` per
    vertex and from the other classes with weight ``1`` per vertex, so the intra-class edge
    probability is ``p_ratio`` times the inter-class one. Self loops are dropped and duplicate
    draws merged, so the average degree is slightly below ``avg_degree``. Features are
    ``centroid[y] + noise * N(0, I)`` with centroids ``~ N(0, I)``.

    Args:
        num_nodes (int): number of vertices ``N``. (default: ``1000``)
        num_classes (int): number of planted classes ``C``. (default: ``4``)
        avg_degree (float): expected average (undirected) degree. (default: ``10.0``)
        p_ratio (float): intra- over inter-class edge probability; ``1`` gives an Erdős–Rényi
            graph. (default: ``10.0``)
        features (int): feature width ``d``. (default: ``32``)
        seed (int): seed of graph, features and split. (default: ``0``)
        noise (float): standard deviation of the feature noise. (default: ``3.0``)

    Returns:
        A canonical ``Data`` (both directions of every edge) with ``x`` ``[N, d] float32``,
        ``y`` ``[N] int64``, a 60/20/20 split and ``name = "sbm"``.
    """
    num_nodes = _check_int("num_nodes", num_nodes, 1)
    num_classes = _check_int("num_classes", num_classes, 1, num_nodes)
    features = _check_int("features", features, 1)
    _check_finite(avg_degree=avg_degree, p_ratio=p_ratio, noise=noise)
    if not avg_degree >= 0:
        raise ValueError(f"avg_degree must be >= 0 (got {avg_degree})")
    if not p_ratio > 0:
        raise ValueError(f"p_ratio must be > 0 (got {p_ratio}); 1 means no class structure")
    if not noise >= 0:
        raise ValueError(f"noise must be >= 0 (got {noise})")
    check_graph_fits(
        "sbm",
        num_nodes,
        num_nodes * avg_degree,
        features,
        what=f"num_nodes={num_nodes}, avg_degree={avg_degree:g}",
    )
    rng = _rng(seed, _STREAM_GRAPH)

    # Blocks are contiguous id ranges before the final permutation.
    block_of = np.arange(num_nodes, dtype=np.int64) * num_classes // num_nodes
    block_size = np.bincount(block_of, minlength=num_classes)
    block_start = np.cumsum(block_size) - block_size

    num_draws = int(round(num_nodes * avg_degree / 2))
    u = rng.integers(0, num_nodes, num_draws)
    block = block_of[u]
    inside = block_size[block]
    outside = num_nodes - inside
    p_same = p_ratio * inside / (p_ratio * inside + outside)
    same = rng.random(num_draws) < p_same
    v_same = block_start[block] + rng.integers(0, inside)
    v_other = rng.integers(0, np.maximum(outside, 1))
    v_other += np.where(v_other >= block_start[block], inside, 0)  # skip u's own block
    v = np.where(same | (outside == 0), v_same, v_other)
    keep = u != v
    u, v = u[keep], v[keep]

    permutation = _rng(seed, _STREAM_PERMUTATION).permutation(num_nodes)
    src = permutation[np.concatenate([u, v])]
    dst = permutation[np.concatenate([v, u])]
    src, dst = distinct_edges(src, dst, num_nodes)  # a simple graph: repeated draws merge
    y = np.empty(num_nodes, dtype=np.int64)
    y[permutation] = block_of

    x = _class_features(y, num_classes, features, noise, _rng(seed, _STREAM_FEATURES))
    train, val, test = random_split_masks(num_nodes, seed)
    data = Data(
        x=x,
        y=torch.from_numpy(y),
        edge_index=torch.from_numpy(np.stack([src, dst])),
        train_mask=train,
        val_mask=val,
        test_mask=test,
        num_nodes=num_nodes,
    )
    data = canonicalize(data, source="sbm")
    data.name = "sbm"
    return data


def rmat_edge_index(
    scale: int,
    edge_factor: int = 16,
    a: float = 0.57,
    b: float = 0.19,
    c: float = 0.19,
    seed: int = 0,
) -> Tensor:
    """Edges of a directed R-MAT graph on ``2**scale`` vertices (Chakrabarti et al., Graph500).

    Each of the ``edge_factor * 2**scale`` draws picks, for every one of the ``scale`` bit
    levels, a quadrant of the adjacency matrix with probabilities ``a`` (top left), ``b`` (top
    right), ``c`` (bottom left) and ``d = 1 - a - b - c``; the row bit goes to the source and
    the column bit to the target. Vertex ids are then randomly permuted (so id order carries no
    locality), self loops are dropped and duplicate edges merged.

    Args:
        scale (int): ``log2`` of the number of vertices, ``1..31``.
        edge_factor (int): edge draws per vertex. (default: ``16``)
        a (float): probability of the top-left quadrant. (default: ``0.57``)
        b (float): probability of the top-right quadrant. (default: ``0.19``)
        c (float): probability of the bottom-left quadrant. (default: ``0.19``)
        seed (int): seed. (default: ``0``)

    Returns:
        Coalesced ``edge_index`` ``[2, E] int64`` with ``E <= edge_factor * 2**scale``.
    """
    scale = _check_int("scale", scale, 1, 31)
    edge_factor = _check_int("edge_factor", edge_factor, 1)
    _check_finite(a=a, b=b, c=c)
    check_graph_fits(
        "rmat", 2**scale, edge_factor * 2**scale, what=f"scale={scale}, edge_factor={edge_factor}"
    )
    d = 1.0 - a - b - c
    if min(a, b, c) < 0 or d < -1e-12:
        raise ValueError(
            f"R-MAT probabilities must be >= 0 with a + b + c <= 1 (got a={a}, b={b}, c={c})"
        )
    num_nodes = 1 << scale
    num_draws = edge_factor * num_nodes
    rng = _rng(seed, _STREAM_GRAPH)
    dtype = np.int32 if scale <= 30 else np.int64
    src = np.zeros(num_draws, dtype=dtype)
    dst = np.zeros(num_draws, dtype=dtype)
    r = np.empty(num_draws, dtype=np.float32)
    a32, ab, abc = np.float32(a), np.float32(a + b), np.float32(a + b + c)
    for _ in range(scale):  # a loop over bit levels, vectorised over all edges
        rng.random(out=r, dtype=np.float32)
        np.left_shift(src, 1, out=src)
        np.bitwise_or(src, r >= ab, out=src)  # row bit: quadrants c, d
        np.left_shift(dst, 1, out=dst)
        np.bitwise_or(dst, (r >= a32) & ((r < ab) | (r >= abc)), out=dst)  # column bit: b, d
    del r
    permutation = _rng(seed, _STREAM_PERMUTATION).permutation(num_nodes).astype(dtype)
    src, dst = permutation[src], permutation[dst]
    keep = src != dst
    key = (src[keep].astype(np.int64) << scale) | dst[keep]
    del src, dst, keep
    key = sorted_unique(key)
    return torch.from_numpy(np.stack([key >> scale, key & (num_nodes - 1)]))


def rmat(
    scale: int = 14,
    edge_factor: int = 16,
    a: float = 0.57,
    b: float = 0.19,
    c: float = 0.19,
    features: int = 32,
    classes: int = 8,
    seed: int = 0,
) -> Data:
    """A directed R-MAT power-law graph with synthetic features, labels and split.

    The graph is :func:`rmat_edge_index`; features, teacher labels and the 60/20/20 split come
    from :func:`add_synthetic_features`. Many vertices are isolated or have no in-neighbours;
    their labels depend on their own features only.

    Args:
        scale (int): ``log2`` of the number of vertices ``N``. (default: ``14``)
        edge_factor (int): edge draws per vertex. (default: ``16``)
        a (float): probability of the top-left quadrant. (default: ``0.57``)
        b (float): probability of the top-right quadrant. (default: ``0.19``)
        c (float): probability of the bottom-left quadrant. (default: ``0.19``)
        features (int): feature width ``d``. (default: ``32``)
        classes (int): number of classes. (default: ``8``)
        seed (int): seed of graph, features, labels and split. (default: ``0``)

    Returns:
        A canonical ``Data`` with ``x`` ``[N, d] float32``, ``y`` ``[N] int64``, masks and
        ``name = "rmat"``.
    """
    scale = _check_int("scale", scale, 1, 31)
    edge_factor = _check_int("edge_factor", edge_factor, 1)
    features = _check_int("features", features, 1)
    check_graph_fits(
        "rmat",
        2**scale,
        edge_factor * 2**scale,
        features,
        what=f"scale={scale}, edge_factor={edge_factor}, features={features}",
    )
    edge_index = rmat_edge_index(scale, edge_factor, a, b, c, seed)
    data = Data(edge_index=edge_index, num_nodes=1 << scale)
    data = add_synthetic_features(data, features=features, classes=classes, seed=seed)
    data.name = "rmat"
    return data
