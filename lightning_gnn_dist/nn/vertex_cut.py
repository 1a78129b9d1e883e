"""The graph context of a vertex cut: layers aggregate over the part's edges, then split
vertices are synchronised (design §7, paper 002 §5.3).

Layers run unchanged on a :class:`~lightning_gnn_dist.data.vertex_cut.VertexCutPart`: ``x`` holds
every local copy ``[num_local, d]`` and ``edge_index`` the part's edges. The exchange's halo is
empty, so a layer's aggregates are partial for split vertices; this context completes them:

* ``DistGCNConv`` asks :meth:`VertexCutContext.synchronise` (sum of globally normalised terms;
  with ``edge_weight`` the weighted degrees are summed over a vertex's copies once,
  :meth:`VertexCutContext.weighted_gcn_edges`);
* every other ``MessagePassing`` layer passes PyG's aggregate forward hook
  (:meth:`VertexCutContext.after_aggregate`): ``sum``/``add`` aggregates are synchronised as they
  are, ``mean`` as local sums divided by the **global** in-degree, ``max`` element-wise.

Edge weights and features live with their edge's part, so sums, means and maxima of messages
built from them are synchronised like any other. Attention layers (softmax over a vertex's whole
neighbourhood), softmax/power aggregations and other aggregations are refused with an error. The dense update after aggregation is computed identically on every copy.
"""

from __future__ import annotations

import torch
from torch import Tensor
from torch_geometric.nn import GATConv, GATv2Conv, TransformerConv

from lightning_gnn_dist.comm.vertex_cut import PartialAggregateSync
from lightning_gnn_dist.data.graph import (
    gcn_normalise,
    gcn_weighted_edges,
    last_self_loop,
    weighted_in_degree,
)
from lightning_gnn_dist.nn.context import CONTEXTS, GraphContext, check_edge_weight

_ATTENTION = (GATConv, GATv2Conv, TransformerConv)
_SUM, _MEAN, _MAX = ("add", "sum"), ("mean",), ("max",)


