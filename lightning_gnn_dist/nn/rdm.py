"""The graph context of ``exchange="rdm"`` (paper 003): whole layers on replicated ``Â``.

Every rank holds ``Â`` and ``Âᵀ`` (or their row panel, ``replication < P``) as CSR matrices
(:class:`~lightning_gnn_dist.nn.spmm.SparseMatrix`, multiplied by
:func:`~lightning_gnn_dist.nn.spmm.spmm` like every other mode's aggregation), built once from
the rows every rank gathers at set-up (:meth:`RDMContext.prepare`; directed graphs keep
both, symmetric ones share one). A layer then runs as one autograd function that follows the
order's plan (:func:`~lightning_gnn_dist.comm.rdm_plan.plan_network`): SpMMs on column slices,
GEMMs on row slices, one redistribution per switch, the forward product ``Â·X`` kept for the
weight gradient, and the input gradient of the first layer skipped when the features need none.

Supported layers, with PyG 2.8's semantics (global degrees, parallel edges and repeated self
loops as PyG counts them): ``GCNConv`` (``Â = D^-1/2 (A + I) D^-1/2`` or as configured),
``SAGEConv`` with ``mean``/``sum`` aggregation (root term ``X·W_r`` on row slices) and
``GraphConv`` (``mean``/``sum``/``add``). ``GCNConv`` and ``GraphConv`` also take an
``edge_weight`` (the batch's edge attribute in the partition's edge order): ``Â`` then holds the
weights (GCN: normalised by global weighted degrees), built on the first call with that weight
tensor (on a layer's first call the ranks agree whether it is weighted: one flag all-reduce,
counted in ``setup_counter``). Anything else — attention layers, other aggregations, edge features,
``SAGEConv(project=True | normalize=True)``, batch norms between layers — is refused by name
when the context is prepared.

Between layers the model's own code (ReLU, dropout) sees the layout of the plan's boundary:
row slices ``[num_owned, f]`` or column slices ``[n_panel, f_j]``, so only element-wise operations
may sit between two convolutions; the last layer returns row slices.
"""

from __future__ import annotations

import logging
import time
import warnings
from dataclasses import dataclass, field

import torch
import torch.distributed as dist
from torch import Tensor, nn
from torch.autograd import Function
from torch_geometric.nn import GCNConv, GraphConv, SAGEConv
from torch_geometric.nn.conv import MessagePassing

from lightning_gnn_dist.comm.rdm import RDMExchange
from lightning_gnn_dist.comm.rdm_plan import LayerPlan, LayerShape, plan_network
from lightning_gnn_dist.data.csr import CSRAdjacency
from lightning_gnn_dist.nn.context import (
    CONTEXTS,
    GraphContext,
    check_edge_weight,
    weight_identity,
)
from lightning_gnn_dist.nn.layers import table_class
from lightning_gnn_dist.nn.norm import DistBatchNorm
from lightning_gnn_dist.nn.spmm import SparseMatrix, spmm

log = logging.getLogger("lightning_gnn_dist.comm.rdm")  # one logger for the mode's messages

SUPPORTED = "GCNConv, SAGEConv (aggr='mean' or 'sum') and GraphConv (aggr 'mean', 'sum', 'add')"


@dataclass(frozen=True)
class LayerSpec:
    """A layer RDM runs: its module, name, matrix kind and shape.

    ``kind`` is ``("gcn", add_self_loops, normalize)``, ``("mean",)`` or ``("sum",)``.
    """

    module: nn.Module
    name: str
    kind: tuple
    shape: LayerShape

    def parameters(self) -> tuple[Tensor, Tensor | None, Tensor | None]:
        """``(weight [out, in], bias [out] or None, root weight [out, in] or None)``."""
        m = self.module
        if isinstance(m, GCNConv):
            return m.lin.weight, m.bias, None
        if isinstance(m, SAGEConv):
            return m.lin_l.weight, m.lin_l.bias, m.lin_r.weight if m.root_weight else None
        return m.lin_rel.weight, m.lin_rel.bias, m.lin_root.weight


