"""``python -m lightning_gnn_dist partition`` and ``partition-compare``: output and bad input."""

from __future__ import annotations

import functools
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from lightning_gnn_dist.cli import main
from lightning_gnn_dist.data import load_dataset
from lightning_gnn_dist.partition import RandomPartitioner, get_partitioner
from lightning_gnn_dist.partition.compare import DEFAULT_METHODS
from lightning_gnn_dist.partition.metrics import partition_metrics
from lightning_gnn_dist.partition.store import PartitionStore
from tests.helpers import random_graph

REPO = Path(__file__).resolve().parents[2]
JSON_KEYS = {
    "method",
    "num_parts",
    "total_volume_rows",
    "avg_send_rows",
    "max_send_rows",
    "avg_messages",
    "max_messages",
    "edge_cut",
    "imbalance",
    "seconds",
}
RATIO_KEYS = ("avg_send_rows", "max_send_rows", "avg_messages", "max_messages", "total_volume_rows")


def write_metis(path: Path, num_nodes: int, num_edges: int, seed: int) -> str:
    """Write a random undirected graph as a METIS file; returns the ``metis:PATH`` spec."""
    data = random_graph(num_nodes, num_edges, seed, directed=False, self_loops=False)
    src, dst = data.edge_index.tolist()
    neighbours = [[] for _ in range(num_nodes)]
    for j, i in zip(src, dst, strict=True):
        neighbours[i].append(j + 1)
    lines = [f"{num_nodes} {len(src) // 2}"] + [" ".join(map(str, n)) for n in neighbours]
    path.write_text("\n".join(lines) + "\n")
    return f"metis:{path}"


@pytest.fixture(scope="module")
def graph_spec(tmp_path_factory):
    return write_metis(tmp_path_factory.mktemp("graphs") / "g.graph", 80, 320, seed=0)


@pytest.fixture(scope="module")
def other_spec(tmp_path_factory):
    return write_metis(tmp_path_factory.mktemp("graphs") / "h.graph", 80, 320, seed=1)


def run(capsys, *argv: str) -> tuple[int, str, str]:
    """``main(argv)`` in-process -> ``(exit code, stdout, stderr)``; argparse's exit included."""
    try:
        code = main(list(argv))
    except SystemExit as exit_:
        code = exit_.code
    captured = capsys.readouterr()
    return code, captured.out, captured.err


@functools.cache
def load(spec: str):
    """``load_dataset`` once per spec (the tests only read the graphs)."""
    return load_dataset(spec)


def expected_summary(spec: str, method: str, num_parts: int, seed: int) -> dict:
    data = load(spec)
    assignment = get_partitioner(method, seed=seed).partition(data, num_parts)
    return partition_metrics(data, assignment, num_parts).summary()


def assert_matches(row: dict, expected: dict) -> None:
    for key, value in expected.items():
        assert row[key] == value, key


# --------------------------------------------------------------------------------------------
# output


@pytest.mark.parametrize("method", ["random", "metis"])
def test_partition_json_matches_partition_metrics(capsys, graph_spec, method):
    code, out, err = run(
        capsys,
        "partition",
        "--dataset",
        graph_spec,
        "--num-parts",
        "3",
        "--method",
        method,
        "--seed",
        "4",
        "--json",
    )
    assert (code, err) == (0, "")
    summary = json.loads(out)
    assert JSON_KEYS <= summary.keys()
    assert summary["method"] == method and summary["num_parts"] == 3
    assert isinstance(summary["seconds"], float) and summary["seconds"] >= 0
    assert_matches(summary, expected_summary(graph_spec, method, 3, seed=4))
    assert "store" not in summary


def test_partition_json_uses_the_seed(capsys, graph_spec):
    """The seed reaches the partitioner (the comparison above would not notice otherwise)."""
    seeded, default = (
        expected_summary(graph_spec, "random", 3, 4),
        expected_summary(graph_spec, "random", 3, 0),
    )
    assert seeded != default
    code, out, _ = run(
        capsys, "partition", "--dataset", graph_spec, "-p", "3", "-m", "random", "--json"
    )
    assert code == 0
    assert_matches(json.loads(out), default)


