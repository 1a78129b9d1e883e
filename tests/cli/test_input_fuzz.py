"""Malformed input, table-driven: every case ends with exit code 2, exactly one ``error:`` line on
stderr, no traceback, nothing on stdout and nothing written.

The CLI runs in-process (``main(argv)``), so ~150 cases take seconds. ``{file}`` in a spec is the
case's input file, ``{tmp}`` the test's folder.
"""

from __future__ import annotations

import gzip
from dataclasses import dataclass

import pytest

from lightning_gnn_dist.cli import main


@dataclass(frozen=True)
class Case:
    id: str
    spec: str
    content: bytes | None = None  # written to {file}
    name: str = "input.txt"  # file name of {file}
    args: tuple[str, ...] = ("-p", "2", "-m", "random")
    expect: str = ""  # a substring of the error line


MTX = "%%MatrixMarket matrix coordinate pattern general\n"
MTX_REAL = "%%MatrixMarket matrix coordinate real general\n"
TINY = "sbm?num_nodes=40&features=4"


def metis(text: str, expect: str = "") -> tuple[str, bytes, str]:
    return "metis:{file}", text.encode(), expect


def mtx(text: str, expect: str = "") -> tuple[str, bytes, str]:
    return "mtx:{file}", text.encode(), expect


def edges(text: str, expect: str = "", options: str = "") -> tuple[str, bytes, str]:
    return "edgelist:{file}" + options, text.encode(), expect


