# The two commands of the README. Each bootstraps the project-local venv (.venv) first.
PY := .venv/bin/python
export OMP_NUM_THREADS ?= 1
export GLOO_SOCKET_IFNAME ?= lo

.PHONY: venv run test lint docs bench

venv:
	@bash scripts/bootstrap.sh

run: venv
	$(PY) -m lightning_gnn_dist fit --config examples/gcn_digits.yaml

lint: venv
	$(PY) -m ruff check lightning_gnn_dist tests examples benchmarks
	$(PY) -m ruff format --check lightning_gnn_dist tests examples benchmarks

# Two pytest-xdist workers, a file at a time (most tests wait on the ranks they start).
test: lint
	$(PY) -m pytest -q -n 2 --dist loadfile

# The documentation site (Sphinx; docs/conf.py) with warnings as errors, from a fresh environment (-E:
# an incremental build can keep a stale toctree after API pages change). tests/test_docs.py runs the
# same build inside the test suite.
docs: venv
	$(PY) -m sphinx -E -j auto -W --keep-going -q -b html docs docs/_build/html

# Every benchmark once in --quick mode (a smoke test; outputs *_quick.*, ignored by git). The full
# runs and `render-all` are listed in benchmarks/README.md.
bench: venv
	$(PY) -m benchmarks quick-all
