"""The LightningCLI commands: which model class and namespace a command line names, and the errors
for a model that cannot work (in-process: nothing here builds a Trainer)."""

from __future__ import annotations

import pytest
import pytorch_lightning as pl
import yaml

from lightning_gnn_dist.cli import main
from lightning_gnn_dist.lightning.cli import (
    CLIError,
    check_option_order,
    check_strategy_text,
    model_namespace,
)
from lightning_gnn_dist.lightning.compat import (
    LIGHTNING_PYTORCH,
    PYTORCH_LIGHTNING,
    default_namespace,
)

pytest.importorskip("lightning")  # the user module of the examples is a lightning.pytorch module
USER_MODULE = "examples.graphsage_lightning.Model"  # a lightning.pytorch LightningModule


@pytest.fixture
def user_config(tmp_path):
    path = tmp_path / "user.yaml"
    path.write_text(f"model:\n  class_path: {USER_MODULE}\n  init_args: {{in_channels: 4}}\n")
    return str(path)


def test_namespace_follows_the_model_class(user_config, tmp_path):
    assert model_namespace(["fit", "--config", user_config]) == LIGHTNING_PYTORCH
    assert model_namespace(["fit", f"--config={user_config}"]) == LIGHTNING_PYTORCH
    assert model_namespace(["fit", "--model.class_path", USER_MODULE]) == LIGHTNING_PYTORCH
    assert (
        model_namespace(["fit", "--model", f"{{class_path: {USER_MODULE}}}"]) == LIGHTNING_PYTORCH
    )
    pl_module = "tests.lightning.scripts.train_script.FailingClassifier"  # NodeClassifier subclass
    assert model_namespace(["fit", "--model.class_path", pl_module]) == default_namespace()
    # The last one wins, as in jsonargparse; no model named: NodeClassifier in the default one.
    args = [
        "fit",
        "--config",
        user_config,
        "--model.class_path",
        "lightning_gnn_dist.NodeClassifier",
    ]
    assert model_namespace(args) == default_namespace() == PYTORCH_LIGHTNING
    assert model_namespace(["fit"]) == default_namespace()
    concrete = "lightning_gnn_dist.NodeClassifier._lightning_pytorch"  # as --print_config writes it
    assert model_namespace(["fit", "--model.class_path", concrete]) == LIGHTNING_PYTORCH


@pytest.mark.parametrize(
    "class_path, message",
    [
        ("nopkg.Model", "'nopkg.Model': no such module"),
        ("examples.graphsage_lightning.Nope", "examples.graphsage_lightning has no 'Nope'"),
        ("torch.nn.Linear", "is <class 'torch.nn.modules.linear.Linear'>, not a LightningModule"),
    ],
)
def test_bad_model_class_path_says_what_is_wrong(capsys, class_path, message):
    with pytest.raises(CLIError, match=message):
        model_namespace(["fit", "--model.class_path", class_path])
    assert main(["fit", "--model.class_path", class_path]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"error: model class_path {class_path!r}") and message in err


def test_flat_model_block_configures_node_predictor(tmp_path, capsys):
    """A ``model:`` block without ``class_path`` configures ``NodePredictor`` (issue 30: the task
    is the datamodule's; with class ids it is ``NodeClassifier`` under its new name)."""
    config = tmp_path / "flat.yaml"
    config.write_text("model:\n  model: sage\n  hidden_channels: 8\n")
    with pytest.raises(SystemExit) as exit_:
        main(["fit", "--config", str(config), "--print_config"])
    assert exit_.value.code == 0
    model = yaml.safe_load(capsys.readouterr().out)["model"]
    assert model["class_path"] == "lightning_gnn_dist.NodePredictor._pytorch_lightning"
    assert model["init_args"]["model"] == "sage" and model["init_args"]["hidden_channels"] == 8