SPEC_CASES = {
    "empty-spec": ("", "no kind"),
    "unknown-kind": ("nosuchkind", "unknown dataset kind"),
    "kind-takes-no-arg": ("digits:foo", "takes no"),
    "kind-needs-path": ("metis", "needs a PATH"),
    "option-without-value": ("digits?k", "not key=value"),
    "option-without-key": ("digits?=3", "not key=value"),
    "option-twice": ("digits?k=1&k=2", "given twice"),
    "option-not-int": ("digits?k=abc", "k='abc'"),
    "digits-k-zero": ("digits?k=0", "k=0"),
    "digits-k-too-big": ("digits?k=5000", "k=5000"),
    "unknown-option": ("digits?unknown=1", "unknown option"),
    "negative-seed": ("digits?seed=-1", "seed"),
    "float-seed": ("digits?seed=1.5", "seed"),
    "sbm-no-nodes": ("sbm?num_nodes=0", "num_nodes"),
    "sbm-negative-nodes": ("sbm?num_nodes=-5", "num_nodes"),
    "sbm-nodes-not-int": ("sbm?num_nodes=abc", "num_nodes"),
    "sbm-nodes-float": ("sbm?num_nodes=1e3", "num_nodes"),
    "sbm-no-classes": ("sbm?num_classes=0", "num_classes"),
    "sbm-classes-above-nodes": ("sbm?num_nodes=10&num_classes=20", "num_classes"),
    "sbm-negative-degree": ("sbm?avg_degree=-1", "avg_degree"),
    "sbm-nan-degree": ("sbm?avg_degree=nan", "avg_degree"),
    "sbm-inf-degree": ("sbm?avg_degree=inf", "avg_degree"),
    "sbm-huge-degree": ("sbm?avg_degree=1e9", "is available"),
    "sbm-zero-ratio": ("sbm?p_ratio=0", "p_ratio"),
    "sbm-negative-ratio": ("sbm?p_ratio=-2", "p_ratio"),
    "sbm-nan-ratio": ("sbm?p_ratio=nan", "p_ratio"),
    "sbm-negative-noise": ("sbm?noise=-1", "noise"),
    "sbm-inf-noise": ("sbm?noise=inf", "noise"),
    "sbm-nan-noise": ("sbm?noise=NaN", "noise"),
    "sbm-no-features": ("sbm?features=0", "features"),
    "sbm-negative-seed": ("sbm?seed=-3", "seed"),
    "sbm-3e9-nodes": ("sbm?num_nodes=3000000000", "is available"),
    "sbm-huge-features": ("sbm?features=100000000000", "is available"),
    "rmat-scale-zero": ("rmat?scale=0", "scale"),
    "rmat-scale-32": ("rmat?scale=32", "scale"),
    "rmat-scale-31": ("rmat?scale=31", "is available"),
    "rmat-negative-scale": ("rmat?scale=-1", "scale"),
    "rmat-no-edge-factor": ("rmat?edge_factor=0", "edge_factor"),
    "rmat-nan-a": ("rmat?a=nan", "option a="),
    "rmat-negative-a": ("rmat?a=-0.1", "a=-0.1"),
    "rmat-probabilities-above-one": ("rmat?a=0.9&b=0.9", "a + b + c"),
    "rmat-inf-b": ("rmat?b=inf", "option b="),
    "rmat-minus-inf-c": ("rmat?c=-inf", "option c="),
    "rmat-no-features": ("rmat?scale=4&features=0", "features"),
    "rmat-no-classes": ("rmat?scale=4&classes=0", "classes"),
    "rmat-huge-edge-factor": ("rmat?scale=30&edge_factor=1000000", "is available"),
    "powerlaw-unknown-option": ("powerlaw?d=0.1", "unknown option"),
    "ogb-no-name": ("ogb:", "needs a NAME"),
    "ogb-unknown-option": ("ogb:ogbn-arxiv?bad=1", "unknown option"),
    "missing-file": ("edgelist:{tmp}/missing.txt", "no such file"),
    "directory-as-file": ("metis:{tmp}", "not a regular file"),
    "missing-mtx": ("mtx:{tmp}/nofile.mtx", "no such file"),
    # issue 30: synthetic targets and edge attributes
    "targets-unknown": ("sbm?num_nodes=40&targets=ranking", "targets='ranking' must be"),
    "targets-zero-columns": ("sbm?num_nodes=40&targets=multilabel:0", "k must be an integer"),
    "targets-word-columns": ("rmat?scale=5&targets=regression:x", "k must be an integer"),
    "targets-multiclass-columns": ("sbm?targets=multiclass:4", "targets='multiclass:4'"),
    "edge-features-negative": ("sbm?num_nodes=40&edge_features=-2", "edge_features=-2"),
    "edge-features-float": ("sbm?edge_features=1.5", "edge_features='1.5' must be an integer"),
    "edge-weights-unknown": ("rmat?scale=5&edge_weights=heavy", "edge_weights='heavy'"),
    "weights-not-bool": ("edgelist:{tmp}/g.txt?weights=maybe", "weights='maybe'"),
    "proteins-no-tasks": ("proteins?num_nodes=40&tasks=0", "tasks"),
    "proteins-species-above-nodes": ("proteins?num_nodes=4&species=9", "species"),
    "digits-no-targets-option": ("digits?targets=regression", "unknown option"),
}

