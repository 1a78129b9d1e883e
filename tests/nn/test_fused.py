"""Unchanged PyG layers aggregate with the CSR product after ``use_sparse_aggregation``: same
outputs and gradients as PyG's scatter path on a multigraph (parallel edges, repeated self loops,
isolated vertices), and the fused path is really taken (or really not, where it must not be)."""

import copy

import pytest
import torch
from torch import nn
from torch_geometric.nn import GATConv, GCNConv, GINConv, GraphConv, SAGEConv

from lightning_gnn_dist.nn import DistGCNConv, use_sparse_aggregation
from tests.nn.test_differential import D_IN, D_OUT, N, multigraph

FUSED = {
    "gcn": lambda: GCNConv(D_IN, D_OUT),
    "gcn-cached": lambda: GCNConv(D_IN, D_OUT, cached=True),
    "gcn-no-self-loops": lambda: GCNConv(D_IN, D_OUT, add_self_loops=False),
    "sage-mean": lambda: SAGEConv(D_IN, D_OUT),
    "sage-sum-project": lambda: SAGEConv(D_IN, D_OUT, aggr="sum", project=True),
    "gin": lambda: GINConv(nn.Linear(D_IN, D_OUT), train_eps=True),
    "graphconv": lambda: GraphConv(D_IN, D_OUT),
    "graphconv-mean": lambda: GraphConv(D_IN, D_OUT, aggr="mean"),
}
SCATTER = {  # must keep PyG's own path
    "sage-max": lambda: SAGEConv(D_IN, D_OUT, aggr="max"),
    "gat": lambda: GATConv(D_IN, D_OUT, heads=2),
}


def run(layer, *args, **kwargs):
    torch.manual_seed(1)
    data = multigraph()
    x = data.x.clone().requires_grad_()
    out = layer(x, data.edge_index, *args, **kwargs)
    (out * torch.randn(out.shape)).sum().backward()
    return (
        out,
        x.grad,
        {k: p.grad.clone() for k, p in layer.named_parameters() if p.grad is not None},
    )


def counting(layer):
    calls = {"fused": 0, "scatter": 0}
    layer.register_message_and_aggregate_forward_hook(
        lambda *a: calls.__setitem__("fused", calls["fused"] + 1)
    )
    layer.register_aggregate_forward_hook(
        lambda *a: calls.__setitem__("scatter", calls["scatter"] + 1)
    )
    return calls


