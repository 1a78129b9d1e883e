"""``python -m lightning_gnn_dist probe``: outside a launcher it says how to start it."""

from lightning_gnn_dist.cli import main


def test_probe_outside_a_launcher_says_how_to_start_it(monkeypatch, capsys):
    for variable in ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"):
        monkeypatch.delenv(variable, raising=False)
    assert main(["probe"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "torchrun" in err[0] and "emulate --nodes N -- probe" in err[0]


def test_probe_bad_sizes(capsys):
    assert main(["probe", "--sizes", "64,big"]) == 2
    assert "--sizes '64,big'" in capsys.readouterr().err
