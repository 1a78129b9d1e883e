"""The graphs, methods and labels of the partition quality benchmark."""

from __future__ import annotations

from benchmarks.common.graphs import METIS_GRAPHS, metis_spec

#: name -> dataset spec. ``rmat`` is the smallest R-MAT with >= 1 M distinct directed edges
#: (scale 16, edge factor 17: 65,536 vertices, 1,010,975 edges after merging duplicates).
GRAPHS: dict[str, str] = {
    "copter2": metis_spec("copter2"),
    "mdual": metis_spec("mdual"),
    "rmat": "rmat?scale=16&edge_factor=17",
    "sbm": "sbm?num_nodes=50000&num_classes=8&avg_degree=20",
    # --quick
    "4elt": metis_spec("4elt"),
    "rmat-small": "rmat?scale=13&edge_factor=8",
    "sbm-small": "sbm?num_nodes=4000&num_classes=4&avg_degree=10",
}
FULL = {"graphs": ["copter2", "mdual", "rmat", "sbm"], "parts": [4, 16, 64]}
QUICK = {"graphs": ["4elt", "rmat-small", "sbm-small"], "parts": [4, 16]}
#: (KaHyPar, Mt-KaHyPar) seconds per cell and seconds per run.
LIMITS = {"full": (120.0, 900.0, 1500.0), "quick": (20.0, 30.0, 100.0)}

#: Paper 000 balances the non-zeros of each row (the library's default is ``"work"``).
PAPER_OPTIONS = {"vertex_weight": "nnz"}

#: Execution order (cheapest first) and labels.
METHODS = ("random", "metis", "kaminpar", "hypergraph-mtkahypar", "hypergraph-kahypar")
LABELS = {
    "kaminpar": "KP (KaMinPar, refined)",
    "hypergraph-mtkahypar": "HP (Mt-KaHyPar)",
    "hypergraph-kahypar": "HP (KaHyPar)",
    "metis": "GP (METIS)",
    "random": "RP",
}
HP_METHODS = ("hypergraph-mtkahypar", "hypergraph-kahypar")
#: Methods compared with METIS in the summary tables (``LABELS[m][4:-1]`` names them there).
VS_METIS = (*HP_METHODS, "kaminpar")

#: Paper 000 Table 2 (P = 512, PaToH/METIS, eps = 0.01): geometric means over its eight graphs
#: of the values normalised to RP.
PAPER_MEANS = {
    "HP": {"vol_avg": 0.13, "vol_max": 0.21, "msgs_avg": 0.29, "msgs_max": 0.48},
    "GP": {"vol_avg": 0.15, "vol_max": 0.56, "msgs_avg": 0.35, "msgs_max": 0.52},
}

#: The code a cell runs, besides ``partition/``: recorded as a fingerprint per run.
FINGERPRINT_DATA_MODULES = ("datasets", "formats", "graph", "synthetic")

__all__ = ["METIS_GRAPHS"]
