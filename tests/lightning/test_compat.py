"""Both Lightning namespaces: which concrete class a neutral class builds, registries, pickling."""

import pickle

import pytest

import lightning_gnn_dist as lgd
from lightning_gnn_dist.lightning.compat import (
    LIGHTNING_PYTORCH,
    NAMESPACES,
    PYTORCH_LIGHTNING,
    lightning_namespace,
    namespace_of,
    resolve_namespace,
)

pytestmark = pytest.mark.skipif(len(NAMESPACES) < 2, reason="needs lightning and pytorch-lightning")

NEUTRAL = {
    "GNNStrategy": ("strategies.DDPStrategy", dict(start_method="fork")),
    "GraphPartitionDataModule": ("LightningDataModule", dict(dataset="digits", method="random")),
    "CommunicationMonitor": ("callbacks.Callback", {}),
    "PartitionReport": ("callbacks.Callback", {}),
    "PredictionWriter": ("callbacks.BasePredictionWriter", {}),
    "NodeClassifier": ("LightningModule", dict(in_channels=4, num_classes=3)),
}


def _base(namespace, dotted):
    obj = NAMESPACES[namespace]
    for part in dotted.split("."):
        obj = getattr(obj, part)
    return obj


def _build_in(module_globals, source):
    """Run ``source`` as the code of a module whose globals are ``module_globals``."""
    scope = {"lgd": lgd, **module_globals}
    exec(source, scope)
    return scope


@pytest.mark.parametrize("name", sorted(NEUTRAL))
@pytest.mark.parametrize(
    "imports, expected",
    [
        ("import lightning as L", LIGHTNING_PYTORCH),
        ("import lightning.pytorch as pl", LIGHTNING_PYTORCH),
        ("from lightning.pytorch import Trainer", LIGHTNING_PYTORCH),
        ("import pytorch_lightning as pl", PYTORCH_LIGHTNING),
        ("from pytorch_lightning.callbacks import ModelCheckpoint", PYTORCH_LIGHTNING),
        ("import torch", PYTORCH_LIGHTNING),  # neither: the default
        ("import lightning as L, pytorch_lightning as pl", PYTORCH_LIGHTNING),  # both: the default
    ],
)
def test_neutral_class_builds_the_namespace_the_caller_imported(name, imports, expected):
    base, kwargs = NEUTRAL[name]
    scope = _build_in({"kwargs": kwargs}, f"{imports}\nobj = lgd.{name}(**kwargs)")
    obj = scope["obj"]
    assert namespace_of(obj) == expected
    assert isinstance(obj, _base(expected, base))
    assert isinstance(obj, getattr(lgd, name))  # the neutral class covers both namespaces
    other = LIGHTNING_PYTORCH if expected == PYTORCH_LIGHTNING else PYTORCH_LIGHTNING
    assert not isinstance(obj, _base(other, base))


def test_explicit_namespace_wins_over_the_callers_imports(monkeypatch):
    with lightning_namespace("lightning"):
        scope = _build_in({}, "import pytorch_lightning as pl\ns = lgd.GNNStrategy()")
        assert lgd.GNNStrategy is lgd.GNNStrategy.for_namespace(LIGHTNING_PYTORCH)
    assert namespace_of(scope["s"]) == LIGHTNING_PYTORCH
    assert lgd.GNNStrategy.__qualname__ == "GNNStrategy"  # neutral again outside the block
    monkeypatch.setenv("LGD_LIGHTNING_NAMESPACE", "lightning.pytorch")
    assert namespace_of(_build_in({}, "s = lgd.GNNStrategy()")["s"]) == LIGHTNING_PYTORCH


@pytest.mark.parametrize("namespace", list(NAMESPACES))
def test_strategy_names_are_registered_and_accepted_by_the_trainer(namespace):
    lightning = NAMESPACES[namespace]
    for name in ("gnn_ddp", "gnn_ddp_spawn", "gnn_ddp_fork"):
        assert name in lightning.strategies.StrategyRegistry
    trainer = lightning.Trainer(strategy="gnn_ddp_fork", accelerator="cpu", devices=2, logger=False)
    assert isinstance(trainer.strategy, lgd.GNNStrategy)
    assert namespace_of(trainer.strategy) == namespace
    with lightning_namespace(namespace):
        strategy = lgd.GNNStrategy(exchange="broadcast", start_method="fork")
    trainer = lightning.Trainer(strategy=strategy, accelerator="cpu", devices=2, logger=False)
    assert trainer.strategy is strategy


@pytest.mark.parametrize("namespace", list(NAMESPACES))
@pytest.mark.parametrize("name", sorted(NEUTRAL))
def test_concrete_classes_pickle_by_name(namespace, name):
    with lightning_namespace(namespace):
        obj = getattr(lgd, name)(**NEUTRAL[name][1])
    copy = pickle.loads(pickle.dumps(obj))
    assert type(copy) is type(obj) and namespace_of(copy) == namespace


class MyClassifier(lgd.NodeClassifier):
    """A user subclass of a neutral class is neutral too."""

    def __init__(self, extra: int = 3, **kwargs):
        super().__init__(**kwargs)
        self.save_hyperparameters()


@pytest.mark.parametrize("namespace", list(NAMESPACES))
def test_user_subclass_of_a_neutral_class(namespace):
    with lightning_namespace(namespace):
        model = MyClassifier(extra=5, in_channels=4, num_classes=3)
    assert isinstance(model, (MyClassifier, _base(namespace, "LightningModule")))
    assert model.hparams.extra == 5 and model.hparams.in_channels == 4
    assert type(pickle.loads(pickle.dumps(model))) is type(model)


def test_bad_namespace_names_say_what_to_use():
    with pytest.raises(ValueError, match="'lightning.fabric'.*'lightning.pytorch'"):
        resolve_namespace("lightning.fabric")
    concrete = lgd.NodeClassifier.for_namespace("lightning")
    with pytest.raises(ValueError, match="lightning.pytorch class"):
        concrete.for_namespace("pytorch_lightning")
    assert lgd.NodeClassifier.for_namespace(NAMESPACES[LIGHTNING_PYTORCH]) is concrete


@pytest.mark.parametrize("namespace", list(NAMESPACES))
def test_load_from_checkpoint_on_the_neutral_class(tmp_path, namespace):
    import torch

    with lightning_namespace(namespace):
        model = lgd.NodeClassifier(in_channels=4, num_classes=3)
    path = tmp_path / "model.ckpt"
    checkpoint = {"state_dict": model.state_dict(), "hyper_parameters": dict(model.hparams)}
    torch.save({**checkpoint, "pytorch-lightning_version": "2.6.6"}, path)
    with lightning_namespace(namespace):
        loaded = lgd.NodeClassifier.load_from_checkpoint(path)
    assert namespace_of(loaded) == namespace and loaded.hparams == model.hparams
    for key, value in model.state_dict().items():
        assert torch.equal(loaded.state_dict()[key], value), key


def test_a_strategy_of_the_other_namespace_is_named_in_lightnings_error():
    lightning = NAMESPACES[LIGHTNING_PYTORCH]
    strategy = lgd.GNNStrategy.for_namespace(PYTORCH_LIGHTNING)(start_method="fork")
    with pytest.raises(ValueError, match="namespace='pytorch_lightning'.*lightning.pytorch"):
        lightning.Trainer(strategy=strategy, accelerator="cpu", devices=2, logger=False)