FILE_CASES = {
    # METIS
    "metis-empty": metis("", "no header"),
    "metis-only-comments": metis("% a comment\n%\n", "no header"),
    "metis-header-words": metis("a b\n", "bad METIS header"),
    "metis-header-one-field": metis("1\n\n", "bad METIS header"),
    "metis-header-five-fields": metis("1 0 0 1 5\n\n", "bad METIS header"),
    "metis-negative-n": metis("-3 1\n", "must be >= 0"),
    "metis-negative-m": metis("3 -1\n2\n1\n\n", "must be >= 0"),
    "metis-fmt-2": metis("3 1 2\n2\n1\n\n", "fmt"),
    "metis-fmt-four-digits": metis("3 1 1111\n2\n1\n\n", "fmt"),
    "metis-ncon-zero": metis("3 1 10 0\n1 2\n1 1\n1\n", "ncon"),
    "metis-too-few-lines": metis("3 1\n2\n1\n", "only 2 vertex lines"),
    "metis-extra-line": metis("2 1\n2\n1\n1\n", "unexpected line"),
    "metis-id-too-big": metis("2 1\n5\n1\n", "out of range"),
    "metis-id-zero": metis("2 1\n0\n1\n", "out of range"),
    "metis-negative-id": metis("2 1\n-1\n1\n", "out of range"),
    "metis-self-loop": metis("2 1\n1\n1\n", "itself"),
    "metis-asymmetric": metis("3 1\n2\n\n\n", "does not list"),
    "metis-duplicate": metis("2 1\n2 2\n1 1\n", "more than once"),
    "metis-wrong-m": metis("2 5\n2\n1\n", "m=5"),
    "metis-word-token": metis("2 1\nx\n1\n", "'x' is not an integer"),
    "metis-float-token": metis("2 1\n1.5\n1\n", "is not an integer"),
    "metis-missing-weights": metis("2 1 10 2\n1\n1 1 1\n", "vertex size/weight"),
    "metis-odd-edge-weights": metis("2 1 1\n2\n1 1\n", "odd number"),
    "metis-huge-id": metis("2 1\n99999999999999999999\n1\n", "is not an integer"),
    "metis-3e9-vertices": metis("3000000000 1\n2\n1\n", "is available"),
    "metis-zero-vertices": metis("0 0\n", "empty"),
    "metis-binary": ("metis:{file}", bytes(range(256)) * 4, "METIS"),
    "metis-latin1": ("metis:{file}", "2 1\n2\xe9\n1\n".encode("latin-1"), "is not an integer"),
    # Matrix Market
    "mtx-empty": mtx("", "empty"),
    "mtx-blank": mtx("\n \n\n", "empty"),
    "mtx-no-banner": mtx("3 3 1\n1 2\n", "banner"),
    "mtx-tensor": mtx("%%MatrixMarket tensor coordinate real general\n1 1 0\n", "banner"),
    "mtx-banner-four-words": mtx("%%MatrixMarket matrix coordinate real\n", "banner"),
    "mtx-array": mtx("%%MatrixMarket matrix array real general\n2 2\n1\n0\n0\n1\n", "array"),
    "mtx-unknown-field": mtx("%%MatrixMarket matrix coordinate quaternion general\n", "field"),
    "mtx-unknown-symmetry": mtx("%%MatrixMarket matrix coordinate real weird\n", "symmetry"),
    "mtx-no-size-line": mtx(MTX + "% only comments\n", "no size line"),
    "mtx-size-two-numbers": mtx(MTX + "3 3\n", "bad size line"),
    "mtx-size-words": mtx(MTX + "a b c\n", "bad size line"),
    "mtx-negative-size": mtx(MTX + "-3 -3 0\n", "must be >= 0"),
    "mtx-negative-entries": mtx(MTX + "3 3 -1\n", "must be >= 0"),
    "mtx-not-square": mtx(MTX + "3 4 1\n1 2\n", "square"),
    "mtx-fewer-entries": mtx(MTX + "3 3 2\n1 2\n", "2 entries"),
    "mtx-more-entries": mtx(MTX + "3 3 1\n1 2\n2 3\n", "1 entries"),
    "mtx-entry-one-number": mtx(MTX + "3 3 1\n1\n", "expected 2 numbers"),
    "mtx-pattern-with-value": mtx(MTX + "3 3 1\n1 2 5\n", "expected 2 numbers"),
    "mtx-real-without-value": mtx(MTX_REAL + "3 3 1\n1 2\n", "expected 3 numbers"),
    "mtx-row-out-of-range": mtx(MTX + "3 3 1\n4 1\n", "out of range"),
    "mtx-row-zero": mtx(MTX + "3 3 1\n0 1\n", "out of range"),
    "mtx-float-index": mtx(MTX + "3 3 1\n1.5 1\n", "is not an integer"),
    "mtx-bad-value": mtx(MTX_REAL + "3 3 1\n1 2 abc\n", "'abc' is not a number"),
    "mtx-3e9-size": mtx(MTX + "3000000000 3000000000 1\n1 1\n", "is available"),
    "mtx-huge-entries": mtx(MTX + "3 3 99999999999\n1 1\n", "is available"),
    "mtx-zero-size": mtx(MTX + "0 0 0\n", "empty"),
    "mtx-complex-short": mtx(
        "%%MatrixMarket matrix coordinate complex general\n2 2 1\n1 2 1.0\n", "4 numbers"
    ),
    "mtx-index-2-pow-40": mtx(MTX + "3 3 1\n1099511627776 1\n", "out of range"),
    # edge lists
    "edges-empty": edges("", "empty"),
    "edges-only-comments": edges("# src dst\n% x\n", "empty"),
    "edges-one-token": edges("0 1\n5\n", "expected 'src dst'"),
    "edges-words": edges("a b\n", "'a' is not a vertex id"),
    "edges-negative": edges("1 -2\n", "negative"),
    "edges-float": edges("1.5 2\n", "'1.5' is not a vertex id"),
    "edges-id-2-pow-32": edges("0 1\n1 4294967296\n", ":2: vertex id 4294967296"),
    "edges-id-3e9": edges("0 3000000000\n", "vertex id 3000000000"),
    "edges-id-2-pow-63": edges("0 9223372036854775808\n", "is not a vertex id"),
    "edges-id-huge": edges("0 99999999999999999999\n", "is not a vertex id"),
    "edges-csv-header": edges("src,dst\n0,1\n", "'src' is not a vertex id"),
    "edges-binary": ("edgelist:{file}", b"\x00\x01\x02\xff\xfe 7\n", "is not a vertex id"),
    "edges-above-num-nodes": edges("0 5\n", "out of range", "?num_nodes=3"),
    "edges-negative-num-nodes": edges("0 1\n", "num_nodes", "?num_nodes=-1"),
    "edges-3e9-num-nodes": edges("0 1\n", "is available", "?num_nodes=3000000000"),
    "edges-bad-directed": edges("0 1\n", "directed", "?directed=maybe"),
    "edges-no-features": edges("0 1\n", "features", "?features=0"),
    "edges-no-classes": edges("0 1\n", "classes", "?classes=0"),
    "edges-largest-id-too-big-for-memory": edges("0 2000000000\n", "is available"),
    "edges-weights-missing": edges("0 1 2.5\n1 2\n", ":2: weights=true needs", "?weights=true"),
    "edges-weights-word": edges("0 1 heavy\n", "'heavy' is not a number", "?weights=true"),
    "edges-weights-nan": edges("0 1 nan\n", "weight nan is not finite", "?weights=true"),
    "mtx-pattern-weights": (
        "mtx:{file}?weights=true",
        (MTX + "2 2 1\n1 2\n").encode(),
        "'pattern'",
    ),
    "gz-not-gzip": ("edgelist:{file}", b"0 1\n", "cannot read"),
    "gz-truncated": ("metis:{file}", gzip.compress(b"2 1\n2\n1\n")[:-6], "cannot read"),
}
NAMES = {"gz-not-gzip": "g.txt.gz", "gz-truncated": "g.graph.gz"}

