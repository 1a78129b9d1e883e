"""PyG's models trimmed per hop on sampled batches (``nn.trim``, issue 31): the seeds' rows and
every gradient equal plain PyG's, on multigraph batches, and the layers really ran on fewer rows."""

import copy
import pickle

import pytest
import torch
import torch.nn.functional as F
from torch_geometric.nn.models import GAT, GCN, GIN, EdgeCNN, GraphSAGE

from lightning_gnn_dist.loaders import LocalGraphStore, NeighborLoader
from lightning_gnn_dist.nn import distribute, trim, use_graph_context
from lightning_gnn_dist.nn.functional import sage_transform_first_cheaper
from lightning_gnn_dist.nn.sampled import SampledBatchContext
from lightning_gnn_dist.nn.trim import trim_per_hop
from tests.helpers import random_graph

D_IN, HIDDEN, CLASSES = 8, 12, 3
MODELS = {
    "sage": lambda layers: GraphSAGE(D_IN, HIDDEN, layers, CLASSES),
    "sage-sum": lambda layers: GraphSAGE(D_IN, HIDDEN, layers, CLASSES, aggr="sum"),
    "sage-max": lambda layers: GraphSAGE(D_IN, HIDDEN, layers, CLASSES, aggr="max"),
    "gcn": lambda layers: GCN(D_IN, HIDDEN, layers, CLASSES),
    "gcn-narrowing": lambda layers: GCN(D_IN, 4, layers, CLASSES),  # X·W before the product
    "gat": lambda layers: GAT(D_IN, HIDDEN, layers, CLASSES, heads=2),
    "gatv2": lambda layers: GAT(D_IN, HIDDEN, layers, CLASSES, v2=True),
    "gin": lambda layers: GIN(D_IN, HIDDEN, layers, CLASSES),
}


@pytest.fixture(scope="module")
def graph():
    # A multigraph: parallel edges, repeated self loops, isolated vertices (298, 299).
    return random_graph(300, 3000, seed=4, features=D_IN, parallel_edges=True)


def sampled_batch(graph, fanouts):
    loader = NeighborLoader(LocalGraphStore(graph), fanouts, graph.train_mask, batch_size=20)
    batch = next(iter(loader))
    src, dst = batch.edge_index
    assert bool((src == dst).any())  # self loops reach the batch
    assert torch.unique(batch.edge_index, dim=1).size(1) < batch.edge_index.size(1)  # parallel
    return batch


def run(model, batch, trimmed_call: bool, context: bool):
    """Output and parameter gradients of a loss on the seeds' rows."""
    model.zero_grad()
    counts = (
        {
            "num_sampled_nodes_per_hop": batch.num_sampled_nodes,
            "num_sampled_edges_per_hop": batch.num_sampled_edges,
        }
        if trimmed_call
        else {}
    )
    if context:
        with use_graph_context(SampledBatchContext.from_batch(batch)):
            out = model(batch.x, batch.edge_index, **counts)
    else:
        out = model(batch.x, batch.edge_index, **counts)
    seeds = out[: batch.batch_size]
    (seeds * torch.randn(seeds.shape, generator=torch.Generator().manual_seed(3))).sum().backward()
    return out, {k: p.grad.clone() for k, p in model.named_parameters() if p.grad is not None}


def trimmed(model):
    return trim_per_hop(distribute(copy.deepcopy(model), ("neighbor",)))


def first_layer_rows(model):
    """Rows of the first layer's output (its activation's input)."""
    rows = []
    model.act.register_forward_hook(lambda m, args, out: rows.append(out.size(0)))
    return rows


@pytest.mark.parametrize("name", list(MODELS))
@pytest.mark.parametrize("trimmed_call", [False, True], ids=["untrimmed", "pyg-trimmed"])
@pytest.mark.parametrize("fanouts", [[4, 3], [3, 2, 2]], ids=["2-hop", "3-hop"])
def test_trimmed_model_equals_pyg_on_sampled_batches(graph, name, trimmed_call, fanouts):
    """Called as the guide shows, the output is the seeds' rows of PyG's untrimmed output;
    called with the per-hop counts, it is PyG's trimmed output, every row. Gradients equal
    PyG's. The first layer computed hops ``0 .. L−1`` only (PyG: every batch vertex)."""
    torch.manual_seed(0)
    reference = MODELS[name](len(fanouts))
    model = trimmed(reference)
    batch = sampled_batch(graph, fanouts)
    rows = first_layer_rows(model)
    expected, expected_grads = run(reference, batch, trimmed_call, context=False)
    out, grads = run(model, batch, trimmed_call, context=True)
    if not trimmed_call:
        expected = expected[: batch.batch_size]
    assert out.shape == expected.shape
    torch.testing.assert_close(out, expected, rtol=1e-5, atol=1e-5)
    assert grads.keys() == expected_grads.keys()
    for key, grad in grads.items():
        torch.testing.assert_close(grad, expected_grads[key], rtol=1e-5, atol=1e-5)
    assert rows[0] == sum(batch.num_sampled_nodes[:-1]) < batch.num_nodes


