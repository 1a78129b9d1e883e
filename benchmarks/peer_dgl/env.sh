#!/usr/bin/env bash
# Create the separate virtual environment python -m benchmarks.peer_dgl runs DGL in.
#
#   bash benchmarks/peer_dgl/env.sh [VENV_DIR]     # default: /tmp/lgd-dgl-venv
#
# DGL 2.1.0 is the newest Linux wheel on the package index; its C++ libraries exist for torch up
# to 2.2.x, so it cannot share the project's venv (torch 2.13). torchdata 0.7.1 (the last with
# datapipes, which DGL's graphbolt imports) goes in without its dependencies, which would pull
# another torch. The torch 2.2.1 wheel on the index is the CUDA build: its CUDA libraries are
# installed with it (about 2.5 GB) but never used here (one CPU thread).
set -euo pipefail
VENV="${1:-/tmp/lgd-dgl-venv}"
PYTHON="${PYTHON:-python3.11}"
if [ -x "$VENV/bin/python" ] && "$VENV/bin/python" -c "import dgl, torch; assert torch.__version__.startswith('2.2.1')" 2>/dev/null; then
    echo "DGL environment ready: $VENV"
    exit 0
fi
"$PYTHON" -m venv "$VENV"
"$VENV/bin/python" -m pip install --quiet --upgrade pip
"$VENV/bin/python" -m pip install --quiet "torch==2.2.1" "numpy<2" scipy pandas networkx psutil pydantic requests tqdm pyyaml
"$VENV/bin/python" -m pip install --quiet --no-deps "torchdata==0.7.1" "dgl==2.1.0"
"$VENV/bin/python" -c "import dgl, torch; print('DGL', dgl.__version__, 'torch', torch.__version__)"
echo "DGL environment ready: $VENV"