ARG_CASES = {
    "parts-zero": (TINY, ("-p", "0", "-m", "random"), "number of parts"),
    "parts-negative": (TINY, ("-p", "-1", "-m", "random"), "number of parts"),
    "parts-above-vertices": (TINY, ("-p", "1000", "-m", "random"), "number of parts"),
    "parts-not-int": (TINY, ("-p", "abc"), "invalid int"),
    "parts-missing": (TINY, ("-m", "random"), "--num-parts"),
    "unknown-method": (TINY, ("-p", "2", "-m", "nope"), "invalid choice"),
    "epsilon-word": (TINY, ("-p", "2", "--epsilon", "abc"), "invalid float"),
    "epsilon-negative": (TINY, ("-p", "2", "-m", "metis", "--epsilon", "-1"), "epsilon"),
    "epsilon-nan": (TINY, ("-p", "2", "-m", "metis", "--epsilon", "nan"), "epsilon"),
    "epsilon-inf": (TINY, ("-p", "2", "-m", "metis", "--epsilon", "inf"), "epsilon"),
    "seed-word": (TINY, ("-p", "2", "--seed", "x"), "invalid int"),
    "unknown-flag": (TINY, ("-p", "2", "--bogus"), "unrecognized"),
    "force-without-out": (TINY, ("-p", "2", "-m", "random", "--force"), "--force"),
    "compare-unknown-method": (TINY, ("-p", "2", "--methods", "nope"), "invalid choice"),
    # issue 18, item 14: accepted and trained on before
    "balance-send-volume-maybe": (
        TINY,
        ("-p", "2", "-m", "hypergraph", "-o", "balance_send_volume=maybe"),
        "balance_send_volume must be True or False (got 'maybe')",
    ),
    "metis-balance-masks-yes": (
        TINY,
        ("-p", "2", "-m", "metis", "-o", "balance_masks=yes"),
        "balance_masks must be True or False (got 'yes')",
    ),
    "gnn-blocks-zero-hops": (TINY, ("-p", "2", "-m", "gnn-blocks", "-o", "num_hops=0"), "num_hops"),
    "seed-negative": (TINY, ("-p", "2", "-m", "random", "--seed", "-1"), "seed must be"),
    # item 15: tracebacks before
    "volume-slack-nan": (TINY, ("-p", "2", "-o", "volume_slack=nan"), "volume_slack must be"),
    "gnn-blocks-alpha-nan": (TINY, ("-p", "2", "-m", "gnn-blocks", "-o", "alpha=nan"), "alpha"),
    "vertex-cut-65-parts": (
        "sbm?num_nodes=100&features=4",
        ("-p", "65", "-m", "vertex-cut"),
        "at most 64 parts",
    ),
}


