"""Subgraph samplers for ``loader="subgraph"`` mini-batch training (paper 000 §4.3.3, 003 §III-F).

A sampler returns the vertex set ``B`` of step ``step`` (sorted original ids); the mini-batch is
the subgraph induced by ``B``. Every rank builds the same sampler with the same seed and asks for
the same step, so all ranks hold the same batch without communicating: the random stream of a
step depends only on ``(seed, step)``.

Normalisation (the same in single-process and distributed runs): the batch is trained as a graph
of its own. GCN normalises the induced subgraph with its own degrees (PyG's ``gcn_norm`` on
``G[B]``, self loops added), SAGE averages and GAT attends over each vertex's in-neighbours inside
``B``, and the loss is the mean over the batch's training vertices. GraphSAINT's
sampling-probability corrections (its aggregator and loss normalisation) are not applied; the
edge and random-walk samplers differ from the uniform one only in which vertex sets they draw.

=========== ============================================================ =====================
name        draws                                                        needs
=========== ============================================================ =====================
uniform     ``size`` vertices uniformly without replacement (paper 000)  the vertex count only
edge        endpoints of ``size // 2`` edges, edge ``(u, v)`` drawn with the graph's edges
            probability ∝ ``1/deg(u) + 1/deg(v)`` (GraphSAINT-edge)
random-walk the vertices of ``size // (walk_length + 1)`` random walks   the graph's edges
            of ``walk_length`` steps from uniform roots (GraphSAINT-RW)
=========== ============================================================ =====================

The edge and random-walk samplers read the whole graph's structure, so they serve single-process
training and the ``stochastic-hypergraph`` partitioner (which runs offline on the whole graph);
distributed ``loader="subgraph"`` training uses ``uniform``, which needs no structure at all.
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from typing import Any, ClassVar

import torch
from torch import Tensor

SUBGRAPH_SAMPLERS: dict[str, type[SubgraphSampler]] = {}

_STEP_STRIDE = 1_000_003  # a prime, so (seed, step) pairs map to distinct generator seeds


class SubgraphSampler(ABC):
    """Draws the vertex set of a mini-batch for a step, identically on every rank.

    Args:
        num_nodes (int): vertices of the whole graph.
        size (int): target batch size in vertices (each sampler says how it uses it).
        seed (int): seed of the batch sequence. (default: ``0``)
    """

    name: ClassVar[str] = ""
    #: whether the sampler reads the graph's edges (then it cannot run on one partition)
    needs_structure: ClassVar[bool] = True

    def __init__(self, num_nodes: int, size: int, seed: int = 0) -> None:
        if num_nodes < 1:
            raise ValueError(f"num_nodes must be >= 1 (got {num_nodes})")
        if not 1 <= size <= num_nodes:
            raise ValueError(
                f"subgraph size must be in [1, {num_nodes}] vertices (got {size}); "
                "pick a batch of at most the graph's vertex count"
            )
        self.num_nodes, self.size, self.seed = int(num_nodes), int(size), int(seed)

    def __init_subclass__(cls, **kwargs) -> None:
        super().__init_subclass__(**kwargs)
        if cls.name:
            SUBGRAPH_SAMPLERS[cls.name] = cls

    def generator(self, step: int) -> torch.Generator:
        """The random stream of ``step``: a function of ``(seed, step)`` only."""
        return torch.Generator().manual_seed((self.seed * _STEP_STRIDE + int(step)) % (2**63))

    def sample(self, step: int) -> Tensor:
        """``[|B|] int64`` sorted distinct original vertex ids of the batch of ``step``."""
        return torch.unique(self._sample(self.generator(step)))

    @abstractmethod
    def _sample(self, generator: torch.Generator) -> Tensor:
        """Vertex ids of one batch (may repeat)."""

    def settings(self) -> dict[str, Any]:
        """What determines the batches besides the graph (part of a store's fingerprint)."""
        return {"sampler": self.name, "subgraph_size": self.size}

    def __repr__(self) -> str:
        args = ", ".join(f"{k}={v!r}" for k, v in self.settings().items() if k != "sampler")
        return f"{type(self).__name__}({args}, seed={self.seed})"


class UniformVertexSampler(SubgraphSampler):
    """``size`` distinct vertices, every vertex equally likely (paper 000's mini-batches)."""

    name = "uniform"
    needs_structure = False

    def __init__(self, num_nodes: int, size: int, seed: int = 0, edge_index=None) -> None:
        super().__init__(num_nodes, size, seed)

    def _sample(self, generator: torch.Generator) -> Tensor:
        n, k = self.num_nodes, self.size
        if 2 * k > n:
            return torch.randperm(n, generator=generator)[:k]
        # O(k) instead of a permutation of all N ids: distinct ids from i.i.d. draws, then k of
        # them at random. The procedure treats every vertex alike, so each k-subset is equally
        # likely.
        chosen = torch.empty(0, dtype=torch.long)
        while chosen.numel() < k:
            draws = torch.randint(0, n, (k + k // 8 + 16,), generator=generator)
            chosen = torch.unique(torch.cat([chosen, draws]))
        return chosen[torch.randperm(chosen.numel(), generator=generator)[:k]]


class _StructureSampler(SubgraphSampler):
    def __init__(self, num_nodes: int, size: int, seed: int = 0, edge_index=None) -> None:
        super().__init__(num_nodes, size, seed)
        if edge_index is None:
            raise ValueError(
                f"the {self.name!r} sampler reads the graph's edges; pass edge_index, or use "
                "sampler 'uniform' for distributed subgraph training"
            )
        src, dst = edge_index
        keep = src != dst
        self.src, self.dst = src[keep], dst[keep]


class EdgeSampler(_StructureSampler):
    """GraphSAINT's edge sampler: ``size // 2`` edges drawn with replacement, edge ``(u, v)``
    with probability ∝ ``1/deg(u) + 1/deg(v)`` (degrees of the undirected graph); the batch is
    their endpoints."""

    name = "edge"

    def __init__(self, num_nodes: int, size: int, seed: int = 0, edge_index=None) -> None:
        super().__init__(num_nodes, size, seed, edge_index)
        degree = torch.bincount(torch.cat([self.src, self.dst]), minlength=num_nodes).double()
        inverse = 1.0 / degree.clamp(min=1)
        self.probability = inverse[self.src] + inverse[self.dst]
        self.num_edges = max(1, size // 2)

    def _sample(self, generator: torch.Generator) -> Tensor:
        if self.src.numel() == 0:
            return torch.randperm(self.num_nodes, generator=generator)[: self.size]
        picked = torch.multinomial(
            self.probability, self.num_edges, replacement=True, generator=generator
        )
        return torch.cat([self.src[picked], self.dst[picked]])


class RandomWalkSampler(_StructureSampler):
    """GraphSAINT's random-walk sampler: ``size // (walk_length + 1)`` roots drawn uniformly,
    each walking ``walk_length`` steps to uniformly chosen out-neighbours (a vertex without
    out-neighbours stays put); the batch is every visited vertex.

    Args:
        walk_length (int): steps per walk. (default: ``2``)
    """

    name = "random-walk"

    def __init__(
        self, num_nodes: int, size: int, seed: int = 0, edge_index=None, walk_length: int = 2
    ) -> None:
        super().__init__(num_nodes, size, seed, edge_index)
        if walk_length < 0:
            raise ValueError(f"walk_length must be >= 0 (got {walk_length})")
        self.walk_length = int(walk_length)
        order = torch.argsort(self.src, stable=True)
        self.neighbours = self.dst[order]
        self.out_degree = torch.bincount(self.src, minlength=num_nodes)
        self.row_start = torch.cumsum(self.out_degree, 0) - self.out_degree
        self.num_roots = max(1, size // (walk_length + 1))

    def _sample(self, generator: torch.Generator) -> Tensor:
        current = torch.randint(0, self.num_nodes, (self.num_roots,), generator=generator)
        visited = [current]
        last = max(0, self.neighbours.numel() - 1)
        for _ in range(self.walk_length):  # a loop over steps, vectorised over walks
            degree = self.out_degree[current]
            offset = (torch.rand(current.numel(), generator=generator) * degree).long()
            offset = torch.minimum(offset, (degree - 1).clamp(min=0))
            index = (self.row_start[current] + offset).clamp(max=last)
            if self.neighbours.numel():
                current = torch.where(degree > 0, self.neighbours[index], current)
            visited.append(current)
        return torch.cat(visited)

    def settings(self) -> dict[str, Any]:
        return {**super().settings(), "walk_length": self.walk_length}


def make_sampler(
    name: str, num_nodes: int, size: int, seed: int = 0, edge_index=None, **options: Any
) -> SubgraphSampler:
    """Build the sampler registered as ``name`` (``uniform``, ``edge`` or ``random-walk``).

    Raises:
        ValueError: unknown name (the message lists the known ones) or bad settings.
    """
    cls = SUBGRAPH_SAMPLERS[check_sampler_name(name)]
    return cls(num_nodes, size, seed, edge_index=edge_index, **options)


def induced_subgraph(edge_index: Tensor, num_nodes: int, batch: Tensor) -> Tensor:
    """Edges of the subgraph induced by the sorted vertex ids ``batch``, relabelled to
    positions in ``batch``: ``[2, E_B] int64`` (the single-process batch of a sampler)."""
    position = torch.full((num_nodes,), -1, dtype=torch.long)
    position[batch] = torch.arange(batch.numel())
    src, dst = position[edge_index[0]], position[edge_index[1]]
    keep = (src >= 0) & (dst >= 0)
    return torch.stack([src[keep], dst[keep]])


def check_subgraph_size(size: int | float) -> int | float:
    """``size`` if it is a fraction of the graph (a ``float`` in ``(0, 1)``), or as an ``int``
    if it is a vertex count (an integer >= 1, also written as an integral ``float`` such as
    ``10.0``: a YAML or command-line ``10`` may reach a ``int | float`` argument as either,
    depending on how the parser orders the union); anything else (``0``, ``-5``, ``1.5``,
    ``nan``, ``inf``) raises ``ValueError``. Whether a count fits the graph is checked once the
    graph is known."""
    is_int = isinstance(size, int) and not isinstance(size, bool)
    if is_int and size >= 1:
        return size
    if isinstance(size, float) and 0.0 < size < 1.0:
        return size
    if isinstance(size, float) and math.isfinite(size) and size >= 1 and size.is_integer():
        return int(size)
    raise ValueError(
        f"subgraph_size must be a vertex count (an integer >= 1) or a fraction of the graph in "
        f"(0, 1) (got {size!r})"
    )


def check_sampler_name(name: str) -> str:
    """``name`` if a subgraph sampler is registered under it (the message lists them)."""
    if not isinstance(name, str) or name not in SUBGRAPH_SAMPLERS:
        raise ValueError(
            f"unknown subgraph sampler {name!r}; choose one of: {', '.join(sorted(SUBGRAPH_SAMPLERS))}"
        )
    return name


def subgraph_vertices(size: int | float, num_nodes: int) -> int:
    """Batch size in vertices: ``size`` itself, or ``round(size * num_nodes)`` when ``0 < size < 1``
    (a fraction of the graph)."""
    check_subgraph_size(size)
    if isinstance(size, float):
        return max(1, round(size * num_nodes))
    if size > num_nodes:
        raise ValueError(
            f"subgraph_size={size} vertices is more than the graph's {num_nodes}; pick at most "
            "the graph's vertex count, or a fraction in (0, 1)"
        )
    return size
