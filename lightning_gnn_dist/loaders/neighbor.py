"""``NeighborLoader``: mini-batches of sampled computation graphs, PyG layout, any graph store.

Single process it is a drop-in for PyG's ``NeighborLoader`` where ``pyg-lib``/``torch-sparse``
cannot be installed; on a :class:`~lightning_gnn_dist.loaders.graph_store.PartitionedGraphStore`
each rank draws seeds from its own vertices (owner-compute, DistDGL).

**Steps per epoch.** Every rank runs ``num_steps`` steps, by default
``ceil(max_r n_r / batch_size)`` where ``n_r`` is rank ``r``'s seed count, so no collective waits
on a rank that has finished. A rank splits its shuffled seeds into ``num_steps`` near-equal
batches (sizes ``⌊n_r / S⌋`` or ``⌈n_r / S⌉``, never above ``batch_size``): every seed is used
exactly once per epoch, none is dropped or padded. (A rank with fewer seeds than steps repeats
its seeds to fill the steps.)
"""

from __future__ import annotations

import math
from collections.abc import Iterator

import torch
from torch import Tensor
from torch_geometric.data import Data

from lightning_gnn_dist.data.csr import prepare_batch_adjacency
from lightning_gnn_dist.data.sampler import NeighborSampler, SampledSubgraph, stream_key
from lightning_gnn_dist.loaders.local_store import FetchedRows
from lightning_gnn_dist.loaders.stepping import SteppedLoader, add_fetched_rows