class VertexCutContext(GraphContext):
    """:class:`GraphContext` of a vertex cut; ``exchange`` is a partial-aggregate
    synchronisation (``cd-0``, ``cd-<r>``, ``0c``, see
    :mod:`lightning_gnn_dist.comm.vertex_cut`)."""

    def synchronise(self, aggregated: Tensor, layer: str) -> Tensor:
        return self.exchange.synchronise(aggregated, layer, "sum")

    def weighted_gcn_edges(
        self, edge_weight: Tensor, add_self_loops: bool, improved: bool, normalize: bool
    ) -> tuple[Tensor, Tensor]:
        """PyG's ``gcn_norm`` with ``edge_weight`` (``[E_local]``, the part's edge order) on the
        part's edges, from global weighted degrees: partial weighted in-degrees are summed over
        a vertex's copies (one exact ``cd-0`` synchronisation, :attr:`setup_counter`), and the
        added self loop sits on the root copy only, weighing the vertex's last loop in the
        dataset's edge order (found by a ``max`` synchronisation of the loops' edge ids, since a
        multigraph's loops of one vertex may lie on several parts) or the fill value."""
        part = self.partition
        check_edge_weight(edge_weight, part.edge_index.size(1))
        weight = edge_weight.detach()
        if not normalize:
            return part.edge_index, weight
        edge_index, num_local = part.edge_index, part.num_owned
        if not add_self_loops:
            partial = weighted_in_degree(edge_index, weight, num_local)
            degree = self._setup_sum(partial.unsqueeze(1))[:, 0]
            return edge_index, gcn_normalise(edge_index, weight, degree)
        order = None if part.edge_ids is None else part.edge_ids.to(edge_index.device)
        key, last_weight, has_loop = last_self_loop(edge_index, weight, num_local, order)
        with torch.no_grad():
            sync = self._setup_sync()
            global_key = sync.synchronise(key.unsqueeze(1), "gcn self loop", "max").squeeze(1)
        kept_here = has_loop & (key == global_key)
        non_loop = edge_index[0] != edge_index[1]
        partial = torch.stack(
            [
                weighted_in_degree(edge_index[:, non_loop], weight[non_loop], num_local),
                torch.where(kept_here, last_weight, torch.zeros_like(last_weight)),
            ],
            dim=1,
        )
        total = self._setup_sum(partial)
        fill = torch.full_like(total[:, 1], 2.0 if improved else 1.0)
        loop_weight = torch.where(global_key >= 0, total[:, 1], fill)
        roots = torch.nonzero(part.is_root.to(edge_index.device)).flatten()
        edges, weight = gcn_weighted_edges(edge_index, weight, roots, loop_weight[roots])
        return edges, gcn_normalise(edges, weight, total[:, 0] + loop_weight)

    def _setup_sync(self) -> PartialAggregateSync:
        """An exact ``cd-0`` synchronisation for set-up rows, counted in :attr:`setup_counter`
        (whatever the layers' mode: ``cd-<r>`` and ``0c`` must not delay or skip degrees)."""
        if "setup-sync" not in self._cache:
            self._cache["setup-sync"] = PartialAggregateSync(
                self.partition, counter=self.setup_counter, group=self.exchange.group
            )
        return self._cache["setup-sync"]

    def _setup_sum(self, partial: Tensor) -> Tensor:
        with torch.no_grad():
            return self._setup_sync().synchronise(partial, "gcn weighted degree", "sum")

    def after_aggregate(self, module, aggr_kwargs: dict, aggregated: Tensor) -> Tensor | None:
        name = getattr(module, "layer_name", "") or type(module).__name__
        if isinstance(module, _ATTENTION):
            raise NotImplementedError(
                f"{type(module).__name__} ({name}) normalises attention over each vertex's whole "
                "neighbourhood, which a vertex cut splits; use GCN/GraphSAGE layers or a vertex "
                "partition with exchange='p2p'"
            )
        aggr = module.aggr if isinstance(module.aggr, str) else None
        if aggr not in _SUM + _MEAN + _MAX:
            raise NotImplementedError(
                f"{type(module).__name__} ({name}) aggregates with {module.aggr!r}; vertex-cut modes "
                "synchronise 'sum', 'add', 'mean' and 'max' aggregations only"
            )
        index, num_rows = aggr_kwargs["index"], aggregated.size(0)
        # index_add, not bincount: CUDA's bincount reads the largest index back to the host
        local_count = index.new_zeros(num_rows).index_add_(0, index, torch.ones_like(index))
        self._check_edges(local_count, name)
        flat = aggregated.reshape(num_rows, -1)
        if aggr in _SUM:
            out = self.exchange.synchronise(flat, name, "sum")
        elif aggr in _MEAN:
            total = self.exchange.synchronise(flat * local_count.unsqueeze(-1), name, "sum")
            out = total / self._global_in_count(flat.device).clamp(min=1).unsqueeze(-1)
        else:
            empty = (local_count == 0).unsqueeze(-1)
            partial = flat.masked_fill(empty, float("-inf"))
            ties = self._local_ties(module, flat, index)
            out = self.exchange.synchronise(partial, name, "max", ties)
            out = out.masked_fill(torch.isneginf(out), 0.0)
        return out.view_as(aggregated)

    def counted_rows(self, device) -> Tensor:
        """Root copies only: every vertex counts once in batch statistics."""
        return self.partition.is_root.to(device)

    def after_message(self, module, messages: Tensor) -> None:
        """Keep a ``max`` layer's messages until its aggregation (their ties split gradients)."""
        if getattr(module, "aggr", None) in _MAX:
            module._lgd_messages = messages.detach()

    @staticmethod
    def _local_ties(module, flat: Tensor, index: Tensor) -> Tensor | None:
        """``[num_local, d]`` local in-edges whose message equals the local maximum."""
        messages = getattr(module, "_lgd_messages", None)
        module._lgd_messages = None
        if messages is None or messages.size(0) != index.numel():
            return None
        hit = messages.reshape(index.numel(), -1) == flat.detach().index_select(0, index)
        return torch.zeros_like(flat).index_add_(0, index, hit.to(flat.dtype))

    def _global_in_count(self, device) -> Tensor:
        """``[num_local]`` in-edges of every vertex in the whole graph, every self loop of a
        multigraph included (PyG's mean divides by all of them)."""
        key = ("in_count", device)
        if key not in self._cache:
            part = self.partition
            loops = part.num_self_loops
            loops = part.has_self_loop.long() if loops is None else loops
            self._cache[key] = (part.in_degree + loops).to(device, torch.float32)
        return self._cache[key]

    def _check_edges(self, local_count: Tensor, name: str) -> None:
        key = ("local_in_count", local_count.device)
        if key not in self._cache:
            part = self.partition
            self._cache[key] = torch.bincount(
                part.edge_index[1].to(local_count.device), minlength=part.num_owned
            )
        if not torch.equal(local_count, self._cache[key]):
            raise NotImplementedError(
                f"layer {name} aggregates over other edges than the part's edge_index (for example "
                "it adds self loops itself); in vertex-cut modes every copy would count them, so "
                "such layers are not supported: pass add_self_loops=False or use a vertex partition"
            )


def check_reductions(model, exchange) -> None:
    """Refuse, before training, a ``max`` aggregation under an exchange that synchronises sums
    only (``cd-<r>``); the message names the layer and the exchange."""
    reductions = getattr(exchange, "reductions", ("sum", "max"))
    for name, module in model.named_modules():
        aggr = getattr(module, "aggr", None)
        if isinstance(aggr, str) and aggr in _MAX and "max" not in reductions:
            raise ValueError(
                f"{type(module).__name__} ({name}) aggregates with aggr='max', which "
                f"exchange={exchange.mode!r} cannot delay (it synchronises sums: sum and mean "
                "aggregations); use exchange='cd-0' or a sum/mean aggregation"
            )


CONTEXTS["vertex-cut"] = VertexCutContext