def layer_spec(module: nn.Module, name: str) -> LayerSpec:
    """The :class:`LayerSpec` of ``module``.

    Raises:
        NotImplementedError: a layer or option RDM cannot run exactly (named in the message).
    """
    label = f"{table_class(module).__name__} ({name or 'model'})"

    def refuse(reason: str) -> NotImplementedError:
        return NotImplementedError(
            f"{label} {reason}; exchange='rdm' runs {SUPPORTED}. Use exchange='p2p' for this model"
        )

    in_channels = getattr(module, "in_channels", None)
    if not isinstance(in_channels, int) or in_channels < 1:
        if isinstance(module, GCNConv | SAGEConv | GraphConv):
            raise refuse(f"has in_channels={in_channels!r} (lazy or bipartite)")
    aggr = module.aggr if isinstance(getattr(module, "aggr", None), str) else None
    if isinstance(module, GCNConv):
        kind = ("gcn", bool(module.add_self_loops), bool(module.normalize))
        root = False
    elif isinstance(module, SAGEConv):
        if module.project:
            raise refuse("projects its input (project=True)")
        if module.normalize:
            raise refuse("L2-normalises its output rows (normalize=True)")
        if aggr not in ("mean", "sum", "add"):
            raise refuse(f"aggregates with {module.aggr!r}")
        kind, root = (("mean",) if aggr == "mean" else ("sum",)), bool(module.root_weight)
    elif isinstance(module, GraphConv):
        if aggr not in ("mean", "sum", "add"):
            raise refuse(f"aggregates with {module.aggr!r}")
        kind, root = (("mean",) if aggr == "mean" else ("sum",)), True
    else:
        raise refuse("is not a layer RDM can run exactly")
    return LayerSpec(module, name, kind, LayerShape(in_channels, module.out_channels, root))