class NeighborLoader(SteppedLoader):
    """Sampled mini-batches of seed vertices and their ``L``-hop in-neighbourhoods.

    Each batch is a :class:`~torch_geometric.data.Data` laid out as PyG's ``NeighborLoader``:
    ``x [num_nodes, d]``, ``y [num_nodes]``, ``edge_index [2, num_edges]`` (local, grouped by
    hop), ``n_id [num_nodes]`` (dataset ids, seeds first), ``input_id [batch_size]`` (positions
    of the seeds in ``input_nodes``), ``batch_size``, ``num_sampled_nodes`` and
    ``num_sampled_edges`` (for :func:`torch_geometric.utils.trim_to_layer`), ``e_id
    [num_edges]`` (each sampled edge's position in the dataset's ``edge_index``), every other
    node attribute of the graph (``[num_nodes, ...]``, rows of ``n_id``) and every edge attribute
    (``[num_edges, ...]``, the sampled edges' values in ``edge_index`` order) under its own
    name. The model's predictions for the seeds are ``out[:batch.batch_size]``. With fan-out ``-1`` on every hop
    the batch also holds ``global_in_degree`` and ``global_self_loops`` ``[num_nodes]`` (the
    whole graph's, for layers that normalise by degrees) and, for every 1-D floating edge
    attribute, ``global_gcn_weight_terms[name] [num_nodes, 3]`` (a weighted ``GCNConv``'s global
    degrees, :func:`~lightning_gnn_dist.data.graph.gcn_weight_terms`).

    Args:
        store: a :class:`~lightning_gnn_dist.loaders.graph_store.LocalGraphStore` or
            ``PartitionedGraphStore``.
        num_neighbors (list[int]): fan-out per hop, ``-1`` for all in-neighbours.
        input_nodes (Tensor): seed vertices, dataset ids or a ``bool`` mask over the store's
            vertices (owned rows for a partitioned store).
        batch_size (int): seeds per step at most. (default: ``1``)
        shuffle (bool): reshuffle seeds every epoch. (default: ``False``)
        replace (bool): sample with replacement. (default: ``False``)
        seed (int): base seed; the draw of a step depends on ``(seed, epoch, step, rank)`` only.
            (default: ``0``)
        num_steps (int, optional): steps per epoch; give the same value on every rank (see the
            module docstring). (default: ``ceil(len(input_nodes) / batch_size)``)
        prefetch (bool): sample and fetch the next batch in a background thread while the
            current step runs. A partitioned store must then use its own process group.
            (default: ``False``)
        device (torch.device, optional): where batches go (the training device): pinned and
            copied asynchronously to a CUDA device, from the prefetch thread when prefetching
            (:class:`~lightning_gnn_dist.loaders.transfer.DeviceTransfer`). (default: ``None``,
            batches stay on the CPU)
    """

    def __init__(
        self,
        store,
        num_neighbors: list[int],
        input_nodes: Tensor,
        batch_size: int = 1,
        shuffle: bool = False,
        replace: bool = False,
        seed: int = 0,
        num_steps: int | None = None,
        prefetch: bool = False,
        device: torch.device | str | None = None,
    ) -> None:
        if batch_size < 1:
            raise ValueError(f"batch_size must be >= 1 (got {batch_size})")
        if input_nodes.dtype == torch.bool:
            input_nodes = store.dataset_ids(input_nodes)
        self.store, self.neighbor_sampler = store, NeighborSampler(num_neighbors, replace)
        self.input_nodes = input_nodes
        self._seeds = store.to_routing(input_nodes)
        self.batch_size, self.shuffle, self.seed = batch_size, shuffle, seed
        self.num_steps = (
            num_steps if num_steps is not None else math.ceil(input_nodes.numel() / batch_size)
        )
        if self.num_steps > 0 and input_nodes.numel() == 0:
            raise ValueError(
                f"rank {store.rank} has no seed vertices but {self.num_steps} steps must run; "
                "use fewer parts or a partitioner that balances the training vertices"
            )
        self._start_stepping(prefetch, device)

    @property
    def num_items(self) -> int:
        return self.input_nodes.numel()

    def make_batch(self, positions: Tensor, step: int, epoch: int | None = None) -> Data:
        """Sample and fetch one batch (collective on a partitioned store)."""
        epoch = self.epoch if epoch is None else epoch
        graph, _ = self._sample(positions, step, epoch)
        return self._assemble(positions, graph, self.store.fetch(graph.n_id, degrees=self._exact))

    def made_batches(self, batches: list[Tensor], epoch: int) -> Iterator[Data]:
        """:meth:`make_batch` of every step in turn. On a partitioned store (two ranks or more,
        two hops or more) each batch's fetch travels with the next batch's hop after the seeds'
        (:meth:`~lightning_gnn_dist.loaders.graph_store.PartitionedGraphStore.sample_hop_and_fetch`):
        three all-to-alls a step instead of six, each batch ready once the next is sampled. The
        batches, bytes and counters are :meth:`make_batch`'s."""
        if self.store.world_size < 2 or len(self.neighbor_sampler.num_neighbors) < 2:
            yield from super().made_batches(batches, epoch)
            return
        previous = None  # (positions, graph) of the batch whose rows come with the next hop
        for step, positions in enumerate(batches):
            earlier = None if previous is None else previous[1]
            graph, rows = self._sample(positions, step, epoch, earlier)
            if previous is not None:
                yield self._assemble(*previous, rows)
            previous = (positions, graph)
        if previous is not None:
            graph = previous[1]
            yield self._assemble(*previous, self.store.fetch(graph.n_id, degrees=self._exact))

    @property
    def _exact(self) -> bool:
        # Fan-out -1 everywhere: the seeds' computation graph is exact, and layers that
        # normalise by degrees (GCN) get the global ones of every batch vertex with the rows.
        return all(fanout == -1 for fanout in self.neighbor_sampler.num_neighbors)

    def _sample(
        self, positions: Tensor, step: int, epoch: int, fetch_with: SampledSubgraph | None = None
    ) -> tuple[SampledSubgraph, FetchedRows | None]:
        """The batch's sampled graph, and with ``fetch_with`` (an earlier batch's graph) that
        graph's rows, fetched with the hop after the seeds'."""
        seeds = self._seeds[positions]
        stream = stream_key(self.seed, epoch, step, self.store.rank)
        replace = self.neighbor_sampler.replace
        hops = iter(range(len(self.neighbor_sampler.num_neighbors)))
        fetched = None

        def sample_hop(frontier: Tensor, fanout: int, stream: int):
            # The first hop's frontier is the seeds, which every rank owns: it needs no messages.
            # The second's remote vertices are the seeds' in-neighbours, halo vertices whose
            # draws every rank sizes itself.
            nonlocal fetched
            hop = next(hops)
            if hop == 1 and fetch_with is not None:
                sampled, fetched = self.store.sample_hop_and_fetch(
                    frontier, fanout, stream, replace, fetch_with.n_id, self._exact
                )
                return sampled
            return self.store.sample_hop(
                frontier, fanout, stream, replace, owned=hop == 0, from_halo=hop == 1
            )

        graph = self.neighbor_sampler.sample(
            seeds, stream, sample_hop, num_ids=getattr(self.store, "num_routing_ids", None)
        )
        return graph, fetched

    def _assemble(self, positions: Tensor, graph: SampledSubgraph, rows: FetchedRows) -> Data:
        """The batch of ``graph`` and its fetched ``rows``."""
        prepare_batch_adjacency(graph.edge_index, graph.num_sampled_nodes, graph.num_sampled_edges)
        batch = Data(
            x=rows.x,
            edge_index=graph.edge_index,
            n_id=rows.ids,
            input_id=positions,
            batch_size=int(positions.numel()),
            num_sampled_nodes=graph.num_sampled_nodes,
            num_sampled_edges=graph.num_sampled_edges,
            num_nodes=int(graph.n_id.numel()),
        )
        return add_fetched_rows(batch, rows, graph.edge_data, self._exact)

    def __repr__(self) -> str:
        return (
            f"NeighborLoader(num_neighbors={self.neighbor_sampler.num_neighbors}, batch_size={self.batch_size}, "
            f"seeds={self.input_nodes.numel()}, steps={self.num_steps}, shuffle={self.shuffle})"
        )


