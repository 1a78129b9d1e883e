"""Per-batch halo plans for ``loader="subgraph"`` (paper 000 §4.3.3, design §5 and §7).

Every rank draws the same batch ``B`` (original vertex ids, shared seed) and restricts its
:class:`~lightning_gnn_dist.data.local.LocalPartition` to the induced subgraph ``G[B]``:

* owned rows: its owned vertices in ``B``; edges: its in-edges whose both ends are in ``B``;
* receive plan: the halo vertices in ``B`` with a kept edge into an owned batch vertex;
* send plan: the entries ``(j → q)`` of its full send plan with ``j ∈ B`` and one of ``j``'s
  out-neighbours in part ``q`` in ``B`` (the part's ``send_edge_targets``).

Both sides apply the same condition to the same edge, so the plans agree without any exchange,
and the rows moved are exactly the connectivity−1 cut of ``G[B]``'s column-net hypergraph
(:func:`~lightning_gnn_dist.partition.batch_volume.batch_metrics`). The result is again a
``LocalPartition`` (the *batch view*), so every exchange mode and layer runs on it unchanged.

Two pieces of a view need the other ranks and are filled by :func:`complete_batch_partition`,
once per batch: the batch-owned row counts of every part (one ``all_gather`` of seven integers
per rank, which also gives the global counts of each mask's vertices and labelled targets in the
batch) and, for each halo row,
its in-degree inside ``G[B]`` and its position in its owner's batch rows (one point-to-point
exchange of two columns over the batch plan; these bytes are counted in the loader's own
:class:`~lightning_gnn_dist.comm.counters.CommCounter`, apart from the layers' traffic).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import replace

import torch
import torch.distributed as dist
from torch import Tensor
from torch_geometric.data import Data

from lightning_gnn_dist.comm import CommCounter, P2PExchange
from lightning_gnn_dist.data.attributes import batch_attributes
from lightning_gnn_dist.data.local import LocalPartition
from lightning_gnn_dist.data.subgraph_sampler import SubgraphSampler
from lightning_gnn_dist.data.targets import labelled_per_vertex

_MASKS = ("train_mask", "val_mask", "test_mask")


def batch_partition(part: LocalPartition, batch: Tensor) -> LocalPartition:
    """Restrict ``part`` to the subgraph induced by ``batch`` (vectorised, local only).

    Args:
        part: this rank's partition (needs ``halo_global_ids`` and the ``send_edge_*`` fields,
            present in stores written by this version).
        batch: ``[|B|] int64`` sorted original vertex ids of the batch.

    Returns:
        The batch view: a ``LocalPartition`` whose owned rows are ``part``'s owned vertices in
        ``B`` (ascending), edges the kept in-edges, and send/receive plans restricted to ``G[B]``.
        Its ``part_offsets`` count only this part's rows and the halo's in-degrees are unknown
        until :func:`complete_batch_partition` runs.
    """
    if part.halo_global_ids is None or part.send_edge_offsets is None:
        raise ValueError(
            f"{part!r} has no halo_global_ids/send_edge_* fields (a store written before subgraph "
            "mini-batches existed); delete the partition store and partition again"
        )
    batch = batch.to(part.global_ids.device)
    num_owned, num_halo = part.num_owned, part.num_halo
    owned_in = torch.isin(part.global_ids, batch)
    halo_in = torch.isin(part.halo_global_ids, batch)
    src, dst = part.edge_index
    keep = torch.cat([owned_in, halo_in])[src] & owned_in[dst]
    src, dst = src[keep], dst[keep]

    halo_needed = torch.zeros(num_halo, dtype=torch.bool, device=src.device)
    halo_needed[src[src >= num_owned] - num_owned] = True
    owned_rows = torch.nonzero(owned_in).flatten()
    halo_rows = torch.nonzero(halo_needed).flatten()
    num_owned_b = owned_rows.numel()
    position = torch.full((num_owned + num_halo,), -1, dtype=torch.long, device=src.device)
    position[owned_rows] = torch.arange(num_owned_b, device=src.device)
    position[num_owned + halo_rows] = num_owned_b + torch.arange(
        halo_rows.numel(), device=src.device
    )
    edge_index = torch.stack([position[src], position[dst]])

    num_parts = part.num_parts
    halo_owner = torch.searchsorted(part.part_offsets, part.halo_ids[halo_rows], right=True) - 1
    peers = torch.repeat_interleave(torch.arange(num_parts, device=src.device), part.send_counts)
    entry_sizes = torch.diff(part.send_edge_offsets)
    entry = torch.repeat_interleave(
        torch.arange(entry_sizes.numel(), device=src.device), entry_sizes
    )
    target_in = torch.isin(part.send_edge_targets, batch)
    feeds_batch = torch.bincount(entry[target_in], minlength=entry_sizes.numel()) > 0
    send_keep = owned_in[part.send_index] & feeds_batch

    loops = edge_index[0] == edge_index[1]
    in_degree = torch.zeros(num_owned_b + halo_rows.numel(), dtype=torch.long, device=src.device)
    in_degree[:num_owned_b] = torch.bincount(edge_index[1][~loops], minlength=num_owned_b)
    offsets = torch.zeros(num_parts + 1, dtype=torch.long, device=src.device)
    offsets[part.part_id + 1 :] = num_owned_b
    local_rows = torch.cat([owned_rows, num_owned + halo_rows])  # a loop's ends are both in B
    view = replace(
        part,
        part_offsets=offsets,
        global_ids=part.global_ids[owned_rows],
        edge_index=edge_index,
        halo_ids=halo_rows.new_zeros(halo_rows.numel()),
        recv_counts=torch.bincount(halo_owner, minlength=num_parts),
        send_index=position[part.send_index[send_keep]],
        send_counts=torch.bincount(peers[send_keep], minlength=num_parts),
        in_degree=in_degree,
        has_self_loop=part.has_self_loop[local_rows],
        num_self_loops=None if part.num_self_loops is None else part.num_self_loops[local_rows],
        halo_global_ids=part.halo_global_ids[halo_rows],
        send_edge_offsets=None,
        send_edge_targets=None,
    )
    for key in ("x", "y", *_MASKS):
        value = getattr(part, key)
        if value is not None:
            setattr(view, key, value[owned_rows])
    view.node_attrs = {name: value[owned_rows] for name, value in part.node_attrs.items()}
    view.edge_attrs = {name: value[keep] for name, value in part.edge_attrs.items()}
    view.edge_ids = None if part.edge_ids is None else part.edge_ids[keep]
    return view


def complete_batch_partition(
    view: LocalPartition, counter: CommCounter | None = None, group=None
) -> tuple[LocalPartition, dict[str, int]]:
    """Fill what a batch view needs from the other ranks (see the module docstring).

    Returns:
        ``(view, counts)``: the view with every part's batch rows in ``part_offsets``, halo ids
        as positions in the batch's relabelled id space and the halo's in-degrees inside
        ``G[B]``; ``counts`` the global number of batch vertices in each mask
        (``{"train_mask": ..., ...}``) and of their labelled targets
        (``{"train_mask_labels": ..., ...}``, see
        :func:`~lightning_gnn_dist.data.targets.labelled_per_vertex`).
    """
    labelled = None if view.y is None else labelled_per_vertex(view.y)
    local = [view.num_owned]
    for key in _MASKS:
        mask = getattr(view, key)
        local.append(0 if mask is None else int(mask.sum()))
        local.append(0 if mask is None or labelled is None else int(labelled[mask].sum()))
    device = view.in_degree.device  # the group's tensors live where the view does (NCCL: CUDA)
    stats = torch.tensor(local, dtype=torch.long, device=device).repeat(view.num_parts, 1)
    if view.num_parts > 1:
        gathered = [torch.zeros_like(stats[0]) for _ in range(view.num_parts)]
        dist.all_gather(gathered, stats[0].clone(), group=group)
        stats = torch.stack(gathered)
    offsets = torch.zeros(view.num_parts + 1, dtype=torch.long, device=device)
    offsets[1:] = torch.cumsum(stats[:, 0], 0)
    view = replace(view, part_offsets=offsets.to(view.part_offsets.device))
    counts = {key: int(stats[:, 2 * i + 1].sum()) for i, key in enumerate(_MASKS)}
    counts |= {f"{key}_labels": int(stats[:, 2 * i + 2].sum()) for i, key in enumerate(_MASKS)}
    if view.num_parts == 1:
        return view, counts

    # Positions and in-degrees are integers far below 2**53: exact in float64.
    num_owned = view.num_owned
    row_info = torch.stack(
        [
            view.in_degree[:num_owned].double(),
            torch.arange(num_owned, dtype=torch.float64, device=view.in_degree.device),
        ],
        dim=1,
    )
    halo_info = P2PExchange(view, counter=counter, group=group)(row_info, "subgraph.plan")
    halo_owner = torch.repeat_interleave(
        torch.arange(view.num_parts, device=halo_info.device), view.recv_counts
    )
    in_degree = view.in_degree.clone()
    in_degree[num_owned:] = halo_info[:, 0].long()
    halo_ids = view.part_offsets[halo_owner] + halo_info[:, 1].long()
    return replace(view, in_degree=in_degree, halo_ids=halo_ids), counts


class SubgraphLoader:
    """One epoch of ``steps_per_epoch`` sampled-subgraph batches of this rank.

    Each batch is a :class:`~torch_geometric.data.Data` like the full-batch one (owned rows of the
    batch: ``x``, ``y``, masks, every other node attribute, local ``edge_index`` with every edge
    attribute in its order and ``e_id``, ``global_ids``) plus ``local_partition``, the completed
    batch view the strategy runs the halo exchange on, and ``num_{train,val,test}_global`` and
    ``num_{train,val,test}_labels_global``, the batch's vertices in each mask and their
    labelled targets over all ranks. With one part the batch is simply the
    induced subgraph, so single-process code trains on it unchanged.

    Args:
        partition: this rank's :class:`LocalPartition`.
        sampler: the batch sampler (same seed on every rank).
        steps_per_epoch: batches per epoch.
        counter: where the plan-completion exchange is counted. (default: a new one)
        group: process group of the parts. (default: the world group)
        current_epoch: returns the epoch being trained (e.g. ``lambda: trainer.current_epoch``),
            so a resumed run draws the batches it would have drawn; without it the loader counts
            its own epochs. Step ``s`` of epoch ``e`` draws the sampler's batch
            ``e * steps_per_epoch + s``. (default: ``None``)

    NCCL rule: per batch (the same batch on every rank: shared seed), one ``all_gather`` of
    seven int64 per rank, then one :class:`~lightning_gnn_dist.comm.p2p.P2PExchange` of two
    float64 columns over the batch plan, whose send and receive counts both sides derive from
    the same edges (so they agree pairwise, zero counts skipped on both sides); tensors on the
    view's device.
    """

    def __init__(
        self,
        partition: LocalPartition,
        sampler: SubgraphSampler,
        steps_per_epoch: int,
        counter: CommCounter | None = None,
        group=None,
        current_epoch: Callable[[], int] | None = None,
    ) -> None:
        if steps_per_epoch < 1:
            raise ValueError(f"steps_per_epoch must be >= 1 (got {steps_per_epoch})")
        self.partition, self.sampler, self.steps_per_epoch = partition, sampler, steps_per_epoch
        self.counter = counter if counter is not None else CommCounter()
        self.group = group
        self.current_epoch = current_epoch
        self.epoch = 0

    def batch(self, step: int) -> Data:
        """The batch of global step ``step`` (same on every rank; collective when ``P > 1``)."""
        view = batch_partition(self.partition, self.sampler.sample(step))
        view, counts = complete_batch_partition(view, self.counter, self.group)
        data = Data(
            x=view.x,
            y=view.y,
            edge_index=view.edge_index,
            global_ids=view.global_ids,
            num_nodes=view.num_owned,
            local_partition=view,
            **batch_attributes(view),
        )
        for key in _MASKS:
            if getattr(view, key) is not None:
                data[key] = getattr(view, key)
            data[f"num_{key.split('_')[0]}_global"] = counts[key]
            data[f"num_{key.split('_')[0]}_labels_global"] = counts[f"{key}_labels"]
        return data

    def __iter__(self) -> Iterator[Data]:
        if self.current_epoch is not None:
            self.epoch = int(self.current_epoch())
        start = self.epoch * self.steps_per_epoch
        self.epoch += 1
        for step in range(start, start + self.steps_per_epoch):
            yield self.batch(step)

    def __len__(self) -> int:
        return self.steps_per_epoch

    def state_dict(self) -> dict[str, int]:
        return {"epoch": self.epoch}

    def load_state_dict(self, state: dict[str, int]) -> None:
        self.epoch = int(state["epoch"])

    def __repr__(self) -> str:
        return f"SubgraphLoader({self.sampler!r}, steps_per_epoch={self.steps_per_epoch}, epoch={self.epoch})"
