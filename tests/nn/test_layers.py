"""The layer table walked (issue 18): every layer a kind accepts is exact there (a configuration
of it passes the differential matrix, ``test_differential.py``), every option condition is
enforced, and every other PyG layer is refused by name in every kind."""

from __future__ import annotations

import functools
import inspect
from pathlib import Path

import pytest
import torch_geometric.nn as pyg_nn
from torch import nn
from torch_geometric.nn.conv import MessagePassing

from lightning_gnn_dist.nn import distribute
from lightning_gnn_dist.nn.layers import (
    KINDS,
    LAYER_TABLE,
    LAYER_TABLE_BEGIN,
    LAYER_TABLE_END,
    REFUSED_LAYERS,
    check_layers,
    declare_exact_layer,
    layer_table_markdown,
    layer_tables_markdown,
    refusal,
)
from tests.nn import test_differential as matrix
from tests.nn import test_differential_edges as edge_matrix

ACCEPTED = [
    (cls, kind)
    for cls, rules in LAYER_TABLE.items()
    for kind, rule in rules.items()
    if rule.refused is None
]


NORMS = (nn.BatchNorm1d, nn.SyncBatchNorm, pyg_nn.BatchNorm, pyg_nn.DiffGroupNorm)


def _bare(cls: type[nn.Module]) -> nn.Module:
    """An instance without running the constructor (refusal by class reads no attribute)."""
    module = cls.__new__(cls)
    nn.Module.__init__(module)
    return module


def _pyg_layers() -> list[type[nn.Module]]:
    found = {
        obj
        for obj in vars(pyg_nn).values()
        if inspect.isclass(obj) and issubclass(obj, MessagePassing) and obj is not MessagePassing
    }
    return sorted(found | set(REFUSED_LAYERS), key=lambda cls: cls.__name__)


@functools.cache
def _classes(module, name: str) -> frozenset[type]:
    return frozenset(type(m) for m in module.make_model(name).modules())


def test_every_accepted_layer_is_in_the_differential_matrix():
    """Each (layer, kind) the table accepts as exact runs in every mode of the kind, in the
    layer matrix or in the matrix of edge weights and features (``test_differential_edges``)."""
    missing = []
    for cls, kind in ACCEPTED:
        if LAYER_TABLE[cls][kind].status != "exact":  # neighbour batch norms: synchronised
            assert kind == "neighbor" and cls in NORMS, (cls, kind)
            continue
        modes = {mode for mode, k in matrix.MODES.items() if k == kind}
        covered = {
            mode
            for mode in modes
            for module in (matrix, edge_matrix)
            for name in module.cells(mode)
            if cls in _classes(module, name)
        }
        missing += [f"{cls.__name__} in {mode}" for mode in sorted(modes - covered)]
    assert not missing, f"accepted but not run: {missing}"


@pytest.mark.parametrize("kind", list(KINDS))
def test_every_other_layer_is_refused_by_name(kind):
    """Every PyG message-passing layer (and refused container) the table does not accept for
    ``kind`` is refused with a ValueError that starts with its name."""
    unrefused = [cls for cls in _pyg_layers() if (cls, kind) not in ACCEPTED]
    assert len(unrefused) > len(_pyg_layers()) // 2
    for cls in unrefused:
        model = nn.ModuleDict({"hop": _bare(cls)})
        with pytest.raises(
            ValueError, match=rf"^{cls.__name__} \(hop\) .*cannot be exact in {kind}"
        ):
            check_layers(model, [kind])


def test_the_walk_covers_pyg():
    names = {cls.__name__ for cls in _pyg_layers()}
    assert {"ChebConv", "SGConv", "APPNP", "GPSConv", "PNAConv", "GINEConv", "MFConv"} <= names