def test_partition_json_reports_the_send_volume_refinement(capsys):
    argv = ["partition", "--dataset", "rmat?scale=9&edge_factor=8", "-p", "4", "--json"]
    code, out, err = run(capsys, *argv, "-m", "hypergraph")
    assert (code, err) == (0, "")
    summary = json.loads(out)
    assert summary["refine_moves"] >= 0
    assert summary["max_send_rows"] <= summary["unrefined_max_send_rows"]
    assert summary["total_volume_rows"] <= 1.05 * summary["unrefined_total_volume_rows"]
    code, out, _ = run(capsys, *argv, "-m", "metis")
    assert code == 0 and "refine_moves" not in json.loads(out)


def test_partition_compare_json_matches_partition_metrics(capsys, graph_spec):
    code, out, err = run(
        capsys,
        "partition-compare",
        "--dataset",
        graph_spec,
        "--num-parts",
        "4",
        "--methods",
        "metis",
        "random",
        "--seed",
        "2",
        "--json",
    )
    assert (code, err) == (0, "")
    rows = json.loads(out)
    assert [row["method"] for row in rows] == ["metis", "random"]
    random_row = expected_summary(graph_spec, "random", 4, seed=2)
    for row in rows:
        assert JSON_KEYS <= row.keys()
        assert row["num_parts"] == 4 and row["seconds"] >= 0
        expected = expected_summary(graph_spec, row["method"], 4, seed=2)
        assert_matches(row, expected)
        for key in RATIO_KEYS:
            assert row[f"{key}_vs_random"] == pytest.approx(expected[key] / random_row[key])
    assert all(rows[1][f"{key}_vs_random"] == 1.0 for key in RATIO_KEYS)


def test_partition_compare_table(capsys, graph_spec):
    code, out, err = run(
        capsys,
        "partition-compare",
        "--dataset",
        graph_spec,
        "-p",
        "2",
        "--methods",
        "hypergraph",
        "metis",
        "random",
    )
    assert (code, err) == (0, "")
    for text in (
        "hypergraph",
        "metis",
        "random",
        "vol avg/RP",
        "msgs max/RP",
        "edge cut",
        "80 vertices",
    ):
        assert text in out, text
    assert "…" not in out  # no column truncated although stdout is not a terminal


def test_partition_table(capsys, graph_spec):
    code, out, err = run(capsys, "partition", "--dataset", graph_spec, "-p", "2", "-m", "metis")
    assert (code, err) == (0, "")
    for text in ("metis", "total_volume_rows", "max_messages", "edge_cut", "imbalance"):
        assert text in out, text
    assert "…" not in out


def test_partition_hypergraph_on_digits(capsys):
    code, out, err = run(
        capsys, "partition", "--dataset", "digits", "-p", "2", "-m", "hypergraph", "--json"
    )
    assert (code, err) == (0, "")
    summary = json.loads(out)
    data = load("digits")
    random = partition_metrics(data, RandomPartitioner().partition(data, 2), 2).summary()
    assert summary["method"] == "hypergraph" and summary["num_nodes"] == 1797
    assert summary["total_volume_rows"] < random["total_volume_rows"] / 4
    assert summary["imbalance"] <= 1.03 + 1e-9


def test_partition_out_writes_then_reuses_a_store(capsys, graph_spec, tmp_path, monkeypatch):
    out_dir = tmp_path / "store"
    argv = ["partition", "--dataset", graph_spec, "-p", "3", "-m", "random", "--seed", "1"]
    code, out, err = run(capsys, *argv, "--out", str(out_dir), "--json")
    assert (code, err) == (0, "")
    first = json.loads(out)
    assert first["store"] == str(out_dir)
    assert_matches(first, expected_summary(graph_spec, "random", 3, seed=1))
    store = PartitionStore.open(out_dir)
    assert store.meta["dataset"] == graph_spec
    assert store.meta["settings"] == {
        "method": "random",
        "seed": 1,
        "epsilon": 0.03,
        "num_parts": 3,
    }
    assert store.metrics.summary() == {k: first[k] for k in store.metrics.summary()}
    meta_before = (out_dir / "meta.json").read_bytes()

    def no_partitioning(self, data, num_parts):
        raise AssertionError("a matching store must be reused")

    monkeypatch.setattr(RandomPartitioner, "_partition", no_partitioning)
    code, out, err = run(capsys, *argv, "--out", str(out_dir), "--json")
    assert (code, err) == (0, "")
    assert json.loads(out) == first  # the stored seconds, not a new timing
    assert (out_dir / "meta.json").read_bytes() == meta_before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["store"]