@dataclass
class RDMContext(GraphContext):
    """:class:`GraphContext` of ``exchange="rdm"``: call :meth:`prepare` with the model once
    (``GNNStrategy`` does), then every supported layer of the model runs through
    :meth:`layer_output`.

    Attributes:
        specs: the model's RDM layers in call order.
    """

    specs: list[LayerSpec] = field(default_factory=list)
    _index: dict[int, int] = field(default_factory=dict, repr=False)
    _matrices: dict[tuple, tuple[SparseMatrix, SparseMatrix]] = field(
        default_factory=dict, repr=False
    )
    _next: int = 0
    _plans: dict[tuple, list[LayerPlan]] = field(default_factory=dict, repr=False)
    _pass_plans: list[LayerPlan] | None = None
    _static: tuple | None = None  # (feature tensor, its version, its column slice)
    _weighted: dict[tuple, tuple] = field(default_factory=dict, repr=False)
    _is_weighted: dict[tuple, bool] = field(default_factory=dict, repr=False)

    @property
    def rdm(self) -> RDMExchange:
        return self.exchange  # type: ignore[return-value]

    # -- set-up -------------------------------------------------------------------------------
    def prepare(self, model: nn.Module) -> None:
        """Bind ``model``'s message-passing layers (in ``named_modules`` order, which must be
        the call order), refuse what RDM cannot run, build ``Â``/``Âᵀ`` of every layer kind and
        let the exchange choose the order. Collective: every rank calls it."""
        specs = []
        for name, module in model.named_modules():
            if isinstance(module, DistBatchNorm | nn.modules.batchnorm._BatchNorm):
                raise NotImplementedError(
                    f"{type(module).__name__} ({name}): exchange='rdm' passes column slices "
                    "between layers, which a batch norm cannot normalise; use exchange='p2p' "
                    "for models with batch norms"
                )
            if isinstance(module, MessagePassing):
                specs.append(layer_spec(module, getattr(module, "layer_name", "") or name))
        if not specs:
            raise ValueError(
                f"exchange='rdm': {type(model).__name__} has no message-passing layer; it runs "
                f"{SUPPORTED}"
            )
        for before, after in zip(specs, specs[1:], strict=False):
            if before.shape.out_width != after.shape.in_width:
                raise ValueError(
                    f"exchange='rdm' needs a chain of convolutions: {before.name} returns "
                    f"{before.shape.out_width} columns but {after.name} takes "
                    f"{after.shape.in_width}"
                )
        self.specs = specs
        self._index = {id(s.module): i for i, s in enumerate(specs)}
        for spec in specs:
            if spec.kind not in self._matrices:
                self._matrices[spec.kind] = self._build_matrices(spec.kind)
        if self.rdm.model_seconds is None:
            self.rdm.calibrate(self._sparse_op_seconds(specs[0].kind))
        self.rdm.configure([s.shape for s in specs], self._nnz(specs[0].kind), True)
        self._plans.clear()
        if self.rdm.rank == 0:
            log.info(
                "rdm: Â and Âᵀ of %d layer kind(s) hold %.1f MB on each rank (replication %d)",
                len(self._matrices),
                self.memory_bytes()["adjacency"] / 1e6,
                self.rdm.layout.replication,
            )

    def _build_matrices(
        self, kind: tuple, edge_weight: Tensor | None = None, improved: bool = False
    ) -> tuple[SparseMatrix, SparseMatrix]:
        """``(Â row panel, Âᵀ row panel)`` of ``kind`` as CSR ``[n_panel, N]`` (one object when
        ``Â`` is symmetric), from the weighted in-edges every rank contributes (with
        ``edge_weight [E_local]``: the layer's edge weights; GCN: normalised by global weighted
        degrees, ``improved`` choosing the added loops' weight)."""
        part = self.partition
        if kind[0] == "gcn":
            edge_index, weight = part.gcn_edge_weight(
                kind[1], improved, kind[2], edge_weight, self._halo_degree
            )
        else:
            edge_index = part.edge_index
            weight = torch.ones(edge_index.size(1)) if edge_weight is None else edge_weight
            weight = weight.to(torch.float32).cpu()
            if kind[0] == "mean":
                count = torch.bincount(edge_index[1], minlength=part.num_owned).clamp(min=1)
                weight = weight / count[edge_index[1]].to(torch.float32).cpu()
        start, end = part.owned_range
        src, dst = edge_index.cpu()
        local_to_global = torch.cat([torch.arange(start, end), part.halo_ids.cpu()])
        src, dst = local_to_global[src], dst + start
        layout = self.rdm.layout
        targets = []
        for q in range(layout.num_parts):
            lo, hi = layout.panel_rows(layout.panel(q))
            if layout.num_panels == 1:
                targets.append(torch.arange(src.numel()))
            else:
                mask = ((dst >= lo) & (dst < hi)) | ((src >= lo) & (src < hi))
                targets.append(mask.nonzero().flatten())
        what = f"structure {kind[0]}"
        ids = self.rdm.send_rows(torch.stack([src, dst], dim=1), targets, what)
        values = self.rdm.send_rows(weight.to(torch.float32).cpu(), targets, what)
        lo, hi = layout.panel_rows(layout.panel(self.rdm.rank))
        src, dst, values = ids[:, 0].cpu(), ids[:, 1].cpu(), values.cpu()  # summed on CPU
        device = part.edge_index.device
        matrix = _panel(dst, src, values, lo, hi, layout.num_nodes, device)
        transpose = _panel(src, dst, values, lo, hi, layout.num_nodes, device)
        if _same(matrix, transpose):
            transpose = matrix
        return matrix, transpose

    def _sparse_op_seconds(self, kind: tuple, width: int = 16, repeats: int = 3) -> float:
        """Seconds per multiply-add of this rank's SpMM with ``Â`` (median of ``repeats``)."""
        matrix = self._matrices[kind][0]
        dense = torch.ones(matrix.adj.num_cols, width, device=matrix.adj.device)
        times = []
        for _ in range(repeats + 1):
            start = time.perf_counter()
            spmm(matrix, dense)
            times.append(time.perf_counter() - start)
        ops = max(matrix.adj.num_entries * width, 1)
        return sorted(times[1:])[len(times[1:]) // 2] / ops

    def _nnz(self, kind: tuple) -> int:
        """Non-zeros of the whole ``Â`` (each panel is held by ``replication`` ranks)."""
        local = torch.tensor(
            [self._matrices[kind][0].adj.num_entries], dtype=torch.float64, device=self.rdm.device
        )
        if self.rdm.world_size > 1:
            dist.all_reduce(local, group=self.rdm.group)
        return int(round(float(local.cpu()) / self.rdm.layout.replication))

    def memory_bytes(self) -> dict[str, int]:
        """Bytes this rank holds for RDM: ``adjacency`` (the ``Â``/``Âᵀ`` panels' structure and
        values, shared when symmetric; weighted layers' own panels included), ``feature_columns`` (the static features' column
        slice)."""
        seen, total = set(), 0
        weighted = [matrices for _, matrices in self._weighted.values()]
        for matrices in [*self._matrices.values(), *weighted]:
            for m in matrices:
                if id(m) not in seen:
                    seen.add(id(m))
                    values = m.values()
                    total += m.adj.nbytes() + (
                        0 if values is None else values.numel() * values.element_size()
                    )
        columns = self._static[2] if self._static is not None else None
        return {
            "adjacency": total,
            "feature_columns": 0 if columns is None else columns.numel() * columns.element_size(),
        }

    # -- running a layer ----------------------------------------------------------------------
    def layer_output(
        self, module: nn.Module, x: Tensor, edge_weight: Tensor | None = None
    ) -> Tensor:
        """The whole layer ``module`` on ``x`` (with ``edge_weight``, ``[E_local]`` in the
        partition's edge order, if given) in the plan's input layout; returns its output in
        the plan's output layout."""
        index = self._index.get(id(module))
        if index is None:
            name = getattr(module, "layer_name", "") or type(module).__name__
            if not self.specs:
                raise RuntimeError(
                    f"exchange='rdm': RDMContext.prepare(model) has not run before layer {name} "
                    "(GNNStrategy calls it in setup)"
                )
            layer_spec(module, name)  # raises for unsupported layers
            raise RuntimeError(
                f"exchange='rdm': layer {name} is not one of the layers bound at set-up "
                f"({', '.join(s.name for s in self.specs)})"
            )
        spec = self.specs[index]
        if index == 0:
            static = self._static_columns(x)
            key = (self.rdm.order, static is not None, x.requires_grad)
            if key not in self._plans:
                self._plans[key] = plan_network(
                    [s.shape for s in self.specs],
                    self.rdm.order,
                    static_input=static is not None,
                    input_grad=x.requires_grad,
                    grad_to_rows=True,
                )
            self._pass_plans = self._plans[key]
        elif index != self._next or self._pass_plans is None:
            raise RuntimeError(
                f"exchange='rdm': layer {spec.name} ran out of order (expected "
                f"{self.specs[min(self._next, len(self.specs) - 1)].name}); RDM needs the "
                "convolutions called once each, in the order they are defined"
            )
        else:
            static = None
        self._next = index + 1
        plan = self._pass_plans[index]
        self._check_input(spec, plan, x, static is not None)
        weight, bias, root = spec.parameters()
        matrices = self._matrices[spec.kind]
        if self._agree_on_weights(spec, edge_weight):
            matrices = self._weighted_matrices(spec, edge_weight)
        run = _LayerRun(self, spec, plan, static, matrices)
        return _RDMLayer.apply(x, weight, bias, root, run)

    def _agree_on_weights(self, spec: LayerSpec, edge_weight: Tensor | None) -> bool:
        """Whether the layer runs with ``edge_weight``, (re)building its weighted ``Â`` for a
        weight tensor it has not seen. Building is collective: on a layer's first call the ranks
        agree whether it is weighted (one all-reduce of two flags, counted in ``setup_counter``
        as ``("edge weights", "control")``); later a rank rebuilds when its weight tensor
        changed, which happens on every rank at once (each passes its batch's edge attribute)."""
        key = (spec.name, spec.kind)
        if key not in self._is_weighted:
            ex = self.rdm
            flags = torch.tensor(
                [int(edge_weight is not None), int(edge_weight is None)],
                dtype=torch.int32,
                device=ex.device,
            )
            if ex.world_size > 1:
                dist.all_reduce(flags, op=dist.ReduceOp.MAX, group=ex.group)
                ex.setup_counter.record(
                    "edge weights",
                    "control",
                    rows_sent=2,
                    rows_received=2,
                    width=1,
                    element_size=4,
                    messages_sent=1,
                    messages_received=1,
                )
            if all(flags.tolist()):
                raise ValueError(
                    f"exchange='rdm': layer {spec.name} got an edge_weight on some ranks and "
                    "none on others; pass the batch's edge attribute on every rank"
                )
            self._is_weighted[key] = bool(flags[0])
        if self._is_weighted[key] != (edge_weight is not None):
            raise ValueError(
                f"exchange='rdm': layer {spec.name} was called "
                f"{'with' if self._is_weighted[key] else 'without'} an edge_weight before and "
                f"{'without' if edge_weight is None else 'with'} one now; RDM builds Â once per "
                "layer, so call it the same way every step"
            )
        if edge_weight is None:
            return False
        check_edge_weight(
            edge_weight, self.partition.edge_index.size(1), table_class(spec.module).__name__
        )
        cached = self._weighted.get(key)
        if cached is None or cached[0] != weight_identity(edge_weight):
            improved = bool(getattr(spec.module, "improved", False))
            matrices = self._build_matrices(spec.kind, edge_weight.detach(), improved)
            self._weighted[key] = (weight_identity(edge_weight), matrices)
        return True

    def _weighted_matrices(self, spec: LayerSpec, edge_weight: Tensor):
        return self._weighted[(spec.name, spec.kind)][1]

    def _static_columns(self, x: Tensor) -> Tensor | None:
        """The column slice of ``x`` if it is the partition's (unchanged) feature matrix on
        every rank; made once, counted as set-up traffic. Ranks agree
        through one all-reduce of two flags (set-up counter, ``("input features",
        "control")``), so a rank whose check differs (e.g. one without rows) cannot take
        another path than the others."""
        features = self.partition.x
        static = (
            features is not None
            and x.data_ptr() == features.data_ptr()
            and x.shape == features.shape
            and x.stride() == features.stride()
            and x.dtype == features.dtype
        )
        fresh = static and self._static is not None and self._static[1] == x._version
        ex = self.rdm
        flags = torch.tensor([int(not static), int(not fresh)], dtype=torch.int32, device=ex.device)
        if ex.world_size > 1:
            dist.all_reduce(flags, op=dist.ReduceOp.MAX, group=ex.group)
            ex.setup_counter.record(
                "input features",
                "control",
                rows_sent=2,
                rows_received=2,
                width=1,
                element_size=4,
                messages_sent=1,
                messages_received=1,
            )
        not_static, refresh = flags.tolist()
        if not_static:
            return None
        if refresh:
            columns = ex.to_columns(x, "input features", "setup", ex.setup_counter)
            self._static = (x, x._version, columns)
        return self._static[2]

    def _check_input(self, spec: LayerSpec, plan: LayerPlan, x: Tensor, static: bool) -> None:
        layout = self.rdm.layout
        width = spec.shape.in_width
        if static or plan.in_layouts == "H":
            expected = (layout.sizes[self.rdm.rank], width)
            what = "row slice"
        else:
            lo, hi = layout.panel_rows(layout.panel(self.rdm.rank))
            expected = (hi - lo, layout.column_split(width)[layout.block(self.rdm.rank)])
            what = "column slice"
        if tuple(x.shape) != tuple(int(v) for v in expected):
            raise ValueError(
                f"exchange='rdm': layer {spec.name} got a {list(x.shape)} input but the order "
                f"{self.rdm.order!r} hands it the {what} {list(expected)} of the previous "
                "layer's output; only element-wise operations may sit between convolutions"
            )


def _panel(
    rows: Tensor, cols: Tensor, values: Tensor, lo: int, hi: int, n: int, device: torch.device
) -> SparseMatrix:
    """``[hi − lo, n]`` CSR matrix of the entries with ``lo ≤ row < hi`` on ``device``, parallel
    entries summed into one (a multigraph's ``Â`` has one entry per vertex pair; entries sorted by
    row, then column, so a symmetric ``Â`` and its ``Âᵀ`` come out identical)."""
    keep = (rows >= lo) & (rows < hi)
    index = torch.stack([rows[keep] - lo, cols[keep]])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # sparse invariant checks disabled
        coo = torch.sparse_coo_tensor(index, values[keep], (hi - lo, n)).coalesce()
    (row, col), summed = coo.indices().to(device), coo.values().to(device)
    adj = CSRAdjacency.from_edge_index(torch.stack([col, row]), hi - lo, n)
    return SparseMatrix(adj, adj.entry_values(summed))


def _same(a: SparseMatrix, b: SparseMatrix) -> bool:
    return (
        torch.equal(a.adj.crow, b.adj.crow)
        and torch.equal(a.adj.col, b.adj.col)
        and torch.equal(a.values(), b.values())
    )


@dataclass
class _LayerRun:
    context: RDMContext
    spec: LayerSpec
    plan: LayerPlan
    static_columns: Tensor | None
    matrices: tuple[SparseMatrix, SparseMatrix]

    def convert(self, t: Tensor, to: str, width: int, direction: str) -> Tensor:
        ex, name = self.context.rdm, self.spec.name
        if to == "V":
            return ex.to_columns(t.contiguous(), name, direction)
        return ex.to_rows(t, name, direction, width)

    def spmm(self, transpose: bool, v: Tensor, direction: str) -> Tensor:
        full = self.context.rdm.gather_panels(v, self.spec.name, direction)
        return spmm(self.matrices[1 if transpose else 0], full)

    def bias_columns(self, width: int) -> slice:
        layout = self.context.rdm.layout
        start, end = layout.column_range(width, layout.block(self.context.rdm.rank))
        return slice(start, end)


class _Held(dict):
    """A matrix in the layouts held so far; :meth:`get` redistributes a missing one."""

    def __init__(self, run: _LayerRun, width: int, direction: str, **layouts) -> None:
        super().__init__({k: v for k, v in layouts.items() if v is not None})
        self.run, self.width, self.direction = run, width, direction

    def get(self, layout: str) -> Tensor:  # type: ignore[override]
        if layout not in self:
            other = self["V" if layout == "H" else "H"]
            self[layout] = self.run.convert(other, layout, self.width, self.direction)
        return self[layout]


class _RDMLayer(Function):
    """One layer under its plan; backward follows the plan's backward order (not autograd's)."""

    @staticmethod
    def forward(ctx, x, weight, bias, root, run: _LayerRun):
        plan, (a, c) = run.plan, (run.spec.shape.in_width, run.spec.shape.out_width)
        layouts = {}
        if "H" in plan.in_layouts or run.static_columns is not None:
            layouts["H"] = x
        if run.static_columns is not None:
            layouts["V"] = run.static_columns
        elif plan.in_layouts == "V":
            layouts["V"] = x
        held = _Held(run, a, "forward", **layouts)
        t_h = None
        if plan.forward_order == "s":
            t_h = run.convert(run.spmm(False, held.get("V"), "forward"), "H", a, "forward")
            z = t_h @ weight.t()
            if bias is not None:
                z = z + bias
            if root is not None:
                z = z + held.get("H") @ root.t()
            out = z if plan.out_layout == "H" else run.convert(z, "V", c, "forward")
        else:
            u = held.get("H") @ weight.t()
            agg = run.spmm(False, run.convert(u, "V", c, "forward"), "forward")
            if bias is not None:
                agg = agg + bias[run.bias_columns(c)]
            if root is None:
                out = agg if plan.out_layout == "V" else run.convert(agg, "H", c, "forward")
            elif plan.out_layout == "V":
                out = agg + run.convert(held.get("H") @ root.t(), "V", c, "forward")
            else:
                out = run.convert(agg, "H", c, "forward") + held.get("H") @ root.t()
        run.context.rdm.predict_pass(run.spec.name, "forward", plan.forward, out.element_size())
        ctx.run, ctx.held, ctx.t_h = run, dict(held), t_h
        ctx.params = (weight, bias, root)
        return out

    @staticmethod
    def backward(ctx, grad_out):
        run = ctx.run
        plan, (a, c) = run.plan, (run.spec.shape.in_width, run.spec.shape.out_width)
        weight, bias, root = ctx.params
        held = _Held(run, a, "backward", **ctx.held)
        grads = _Held(run, c, "backward", **{plan.out_layout: grad_out.contiguous()})
        grad_bias = None
        if bias is not None:
            if plan.out_layout == "H":
                grad_bias = grad_out.sum(0)
            else:
                grad_bias = grad_out.new_zeros(c)
                grad_bias[run.bias_columns(c)] = grad_out.sum(0)
        grad_x = grad_root = None
        if plan.backward_order == "s":
            s_h = run.convert(run.spmm(True, grads.get("V"), "backward"), "H", c, "backward")
            if plan.weight_route == "S":
                grad_weight = s_h.t() @ held.get("H")
            else:
                grad_weight = grads.get("H").t() @ ctx.t_h
            if root is not None:
                grad_root = grads.get("H").t() @ held.get("H")
            if plan.grad_layout is not None:
                grad_x = s_h @ weight
                if root is not None:
                    grad_x = grad_x + grads.get("H") @ root
                if plan.grad_layout == "V":
                    grad_x = run.convert(grad_x, "V", a, "backward")
        else:
            g_h = grads.get("H")
            if plan.forward_order == "s":
                grad_weight = g_h.t() @ ctx.t_h
            elif plan.weight_route == "T":
                t_h = run.convert(run.spmm(False, held.get("V"), "backward"), "H", a, "backward")
                grad_weight = g_h.t() @ t_h
            else:
                s_h = run.convert(run.spmm(True, grads.get("V"), "backward"), "H", c, "backward")
                grad_weight = s_h.t() @ held.get("H")
            if root is not None:
                grad_root = g_h.t() @ held.get("H")
            if plan.grad_layout is not None:
                k_v = run.convert(g_h @ weight, "V", a, "backward")
                g_v = run.spmm(True, k_v, "backward")
                if root is None:
                    grad_x = (
                        g_v if plan.grad_layout == "V" else run.convert(g_v, "H", a, "backward")
                    )
                elif plan.grad_layout == "V":
                    grad_x = g_v + run.convert(g_h @ root, "V", a, "backward")
                else:
                    grad_x = run.convert(g_v, "H", a, "backward") + g_h @ root
        ex = run.context.rdm
        ex.predict_pass(run.spec.name, "backward", plan.backward, grad_out.element_size())
        ex.last_backward_end = time.perf_counter()
        return grad_x, grad_weight, grad_bias, grad_root, None


CONTEXTS["rdm"] = RDMContext
