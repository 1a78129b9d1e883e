"""Negative targets for link prediction, drawn at run time from counter-based streams.

Every negative keeps its positive's source and replaces the target (tail corruption: DGL's
``PerSourceUniform(k)``, GraphStorm's ``uniform``, ogbl-citation2's evaluation protocol), so
a pair is always scored on the rank that owns its source. ``k = num_negatives`` per positive.

* ``"global"``: target ``j`` of pair ``i`` uniform over all ``N`` vertices,
  ``hash(seed, epoch, stream, id(i), j) · N / 2³²`` — a function of the pair's position in its
  split, so the same on any number of ranks as in a single-process run: training is exact. The
  targets' embedding rows (mostly remote) arrive by the score exchange: 8 B of id and ``4·d`` B of
  row per distinct row and step, the gradients back.
* ``"local"``: uniform over the vertices this rank owns (GraphStorm's ``localuniform``): no row
  travels for them; the draw depends on the partition.
* ``"in-batch"``: the target of pair ``(i + j + 1) mod n`` of the rank's batch (GraphStorm's
  ``inbatch``): no row beyond the positives' travels.

``filter_true`` (where asked) redraws a global or local negative that is a known true edge of
its source — an edge of the training graph or a training supervision pair
(:func:`known_edge_keys`) — up to :data:`MAX_REDRAWS` times with the next stream, then masks
it out (DGL's ``GlobalUniform`` may return fewer negatives the same way). Validation and test
edges are never filtered against in training: knowing them would leak them.
"""

from __future__ import annotations

import torch
from torch import Tensor

from lightning_gnn_dist.data.sampler import hash_keys

NEGATIVE_SAMPLERS = ("global", "local", "in-batch")
MAX_REDRAWS = 8
STREAMS = {"train": 0, "val": 1, "test": 2}
"""The stream tag of each split's negatives: validation and test draw their own."""


def check_negatives(negatives: str, num_negatives: int, name: str = "num_negatives") -> None:
    """Refuse an unknown sampler or a count below 1, one line each.

    Raises:
        ValueError: naming the value and the choices.
    """
    if negatives not in NEGATIVE_SAMPLERS:
        raise ValueError(
            f"undefined negatives option {negatives!r}; choose one of "
            f"{', '.join(map(repr, NEGATIVE_SAMPLERS))}"
        )
    if not isinstance(num_negatives, int) or isinstance(num_negatives, bool) or num_negatives < 1:
        raise ValueError(
            f"{name} must be an integer >= 1 negatives per positive pair (got {num_negatives!r}); "
            "a link predictor trained without negatives learns to call every pair an edge"
        )


def check_negative_count(num_negatives: int, num_nodes: int, name: str = "num_negatives") -> None:
    """Refuse more negatives per positive than the graph has vertices.

    Raises:
        ValueError: naming both numbers.
    """
    if num_negatives > num_nodes:
        raise ValueError(
            f"{name}={num_negatives} negatives per positive pair, but the graph has only "
            f"{num_nodes} vertices; use at most {num_nodes}"
        )


def _uniform(key: Tensor, size: int) -> Tensor:
    """``key`` (32-bit hashes) → integers uniform in ``[0, size)``."""
    return (key * size) >> 32


def draw_negatives(
    negatives: str,
    dst: Tensor,
    pair_id: Tensor,
    num_negatives: int,
    *,
    num_nodes: int,
    seed: int,
    epoch: int,
    stream: int = 0,
    pool: Tensor | None = None,
    attempt: int = 0,
) -> Tensor:
    """``[n, k]`` negative targets (dataset ids) of ``n`` positive pairs.

    Args:
        negatives: ``"global"``, ``"local"`` or ``"in-batch"`` (module docstring).
        dst: ``[n] int64`` the positives' targets (``in-batch`` uses them).
        pair_id: ``[n] int64`` each pair's position in its split (keys its stream).
        num_negatives: ``k``.
        num_nodes: vertices of the graph (``global``'s range).
        seed, epoch, stream: the random stream (``stream``: :data:`STREAMS` of the split).
        pool: ``local``: the vertices to draw from (this rank's owned dataset ids).
        attempt: redraw number (``filter_true``).
    """
    k = num_negatives
    if negatives == "in-batch":
        n = dst.numel()
        shift = (torch.arange(n).unsqueeze(1) + torch.arange(1, k + 1)) % max(n, 1)
        return dst[shift]
    column = torch.arange(k) + attempt * k
    key = hash_keys(seed, epoch, stream, pair_id.unsqueeze(1), column)
    if negatives == "global":
        return _uniform(key, num_nodes)
    if pool is None or pool.numel() == 0:
        raise ValueError("local negatives need the rank's own vertices (pool)")
    return pool[_uniform(key, pool.numel())]