@pytest.mark.parametrize(
    "transform_first", [True, False], ids=["transform-first", "aggregate-first"]
)
@pytest.mark.parametrize("name", ["sage", "sage-sum"])
def test_both_orders_of_a_sage_layer_equal_pyg(graph, name, transform_first, monkeypatch):
    """A SAGE layer multiplies before or after aggregating, whichever costs less on its hop;
    both orders give PyG's seeds' rows and gradients (each forced here on every layer)."""
    asked = []

    def forced(*sizes, **_):
        asked.append(sizes)
        return transform_first

    monkeypatch.setattr(trim, "sage_transform_first_cheaper", forced)
    torch.manual_seed(0)
    reference = MODELS[name](2)
    batch = sampled_batch(graph, [4, 3])
    expected, expected_grads = run(reference, batch, False, context=False)
    out, grads = run(trimmed(reference), batch, False, context=True)
    torch.testing.assert_close(out, expected[: batch.batch_size], rtol=1e-5, atol=1e-5)
    for key, grad in grads.items():
        torch.testing.assert_close(grad, expected_grads[key], rtol=1e-5, atol=1e-5)
    assert len(asked) == 2  # one choice per layer


def test_a_sampled_hop_aggregates_first_and_a_whole_graph_transforms_first():
    """The order's cost on the benchmark's second layer (256 → 16; 4,085 sources, 1,009
    targets, 5,200 edges: aggregating first is ~2.3× cheaper) and on a whole graph of as many
    sources as targets (a narrowing layer transforms first; a widening one never)."""
    assert not sage_transform_first_cheaper(256, 16, 4085, 1009, 5200, input_grad=True)
    assert sage_transform_first_cheaper(256, 16, 4085, 4085, 17 * 4085, input_grad=True)
    assert sage_transform_first_cheaper(256, 16, 4085, 4085, 17 * 4085, input_grad=False)
    assert not sage_transform_first_cheaper(16, 256, 4085, 4085, 17 * 4085, input_grad=True)
    # the first layer (100 → 256, no input gradient) aggregates first either way
    assert not sage_transform_first_cheaper(100, 256, 11465, 4085, 28547, input_grad=False)


@pytest.mark.parametrize("name", ["gcn", "sage"])
def test_trimmed_model_with_fanout_minus_one_equals_the_full_graph(graph, name):
    """Fan-out −1: the seeds' rows equal a full-graph forward pass (GCN with the global
    degrees the batch carries)."""
    torch.manual_seed(0)
    reference = MODELS[name](2)
    batch = sampled_batch(graph, [-1, -1])
    with torch.no_grad():
        expected = reference(graph.x, graph.edge_index)[batch.n_id[: batch.batch_size]]
        with use_graph_context(SampledBatchContext.from_batch(batch)):
            out = trimmed(reference)(batch.x, batch.edge_index)
    torch.testing.assert_close(out, expected, rtol=1e-5, atol=1e-5)


UNTRIMMABLE = {
    "batch-norm": lambda: GraphSAGE(D_IN, HIDDEN, 2, CLASSES, norm="batch_norm"),
    "jumping-knowledge": lambda: GraphSAGE(D_IN, HIDDEN, 2, CLASSES, jk="cat"),
    "gcn-cached": lambda: GCN(D_IN, HIDDEN, 2, CLASSES, cached=True),
    "edge-cnn": lambda: EdgeCNN(D_IN, HIDDEN, 2, CLASSES),  # not a model trim_per_hop knows
    "subclass": lambda: type("MySAGE", (GraphSAGE,), {})(D_IN, HIDDEN, 2, CLASSES),
    "three-layers": lambda: GraphSAGE(D_IN, HIDDEN, 3, CLASSES),  # the batch has 2 hops
}