def assert_same(a, b):
    for left, right in zip(a[:2], b[:2], strict=True):
        torch.testing.assert_close(left, right, rtol=1e-5, atol=1e-5)
    assert a[2].keys() == b[2].keys()
    for key in a[2]:
        torch.testing.assert_close(a[2][key], b[2][key], rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("name", list(FUSED) + list(SCATTER))
def test_layer_equals_pyg_and_takes_the_expected_path(name):
    torch.manual_seed(0)
    plain = {**FUSED, **SCATTER}[name]()
    fused = use_sparse_aggregation(copy.deepcopy(plain))
    calls = counting(fused)
    for _ in range(2):  # the second call reuses the cached matrix (and GCN's cached norm)
        assert_same(run(fused), run(plain))
        fused.zero_grad(), plain.zero_grad()
    expected_fused = name in FUSED
    assert (calls["fused"] > 0, calls["scatter"] > 0) == (expected_fused, not expected_fused)


def test_graphconv_edge_weights_constant_fused_learned_not():
    data = multigraph()
    weight = torch.rand(data.edge_index.size(1))
    torch.manual_seed(0)
    plain = GraphConv(D_IN, D_OUT)
    fused = use_sparse_aggregation(copy.deepcopy(plain))
    calls = counting(fused)
    assert_same(run(fused, weight), run(plain, weight))
    assert calls == {"fused": 1, "scatter": 0}
    learned = weight.clone().requires_grad_()
    run(fused, learned)
    assert calls["scatter"] == 1  # a weight that needs a gradient keeps the scatter path
    assert learned.grad is not None


def test_bipartite_call_with_size():
    data = multigraph()
    torch.manual_seed(0)
    plain = SAGEConv(D_IN, D_OUT)
    fused = use_sparse_aggregation(copy.deepcopy(plain))
    targets = 20  # the first 20 vertices are targets; edges into the others are dropped
    edges = data.edge_index[:, data.edge_index[1] < targets]
    x = data.x
    out_plain = plain((x, x[:targets]), edges, size=(N, targets))
    out_fused = fused((x, x[:targets]), edges, size=(N, targets))
    torch.testing.assert_close(out_fused, out_plain, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize(
    "options", [{}, {"add_self_loops": False}, {"normalize": False}, {"improved": True}]
)
def test_dist_gcn_outside_a_context_equals_pyg(options):
    torch.manual_seed(0)
    plain = GCNConv(D_IN, D_OUT, **options)
    ours = copy.deepcopy(plain)
    ours.__class__ = DistGCNConv
    assert_same(run(ours), run(plain))
    with torch.no_grad():  # a wider layer aggregates before its transform
        wide = GCNConv(D_IN, 2 * D_IN, **options)
        wider = copy.deepcopy(wide)
        wider.__class__ = DistGCNConv
        data = multigraph()
        torch.testing.assert_close(
            wider(data.x, data.edge_index), wide(data.x, data.edge_index), rtol=1e-5, atol=1e-5
        )


@pytest.mark.parametrize("name", ["gcn", "sage-mean", "graphconv"])
def test_fused_layers_run_under_inference_mode(name):
    # Lightning's test/predict loops: inference tensors keep no version counter to key caches on.
    torch.manual_seed(0)
    plain = FUSED[name]()
    fused = use_sparse_aggregation(copy.deepcopy(plain))
    data = multigraph()
    weight = torch.rand(data.edge_index.size(1)) if name == "graphconv" else None
    with torch.inference_mode():
        edges, x = data.edge_index.clone(), data.x.clone()
        args = () if weight is None else (weight.clone(),)
        for _ in range(2):  # the second call hits the caches keyed on inference tensors
            torch.testing.assert_close(
                fused(x, edges, *args), plain(x, edges, *args), rtol=1e-5, atol=1e-5
            )


@pytest.mark.parametrize(
    "aggr, num_bases, in_out", [("mean", None, (D_IN, D_OUT)), ("sum", 2, (D_IN, D_OUT)),
                                ("mean", None, (D_OUT, D_IN))],
)  # fmt: skip
def test_fused_rgcn_on_overlapping_relation_ranges_equals_pyg(aggr, num_bases, in_out):
    """Relations whose target and source ranges overlap (edge types drawn at random on one
    node type), a relation without edges and rows no relation reaches: outputs and gradients
    equal PyG's ``RGCNConv``, whichever side is transformed first."""
    from torch_geometric.nn import RGCNConv

    from lightning_gnn_dist.nn.rgcn import FusedRGCNConv

    data = multigraph()
    if in_out[0] != D_IN:
        data.x = torch.randn(data.num_nodes, in_out[0])
    keep = data.edge_index.max(0).values < data.num_nodes - 2  # the last rows: no edges
    edge_index = data.edge_index[:, keep]
    edge_type = torch.randint(
        0, 3, (edge_index.size(1),), generator=torch.Generator().manual_seed(3)
    )
    torch.manual_seed(0)
    reference = RGCNConv(*in_out, 4, num_bases=num_bases, aggr=aggr)  # relation 3: no edges
    fused = FusedRGCNConv(*in_out, 4, num_bases=num_bases, aggr=aggr)
    fused.load_state_dict(reference.state_dict())
    results = []
    for layer in (reference, fused):
        x = data.x.clone().requires_grad_()
        out = layer(x, edge_index, edge_type)
        torch.manual_seed(1)
        (out * torch.randn(out.shape)).sum().backward()
        results.append((out, x.grad, [p.grad for p in layer.parameters()]))
    (out, grad, params), (fused_out, fused_grad, fused_params) = results
    torch.testing.assert_close(fused_out, out, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(fused_grad, grad, atol=1e-5, rtol=1e-5)
    for expected, got in zip(params, fused_params, strict=True):
        torch.testing.assert_close(got, expected, atol=1e-5, rtol=1e-5)
