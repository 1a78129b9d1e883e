"""The layer table: which layers each kind of mode accepts — every one of them exact — and why
every other layer is refused (issue 18).

A *kind* groups the modes that run a layer the same way:

* ``"vertex"`` — a vertex partition: ``p2p``, ``broadcast``, ``hierarchical``, ``cached``
  (exact at ``staleness_bound=0``) and ``loader="subgraph"`` batches. A rank holds every
  in-edge of its rows, with the edges' attributes, and receives its in-neighbours' rows, so a
  layer whose output row depends only on its own row, its in-neighbours' rows and its in-edges'
  attributes is exact — attention and softmax aggregations over edge features included — and
  edge attributes never travel.
* ``"vertex-cut"`` — ``cd-0`` (exact; ``cd-<r>`` and ``0c`` are approximate and synchronise
  ``sum``/``mean`` only). A vertex's in-edges are spread over parts and partial aggregates are
  completed after aggregation, so attention (softmax over a whole neighbourhood) and anything
  that reads degrees or adds edges inside the layer cannot be. Sums, means and maxima of
  messages are, edge features in the messages included (each edge and its attributes live on
  one part); ``GCNConv``'s weighted degrees are summed over a vertex's copies.
* ``"neighbor"`` — ``loader="neighbor"``: the model runs on each rank's sampled batch. With
  fan-out ``-1`` on every hop the seeds' outputs equal full-graph outputs for the layers
  accepted here (``GCNConv`` normalises with the global degrees the loader fetches); sampled
  fan-outs are an estimator (PyG ``NeighborLoader`` semantics). Batches carry the sampled edges'
  attributes.
* ``"hetero"`` — a typed graph (``HeteroData``) on a vertex partition, full batch
  (:mod:`~lightning_gnn_dist.nn.hetero`): the layers of ``to_hetero(model, metadata)`` and
  ``HeteroConv`` run per relation, bipartite ``(x_src, x_dst)`` inputs included, each with the
  relation's halo rows (``GCNConv``: the relation's global degrees; PyG takes it on relations
  within one type only); ``RGCNConv``, ``FastRGCNConv`` and ``RGATConv`` run on the homogeneous
  view with ``edge_type``; ``HGTConv`` on ``x_dict`` with every relation's halo rows. Typed
  neighbour batches (``loader="neighbor"``) are complete: the layers are PyG's there, with the
  batch's degrees.

:data:`EDGE_INPUTS` lists the edge weights or features each layer takes (the table's edge
column): the batch's edge attributes in ``edge_index`` order, passed as PyG does
(``conv(x, edge_index, batch.edge_weight)``, ``conv(x, edge_index, batch.edge_attr)``).

:data:`LAYER_TABLE` is the single source of the documented table (:func:`layer_table_markdown`)
and of :func:`check_layers`, which :func:`~lightning_gnn_dist.nn.distribute` runs: a
message-passing layer or norm that the table does not accept for the kind is refused with a
``ValueError`` naming it, its option and the reason. Per-row modules (``Linear``, activations,
dropout, ``LayerNorm`` over features, ``MessageNorm``) need no entry. A layer of your own is
accepted after :func:`declare_exact_layer` — a promise that its output row depends only on its
own row and its in-neighbours' rows.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

import torch_geometric.nn as pyg_nn
from torch import nn
from torch_geometric.nn import norm as pyg_norm
from torch_geometric.nn.conv import MessagePassing

from lightning_gnn_dist.nn.conv import DISTRIBUTED_LAYERS
from lightning_gnn_dist.nn.norm import DistBatchNorm, DistPyGBatchNorm
from lightning_gnn_dist.nn.rgcn import FusedRGCNConv

KINDS: dict[str, str] = {
    "vertex": "vertex partition: `p2p`, `broadcast`, `hierarchical`, `cached` (bound 0), "
    '`loader="subgraph"`',
    "vertex-cut": "vertex cut: `cd-0` (`cd-<r>`, `0c` approximate)",
    "neighbor": '`loader="neighbor"`, fan-out −1',
    "hetero": "typed graph (`HeteroData`): per relation, `p2p`, `broadcast`, `hierarchical`",
}
"""Kinds of modes, each with the modes it covers (the table's columns)."""

AGGREGATIONS = ("sum", "add", "mean", "max")
"""Aggregations every kind accepts (``vertex-cut`` synchronises exactly these)."""


@dataclass(frozen=True)
class Option:
    """A condition on a layer attribute: its value must be one of ``allowed``."""

    name: str
    allowed: tuple
    why: str = ""

    def violated_by(self, module: nn.Module) -> bool:
        value = getattr(module, self.name, None)
        return not any(value is a or (type(value) is type(a) and value == a) for a in self.allowed)


@dataclass(frozen=True)
class Rule:
    """How one kind treats one layer class.

    Attributes:
        refused: the reason the kind refuses the layer outright (``None``: accepted when every
            option holds).
        options: conditions on the layer's attributes.
        status: ``"exact"``, or ``"synchronised"`` for a norm whose batch statistics are those of
            every rank's batch (not of the whole graph).
        note: one line for the table (what makes it exact, or the condition).
    """

    refused: str | None = None
    options: tuple[Option, ...] = ()
    status: str = "exact"
    note: str = ""


_AGGR = Option("aggr", AGGREGATIONS, "vertex-cut modes synchronise sum, mean and max only")
_SOFTMAX_AGGR = Option(
    "aggr",
    AGGREGATIONS,
    "softmax and power-mean aggregations normalise over each vertex's whole in-neighbourhood, "
    "which a vertex cut splits; vertex-cut modes synchronise sum, mean and max only",
)
_ATTENTION = Rule(
    "normalises attention over each vertex's whole in-neighbourhood, which a vertex cut splits"
)
_LOCAL_DEGREE = Rule(
    "reads in-degrees from the part's edges, which a vertex cut splits (partial degrees)"
)
_ALL = ("vertex", "vertex-cut", "neighbor", "hetero")
_TYPED = Rule(note="on the homogeneous view with `edge_type` (exchanged with the part's plan)")


def _same(rule: Rule, kinds: Iterable[str] = _ALL, **override: Rule) -> dict[str, Rule]:
    return {kind: override.get(kind.replace("-", "_"), rule) for kind in kinds}


_AGGR_RULE = Rule(options=(_AGGR,))
_BATCH_NORM = {
    "hetero": Rule(note="statistics over every rank's rows"),
    "vertex": Rule(note="statistics over every rank's rows"),
    "vertex-cut": Rule(note="statistics over root copies (each vertex once)"),
    "neighbor": Rule(
        status="synchronised",
        note="statistics over every rank's batch (SyncBatchNorm semantics); running statistics "
        "identical on every rank",
    ),
}

LAYER_TABLE: dict[type[nn.Module], dict[str, Rule]] = {
    pyg_nn.GCNConv: _same(
        Rule(note="global degrees, weighted with `edge_weight`"),
        vertex_cut=Rule(
            note="global degrees; with `edge_weight` summed over a vertex's copies at set-up"
        ),
        neighbor=Rule(
            note="global degrees fetched with the rows when every fan-out is −1; with "
            "`edge_weight` the batch must carry `global_gcn_weight_terms` (else refused by name "
            "at the call)"
        ),
        hetero=Rule(
            note="per relation within one type, with the relation's global degrees (typed "
            "neighbour batches: the batch's)"
        ),
    ),
    pyg_nn.SAGEConv: _same(_AGGR_RULE),
    pyg_nn.GraphConv: _same(_AGGR_RULE),
    pyg_nn.GINConv: _same(Rule()),
    pyg_nn.GINEConv: _same(Rule()),
    pyg_nn.NNConv: _same(_AGGR_RULE),
    pyg_nn.GENConv: _same(
        Rule(note="softmax/power aggregation over complete in-neighbourhoods"),
        vertex_cut=Rule(
            options=(_SOFTMAX_AGGR,),
            note="its default softmax and power-mean aggregations normalise over a vertex's whole "
            "in-neighbourhood, which a vertex cut splits",
        ),
    ),
    pyg_nn.CGConv: _same(_AGGR_RULE),
    pyg_nn.GMMConv: _same(_AGGR_RULE),
    pyg_nn.SimpleConv: _same(
        _AGGR_RULE,
        vertex_cut=Rule(
            options=(
                _AGGR,
                Option("combine_root", ("sum", "cat", None), "self loops added in the layer"),
            )
        ),
    ),
    pyg_nn.ResGatedGraphConv: _same(Rule()),
    pyg_nn.EdgeConv: _same(_AGGR_RULE),
    pyg_nn.LEConv: _same(Rule()),
    pyg_nn.LGConv: _same(
        Rule(options=(Option("normalize", (False,), "it normalises with local source degrees"),))
    ),
    pyg_nn.MFConv: _same(Rule(note="destination degrees are complete"), vertex_cut=_LOCAL_DEGREE),
    pyg_nn.GATConv: _same(Rule(), vertex_cut=_ATTENTION),
    pyg_nn.GATv2Conv: _same(Rule(), vertex_cut=_ATTENTION),
    pyg_nn.TransformerConv: _same(Rule(), vertex_cut=_ATTENTION),
    pyg_nn.RGCNConv: {"hetero": _TYPED},
    pyg_nn.FastRGCNConv: {"hetero": _TYPED},
    pyg_nn.RGATConv: {"hetero": _TYPED},
    pyg_nn.HGTConv: {
        "hetero": Rule(note="`x_dict`: every relation's halo rows of its source type appended")
    },
    pyg_nn.HeteroConv: {"hetero": Rule(note="each relation's layer by its own row")},
    nn.BatchNorm1d: _BATCH_NORM,
    nn.SyncBatchNorm: _BATCH_NORM,
    pyg_norm.BatchNorm: _BATCH_NORM,
    pyg_norm.DiffGroupNorm: _BATCH_NORM,
}
"""``layer class → {kind: Rule}``; a class or kind missing here is refused."""

_ATTR = "`edge_attr` [E, edge_dim] (with `edge_dim`)"
EDGE_INPUTS: dict[type[nn.Module], str] = {
    pyg_nn.GCNConv: "`edge_weight` [E]",
    pyg_nn.GraphConv: "`edge_weight` [E]",
    pyg_nn.LEConv: "`edge_weight` [E]",
    pyg_nn.LGConv: "`edge_weight` [E]",
    pyg_nn.SimpleConv: "`edge_weight` [E]",
    pyg_nn.GINEConv: "`edge_attr` [E, d]",
    pyg_nn.NNConv: "`edge_attr` [E, d]",
    pyg_nn.CGConv: "`edge_attr` [E, dim]",
    pyg_nn.GMMConv: "`edge_attr` [E, dim] (pseudo-coordinates)",
    pyg_nn.GENConv: _ATTR,
    pyg_nn.GATConv: _ATTR,
    pyg_nn.GATv2Conv: _ATTR,
    pyg_nn.TransformerConv: _ATTR,
    pyg_nn.ResGatedGraphConv: _ATTR,
}
"""The edge weights or features each layer of :data:`LAYER_TABLE` takes, wherever the table
accepts the layer: the batch's edge attribute in ``edge_index`` order. Vertex partitions keep
every edge with its target's owner and a vertex cut with its part, so they move no byte of it."""

_MULTI_HOP = "propagates several hops in one call (a rank holds one hop of in-neighbours)"
_SOURCE_DEGREES = "normalises with source degrees computed from the local edges"
_NEEDS = "needs inputs a partition does not carry"
REFUSED_LAYERS: dict[type[nn.Module], str] = {
    pyg_nn.ChebConv: _MULTI_HOP + " and " + _SOURCE_DEGREES,
    pyg_nn.SGConv: _MULTI_HOP + " and " + _SOURCE_DEGREES,
    pyg_nn.SSGConv: _MULTI_HOP + " and " + _SOURCE_DEGREES,
    pyg_nn.APPNP: _MULTI_HOP,
    pyg_nn.TAGConv: _MULTI_HOP,
    pyg_nn.MixHopConv: _MULTI_HOP,
    pyg_nn.ARMAConv: _MULTI_HOP,
    pyg_nn.GatedGraphConv: _MULTI_HOP,
    pyg_nn.AntiSymmetricConv: _MULTI_HOP,
    pyg_nn.PANConv: _MULTI_HOP,
    pyg_nn.LabelPropagation: _MULTI_HOP,
    pyg_nn.GCN2Conv: _SOURCE_DEGREES + " and reads the initial features x_0",
    pyg_nn.PDNConv: _SOURCE_DEGREES + " (weights it learns from the edge attributes)",
    pyg_nn.FAConv: _SOURCE_DEGREES + " and reads the initial features x_0",
    pyg_nn.EGConv: _SOURCE_DEGREES,
    pyg_nn.ClusterGCNConv: "normalises with degrees computed inside the layer",
    pyg_nn.GPSConv: "attends over all vertices of the graph",
    pyg_nn.DirGNNConv: "aggregates over out-edges too, which a rank does not hold",
    pyg_nn.HANConv: "its semantic attention averages over every vertex of a type (a "
    "whole-graph mean that no part holds)",
    pyg_nn.WLConv: "hashes colours over the whole graph",
    pyg_nn.DynamicEdgeConv: "builds a k-NN graph over all vertices",
    pyg_nn.GravNetConv: "builds a k-NN graph over all vertices",
    pyg_nn.SuperGATConv: "samples negative edges over the whole graph",
    pyg_nn.DNAConv: "attends over the layer history of a vertex's neighbourhood (not audited)",
    pyg_nn.HypergraphConv: "runs on hypergraphs",
    pyg_nn.SignedConv: _NEEDS + " (positive and negative edges)",
    pyg_nn.FiLMConv: _NEEDS + " (edge types)",
    pyg_nn.SplineConv: "needs the torch-spline-conv extension (not audited)",
    pyg_nn.PNAConv: "needs a degree histogram of the training graph (not audited)",
    pyg_nn.PointNetConv: _NEEDS + " (positions)",
    pyg_nn.PPFConv: _NEEDS + " (positions and normals)",
    pyg_nn.PointTransformerConv: _NEEDS + " (positions)",
    pyg_nn.PointGNNConv: _NEEDS + " (positions)",
    pyg_nn.XConv: _NEEDS + " (positions)",
}
"""Layers refused by every kind, with the reason (a precise message; any other layer missing
from :data:`LAYER_TABLE` is refused with a general one)."""

_DECLARED: dict[type[nn.Module], tuple[str, ...]] = {}
_REPLACED: dict[type[nn.Module], type[nn.Module]] = {
    **{dist_cls: cls for cls, dist_cls in DISTRIBUTED_LAYERS.items()},
    FusedRGCNConv: pyg_nn.RGCNConv,
    DistBatchNorm: nn.BatchNorm1d,
    DistPyGBatchNorm: pyg_norm.BatchNorm,
}


def declare_exact_layer(layer: type[nn.Module], kinds: Iterable[str] = ("vertex",)) -> None:
    """Accept a message-passing layer of your own in ``kinds``: a promise that its output row
    depends only on its own row and its in-neighbours' rows, and (for ``"vertex-cut"``) that it
    aggregates with ``sum``/``mean``/``max`` over the given edges without reading degrees.

    Raises:
        ValueError: an unknown kind (the message lists the kinds).
    """
    kinds = tuple(kinds)
    unknown = [kind for kind in kinds if kind not in KINDS]
    if unknown:
        raise ValueError(f"unknown kind {unknown[0]!r}; kinds are: {', '.join(KINDS)}")
    _DECLARED[layer] = kinds


def table_class(module: nn.Module) -> type[nn.Module]:
    """The class a module is listed under: our distributed subclasses stand for the PyG or torch
    layer they replace (same parameters and state dict)."""
    cls = type(module)
    return _REPLACED.get(cls, cls)


def needs_entry(module: nn.Module) -> bool:
    """Whether ``module`` must be accepted by the table (message passing, batch norms and the
    refused containers); per-row modules need no entry."""
    return (
        isinstance(module, MessagePassing)
        or table_class(module) in LAYER_TABLE
        or table_class(module) in REFUSED_LAYERS
    )


def refusal(module: nn.Module, kind: str) -> str | None:
    """Why ``kind`` refuses ``module`` (``None`` when it is accepted)."""
    if kind not in KINDS:
        raise ValueError(f"unknown kind {kind!r}; kinds are: {', '.join(KINDS)}")
    if not needs_entry(module):
        return None
    cls = table_class(module)
    if cls in _DECLARED:
        return None if kind in _DECLARED[cls] else f"is declared exact for {_DECLARED[cls]} only"
    if cls in REFUSED_LAYERS:
        return REFUSED_LAYERS[cls]
    rule = LAYER_TABLE.get(cls, {}).get(kind)
    if rule is None:
        if cls in LAYER_TABLE:
            return f"is not exact in {kind} modes"
        return (
            "is not in the layer table, so its exactness on a partition is unknown; if its "
            "output row depends only on its own row and its in-neighbours' rows, declare it "
            "with lightning_gnn_dist.nn.declare_exact_layer"
        )
    if rule.refused is not None:
        return rule.refused
    for option in rule.options:
        if option.violated_by(module):
            allowed = ", ".join(repr(a) for a in option.allowed)
            return (
                f"with {option.name}={getattr(module, option.name, None)!r} is not accepted "
                f"({option.why}; accepted: {allowed})"
            )
    return None


def check_layers(model: nn.Module, kinds: Iterable[str]) -> None:
    """Raise ``ValueError`` for the first submodule of ``model`` that a kind refuses, naming
    the module, its class, the kind and the reason (see :data:`LAYER_TABLE`)."""
    for kind in kinds:
        for name, module in model.named_modules():
            reason = refusal(module, kind)
            if reason is not None:
                raise ValueError(
                    f"{table_class(module).__name__} ({name or 'model'}) {reason}, so it cannot "
                    f"be exact in {kind} modes ({KINDS[kind]}). The layers each mode accepts "
                    "are listed in lightning_gnn_dist.nn.layers.LAYER_TABLE (docs: 'Exact "
                    "layers'); use one of them, or train this model single-process."
                )


LAYER_TABLE_BEGIN = "<!-- layer-table: generated by lightning_gnn_dist.nn.layers.layer_tables_markdown; tests/nn/test_layers.py checks it -->"
LAYER_TABLE_END = "<!-- /layer-table -->"
"""Markers around the generated tables in ``docs/guide/layers.md`` (a test compares them)."""


@dataclass
class _Row:
    layer: str
    cells: list[str] = field(default_factory=list)


def layer_table_markdown() -> str:
    """The documented table, generated from :data:`LAYER_TABLE` (one row per layer; the edge
    column from :data:`EDGE_INPUTS`)."""
    header = "| layer | edge weights / features | " + " | ".join(KINDS.values()) + " |"
    lines = [header, "|---" * (len(KINDS) + 2) + "|"]
    for cls, rules in LAYER_TABLE.items():
        row = _Row(f"`{cls.__name__}` | {EDGE_INPUTS.get(cls, '—')}")
        for kind in KINDS:
            rule = rules.get(kind)
            if rule is None or rule.refused is not None:
                row.cells.append("refused" + (f": {rule.refused}" if rule else ""))
                continue
            text = rule.status
            conditions = [
                f"`{o.name}` ∈ {{{', '.join(repr(a) for a in o.allowed)}}}" for o in rule.options
            ]
            details = "; ".join(conditions + ([rule.note] if rule.note else []))
            row.cells.append(text + (f" ({details})" if details else ""))
        lines.append(f"| {row.layer} | " + " | ".join(row.cells) + " |")
    return "\n".join(lines)


def refused_layers_markdown() -> str:
    """The refused layers of :data:`REFUSED_LAYERS` as a two-column table (layer, reason)."""
    lines = ["| layer (refused in every mode) | why |", "|---|---|"]
    for cls, reason in sorted(REFUSED_LAYERS.items(), key=lambda item: item[0].__name__):
        lines.append(f"| `{cls.__name__}` | {reason} |")
    return "\n".join(lines)


def layer_tables_markdown() -> str:
    """What ``docs/guide/layers.md`` holds between :data:`LAYER_TABLE_BEGIN` and
    :data:`LAYER_TABLE_END`: the accepted layers per kind, then the refused ones."""
    return "\n".join(
        [
            LAYER_TABLE_BEGIN,
            "",
            layer_table_markdown(),
            "",
            refused_layers_markdown(),
            "",
            LAYER_TABLE_END,
        ]
    )
