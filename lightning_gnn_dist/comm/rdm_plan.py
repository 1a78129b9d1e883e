"""RDM (paper 003): the SpMM/GEMM orders, the plan of every redistribution, and their cost.

Pure functions of the layer widths, the order and the row split; no process group. The
exchange (:mod:`.rdm`) executes these plans and the counters must equal what they predict.

Layouts of a dense ``[N, f]`` matrix:

* ``H`` (row slices): rank ``p`` holds its owned rows ``[n_p, f]`` — the project's usual layout,
  so loss, metrics and norms see what they always see;
* ``V`` (column slices): with ``R`` ranks per row panel of ``Â`` (``replication``, ``R_A`` of the
  paper; ``P / R`` panels), rank ``p`` holds the rows of its panel and column block
  ``p mod R`` of ``R`` blocks: ``[n_panel, f_j]``. With ``R = P`` (the default, ``Â`` replicated
  on every rank) that is all ``N`` rows and ``f / P`` columns.

An SpMM ``Â·X`` needs no communication on ``V`` when ``R = P``; with ``R < P`` it first gathers
the column block from the other panels (``(P/R − 1)·N·f`` elements, Tables II–III). A GEMM
``X·W`` needs none on ``H``. Switching layouts moves ``(R − 1)/R · N · f`` elements (one
``all_to_all_single``).

**Orders.** A string of ``2L`` letters: the forward order of layers ``1..L`` then the backward
order of layers ``L..1`` (the artifact's ``mmorder``; ``"dsds"`` is Table IV's ID 10). ``s``:
SpMM first, ``d``: GEMM (dense) first. Forward ``s`` takes its input in ``V`` and yields ``H``,
``d`` takes ``H`` and yields ``V``; backward ``s`` takes the output gradient in ``V`` and yields
the input gradient in ``H``, ``d`` the reverse. Forward ``s`` keeps ``T = (Â·X)`` in ``H`` for the
weight gradient (§III-C), backward ``s`` computes ``Âᵀ·G`` and uses it for both gradients.

**Plan rules** (what :func:`plan_network` decides; the exchange follows them):

1. The layout between layers ``l`` and ``l + 1`` (what the model's element-wise code in between,
   e.g. ReLU, sees) minimises the redistributions of width ``f_l`` at that boundary: forward
   (``l``'s output, ``l + 1``'s input) plus backward (``l + 1``'s input gradient, ``l``'s output
   gradient); ties go to ``H``. The last layer returns ``H`` (the loss needs whole rows).
2. The first layer's input, when it is the static feature matrix, is held in both layouts (its
   ``V`` copy made once, counted as set-up traffic) and needs no gradient: the first layer's
   backward then computes only its weight gradient — ``(Â·X)ᵀ·G`` from the memoised forward
   product when the layer is ``s``/``d``, with no SpMM and no redistribution (the paper computes
   ``G⁰`` as well).
3. A weight gradient needs ``T_H`` and ``G_H``, or ``X_H`` and ``(ÂᵀG)_H``; a missing operand is
   redistributed (the narrower of the two candidates). ``d``/``d`` layers recompute ``Â·X`` or
   ``Âᵀ·G``, whichever moves fewer columns given what is already held.
4. Layers with a root term (``SAGEConv``, ``GraphConv``: ``Â·X·W + X·W_root``) also need ``X_H``
   and ``G_H``; GEMM-first they move one more matrix of width ``f_l`` forward and ``f_{l−1}``
   backward (the root product joins the aggregated one).

Differences from Table IV (the paper's model, :func:`table_iv_cost`, two typos corrected): the
element-wise activation between layers applies its mask in the boundary layout, so an order
whose gradient leaves layer ``l + 1`` in the layout layer ``l`` wants but not in the boundary
layout pays ``2·f_l`` more (only orders with a ``d``/``d`` layer; never Pareto-optimal in the
paper's Table VI); ``d``/``d`` recomputation reuses a layout already held (up to ``min(f)``
less); rule 2 (fewer).
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

LAYOUTS = ("H", "V")


@dataclass(frozen=True)
class LayerShape:
    """One RDM layer: ``in_width → out_width`` (``f_{l−1} → f_l``) and whether it has a root
    term ``X·W_root`` beside the aggregation."""

    in_width: int
    out_width: int
    root: bool = False


@dataclass(frozen=True)
class Move:
    """One redistribution: matrix ``what`` of ``width`` columns switched to layout ``to``."""

    what: str
    width: int
    to: str


@dataclass(frozen=True)
class PassPlan:
    """The redistributions and SpMMs of one layer in one direction."""

    moves: tuple[Move, ...] = ()
    spmm_widths: tuple[int, ...] = ()

    @property
    def comm_units(self) -> int:
        """Redistributed columns (units of ``N`` elements, before the ``(R−1)/R`` factor)."""
        return sum(m.width for m in self.moves)

    @property
    def sparse_units(self) -> int:
        """SpMM columns (units of ``nnz`` multiply-adds)."""
        return sum(self.spmm_widths)


@dataclass(frozen=True)
class LayerPlan:
    """What one layer does under an order.

    Attributes:
        forward_order, backward_order: ``"s"`` or ``"d"``.
        in_layouts: layouts the input arrives in (``"H"``, ``"V"``, or ``"HV"`` for the static
            feature matrix).
        out_layout: layout of the output (and of its gradient).
        grad_layout: layout of the returned input gradient (``None``: not computed).
        weight_route: ``"T"``: weight gradient ``(Â·X)ᵀ·G``; ``"S"``: ``Xᵀ·(Âᵀ·G)``.
        forward, backward: the redistributions and SpMMs of each pass.
    """

    forward_order: str
    backward_order: str
    in_layouts: str
    out_layout: str
    grad_layout: str | None
    weight_route: str
    forward: PassPlan
    backward: PassPlan


def parse_order(order: str, num_layers: int) -> tuple[str, str]:
    """``(forward, backward)`` letters of each layer, both in layer order ``1..L``.

    Raises:
        ValueError: not ``2L`` letters ``s``/``d``.
    """
    text = order.lower()
    if len(text) != 2 * num_layers or set(text) - {"s", "d"}:
        raise ValueError(
            f"rdm order {order!r} must have {2 * num_layers} letters 's' (SpMM first) or 'd' "
            f"(GEMM first) for {num_layers} layers: the forward order of layers 1..{num_layers} "
            f"then the backward order of layers {num_layers}..1, e.g. {'ds' * num_layers!r}"
        )
    return text[:num_layers], text[num_layers:][::-1]


def all_orders(num_layers: int) -> list[str]:
    """All ``4^L`` orders."""
    return ["".join(p) for p in itertools.product("sd", repeat=2 * num_layers)]


def _other(layout: str) -> str:
    return "V" if layout == "H" else "H"


def _boundary_layout(shapes, fwd, bwd, grads, k: int) -> str:
    """Layout between layers ``k`` and ``k + 1`` (rule 1)."""
    nxt = k + 1

    def cost(x: str) -> int:
        out_free = {"H"} if fwd[k] == "s" else ({"H", "V"} if shapes[k].root else {"V"})
        need_in = {"V", "H"} if fwd[nxt] == "s" and shapes[nxt].root else {_need(fwd[nxt])}
        total = int(x not in out_free) + len(need_in - {x})
        if grads[nxt] and not (bwd[nxt] == "d" and shapes[nxt].root):
            total += int(x != ("H" if bwd[nxt] == "s" else "V"))
        need_grad = {_need(bwd[k])} | ({"H"} if shapes[k].root else set())
        return total + len(need_grad - {x})

    return min(LAYOUTS, key=lambda x: (cost(x), x != "H"))


def _need(letter: str) -> str:
    """Layout an ``s`` (SpMM first) or ``d`` step needs for its input."""
    return "V" if letter == "s" else "H"


def plan_network(
    shapes: Sequence[LayerShape],
    order: str,
    *,
    static_input: bool = True,
    input_grad: bool = False,
    grad_to_rows: bool = False,
) -> list[LayerPlan]:
    """The plan of every layer under ``order`` (see the module docstring for the rules).

    Args:
        shapes: the layers, first to last.
        order: ``2L`` letters, see :func:`parse_order`.
        static_input: the first layer's input is held in both layouts (the feature matrix,
            redistributed once at set-up). ``False``: it arrives row-sliced every step.
        input_grad: the first layer returns the gradient of its input. With ``static_input``
            it is returned in the layout it is produced in (the paper's convention) unless
            ``grad_to_rows``.
        grad_to_rows: return the static input's gradient in row slices (what a model that
            passed the row-sliced features needs; the exchange uses this).
    """
    num = len(shapes)
    fwd, bwd = parse_order(order, num)
    grads = [input_grad] + [True] * (num - 1)
    outs = [_boundary_layout(shapes, fwd, bwd, grads, k) for k in range(num - 1)] + ["H"]
    ins = ["HV" if static_input else "H"] + outs[:-1]
    first = "H" if static_input and input_grad and grad_to_rows else None
    return [
        _plan_layer(shapes[k], fwd[k], bwd[k], ins[k], outs[k], grads[k], first if k == 0 else None)
        for k in range(num)
    ]


def _plan_layer(
    shape: LayerShape,
    o: str,
    b: str,
    in_layouts: str,
    out: str,
    input_grad: bool,
    grad_layout: str | None = None,
) -> LayerPlan:
    a, c, root = shape.in_width, shape.out_width, shape.root
    held_x = set(in_layouts)
    moves: list[Move] = []
    spmm: list[int] = []
    # -- forward --
    if o == "s":
        if "V" not in held_x:
            moves.append(Move("input", a, "V"))
            held_x.add("V")
        spmm.append(a)
        moves.append(Move("aggregated input", a, "H"))
        if root and "H" not in held_x:
            moves.append(Move("input", a, "H"))
            held_x.add("H")
        if out == "V":
            moves.append(Move("output", c, "V"))
    else:
        if "H" not in held_x:
            moves.append(Move("input", a, "H"))
            held_x.add("H")
        moves.append(Move("transformed input", c, "V"))
        spmm.append(c)
        if root:
            moves.append(Move("root term", c, "V") if out == "V" else Move("output", c, "H"))
        elif out == "H":
            moves.append(Move("output", c, "H"))
    forward = PassPlan(tuple(moves), tuple(spmm))
    # -- backward --
    held_g = {out}
    moves, spmm = [], []

    def need_g(layout: str) -> None:
        if layout not in held_g:
            moves.append(Move("output gradient", c, layout))
            held_g.add(layout)

    if input_grad and grad_layout is None and in_layouts != "HV":
        grad_layout = in_layouts
    if b == "s":
        need_g("V")
        spmm.append(c)
        moves.append(Move("aggregated gradient", c, "H"))
        if "H" in held_x:
            route = "S"
        elif "H" in held_g or c < a:
            route = "T"
            need_g("H")
        else:
            route = "S"
            moves.append(Move("input", a, "H"))
            held_x.add("H")
        if root:
            need_g("H")
        if input_grad:
            grad_layout = grad_layout or "H"
            if grad_layout == "V":
                moves.append(Move("input gradient", a, "V"))
    else:
        need_g("H")
        route = "T"
        if o == "d":  # d/d: recompute Â·X or Âᵀ·G, whichever moves fewer columns
            t_cost = (0 if "V" in held_x else a) + a
            s_cost = (0 if "V" in held_g else c) + c
            if (t_cost, a) <= (s_cost, c):
                if "V" not in held_x:
                    moves.append(Move("input", a, "V"))
                spmm.append(a)
                moves.append(Move("aggregated input", a, "H"))
            else:
                route = "S"
                need_g("V")
                spmm.append(c)
                moves.append(Move("aggregated gradient", c, "H"))
        if input_grad:
            moves.append(Move("transformed gradient", a, "V"))
            spmm.append(a)
            if root:
                grad_layout = grad_layout or "V"
                if grad_layout == "V":
                    moves.append(Move("root gradient", a, "V"))
                else:
                    moves.append(Move("input gradient", a, "H"))
            else:
                grad_layout = grad_layout or "V"
                if grad_layout == "H":
                    moves.append(Move("input gradient", a, "H"))
    backward = PassPlan(tuple(moves), tuple(spmm))
    return LayerPlan(o, b, in_layouts, out, grad_layout, route, forward, backward)


def plan_units(plans: Sequence[LayerPlan]) -> tuple[int, int]:
    """``(redistributed columns, SpMM columns)`` of one training step: Table IV's units
    (``(P−1)/P·N`` elements and ``nnz`` multiply-adds)."""
    comm = sum(p.forward.comm_units + p.backward.comm_units for p in plans)
    sparse = sum(p.forward.sparse_units + p.backward.sparse_units for p in plans)
    return comm, sparse


def table_iv_cost(order: str, widths: Sequence[int]) -> tuple[int, int]:
    """The paper's model (§IV, Table IV for ``L = 2``, any ``L`` here) in its units:
    ``(communication, sparse ops)``. Two printed entries are typos and are corrected here
    (ID 13 has ``2·f_in``, ID 15 ``2·f_out``). It computes ``G⁰`` and ignores where the
    activation's mask lives; see :func:`plan_network` for what this package does."""
    num = len(widths) - 1
    f = list(widths)
    o, b = parse_order(order, num)
    comm = sum(f[k] if o[k] == "s" else f[k + 1] for k in range(num))
    comm += sum(f[k + 1] for k in range(num - 1) if o[k] == o[k + 1])
    comm += f[num] * ((o[-1] == "d") + (b[-1] == "s"))
    comm += sum(f[k + 1] if b[k] == "s" else f[k] for k in range(num))
    comm += sum(f[k + 1] for k in range(num - 1) if b[k] == b[k + 1])
    sparse = sum(f[k] if o[k] == "s" else f[k + 1] for k in range(num))
    sparse += sum(f[k + 1] if b[k] == "s" else f[k] for k in range(num))
    for k in range(num):
        if o[k] == "d" and b[k] == "d":
            comm += 2 * min(f[k], f[k + 1])
            sparse += min(f[k], f[k + 1])
    return comm, sparse


