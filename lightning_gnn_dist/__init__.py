"""lightning-gnn-dist: partitioned, communication-minimal distributed GNN training for
PyTorch Lightning.

The package uses the ``pytorch_lightning`` namespace (package ``pytorch-lightning``) throughout;
its strategies are registered in that namespace's registry.
"""

__version__ = "0.1.0.dev0"
