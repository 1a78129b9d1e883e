"""Link-prediction batches of one rank: its supervision pairs, their negatives, full batches.

A rank serves the pairs whose source it owns (:mod:`~lightning_gnn_dist.data.links`). Every
batch has PyG's link layout — ``edge_label_index [2, n + n·k]`` (the positives, then their
negatives in pair-major order: negative ``j`` of positive ``i`` at ``n + i·k + j``) and
``edge_label`` (the positives' labels, then ``0``) — plus ``num_positives`` (``n``),
``num_negatives`` (``k``), ``input_id`` (the positives' positions in their split) and, where
negatives were filtered, ``negative_valid [n·k] bool``. A full batch's ids are dataset ids and
it carries ``link_directory`` (:func:`~lightning_gnn_dist.nn.link.endpoint_rows` fetches the far
endpoints' rows with it); a sampled batch's index its own rows
(:mod:`~lightning_gnn_dist.loaders.link_neighbor`).

Evaluation batches (``val``, ``test``) hold ``eval_num_negatives`` negatives per positive
(global, a fixed stream per split, or the split's stored per-positive negatives), and the
split's other stored negative pairs (label ``0``) as ``pool_index [2, m]``, the Hits@K pool.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Iterator
from dataclasses import dataclass

import torch
from torch import Tensor
from torch_geometric.data import Data

from lightning_gnn_dist.data.negatives import STREAMS, filtered_negatives


@dataclass
class LinkPairs:
    """One split's supervision pairs on one rank.

    Attributes:
        index: ``[2, n] int64`` positive pairs (dataset ids), sources owned here.
        label: ``[n]`` their labels.
        pair_id: ``[n] int64`` their positions in the split (keys of their negatives' stream).
        num_global: positives of the split over all ranks.
        counts: ``[P]`` positives of every rank (steps per epoch agree from it).
        per_positive: ``[n, K] int64`` stored negative targets of each positive, or ``None``.
        pool: ``[2, m] int64`` other stored negative pairs (a Hits@K pool), or ``None``.
    """

    index: Tensor
    label: Tensor
    pair_id: Tensor
    num_global: int
    counts: list[int]
    per_positive: Tensor | None = None
    pool: Tensor | None = None

    @classmethod
    def of_part(cls, part, split: str, link_meta: dict) -> LinkPairs:
        """The pairs of ``split`` stored in ``part`` (``link_meta``: the store's ``link``)."""
        index = part.link_label_index.get(split)
        if index is None:
            empty = torch.empty(2, 0, dtype=torch.long)
            return cls(empty, torch.empty(0), empty[0], 0, [0] * part.num_parts)
        label, ids = part.link_label[split], part.link_label_id[split]
        positive = label != 0
        num_global = int(link_meta["num_positives"][split])
        pairs = cls(index[:, positive], label[positive], ids[positive], num_global, [])
        negatives = index[:, ~positive]
        k = int(link_meta.get("negatives_per_positive", {}).get(split, 0))
        if k and negatives.size(1) == k * pairs.index.size(1):
            # stored per positive, positive-major after the positives (ogbl-citation2)
            owner = (ids[~positive] - num_global) // k
            order = torch.argsort(owner, stable=True)
            pairs.per_positive = negatives[1, order].view(-1, k)
        elif negatives.size(1):
            pairs.pool = negatives
        return pairs

    @property
    def num_positives(self) -> int:
        return int(self.index.size(1))


class NegativeSampler:
    """Draws the negatives of a rank's pairs (:mod:`~lightning_gnn_dist.data.negatives`).

    Args:
        negatives: ``"global"``, ``"local"`` or ``"in-batch"``.
        num_negatives: ``k`` per positive.
        num_nodes: vertices of the graph.
        seed: base seed of the stream.
        pool: ``local``: this rank's owned dataset ids.
        known: ``filter_true``: sorted keys of the true edges to redraw, else ``None``.
    """

    def __init__(
        self,
        negatives: str,
        num_negatives: int,
        num_nodes: int,
        seed: int = 0,
        pool: Tensor | None = None,
        known: Tensor | None = None,
    ) -> None:
        self.negatives, self.num_negatives = negatives, num_negatives
        self.num_nodes, self.seed, self.pool, self.known = num_nodes, seed, pool, known

    def draw(
        self, src: Tensor, dst: Tensor, pair_id: Tensor, epoch: int, stream: int
    ) -> tuple[Tensor, Tensor | None]:
        """``(targets [n, k], valid [n, k] bool or None)`` of the pairs ``(src, dst)``."""
        known = self.known if self.known is not None else torch.empty(0, dtype=torch.long)
        targets, valid = filtered_negatives(
            self.negatives, src, dst, pair_id, self.num_negatives, known,
            num_nodes=self.num_nodes, seed=self.seed, epoch=epoch, stream=stream, pool=self.pool,
        )  # fmt: skip
        return targets, (None if self.known is None else valid)


def link_batch_fields(
    pairs: LinkPairs, rows: Tensor, targets: Tensor, valid: Tensor | None
) -> dict[str, Tensor | int]:
    """The link fields of a batch of the positives ``rows`` (positions in ``pairs``) with their
    negative ``targets [n, k]`` (dataset ids)."""
    index = pairs.index[:, rows]
    n, k = targets.shape
    negative = torch.stack([index[0].repeat_interleave(k), targets.reshape(-1)])
    label = pairs.label[rows]
    fields: dict[str, Tensor | int] = {
        "edge_label_index": torch.cat([index, negative], 1),
        "edge_label": torch.cat([label, label.new_zeros(n * k)]),
        "num_positives": n,
        "num_negatives": k,
        "input_id": pairs.pair_id[rows],
    }
    if valid is not None:
        fields["negative_valid"] = valid.reshape(-1)
    return fields


class FullLinkLoader:
    """One batch per epoch (not a ``DataLoader``): the rank's whole part with one split's pairs.

    Training batches draw fresh negatives every epoch (``epoch`` is part of the stream: a
    resumed run draws the epoch's own); evaluation batches the same negatives every time, in
    ``eval_chunks`` chunks of positives (every rank the same number, see :attr:`chunks`).

    Args:
        base: the part's full batch (``x``, ``edge_index``, attributes, ``global_ids``).
        pairs: the split's :class:`LinkPairs`.
        sampler: the split's :class:`NegativeSampler`.
        split: ``"train"``, ``"val"`` or ``"test"``.
        directory: the partition's :class:`~lightning_gnn_dist.comm.score.VertexDirectory`.
        chunk_size: evaluation positives per chunk (bounds the rows one chunk fetches).
    """

    def __init__(
        self,
        base: Data,
        pairs: LinkPairs,
        sampler: NegativeSampler,
        split: str,
        directory=None,
        chunk_size: int | None = None,
    ) -> None:
        self.base, self.pairs, self.split = base, pairs, split
        self.negative_sampler = sampler
        self.directory, self.epoch = directory, 0
        self.train = split == "train"
        most = max(pairs.counts or [pairs.num_positives])
        self.chunks = 1 if self.train or not chunk_size else max(1, math.ceil(most / chunk_size))
        # Lightning passes the epoch to loader.sampler.set_epoch before every epoch
        self.sampler = _EpochSetter(self)
        self.batch_sampler = None

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch

    def __len__(self) -> int:
        return 1

    def make_batch(self, epoch: int) -> Data:
        pairs, stream = self.pairs, STREAMS.get(self.split, 0)
        draw_epoch = epoch if self.train else 0  # evaluation: the same negatives every time
        rows = torch.arange(pairs.num_positives)
        if pairs.per_positive is not None:
            targets, valid = pairs.per_positive, None
        else:
            src, dst = pairs.index
            targets, valid = self.negative_sampler.draw(src, dst, pairs.pair_id, draw_epoch, stream)
        batch = copy.copy(self.base)
        for key, value in link_batch_fields(pairs, rows, targets, valid).items():
            batch[key] = value
        batch.num_positives_global = pairs.num_global
        batch.link_chunks = self.chunks
        if pairs.pool is not None:
            batch.pool_index = pairs.pool
        if self.directory is not None:
            batch.link_directory = self.directory
        return batch

    def __iter__(self) -> Iterator[Data]:
        epoch = self.epoch
        self.epoch += 1
        yield self.make_batch(epoch)


class _EpochSetter:
    def __init__(self, loader) -> None:
        self.loader = loader

    def set_epoch(self, epoch: int) -> None:
        self.loader.set_epoch(epoch)


__all__ = ["FullLinkLoader", "LinkPairs", "NegativeSampler", "link_batch_fields"]
