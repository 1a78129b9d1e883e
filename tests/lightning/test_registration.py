"""``import lightning_gnn_dist`` is light (no torch, no Lightning) and still registers
``strategy="gnn_ddp"`` in every Lightning namespace, imported before or after the package
(issue 29, item 9). Each case runs in a fresh interpreter: this one has everything imported."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from lightning_gnn_dist.lightning import registration
from lightning_gnn_dist.lightning.compat import NAMESPACES

REPO = Path(__file__).resolve().parents[2]


def _python(source: str) -> str:
    result = subprocess.run(
        [sys.executable, "-c", source],
        env={**os.environ, "PYTHONPATH": str(REPO)},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    return result.stdout


def test_importing_the_package_loads_neither_torch_nor_lightning():
    out = _python(
        "import sys\nimport lightning_gnn_dist as lgd\n"
        "print(sorted({m.split('.')[0] for m in sys.modules}"
        " & {'torch', 'lightning', 'pytorch_lightning', 'torch_geometric', 'numpy'}))\n"
        "print(lgd.__all__ == sorted(lgd.__all__), set(lgd.__all__) <= set(dir(lgd)))"
    )
    assert out.split("\n")[:2] == ["[]", "True True"]


_TRAINER = (
    "t = {trainer}(strategy='{name}', accelerator='cpu', devices=2, logger=False)\n"
    "print(type(t.strategy).__qualname__, t.strategy._start_method)\n"
)


@pytest.mark.parametrize(
    "imports, trainer, namespace",
    [
        ("import lightning_gnn_dist\nimport pytorch_lightning as pl", "pl.Trainer", "pl"),
        ("import pytorch_lightning as pl\nimport lightning_gnn_dist", "pl.Trainer", "pl"),
        ("import lightning_gnn_dist\nimport lightning.pytorch as L", "L.Trainer", "L"),
        ("import lightning_gnn_dist\nimport lightning as L", "L.Trainer", "L"),
        ("import lightning as L\nimport lightning_gnn_dist", "L.Trainer", "L"),
        ("import lightning_gnn_dist\nfrom pytorch_lightning import Trainer", "Trainer", "pl"),
    ],
)
def test_strategy_names_work_whichever_is_imported_first(imports, trainer, namespace):
    if ("lightning.pytorch" if namespace == "L" else "pytorch_lightning") not in NAMESPACES:
        pytest.skip("that Lightning namespace is not installed")
    expected = "_lightning_pytorch" if namespace == "L" else "_pytorch_lightning"
    source = (
        imports
        + "\n"
        + "".join(
            _TRAINER.format(trainer=trainer, name=name) for name in registration.GNN_STRATEGIES
        )
    )
    lines = [line for line in _python(source).splitlines() if line.startswith("GNNStrategy")]
    assert lines == [
        f"GNNStrategy.{expected} {start}" for start in registration.GNN_STRATEGIES.values()
    ]


def test_the_strategy_module_registers_the_same_names_with_the_classes():
    from lightning_gnn_dist.lightning.strategy import GNNStrategy

    for namespace, lightning in NAMESPACES.items():
        registry = lightning.strategies.StrategyRegistry
        for name, start_method in registration.GNN_STRATEGIES.items():
            assert registry[name]["strategy"] is GNNStrategy.for_namespace(namespace)
            assert registry[name]["init_params"] == {"start_method": start_method}
            assert registry[name]["description"] == registration.strategy_description(start_method)


def test_lazy_names_and_old_paths_still_resolve():
    out = _python(
        "import warnings\nimport lightning_gnn_dist as lgd\n"
        "print(lgd.GNNStrategy.__qualname__, lgd.distribute.__module__)\n"
        "print(lgd.costmodel.__name__)\n"
        "with warnings.catch_warnings(record=True) as caught:\n"
        "    warnings.simplefilter('always')\n"
        "    from lightning_gnn_dist.data import LocalGraphStore\n"
        "print(LocalGraphStore.__module__, caught[0].category.__name__)\n"
        "try:\n    lgd.no_such_name\nexcept AttributeError as error:\n    print(error)\n"
    )
    assert out.splitlines() == [
        "GNNStrategy lightning_gnn_dist.nn.distribute",
        "lightning_gnn_dist.costmodel",
        "lightning_gnn_dist.loaders.local_store DeprecationWarning",
        "module 'lightning_gnn_dist' has no attribute 'no_such_name'",
    ]
