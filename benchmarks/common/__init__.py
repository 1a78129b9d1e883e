"""Pieces several benchmarks share: forked processes and memory readings (:mod:`.processes`),
graphs (:mod:`.graphs`), partition stores (:mod:`.stores`) and Lightning fits (:mod:`.fits`)."""