def test_subprocess_contract():
    """The real command line: ``python -m lightning_gnn_dist partition-compare ... --json``."""
    env = {**os.environ, "LGD_PROGRESS": "0"}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")]))
    command = [
        sys.executable,
        "-m",
        "lightning_gnn_dist",
        "partition-compare",
        "--dataset",
        "digits",
        "--num-parts",
        "2",
        "--json",
    ]
    result = subprocess.run(command, cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    assert "Traceback" not in result.stderr
    rows = json.loads(result.stdout)
    assert [row["method"] for row in rows] == list(DEFAULT_METHODS)
    for row in rows:
        assert JSON_KEYS <= row.keys()
        assert row["num_parts"] == 2 and row["num_nodes"] == 1797
    by_method = {row["method"]: row for row in rows}
    for method in ("random", "metis"):
        assert_matches(by_method[method], expected_summary("digits", method, 2, seed=0))


def test_help_lists_every_command(capsys, monkeypatch):
    """Issue 18, item 20: ``--help`` names the module (not ``__main__.py``, what argparse takes
    from ``sys.argv[0]`` under ``python -m``) and every command."""
    monkeypatch.setattr(sys, "argv", [str(REPO / "lightning_gnn_dist" / "__main__.py"), "--help"])
    with pytest.raises(SystemExit) as exit_:
        main()
    assert exit_.value.code == 0
    out = capsys.readouterr().out
    assert out.startswith("usage: python -m lightning_gnn_dist "), out
    assert "__main__" not in out
    listed = re.findall(r"^    (\S+)", out, re.M)
    assert listed == [
        "fit",
        "validate",
        "test",
        "predict",
        "emulate",
        "probe",
        "partition",
        "partition-compare",
    ]


# --------------------------------------------------------------------------------------------
# bad input: exit code 2, one ``error:`` line, nothing written


def assert_one_error_line(code, out: str, err: str, *fragments: str) -> None:
    assert code == 2
    assert out == ""
    lines = err.splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith("error: "), err
    assert "Traceback" not in err
    for fragment in fragments:
        assert fragment in lines[0], (fragment, lines[0])


def _bad_metis(tmp: Path) -> tuple[str, tuple[str, ...]]:
    (tmp / "bad.graph").write_text("3 2\n2\n1 x\n2\n")
    return f"metis:{tmp / 'bad.graph'}", (f"{tmp / 'bad.graph'}:3", "'x'")


def _asymmetric_metis(tmp: Path) -> tuple[str, tuple[str, ...]]:
    (tmp / "asym.graph").write_text("3 1\n2\n\n\n")
    return f"metis:{tmp / 'asym.graph'}", ("asym.graph:2", "does not list")


def _comments_only_edgelist(tmp: Path) -> tuple[str, tuple[str, ...]]:
    (tmp / "empty.txt").write_text("# src dst\n% nothing here\n\n")
    return f"edgelist:{tmp / 'empty.txt'}", ("empty",)


def _empty_file_edgelist(tmp: Path) -> tuple[str, tuple[str, ...]]:
    (tmp / "zero.txt").write_bytes(b"")
    return f"edgelist:{tmp / 'zero.txt'}", ("empty",)


def _empty_metis(tmp: Path) -> tuple[str, tuple[str, ...]]:
    (tmp / "empty.graph").write_text("% no vertices\n0 0\n")
    return f"metis:{tmp / 'empty.graph'}", ("empty",)


DATASET_ERRORS = {
    "missing-file": lambda tmp: (
        "metis:/nonexistent.graph",
        ("/nonexistent.graph", "no such file"),
    ),
    "malformed-metis": _bad_metis,
    "asymmetric-metis": _asymmetric_metis,
    "empty-edgelist-comments": _comments_only_edgelist,
    "empty-edgelist-file": _empty_file_edgelist,
    "empty-metis": _empty_metis,
    "unknown-kind": lambda tmp: ("nope:x", ("unknown dataset kind 'nope'", "digits")),
    "bad-option": lambda tmp: ("digits?k=abc", ("k='abc'", "integer")),
    "directory": lambda tmp: (f"metis:{tmp}", ("not a regular file",)),
}


@pytest.mark.parametrize("command", ["partition", "partition-compare"])
@pytest.mark.parametrize("case", sorted(DATASET_ERRORS))
def test_bad_dataset(capsys, tmp_path, command, case):
    spec, fragments = DATASET_ERRORS[case](tmp_path)
    before = sorted(tmp_path.iterdir())
    extra = ["--out", str(tmp_path / "out")] if command == "partition" else ["--methods", "random"]
    code, out, err = run(capsys, command, "--dataset", spec, "-p", "1", *extra)
    assert_one_error_line(code, out, err, *fragments)
    assert sorted(tmp_path.iterdir()) == before  # no store, no temporary directory


@pytest.mark.parametrize("command", ["partition", "partition-compare"])
@pytest.mark.parametrize(
    ("num_parts", "fragments"),
    [
        ("0", ("integer >= 1", "got 0")),
        ("-3", ("integer >= 1", "got -3")),
        ("81", ("number of parts (81) exceeds the number of vertices (80)",)),
        ("two", ("--num-parts", "invalid int value")),
    ],
)
def test_bad_num_parts(capsys, tmp_path, graph_spec, command, num_parts, fragments):
    extra = ["--out", str(tmp_path / "out")] if command == "partition" else []
    method = ["-m", "random"] if command == "partition" else ["--methods", "random"]
    code, out, err = run(capsys, command, "--dataset", graph_spec, "-p", num_parts, *method, *extra)
    assert_one_error_line(code, out, err, *fragments)
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(
    ("argv", "fragments"),
    [
        (["partition", "-p", "2", "--method", "nope"], ("invalid choice: 'nope'", "random")),
        (
            ["partition-compare", "-p", "2", "--methods", "random", "nope"],
            ("invalid choice: 'nope'",),
        ),
        (["partition", "--method", "random"], ("required", "--num-parts")),
        (["partition", "-p", "2", "--epsilon", "-1"], ("epsilon",)),
        (["partition", "-p", "2", "--bogus"], ("unrecognized arguments: --bogus",)),
        (["bogus"], ("invalid choice: 'bogus'",)),
        ([], ("required",)),
    ],
    ids=[
        "unknown-method",
        "unknown-compare-method",
        "no-num-parts",
        "bad-epsilon",
        "unknown-flag",
        "unknown-command",
        "no-command",
    ],
)
def test_bad_arguments(capsys, tmp_path, graph_spec, argv, fragments):
    if argv and argv[0].startswith("partition"):
        argv = [*argv, "--dataset", graph_spec]
        if argv[0] == "partition":
            argv += ["--out", str(tmp_path / "out")]
    code, out, err = run(capsys, *argv)
    assert_one_error_line(code, out, err, *fragments)
    assert list(tmp_path.iterdir()) == []


def test_store_of_another_dataset_is_refused(capsys, tmp_path, graph_spec, other_spec):
    out_dir = tmp_path / "store"
    common = ["-p", "2", "-m", "random", "--out", str(out_dir), "--json"]
    code, _, err = run(capsys, "partition", "--dataset", graph_spec, *common)
    assert (code, err) == (0, "")
    before = {p.name: p.read_bytes() for p in out_dir.iterdir()}

    code, out, err = run(capsys, "partition", "--dataset", other_spec, *common)
    assert_one_error_line(
        code, out, err, str(out_dir), "another dataset", "dataset fingerprint", graph_spec
    )
    assert {p.name: p.read_bytes() for p in out_dir.iterdir()} == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["store"]

    code, out, err = run(capsys, "partition", "--dataset", graph_spec, *common[:-1], "--seed", "5")
    assert_one_error_line(code, out, err, "seed: stored 0, requested 5")
    assert {p.name: p.read_bytes() for p in out_dir.iterdir()} == before


def test_corrupt_store_is_reported(capsys, tmp_path, graph_spec):
    out_dir = tmp_path / "store"
    argv = ["partition", "--dataset", graph_spec, "-p", "2", "-m", "random", "--out", str(out_dir)]
    assert run(capsys, *argv)[0] == 0
    meta = out_dir / "meta.json"
    meta.write_bytes(meta.read_bytes()[:40])
    code, out, err = run(capsys, *argv)
    assert_one_error_line(code, out, err, str(meta), "corrupt", f"delete {out_dir}")


def test_out_is_not_a_store(capsys, tmp_path, graph_spec):
    (tmp_path / "file").write_text("x")
    argv = ["partition", "--dataset", graph_spec, "-p", "2", "-m", "random", "--out"]
    code, out, err = run(capsys, *argv, str(tmp_path))
    assert_one_error_line(code, out, err, "not a partition store")
    code, out, err = run(capsys, *argv, str(tmp_path / "file" / "store"))  # parent is a file
    assert_one_error_line(code, out, err, str(tmp_path / "file"))
    assert [p.name for p in tmp_path.iterdir()] == ["file"]


def test_partition_compare_splits_the_rows_by_node(capsys):
    import json

    from lightning_gnn_dist.cli import main

    spec = "sbm?num_nodes=120&num_classes=3&avg_degree=6&features=8&seed=2"
    args = ["partition-compare", "--dataset", spec, "-p", "4", "--methods", "metis", "random"]
    assert main(args + ["--nodes", "2", "--widths", "8,4", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    for row in rows:
        assert row["inter_node_rows"] + row["intra_node_rows"] == row["total_volume_rows"]
        assert row["hierarchical_inter_node_rows"] <= row["inter_node_rows"]
        assert row["predicted_epoch_seconds_by_exchange"]["hierarchical"] > 0
    assert main(args + ["--nodes", "2"]) == 0
    assert "hier. inter rows" in capsys.readouterr().out
    assert main(args + ["--nodes", "3"]) == 2
    assert "--nodes 3: give a divisor of --num-parts 4" in capsys.readouterr().err


def test_partition_compare_on_nodes_adds_the_placed_variants(capsys):
    """``--nodes 2`` with 2 ranks per node: each method's placed variants follow its naive row,
    the same partitions as ``method="auto"`` weighs (``partition_candidates``)."""
    from lightning_gnn_dist.costmodel.plan import partition_candidates
    from lightning_gnn_dist.partition.placement import Topology, partition_label

    spec = "sbm?num_nodes=120&num_classes=3&avg_degree=6&features=8&seed=2"
    args = ["partition-compare", "--dataset", spec, "-p", "4", "--seed", "2"]
    args += ["--methods", "hypergraph", "random", "--nodes"]
    code, out, err = run(capsys, *args, "2", "--widths", "8,4", "--json")
    assert code == 0, err
    rows = json.loads(out)
    labels = [partition_label(r["method"], r["placement"]) for r in rows]
    assert {"hypergraph/two-level", "random/mapped"} <= set(labels)
    assert "random/two-level" not in labels and labels[0] == "hypergraph"
    assert [r["method"] for r in rows] == sorted(r["method"] for r in rows)  # after their method
    metrics, _ = partition_candidates(
        load_dataset(spec), 4, ["hypergraph", "random"], seed=2, topology=Topology(2, 2)
    )
    assert sorted(labels) == sorted(metrics)
    naive = {r["method"]: r for r in rows if r["placement"] == "naive"}
    for row, label in zip(rows, labels, strict=True):
        assert row["total_volume_rows"] == metrics[label].total_volume_rows
        assert row["inter_node_rows"] + row["intra_node_rows"] == row["total_volume_rows"]
        assert row["predicted_epoch_seconds_by_exchange"]["hierarchical"] > 0
        if row["placement"] == "mapped":  # a renumbering: the same volume, fewer rows across
            assert row["total_volume_rows"] == naive[row["method"]]["total_volume_rows"]
            assert row["inter_node_rows"] <= naive[row["method"]]["inter_node_rows"]
    assert (
        rows[labels.index("random/mapped")]["inter_node_rows"] < naive["random"]["inter_node_rows"]
    )
    code, out, _ = run(capsys, *args, "2")
    assert code == 0 and "random/mapped" in out and "hypergraph/two-level" in out
    code, out, _ = run(capsys, *args, "4", "--json")  # one rank per node: nothing to place
    assert code == 0 and [r["placement"] for r in json.loads(out)] == ["naive", "naive"]


def test_partition_compare_auto_prints_the_plan_table(capsys, tmp_path):
    spec = "sbm?num_nodes=120&num_classes=3&avg_degree=6&features=8&seed=2"
    args = [
        "partition-compare",
        "--auto",
        "--dataset",
        spec,
        "-p",
        "2",
        "--methods",
        "metis",
        "random",
    ]
    probe = tmp_path / "probe.json"
    probe.write_text(json.dumps({"bandwidth_bytes_per_s": 1e6, "latency_s": 1e-4}))
    code, out, _ = run(capsys, *args, "--widths", "8,4,3", "--network", str(probe), "--json")
    plan = json.loads(out)
    assert code == 0 and plan["settings"]["network"]["bandwidth_bytes_per_s"] == 1e6
    assert len(plan["rows"]) == 6 and all(r["candidate"]["codec"] == "fp32" for r in plan["rows"])
    assert "chosen" not in plan and plan["rows"][0]["candidate"] == plan["pick"]  # one pick
    code, out, _ = run(capsys, *args, "--widths", "8,4,3", "--allow-stale", "--cores", "2")
    assert code == 0 and "automatic plan" in out and "◀" in out and "metis + cached" in out
    assert "computed" in out and "pred. epoch ms" in out
    for extra, message in [
        ([], "--auto predicts epochs: give the model's --widths"),
        (["--widths", "8,4,3", "--network", "ethernet"], "neither a preset"),
        (["--widths", "8,4,3", "--option", "vertex_weight=work"], "drop --option"),
    ]:
        code, _, err = run(capsys, *args, *extra)
        assert code == 2 and message in err, err
    code, _, err = run(capsys, *args[:1], *args[2:], "--allow-stale")
    assert code == 2 and "apply to --auto only" in err


@pytest.mark.parametrize("placement", ["naive", "two-level"])
def test_partition_places_the_store_for_nodes(capsys, tmp_path, placement):
    spec = "sbm?num_nodes=120&num_classes=3&avg_degree=6&features=8&seed=2"
    args = ["partition", "--dataset", spec, "-p", "4", "--nodes", "2", "--placement", placement]
    code, out, err = run(capsys, *args, "--out", str(tmp_path / "s"), "--json")
    assert code == 0, err
    summary = json.loads(out)
    meta = PartitionStore.open(tmp_path / "s").meta
    assert meta["placement"]["method"] == summary["placement"] == placement
    assert (meta["placement"]["num_nodes"], meta["placement"]["ranks_per_node"]) == (2, 2)
    assert summary["inter_node_rows"] + summary["intra_node_rows"] == summary["total_volume_rows"]
    # without --out: the same partition and rows
    code, out, _ = run(capsys, *args, "--json")
    again = json.loads(out)
    assert code == 0 and again["inter_node_rows"] == summary["inter_node_rows"]
    # the store refuses to be reused with another placement
    other = "naive" if placement != "naive" else "mapped"
    code, _, err = run(capsys, *args[:-1], other, "--out", str(tmp_path / "s"))
    assert code == 2 and f"placed {placement!r}, but placement={other!r}" in err


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (
            ["--placement", "mapped"],
            "--placement mapped decides which parts share a node: add --nodes",
        ),
        (
            ["--nodes", "2", "--placement", "two-level", "--method", "metis"],
            "use method='hypergraph'",
        ),
        (["--nodes", "2", "--placement", "nearest"], "invalid choice: 'nearest'"),
        (["--nodes", "3"], "--nodes 3: give a divisor of --num-parts 4"),
    ],
)
def test_partition_refuses_a_bad_placement(capsys, tmp_path, graph_spec, extra, message):
    argv = ["partition", "--dataset", graph_spec, "-p", "4", "--out", str(tmp_path / "s"), *extra]
    code, out, err = run(capsys, *argv)
    assert_one_error_line(code, out, err, message)
    assert list(tmp_path.iterdir()) == []


def test_partition_compare_auto_on_nodes_lists_hierarchical_and_two_level(capsys):
    spec = "sbm?num_nodes=120&num_classes=3&avg_degree=6&features=8&seed=2"
    args = ["partition-compare", "--auto", "--dataset", spec, "-p", "4", "--widths", "8,4,3"]
    args += ["--methods", "hypergraph", "random", "--json"]
    code, out, err = run(capsys, *args, "--nodes", "2")
    assert code == 0, err
    plan = json.loads(out)
    kinds = {(r["candidate"]["exchange"], r["candidate"]["placement"]) for r in plan["rows"]}
    assert {("hierarchical", "naive"), ("hierarchical", "two-level"), ("p2p", "two-level")} <= kinds
    assert plan["settings"]["topology"] == {"num_nodes": 2, "ranks_per_node": 2}
    code, out, _ = run(capsys, *args)
    kinds = {
        (r["candidate"]["exchange"], r["candidate"]["placement"]) for r in json.loads(out)["rows"]
    }
    assert code == 0 and {k for k in kinds if "hierarchical" in k or "two-level" in k} == set()