def filtered_negatives(
    negatives: str,
    src: Tensor,
    dst: Tensor,
    pair_id: Tensor,
    num_negatives: int,
    known: Tensor,
    **stream,
) -> tuple[Tensor, Tensor]:
    """:func:`draw_negatives` with known true edges redrawn: ``(targets [n, k], valid [n, k]
    bool)``; ``known`` are the sorted keys ``src · N + dst`` of :func:`known_edge_keys`. A
    negative still true after :data:`MAX_REDRAWS` redraws is ``valid = False``."""
    num_nodes = stream["num_nodes"]
    targets = draw_negatives(negatives, dst, pair_id, num_negatives, **stream)
    if negatives == "in-batch" or known.numel() == 0:
        return targets, torch.ones_like(targets, dtype=torch.bool)
    bad = _contains(known, src.unsqueeze(1) * num_nodes + targets)
    for attempt in range(1, MAX_REDRAWS + 1):
        if not bool(bad.any()):
            break
        rows = bad.any(1).nonzero().view(-1)
        redraw = draw_negatives(
            negatives, dst[rows], pair_id[rows], num_negatives, attempt=attempt, **stream
        )
        replace = bad[rows]
        targets[rows] = torch.where(replace, redraw, targets[rows])
        bad[rows] = replace & _contains(known, src[rows].unsqueeze(1) * num_nodes + targets[rows])
    return targets, ~bad


def _contains(sorted_keys: Tensor, queries: Tensor) -> Tensor:
    if sorted_keys.numel() == 0:
        return torch.zeros_like(queries, dtype=torch.bool)
    pos = torch.searchsorted(sorted_keys, queries).clamp(max=sorted_keys.numel() - 1)
    return sorted_keys[pos] == queries


def known_edge_keys(part, train_pairs: Tensor | None = None) -> Tensor:
    """Sorted keys ``src · N + dst`` of the true edges a rank knows for its owned sources:
    every out-edge of an owned vertex in the training (message-passing) graph — its local
    edges, and the ones into other parts that its halo send plan lists
    (``send_edge_targets``) — and the training supervision pairs ``train_pairs [2, n]``
    (default: the part's positive training pairs).

    Raises:
        ValueError: a part without ``send_edge_targets`` (a vertex cut, or a store written
            before they existed).
    """
    if getattr(part, "send_edge_targets", None) is None or part.send_edge_offsets is None:
        raise ValueError(
            "filter_true needs each vertex's out-edges, which a vertex partition's send plan "
            "holds (send_edge_targets); use a vertex method (hypergraph, metis, random) or "
            "filter_true=False"
        )
    n, owned = part.num_nodes_global, part.num_owned
    ids = part.global_ids
    local = part.edge_index[:, part.edge_index[0] < owned]
    keys = [ids[local[0]] * n + ids[local[1]]]
    per_entry = torch.diff(part.send_edge_offsets)
    sources = ids[torch.repeat_interleave(part.send_index, per_entry)]
    keys.append(sources * n + part.send_edge_targets)
    if train_pairs is None:
        pairs = part.link_label_index.get("train")
        if pairs is not None:
            train_pairs = pairs[:, part.link_label["train"] != 0]
    if train_pairs is not None:
        keys.append(train_pairs[0] * n + train_pairs[1])
    return torch.unique(torch.cat(keys))


def graph_edge_keys(
    edge_index: Tensor, num_nodes: int, train_pairs: Tensor | None = None
) -> Tensor:
    """:func:`known_edge_keys` of a whole graph (single process): every edge of the training
    graph ``edge_index`` and the pairs ``train_pairs``."""
    keys = [edge_index[0] * num_nodes + edge_index[1]]
    if train_pairs is not None:
        keys.append(train_pairs[0] * num_nodes + train_pairs[1])
    return torch.unique(torch.cat(keys))


def negative_pairs(src: Tensor, targets: Tensor) -> Tensor:
    """``[2, n·k]``: the pairs ``(src[i], targets[i, j])`` in pair-major order."""
    k = targets.size(1)
    return torch.stack([src.repeat_interleave(k), targets.reshape(-1)])


__all__ = [
    "MAX_REDRAWS",
    "NEGATIVE_SAMPLERS",
    "STREAMS",
    "check_negative_count",
    "check_negatives",
    "draw_negatives",
    "filtered_negatives",
    "graph_edge_keys",
    "known_edge_keys",
    "negative_pairs",
]