class OwnDefaults(pl.LightningModule):
    """Every default differs from NodeClassifier's (lr 0.01, weight_decay 5e-4, dropout 0.5,
    hidden_channels 16), as in PyG's GraphSAGE example."""

    def __init__(
        self,
        in_channels: int,
        hidden_channels: int = 256,
        lr: float = 0.005,
        weight_decay: float = 0.0,
        dropout: float = 0.3,
    ) -> None:
        super().__init__()


def test_a_user_module_keeps_its_own_defaults(tmp_path, capsys):
    """Issue 18, item 7: init arguments the config leaves unset keep the module's defaults."""
    config = tmp_path / "own.yaml"
    class_path = "tests.lightning.test_cli.OwnDefaults"
    config.write_text(f"model:\n  class_path: {class_path}\n  init_args: {{in_channels: 4}}\n")
    with pytest.raises(SystemExit) as exit_:
        main(["fit", "--config", str(config), "--print_config"])
    assert exit_.value.code == 0
    init_args = yaml.safe_load(capsys.readouterr().out)["model"]["init_args"]
    expected = {"hidden_channels": 256, "lr": 0.005, "weight_decay": 0.0, "dropout": 0.3}
    assert {k: init_args[k] for k in expected} == expected


def test_fit_help_names_the_module(capsys):
    with pytest.raises(SystemExit) as exit_:
        main(["fit", "--help"])
    assert exit_.value.code == 0
    assert capsys.readouterr().out.startswith("usage: python -m lightning_gnn_dist [options] fit ")


@pytest.mark.parametrize(
    "argv, refused",
    [
        (["--trainer.devices", "4", "--config", "CONFIG"], "--trainer.devices"),
        (["--trainer.devices=4", "-c", "CONFIG"], "--trainer.devices"),
        (["--model.lr", "0.1", "--config=CONFIG"], "--model.lr"),  # sets model.init_args.lr
        (["--model.init_args.lr", "0.1", "--config", "CONFIG"], "--model.init_args.lr"),
        (["--trainer", "{}", "--config", "CONFIG"], "--trainer"),
        (["--config", "CONFIG", "--trainer.devices", "4"], None),  # after: it wins, as meant
        (["--trainer.num_nodes", "2", "--config", "CONFIG"], None),  # the config leaves it
        (["--data.dataset", "digits", "--config", "CONFIG"], None),
    ],
)
def test_an_option_the_config_replaces_is_refused(tmp_path, capsys, argv, refused):
    """Issue 18, item 20: ``--trainer.devices 4 --config FILE`` where FILE sets devices."""
    config = tmp_path / "run.yaml"
    config.write_text("trainer: {devices: 2}\nmodel: {init_args: {lr: 0.01}}\n")
    argv = ["fit", *(a.replace("CONFIG", str(config)) for a in argv)]
    if refused is None:
        check_option_order(argv)
        return
    with pytest.raises(CLIError, match=f"^{refused} comes before --config {config}, which sets"):
        check_option_order(argv)
    assert main(argv) == 2  # one line, exit 2, before any Trainer exists
    assert capsys.readouterr().err.count("\n") == 1


@pytest.mark.parametrize(
    "text, message",
    [
        (
            "{class_path: lightning_gnn_dist.GNNStrategy, init_args: {codec: 8}}",
            "trainer.strategy: codec must be a name",
        ),
        (
            "{class_path: GNNStrategy, init_args: {exchange: smoke}}",
            "trainer.strategy: unknown exchange mode 'smoke'",
        ),
        (
            "{class_path: mypkg.MyStrategy, init_args: {x: [1]}}",
            "trainer.strategy: 'mypkg.MyStrategy' with init_args {'x': [1]} could not be read",
        ),
    ],
)
def test_a_strategy_the_parser_kept_as_text_is_explained(text, message):
    """Issue 29, item 7: a strategy mapping with a value of the wrong type stayed a string,
    which Lightning reported as "You selected an invalid strategy name"."""
    with pytest.raises(CLIError, match=message.replace("[", r"\[").replace("(", r"\(")):
        check_strategy_text(text)
    for fine in ("gnn_ddp", "ddp", None, "{not_a_class: 1}"):
        check_strategy_text(fine)