VIOLATIONS = {
    (pyg_nn.SAGEConv, "aggr"): lambda: pyg_nn.SAGEConv(4, 4, aggr="min"),
    (pyg_nn.GraphConv, "aggr"): lambda: pyg_nn.GraphConv(4, 4, aggr="min"),
    (pyg_nn.SimpleConv, "aggr"): lambda: pyg_nn.SimpleConv(aggr="min"),
    (pyg_nn.SimpleConv, "combine_root"): lambda: pyg_nn.SimpleConv(combine_root="self_loop"),
    (pyg_nn.EdgeConv, "aggr"): lambda: pyg_nn.EdgeConv(nn.Linear(8, 4), aggr="min"),
    (pyg_nn.NNConv, "aggr"): lambda: pyg_nn.NNConv(4, 4, nn.Linear(2, 16), aggr="min"),
    (pyg_nn.CGConv, "aggr"): lambda: pyg_nn.CGConv(4, dim=2, aggr="min"),
    (pyg_nn.GMMConv, "aggr"): lambda: pyg_nn.GMMConv(4, 4, dim=2, kernel_size=2, aggr="min"),
    (pyg_nn.GENConv, "aggr"): lambda: pyg_nn.GENConv(4, 4),  # softmax
    (pyg_nn.LGConv, "normalize"): lambda: pyg_nn.LGConv(normalize=True),
}
CONDITIONS = [
    (cls, kind, option.name) for cls, kind in ACCEPTED for option in LAYER_TABLE[cls][kind].options
]


def test_every_option_condition_is_enforced():
    for cls, kind, option in CONDITIONS:
        module = VIOLATIONS[(cls, option)]()
        reason = refusal(module, kind)
        assert reason is not None and reason.startswith(f"with {option}="), (cls, kind, reason)
        with pytest.raises(ValueError, match=rf"^{cls.__name__} \(layer\) with {option}="):
            distribute(nn.ModuleDict({"layer": module}), (kind,))


def test_mfconv_is_refused_under_a_vertex_cut():
    """Item 4: MFConv picks its weights by the in-degree it counts on the part's edges, which
    a vertex cut splits; it is refused by name (and accepted where its degrees are complete)."""
    model = nn.ModuleDict({"conv": pyg_nn.MFConv(4, 4)})
    with pytest.raises(ValueError, match=r"^MFConv \(conv\) reads in-degrees .*vertex-cut"):
        distribute(model, ("vertex-cut",))
    distribute(model, ("vertex", "neighbor"))


class OwnConv(MessagePassing):
    def forward(self, x, edge_index):
        return self.propagate(edge_index, x=x)


def test_a_layer_of_your_own_is_refused_until_declared():
    with pytest.raises(ValueError, match=r"^OwnConv \(conv\) is not in the layer table"):
        distribute(nn.ModuleDict({"conv": OwnConv()}))
    declare_exact_layer(OwnConv, ["vertex"])
    try:
        distribute(nn.ModuleDict({"conv": OwnConv()}))
        with pytest.raises(ValueError, match=r"declared exact for \('vertex',\) only"):
            distribute(nn.ModuleDict({"conv": OwnConv()}), ("vertex-cut",))
        with pytest.raises(ValueError, match="unknown kind 'edge'"):
            declare_exact_layer(OwnConv, ["edge"])
    finally:
        from lightning_gnn_dist.nn import layers

        layers._DECLARED.pop(OwnConv, None)


def test_the_markdown_table_lists_every_layer_and_kind():
    table = layer_table_markdown()
    assert all(f"`{cls.__name__}`" in table for cls in LAYER_TABLE)
    assert all(description in table.splitlines()[0] for description in KINDS.values())


def test_the_docs_page_holds_the_generated_tables():
    """docs/guide/layers.md shows LAYER_TABLE and REFUSED_LAYERS as they are (regenerate the
    block with ``layer_tables_markdown()`` when the table changes)."""
    page = (Path(__file__).resolve().parents[2] / "docs" / "guide" / "layers.md").read_text()
    start, end = page.index(LAYER_TABLE_BEGIN), page.index(LAYER_TABLE_END)
    assert page[start : end + len(LAYER_TABLE_END)] == layer_tables_markdown(), (
        "docs/guide/layers.md is stale: replace its layer-table block with "
        "lightning_gnn_dist.nn.layers.layer_tables_markdown()"
    )
    assert all(f"| `{cls.__name__}` |" in page for cls in [*LAYER_TABLE, *REFUSED_LAYERS])
