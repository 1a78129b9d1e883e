"""``LinkNeighborLoader``: sampled link-prediction mini-batches in PyG's layout, owner-compute.

Each rank draws batches from the supervision pairs whose source it owns. A batch's seeds are
the distinct endpoints of its positives and their negatives (dataset ids, ascending, as PyG's
``LinkNeighborLoader`` orders them); their ``L``-hop neighbourhoods are sampled on the neighbour
machinery of :mod:`~lightning_gnn_dist.loaders.neighbor` — remote vertices by their owners in
one request per hop (the seeds too: a pair's target may live anywhere), rows fetched in one
message per step, the next batch prepared while the current step runs (``prefetch``). The draw
depends on ``(seed, epoch, step, rank)`` and dataset ids only, so a single process redraws the
same batch from the whole graph (``tests/loaders/test_link_neighbor.py``).

A batch is a :class:`~torch_geometric.data.Data` laid out as
:class:`~lightning_gnn_dist.loaders.neighbor.NeighborLoader`'s (``x``, ``edge_index``, ``n_id``, ``e_id``, attributes,
``num_sampled_nodes``/``num_sampled_edges``, ``batch_size`` = the seeds) plus the link fields of
:mod:`~lightning_gnn_dist.loaders.link` with ``edge_label_index`` indexing the batch's rows
(seeds first: the model's first ``batch_size`` output rows are the endpoints').

``exclude=True`` (training; DGL's ``exclude="reverse_id"``) removes every sampled edge that joins
the two endpoints of one of the batch's positives, in either direction, so a pair is never
predicted from its own edge.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor
from torch_geometric.data import Data

from lightning_gnn_dist.data.csr import prepare_batch_adjacency
from lightning_gnn_dist.data.negatives import STREAMS
from lightning_gnn_dist.data.sampler import NeighborSampler, SampledSubgraph, stream_key
from lightning_gnn_dist.loaders.link import LinkPairs, NegativeSampler, link_batch_fields
from lightning_gnn_dist.loaders.stepping import SteppedLoader, add_fetched_rows


def exclude_pair_edges(
    graph: SampledSubgraph, node_ids: Tensor, pairs: Tensor, num_nodes: int
) -> SampledSubgraph:
    """``graph`` without the sampled edges that join the endpoints of a pair of ``pairs
    [2, n]`` in either direction (``node_ids``: dataset id of each batch row)."""
    if graph.edge_index.size(1) == 0 or pairs.size(1) == 0:
        return graph
    # A pair's endpoints are seeds, the batch's first rows: only edges between two seeds can
    # join one, so only those are looked up (most sampled edges leave the seeds).
    num_seeds = int(graph.num_sampled_nodes[0])
    edge_index = graph.edge_index
    candidates = torch.nonzero((edge_index[0] < num_seeds) & (edge_index[1] < num_seeds)).view(-1)
    if candidates.numel() == 0:
        return graph
    keys = torch.unique(
        torch.cat([pairs[0] * num_nodes + pairs[1], pairs[1] * num_nodes + pairs[0]])
    )
    query = node_ids[edge_index[0, candidates]] * num_nodes + node_ids[edge_index[1, candidates]]
    pos = torch.searchsorted(keys, query).clamp(max=keys.numel() - 1)
    dropped = candidates[keys[pos] == query]
    if dropped.numel() == 0:
        return graph
    keep = torch.ones(edge_index.size(1), dtype=torch.bool)
    keep[dropped] = False
    hop = torch.repeat_interleave(
        torch.arange(len(graph.num_sampled_edges)), torch.tensor(graph.num_sampled_edges)
    )
    counts = torch.bincount(hop[keep], minlength=len(graph.num_sampled_edges)).tolist()
    return SampledSubgraph(
        graph.n_id,
        graph.edge_index[:, keep],
        graph.num_sampled_nodes,
        counts,
        {key: value[keep] for key, value in graph.edge_data.items()},
    )


class LinkNeighborLoader(SteppedLoader):
    """Sampled mini-batches of a rank's supervision pairs (module docstring).

    Args:
        store: a :class:`~lightning_gnn_dist.loaders.graph_store.PartitionedGraphStore` (or a
            ``LocalGraphStore``: one process, routing ids are dataset ids).
        num_neighbors (list[int]): fan-out per hop, ``-1`` for all in-neighbours.
        pairs (LinkPairs): the split's pairs on this rank.
        negative_sampler (NegativeSampler): draws the positives' negatives.
        directory: the partition's :class:`~lightning_gnn_dist.comm.score.VertexDirectory`
            (dataset ids → routing ids); ``None`` with a ``LocalGraphStore``.
        split (str): ``"train"`` (fresh negatives per epoch, ``exclude`` applies) or an
            evaluation split (the same negatives every time). (default: ``"train"``)
        batch_size (int): positives per step at most. (default: ``1``)
        shuffle (bool): reshuffle the pairs every epoch. (default: ``False``)
        replace (bool): sample neighbours with replacement. (default: ``False``)
        seed (int): base seed of the draw. (default: ``0``)
        num_steps (int, optional): steps per epoch, the same on every rank. (default:
            ``ceil(max(pairs.counts) / batch_size)``)
        exclude (bool): drop the batch's positives' own edges (training). (default: ``True``)
        prefetch (bool): prepare the next batch in a background thread. (default: ``False``)
        device: where batches go (pinned, asynchronous copies to CUDA). (default: ``None``)
    """

    def __init__(
        self,
        store,
        num_neighbors: list[int],
        pairs: LinkPairs,
        negative_sampler: NegativeSampler,
        directory=None,
        split: str = "train",
        batch_size: int = 1,
        shuffle: bool = False,
        replace: bool = False,
        seed: int = 0,
        num_steps: int | None = None,
        exclude: bool = True,
        prefetch: bool = False,
        device: torch.device | str | None = None,
    ) -> None:
        if batch_size < 1:
            raise ValueError(f"batch_size must be >= 1 (got {batch_size})")
        self.store, self.neighbor_sampler = store, NeighborSampler(num_neighbors, replace)
        self.pairs, self.negative_sampler, self.directory = pairs, negative_sampler, directory
        self.split, self.train = split, split == "train"
        self.batch_size, self.shuffle, self.seed = batch_size, shuffle, seed
        self.exclude = exclude and self.train
        most = max(pairs.counts) if pairs.counts else pairs.num_positives
        self.num_steps = num_steps if num_steps is not None else math.ceil(most / batch_size)
        if self.num_steps > 0 and pairs.num_positives == 0:
            raise ValueError(
                f"rank {store.rank} has no {split} pairs but {self.num_steps} steps must run; use "
                "fewer parts or a partition that spreads the pairs' sources"
            )
        self._start_stepping(prefetch, device)

    @property
    def num_items(self) -> int:
        return self.pairs.num_positives

    def seeds_and_labels(self, positions: Tensor, epoch: int) -> tuple[Tensor, dict]:
        """``(seeds, fields)``: the batch's distinct endpoints (dataset ids, ascending) and its
        link fields with ``edge_label_index`` over the seeds' positions."""
        pairs = self.pairs
        if pairs.per_positive is not None:
            targets, valid = pairs.per_positive[positions], None
        else:
            src, dst = pairs.index[:, positions]
            draw_epoch = epoch if self.train else 0
            stream = STREAMS.get(self.split, 0)
            targets, valid = self.negative_sampler.draw(
                src, dst, pairs.pair_id[positions], draw_epoch, stream
            )
        fields = link_batch_fields(pairs, positions, targets, valid)
        seeds, inverse = torch.unique(fields["edge_label_index"].reshape(-1), return_inverse=True)
        fields["edge_label_index"] = inverse.view(2, -1)
        return seeds, fields

    def make_batch(self, positions: Tensor, step: int, epoch: int | None = None) -> Data:
        """Sample and fetch one batch (collective on a partitioned store)."""
        epoch = self.epoch if epoch is None else epoch
        seeds, fields = self.seeds_and_labels(positions, epoch)
        routing = seeds if self.directory is None else self.directory.routing(seeds)
        stream = stream_key(self.seed, epoch, step, self.store.rank)
        replace = self.neighbor_sampler.replace

        def sample_hop(frontier: Tensor, fanout: int, stream: int):
            # a pair's target may be owned anywhere: every hop routes, the seeds' too
            return self.store.sample_hop(frontier, fanout, stream, replace, owned=False)

        graph = self.neighbor_sampler.sample(
            routing, stream, sample_hop, num_ids=getattr(self.store, "num_routing_ids", None)
        )
        exact = all(fanout == -1 for fanout in self.neighbor_sampler.num_neighbors)
        rows = self.store.fetch(graph.n_id, degrees=exact)
        if self.exclude:
            n = fields["num_positives"]
            positives = seeds[fields["edge_label_index"][:, :n]]
            graph = exclude_pair_edges(graph, rows.ids, positives, self.num_nodes)
        prepare_batch_adjacency(graph.edge_index, graph.num_sampled_nodes, graph.num_sampled_edges)
        batch = Data(
            x=rows.x,
            edge_index=graph.edge_index,
            n_id=rows.ids,
            batch_size=int(seeds.numel()),
            num_sampled_nodes=graph.num_sampled_nodes,
            num_sampled_edges=graph.num_sampled_edges,
            num_nodes=int(graph.n_id.numel()),
            **fields,
        )
        return add_fetched_rows(batch, rows, graph.edge_data, exact)

    @property
    def num_nodes(self) -> int:
        return int(self.negative_sampler.num_nodes)

    def __repr__(self) -> str:
        return (
            f"LinkNeighborLoader(num_neighbors={self.neighbor_sampler.num_neighbors}, "
            f"batch_size={self.batch_size}, pairs={self.pairs.num_positives}, "
            f"steps={self.num_steps}, negatives={self.negative_sampler.negatives!r})"
        )


__all__ = ["LinkNeighborLoader", "exclude_pair_edges"]
