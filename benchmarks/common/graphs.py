"""Graphs the benchmarks share: the METIS example meshes, a triangulated grid mesh."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch
from torch_geometric.data import Data

from lightning_gnn_dist.data import load_dataset
from lightning_gnn_dist.data.graph import canonicalize
from lightning_gnn_dist.data.synthetic import add_synthetic_features

#: The METIS example graphs (Debian/Ubuntu ``libmetis-doc``; absent on some machines).
METIS_GRAPHS = Path("/usr/share/doc/libmetis-dev/examples/graphs")


def metis_spec(name: str) -> str:
    """Dataset spec of a METIS example graph, e.g. ``metis_spec("copter2")``."""
    return f"metis:{METIS_GRAPHS / name}.graph"


def missing(spec: str) -> str | None:
    """Why ``spec`` cannot be loaded on this machine (a ``metis:`` file that is absent), or
    ``None`` when it can."""
    if spec.startswith("metis:") and not Path(spec[len("metis:") :]).is_file():
        return f"no {spec[len('metis:') :]}; apt-get install libmetis-doc"
    return None


def triangulated_grid(side: int, features: int | None = None, classes: int = 8) -> Data:
    """A 2-D finite-element-like mesh: a ``side × side`` grid with one diagonal per cell, both
    directions of every edge (degree ≤ 6), canonicalised; with ``features``, seeded synthetic
    features and ``classes`` labels."""
    ids = np.arange(side * side).reshape(side, side)
    pairs = [
        (ids[:, :-1], ids[:, 1:]),
        (ids[:-1, :], ids[1:, :]),
        (ids[:-1, :-1], ids[1:, 1:]),
    ]
    src = np.concatenate([a.ravel() for a, _ in pairs])
    dst = np.concatenate([b.ravel() for _, b in pairs])
    edges = torch.from_numpy(np.stack([np.concatenate([src, dst]), np.concatenate([dst, src])]))
    data = canonicalize(Data(edge_index=edges, num_nodes=side * side))
    if features is not None:
        data = add_synthetic_features(data, features=features, classes=classes, seed=0)
    return data


def load_graph(spec: str) -> Data:
    """``load_dataset(spec)``, plus ``grid:<side>``: :func:`triangulated_grid` with 32 features."""
    if spec.startswith("grid:"):
        return triangulated_grid(int(spec[len("grid:") :]), features=32)
    return load_dataset(spec)