class NeighborLoaders:
    """The train/val/test :class:`NeighborLoader` of one rank over one shared store.

    Each split's steps per epoch are ``ceil(max_r n_r / batch_size)`` over the per-part counts
    of its mask, so every rank runs the same number of steps (module docstring).

    Args:
        store: this rank's graph store.
        mask_counts: per mask name (``"train_mask"``...), the seed count of every part.
        num_neighbors: training fan-outs per hop.
        eval_num_neighbors: validation/test fan-outs; ``-1`` everywhere gives exact
            full-neighbourhood predictions. (default: ``num_neighbors``)
        batch_size, shuffle, replace, seed, prefetch: as :class:`NeighborLoader` (shuffle and
            prefetch apply to training only).

    Attributes:
        device: the training device of the loaders built from now on (``GNNStrategy`` sets
            it; ``None``: batches stay on the CPU).
    """

    def __init__(
        self,
        store,
        mask_counts: dict[str, list[int]],
        num_neighbors: list[int],
        batch_size: int,
        shuffle: bool = True,
        replace: bool = False,
        seed: int = 0,
        eval_num_neighbors: list[int] | None = None,
        prefetch: bool = False,
    ) -> None:
        self.store, self.mask_counts = store, mask_counts
        self.num_neighbors = num_neighbors
        self.eval_num_neighbors = eval_num_neighbors or num_neighbors
        self.batch_size, self.shuffle, self.replace = batch_size, shuffle, replace
        self.seed, self.prefetch = seed, prefetch
        self.device: torch.device | None = None
        self._loaders: dict[str, NeighborLoader] = {}

    #: The loader class each split gets (a subclass serves typed graphs).
    loader_class: type[NeighborLoader] = NeighborLoader

    def seeds(self, split: str) -> tuple[Tensor | None, list[int]]:
        """``(mask, counts)`` of ``split``: the rank's seed mask over its owned vertices, and
        every part's seed count (``"predict"``: every owned vertex)."""
        part = self.store.partition
        if split == "predict":
            return torch.ones(part.num_owned, dtype=torch.bool), torch.diff(
                part.part_offsets
            ).tolist()
        mask = getattr(part, f"{split}_mask")
        if mask is None:
            raise ValueError(f"the dataset has no {split}_mask; cannot serve {split} batches")
        return mask, self.mask_counts.get(f"{split}_mask", [int(mask.sum())])

    def loader(self, split: str) -> NeighborLoader:
        """The loader of ``split`` (``"train"``, ``"val"``, ``"test"``, or ``"predict"``: every
        owned vertex), built once."""
        if split not in self._loaders:
            mask, counts = self.seeds(split)
            train = split == "train"
            self._loaders[split] = self.loader_class(
                self.store,
                self.num_neighbors if train else self.eval_num_neighbors,
                mask,
                batch_size=self.batch_size,
                shuffle=self.shuffle and train,
                replace=self.replace,
                seed=self.seed,
                num_steps=math.ceil(max(counts) / self.batch_size),
                prefetch=self.prefetch and train,
                device=self.device,
            )
        return self._loaders[split]
