#!/usr/bin/env bash
# Create (or reuse) the project-local virtual environment in .venv. Idempotent: reinstalls only
# when pyproject.toml or the development constraints changed since the last successful install.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
VENV=.venv
STAMP=$VENV/.installed
want=$(cat pyproject.toml requirements/constraints-dev.txt | sha256sum | cut -d' ' -f1)
if [ -f "$STAMP" ] && [ "$(cat "$STAMP")" = "$want" ] && [ -x "$VENV/bin/python" ]; then
  exit 0
fi
echo "bootstrap: installing into $VENV (about a minute on first run)" >&2
[ -x "$VENV/bin/python" ] || "$PY" -m venv "$VENV"
"$VENV/bin/python" -m pip install -q --disable-pip-version-check --upgrade pip
# torch first and pinned: an unpinned resolve would pull a multi-GB CUDA build.
"$VENV/bin/python" -m pip install -q --disable-pip-version-check -c requirements/constraints-dev.txt torch
"$VENV/bin/python" -m pip install -q --disable-pip-version-check -c requirements/constraints-dev.txt -e '.[dev,docs]'
echo "$want" > "$STAMP"
