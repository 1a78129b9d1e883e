"""The Lightning contract tests run under every installed namespace (``pytorch_lightning`` and
``lightning.pytorch``): a test takes the ``lightning`` fixture (the namespace's module, used as
``pl``) and builds the package's classes inside ``lightning_namespace`` of it."""

import pytest

from lightning_gnn_dist.lightning.compat import NAMESPACES, lightning_namespace


@pytest.fixture(params=list(NAMESPACES))
def lightning(request):
    """The Lightning namespace module under test (``pytorch_lightning`` or ``lightning.pytorch``)."""
    with lightning_namespace(request.param):
        yield NAMESPACES[request.param]
