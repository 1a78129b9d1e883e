"""``--option KEY=VALUE`` of ``partition`` and ``partition-compare``."""

from __future__ import annotations

import json

import pytest
import yaml

from lightning_gnn_dist.cli import main, parse_options
from lightning_gnn_dist.data import load_dataset
from lightning_gnn_dist.partition import get_partitioner
from lightning_gnn_dist.partition.metrics import partition_metrics
from tests.cli.test_partition_commands import run

SPEC = "rmat?scale=9&edge_factor=8&features=8&classes=3"


def test_values_are_python_literals_or_strings():
    assert parse_options(
        ["vertex_weight=work", "widths=64,16,8", "balance_masks=True", "volume_slack=0.1", "x="]
    ) == {
        "vertex_weight": "work",
        "widths": (64, 16, 8),
        "balance_masks": True,
        "volume_slack": 0.1,
        "x": "",
    }


def test_partition_option_reaches_the_partitioner(capsys):
    code, out, err = run(
        capsys, "partition", "--dataset", SPEC, "-p", "3", "-m", "metis", "--json",
        "--option", "vertex_weight=nnz+rows", "-o", "balance_masks=False",
    )  # fmt: skip
    assert code == 0, err
    data = load_dataset(SPEC)
    assignment = get_partitioner("metis", vertex_weight="nnz+rows").partition(data, 3)
    expected = partition_metrics(data, assignment, 3).summary()
    summary = json.loads(out)
    assert {k: summary[k] for k in expected} == expected
    assert summary["rows_imbalance"] < 1.05
    default = partition_metrics(data, get_partitioner("metis").partition(data, 3), 3)
    assert summary["rows_imbalance"] < default.rows_imbalance  # the option changed the parts


def test_partition_compare_gives_options_to_the_methods_that_take_them(capsys):
    code, out, err = run(
        capsys, "partition-compare", "--dataset", SPEC, "-p", "2", "--json",
        "--methods", "hypergraph", "metis", "random", "--option", "vertex_weight=rows",
    )  # fmt: skip
    assert code == 0, err
    rows = {r["method"]: r for r in json.loads(out)}
    data = load_dataset(SPEC)
    for method in ("hypergraph", "metis", "random"):
        options = {} if method == "random" else {"vertex_weight": "rows"}
        assignment = get_partitioner(method, **options).partition(data, 2)
        expected = partition_metrics(data, assignment, 2)
        assert rows[method]["total_volume_rows"] == expected.total_volume_rows
        assert rows[method]["rows_imbalance"] == pytest.approx(expected.rows_imbalance)


@pytest.mark.parametrize(
    "argv, fragments",
    [
        (["partition", "-m", "metis", "--option", "vertex_weight"], ["KEY=VALUE", "vertex_weight"]),
        (["partition", "-m", "metis", "--option", "9x=1"], ["KEY=VALUE"]),
        (["partition", "-m", "metis", "-o", "vertex_wight=rows"], ["no option 'vertex_wight'"]),
        (["partition", "-m", "metis", "-o", "seed=3"], ["use --seed"]),
        (["partition", "-m", "metis", "-o", "vertex_weight=edges"], ["unknown vertex_weight"]),
        (["partition", "-m", "hypergraph", "-o", "vertex_weight=nnz+rows"], ["method='metis'"]),
        (["partition-compare", "--methods", "metis", "random", "-o", "volume_slack=0.1"],
         ["no method among metis, random takes the option 'volume_slack'"]),
    ],
)  # fmt: skip
def test_bad_options_end_in_one_error_line(capsys, argv, fragments):
    code, out, err = run(capsys, *argv, "--dataset", SPEC, "-p", "2")
    assert code == 2 and out == ""
    assert err.startswith("error: ") and err.count("\n") == 1, err
    for fragment in fragments:
        assert fragment in err


def test_lightning_cli_takes_partition_options(capsys):
    with pytest.raises(SystemExit) as exit_:
        main(["fit", "--data.partition_options", "{vertex_weight: nnz+rows}", "--print_config"])
    assert exit_.value.code == 0
    data = yaml.safe_load(capsys.readouterr().out)["data"]
    assert data["partition_options"] == {"vertex_weight": "nnz+rows"}