def table_iv_id(order: str) -> int:
    """Table IV's ID of a two-layer order (``"dsds"`` → 10)."""
    o, b = parse_order(order, 2)
    return 2 * (o[0] == "d") + (o[1] == "d") + 8 * (b[1] == "d") + 4 * (b[0] == "d")


@dataclass(frozen=True)
class RDMLayout:
    """The row and column split of RDM's layouts (all counts in rows or elements).

    Args:
        part_offsets: ``[P + 1]`` owned row ranges (the partition's contiguous ranges).
        replication: ranks per row panel of ``Â`` (``R_A``); must divide ``P``.
    """

    part_offsets: tuple[int, ...]
    replication: int
    _sizes: np.ndarray = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "_sizes", np.diff(np.asarray(self.part_offsets, dtype=np.int64)))
        check_replication(self.replication, self.num_parts)

    @property
    def num_parts(self) -> int:
        return len(self.part_offsets) - 1

    @property
    def num_nodes(self) -> int:
        return int(self.part_offsets[-1])

    @property
    def num_panels(self) -> int:
        """Row panels of ``Â`` (``P / R_A``)."""
        return self.num_parts // self.replication

    @property
    def sizes(self) -> np.ndarray:
        """``[P]`` owned rows per rank."""
        return self._sizes

    def panel(self, rank: int) -> int:
        return rank // self.replication

    def block(self, rank: int) -> int:
        """Column block of ``rank`` in the ``V`` layout."""
        return rank % self.replication

    def group(self, rank: int) -> range:
        """Ranks sharing ``rank``'s row panel (they redistribute among themselves)."""
        start = self.panel(rank) * self.replication
        return range(start, start + self.replication)

    def panel_rows(self, panel: int) -> tuple[int, int]:
        """``(start, end)`` global rows of row panel ``panel``."""
        r = self.replication
        return int(self.part_offsets[panel * r]), int(self.part_offsets[(panel + 1) * r])

    def column_split(self, width: int) -> list[int]:
        """Columns of each of the ``R_A`` blocks of a ``width``-column matrix."""
        r = self.replication
        return [width // r + (j < width % r) for j in range(r)]

    def column_range(self, width: int, block: int) -> tuple[int, int]:
        split = self.column_split(width)
        start = sum(split[:block])
        return start, start + split[block]

    def elements_sent(self, to: str, width: int) -> np.ndarray:
        """``[P, P]`` elements rank ``p`` sends rank ``q`` to switch a ``width``-column matrix
        to layout ``to``."""
        P, split = self.num_parts, self.column_split(width)
        sent = np.zeros((P, P), dtype=np.int64)
        for p in range(P):
            for q in self.group(p):
                if q != p:
                    rows, block = (self._sizes[p], q) if to == "V" else (self._sizes[q], p)
                    sent[p, q] = rows * split[self.block(block)]
        return sent

    def gather_elements_sent(self, width: int) -> np.ndarray:
        """``[P, P]`` elements of the panel exchange before an SpMM on a ``width``-column
        ``V`` matrix (``R_A < P``): every tile goes to the ranks of its column block in the
        other panels."""
        P, split = self.num_parts, self.column_split(width)
        sent = np.zeros((P, P), dtype=np.int64)
        for p in range(P):
            start, end = self.panel_rows(self.panel(p))
            for q in range(self.block(p), P, self.replication):
                if self.panel(q) != self.panel(p):
                    sent[p, q] = (end - start) * split[self.block(p)]
        return sent

    def pass_elements(self, plan: PassPlan) -> tuple[np.ndarray, np.ndarray]:
        """``([P, P] redistributed, [P, P] panel-exchanged)`` elements of one pass."""
        P = self.num_parts
        moved, gathered = np.zeros((P, P), dtype=np.int64), np.zeros((P, P), dtype=np.int64)
        for move in plan.moves:
            moved += self.elements_sent(move.to, move.width)
        if self.num_panels > 1:
            for width in plan.spmm_widths:
                gathered += self.gather_elements_sent(width)
        return moved, gathered


def check_replication(replication: int, num_parts: int) -> None:
    """Raise ``ValueError`` unless ``replication`` divides ``num_parts``."""
    valid = [r for r in range(1, num_parts + 1) if num_parts % r == 0]
    if replication not in valid:
        raise ValueError(
            f"replication={replication!r}: the ranks per row panel of Â must divide the "
            f"{num_parts} ranks; choose one of {valid} ({num_parts} = Â on every rank)"
        )


@dataclass(frozen=True)
class OrderCost:
    """One order's predicted cost over all ranks, one training step.

    Attributes:
        order: the order string.
        comm_elements: elements moved (redistributions and panel exchanges).
        sparse_ops: SpMM multiply-adds.
        collectives: ``all_to_all_single`` calls.
        seconds: the scalar model (see :func:`order_costs`).
    """

    order: str
    comm_elements: int
    sparse_ops: int
    collectives: int
    seconds: float


def order_costs(
    shapes: Sequence[LayerShape],
    layout: RDMLayout,
    nnz: int,
    *,
    static_input: bool = True,
    input_grad: bool = False,
    element_seconds: float = 4e-9,
    sparse_op_seconds: float = 1e-9,
    latency_seconds: float = 5e-5,
    orders: Sequence[str] | None = None,
) -> list[OrderCost]:
    """Cost of each order (default: all ``4^L``) for a graph with ``nnz`` non-zeros in ``Â``.

    ``seconds`` = (elements moved · ``element_seconds`` + SpMM multiply-adds ·
    ``sparse_op_seconds``) / P + collectives · ``latency_seconds``: the average rank's time in
    the parts that depend on the order (the GEMMs do not). The defaults are this project's
    2-core test machine (gloo over loopback ≈ 1 GB/s, one-thread CSR SpMM ≈ 1 ns per
    multiply-add); :mod:`lightning_gnn_dist.costmodel` passes calibrated values.
    """
    result = []
    P = layout.num_parts
    for order in orders if orders is not None else all_orders(len(shapes)):
        plans = plan_network(shapes, order, static_input=static_input, input_grad=input_grad)
        comm = ops = collectives = 0
        for plan in plans:
            for pas in (plan.forward, plan.backward):
                moved, gathered = layout.pass_elements(pas)
                comm += int(moved.sum() + gathered.sum())
                ops += nnz * pas.sparse_units
                if P > 1:
                    collectives += len(pas.moves) * (layout.replication > 1)
                    collectives += len(pas.spmm_widths) * (layout.num_panels > 1)
        seconds = (comm * element_seconds + ops * sparse_op_seconds) / P
        result.append(
            OrderCost(order, comm, ops, collectives, seconds + collectives * latency_seconds)
        )
    return result


def pareto(costs: Sequence[OrderCost]) -> list[OrderCost]:
    """The orders no other order beats in both elements moved and SpMM work (Table VI), sorted
    by the scalar model's seconds (the model's pick first)."""
    keep = [
        c
        for c in costs
        if not any(
            o.comm_elements <= c.comm_elements
            and o.sparse_ops <= c.sparse_ops
            and (o.comm_elements, o.sparse_ops) != (c.comm_elements, c.sparse_ops)
            for o in costs
        )
    ]
    return sorted(keep, key=lambda c: (c.seconds, c.comm_elements, c.order))