def _cases() -> list[Case]:
    cases = [Case(id_, spec, expect=expect) for id_, (spec, expect) in SPEC_CASES.items()]
    for id_, (spec, content, expect) in FILE_CASES.items():
        cases.append(Case(id_, spec, content, NAMES.get(id_, "input.txt"), expect=expect))
    for id_, (spec, args, expect) in ARG_CASES.items():
        cases.append(Case(id_, spec, args=args, expect=expect))
    return cases


CASES = _cases()


def test_the_table_is_large_enough():
    assert len(CASES) >= 120
    assert len({case.id for case in CASES}) == len(CASES)


@pytest.mark.parametrize("case", CASES, ids=[case.id for case in CASES])
def test_malformed_input_gives_one_error_line(case, tmp_path, capsys):
    inputs = set()
    if case.content is not None:
        (tmp_path / case.name).write_bytes(case.content)
        inputs.add(case.name)
    spec = case.spec.format(file=tmp_path / case.name, tmp=tmp_path)
    command = "partition-compare" if case.id.startswith("compare-") else "partition"
    without_out = command == "partition-compare" or case.id == "force-without-out"
    out_args = () if without_out else ("--out", str(tmp_path / "store"))
    try:
        code = main([command, "--dataset", spec, *case.args, *out_args])
    except SystemExit as exit_:
        code = exit_.code
    captured = capsys.readouterr()
    lines = captured.err.splitlines()
    assert code == 2, captured.err
    assert len(lines) == 1 and lines[0].startswith("error: "), captured.err
    assert "Traceback" not in captured.err
    assert case.expect in lines[0], lines[0]
    assert captured.out == ""
    assert {p.name for p in tmp_path.iterdir()} == inputs  # no store, no temporary folder


# -- the LightningCLI (issue 18, items 9, 14, 15): every bad value, and every combination the
# strategy and the datamodule refuse together, ends at parse or construction time -------------
STRATEGY = ("--trainer.strategy", "lightning_gnn_dist.GNNStrategy")
NEIGHBOR = ("--data.loader", "neighbor", "--data.num_neighbors", "[3]")
SUBGRAPH = ("--data.loader", "subgraph")


def exchange(mode: str) -> tuple[str, ...]:
    return (*STRATEGY, "--trainer.strategy.exchange", mode)


def plan(option: str) -> tuple[str, ...]:
    """``method="auto"`` with one plan option set (YAML) besides the widths."""
    widths = "" if option.startswith("widths") else "widths: [64, 16, 10], "
    return ("--data.method", "auto", "--data.plan_options", f"{{{widths}{option}}}")