@pytest.mark.parametrize("name", list(UNTRIMMABLE))
def test_models_that_cannot_trim_run_as_pyg(graph, name):
    """A row the seeds do not need could change other rows (batch statistics, jumping
    knowledge), the layer is not one the trimming knows, or the batch has other hops than
    the model layers: the model runs untrimmed, every row as PyG's."""
    torch.manual_seed(0)
    reference = UNTRIMMABLE[name]()
    model = trimmed(reference)
    batch = sampled_batch(graph, [4, 3])
    reference.eval(), model.eval()
    with torch.no_grad():
        expected = reference(batch.x, batch.edge_index)
        with use_graph_context(SampledBatchContext.from_batch(batch)):
            out = model(batch.x, batch.edge_index)
    assert out.shape == (batch.num_nodes, CLASSES)
    torch.testing.assert_close(out, expected, rtol=1e-5, atol=1e-5)


def test_calls_that_are_not_the_batch_run_as_pyg(graph):
    """Outside a sampled batch's context, on other edges than the batch's, or with edge
    attributes, the trimmed class is PyG's model, every row."""
    torch.manual_seed(0)
    reference = GAT(D_IN, HIDDEN, 2, CLASSES)
    model = trimmed(reference)
    batch = sampled_batch(graph, [4, 3])
    attributes = torch.rand(batch.edge_index.size(1), 2)
    with torch.no_grad():
        torch.testing.assert_close(
            model(graph.x, graph.edge_index), reference(graph.x, graph.edge_index)
        )
        expected = reference(batch.x, batch.edge_index)
        with use_graph_context(SampledBatchContext.from_batch(batch)):
            other_edges = model(batch.x, batch.edge_index.clone())
            with_attributes = model(batch.x, batch.edge_index, edge_attr=attributes)
    torch.testing.assert_close(other_edges, expected)
    torch.testing.assert_close(with_attributes, expected)


def test_trim_per_hop_keeps_the_model(graph):
    """Same class name, parameters and state dict; idempotent; the model pickles (its class is
    importable) and trains in train mode with dropout."""
    torch.manual_seed(0)
    reference = GraphSAGE(D_IN, HIDDEN, 2, CLASSES, dropout=0.5)
    model = trim_per_hop(trim_per_hop(distribute(copy.deepcopy(reference), ("neighbor",))))
    assert type(model).__name__ == "GraphSAGE" and isinstance(model, GraphSAGE)
    assert repr(model) == repr(reference)
    assert model.state_dict().keys() == reference.state_dict().keys()
    restored = pickle.loads(pickle.dumps(model))
    assert type(restored) is type(model)
    batch = sampled_batch(graph, [4, 3])
    with use_graph_context(SampledBatchContext.from_batch(batch)):
        out = model(batch.x, batch.edge_index)
    loss = F.cross_entropy(out, batch.y[: batch.batch_size])
    loss.backward()
    assert out.shape == (batch.batch_size, CLASSES) and torch.isfinite(loss)


@pytest.mark.parametrize("compiled", [True, False])
@pytest.mark.parametrize("p", [0.1, 0.5])
def test_relu_dropout_is_dropout_of_relu(compiled, p):
    """The trimmed models' ``dropout(relu(x))`` (one compiled pass where numba is installed):
    each element is ``relu(x) / (1 − p)`` or ``0``, positive elements are kept with probability
    ``1 − p``, the gradient flows where the output is positive, and ``torch.manual_seed``
    reproduces it."""
    from lightning_gnn_dist.data.sampler import use_compiled
    from lightning_gnn_dist.nn.trim import relu_dropout

    use_compiled(compiled)
    try:
        x = torch.randn(400, 500, dtype=torch.float64, requires_grad=True)
        torch.manual_seed(7)
        out = relu_dropout(x, p)
        torch.manual_seed(7)
        again = relu_dropout(x, p)
        other = relu_dropout(x, p)
    finally:
        use_compiled(True)
    assert torch.equal(out, again) and not torch.equal(out, other)
    kept = out != 0
    torch.testing.assert_close(out[kept], x.detach()[kept] / (1 - p))
    positive = x.detach() > 0
    assert not bool((kept & ~positive).any())
    assert float(kept.sum() / positive.sum()) == pytest.approx(1 - p, abs=0.01)
    grad = torch.randn_like(out)
    out.backward(grad)
    torch.testing.assert_close(x.grad, torch.where(kept, grad / (1 - p), 0.0))