RDM = (*exchange("rdm"), "--trainer.strategy.rdm_order")
CODEC = (*STRATEGY, "--trainer.strategy.codec")


LIGHTNING_CASES = {
    # item 14
    "cached-with-neighbor": (*exchange("cached"), *NEIGHBOR, "caches nothing"),
    "cached-with-subgraph": (
        *exchange("cached"),
        *SUBGRAPH,
        "--data.subgraph_size",
        "10",
        "caches nothing",
    ),
    "cd0-with-neighbor": (*exchange("cd-0"), *NEIGHBOR, "runs on a vertex-cut partition"),
    "batch-size-float": (*NEIGHBOR, "--data.batch_size", "1.5", "data.batch_size"),
    "fanout-float": (*NEIGHBOR, "--data.num_neighbors", "[1.5]", "data.num_neighbors"),
    "cache-size-negative": (*NEIGHBOR, "--data.cache_size", "-1", "cache_size must be"),
    "cd-leading-zero": (*exchange("cd-05"), "without leading zeros"),
    "cd-arabic-digit": (*exchange("cd-\u0665"), "ASCII digits"),
    "staleness-inf": (
        *exchange("cached"),
        "--trainer.strategy.staleness_bound",
        "inf",
        "staleness_bound",
    ),
    "staleness-for-p2p": (
        *exchange("p2p"),
        "--trainer.strategy.staleness_bound",
        "3",
        "applies to exchange='cached'",
    ),
    "strategy-typo": (*STRATEGY, "--trainer.strategy.exchnage", "cached", "exchnage"),
    "loader-option-elsewhere": ("--data.batch_size", "64", "applies to loader='neighbor'"),
    # item 15
    "fanout-zero": (*NEIGHBOR, "--data.num_neighbors", "[0]", "num_neighbors must be"),
    "fanout-negative": (*NEIGHBOR, "--data.num_neighbors", "[5, -3]", "num_neighbors must be"),
    "fanout-not-a-list": (*NEIGHBOR, "--data.num_neighbors", "5", "data.num_neighbors"),
    "batch-size-negative": (*NEIGHBOR, "--data.batch_size", "-3", "batch_size must be"),
    "batch-size-zero": (*NEIGHBOR, "--data.batch_size", "0", "batch_size must be"),
    "subgraph-size-zero": (*SUBGRAPH, "--data.subgraph_size", "0", "subgraph_size must be"),
    "subgraph-size-negative": (*SUBGRAPH, "--data.subgraph_size", "-5", "subgraph_size must be"),
    "subgraph-size-above-one": (*SUBGRAPH, "--data.subgraph_size", "1.5", "subgraph_size must be"),
    "subgraph-size-not-whole": (*SUBGRAPH, "--data.subgraph_size", "2.5", "subgraph_size must be"),
    "subgraph-size-nan": (*SUBGRAPH, "--data.subgraph_size", "nan", "data.subgraph_size"),
    "unknown-sampler": (
        *SUBGRAPH,
        "--data.subgraph_size",
        "10",
        "--data.subgraph_sampler",
        "nope",
        "unknown subgraph sampler",
    ),
    "exchange-of-other-kind": (*exchange("cd-0"), "runs on a vertex-cut partition"),
    "vertex-cut-65-ranks": (
        *exchange("cd-0"),
        "--data.method",
        "vertex-cut",
        "--trainer.devices",
        "65",
        "at most 64",
    ),
    "cd-overflow": (*exchange("cd-99999999999999999999"), "from 1 to 999,999,999"),
    "exchange-none": (*exchange("null"), "exchange must be a mode name"),
    "seed-negative": ("--data.seed", "-1", "seed must be an integer >= 0"),
    # issue 30: the targets' task
    "task-unknown": ("--data.task", "ranking", "undefined task option 'ranking'"),
    "num-parts-vs-devices": ("--data.num_parts", "3", "num_parts=3 but 2 processes run"),
    "timeout-nan": (*STRATEGY, "--trainer.strategy.timeout", "nan", '"timeout"'),
    # item 9: evaluating an untrained model, predicting into nothing
    "test-without-checkpoint": ("@test", "would evaluate an untrained model"),
    "validate-without-checkpoint": ("@validate", "would evaluate an untrained model"),
    "predict-without-writer": ("@predict", "--ckpt_path", "missing.ckpt", "would write nothing"),
    # issue 29, item 7: accepted, then refused on every rank after launch (or misread)
    "rdm-order-length": (*RDM, "dsdsdsdsds", "rdm_order='dsdsdsdsds' does not fit NodePredictor"),
    "rdm-order-case": (*RDM, "Model", "rdm_order='Model': use 'auto'"),
    "plan-methods-unknown": (*plan("methods: [nope]"), "unknown partition method 'nope'"),
    "plan-methods-letters": (*plan("methods: mts"), "unknown partition method 'mts'"),
    "plan-methods-empty": (*plan("methods: []"), "plan option methods=[]: give a non-empty"),
    "plan-widths-float": (*plan("widths: [64, 16.5, 10]"), "widths[1] must be an integer"),
    "plan-widths-string": (*plan("widths: '64,16'"), "plan option widths='64,16'"),
    "plan-widths-nan": (*plan("widths: [64, .nan, 10]"), "widths[1] must be an integer"),
    "plan-widths-huge": (*plan("widths: [64, 1000000000000, 10]"), "widths[1] must be an integer"),
    "plan-cores-zero": (*plan("cores: 0"), "plan option cores must be an integer >= 1"),
    "plan-cores-negative": (*plan("cores: -4"), "plan option cores must be an integer >= 1"),
    "plan-allow-stale-word": (*plan("allow_stale: maybe"), "allow_stale must be True or False"),
    "plan-costs-unknown": (*plan("costs: {spmm: 1.0e-9}"), "plan option costs: unknown key"),
    "plan-network-number": (*plan("network: 8"), "plan option network=8: give a preset"),
    "plan-network-list": (*plan("network: [1, 2]"), "plan option network=[1, 2]"),
    "codec-direction-typo": (*CODEC, "{forwrd: int8}", "key 'forwrd' looks like a misspelt"),
    "codec-unknown-layer": (*CODEC, "{convs.7: int8}", "codec names layer 'convs.7'"),
    "codec-adaptive-fetch": (*CODEC, "{features: adaptive}", "codec['features']='adaptive'"),
    "codec-adaptive-neighbor": (*CODEC, "adaptive", *NEIGHBOR, "feature fetch does not have"),
    "codec-tolerance-inf": (
        *STRATEGY,
        "--trainer.strategy.codec_tolerance",
        "inf",
        "codec_tolerance",
    ),
    "strategy-mapping-codec-int": (
        "--trainer.strategy",
        "{class_path: lightning_gnn_dist.GNNStrategy, init_args: {codec: 8}}",
        "trainer.strategy: codec must be a name",
    ),
}


@pytest.mark.parametrize("case", list(LIGHTNING_CASES))
def test_lightning_cli_refuses_bad_values_in_one_line(case, tmp_path, capsys, monkeypatch):
    *args, expect = LIGHTNING_CASES[case]
    command = args.pop(0)[1:] if args and args[0].startswith("@") else "fit"
    config = tmp_path / "run.yaml"
    config.write_text(
        "trainer: {devices: 2, accelerator: cpu, logger: false, enable_progress_bar: false}\n"
        f"data: {{dataset: digits, method: random, root: {tmp_path / 'parts'}}}\n"
    )
    monkeypatch.chdir(tmp_path)
    code = main([command, "--config", str(config), *args])
    captured = capsys.readouterr()
    lines = captured.err.splitlines()
    assert code == 2, captured.err
    assert len(lines) == 1 and lines[0].startswith("error: "), captured.err
    assert expect in lines[0], lines[0]
    assert captured.out == "" and "Traceback" not in captured.err
    assert [p.name for p in tmp_path.iterdir()] == ["run.yaml"]  # nothing written, no process
