import warnings

import pytest
import pytorch_lightning as pl
import torch

from lightning_gnn_dist import GNNStrategy, GraphPartitionDataModule, NodeClassifier
from lightning_gnn_dist.partition.backends import mtkahypar as mtkahypar_backend
from lightning_gnn_dist.partition.store import PartitionStoreError
from tests.helpers import random_graph


def test_in_memory_graph_single_part(tmp_path):
    data = random_graph(60, 200, 0, features=4)
    data.name = "toy graph"
    dm = GraphPartitionDataModule(data, method="random", num_parts=1, root=str(tmp_path))
    dm.prepare_data()
    dm.setup("fit")
    assert dm.store_path.name.startswith("toy_graph-random-p1")
    batch = next(iter(dm.train_dataloader()))
    assert batch.x.shape == (60, 4) and batch.num_train_global == int(data.train_mask.sum())
    assert torch.equal(torch.sort(batch.global_ids).values, torch.arange(60))
    assert dm.num_features == 4 and dm.num_classes == int(data.y.max()) + 1


def test_parts_must_equal_world_size(tmp_path):
    dm = GraphPartitionDataModule(
        random_graph(30, 60, 1, features=2), method="random", num_parts=2, root=str(tmp_path)
    )
    dm.prepare_data()
    with pytest.raises(ValueError, match="2 parts but 1 processes"):
        dm.setup("fit")


def test_store_made_with_other_settings_is_refused(tmp_path):
    data = random_graph(30, 60, 2, features=2)
    store = str(tmp_path / "s")
    first = GraphPartitionDataModule(data, method="metis", num_parts=1, store=store)
    first.prepare_data()
    # a setting given explicitly that contradicts the store: refused at construction
    for given, value in [("method", "random"), ("seed", 3), ("epsilon", 0.1), ("num_parts", 2)]:
        with pytest.raises(ValueError, match=f"made with {given}=.*, not {given}={value!r}"):
            GraphPartitionDataModule(data, store=store, **{"num_parts": 1, given: value})
    # options that differ from the store's: refused when the store is opened
    other = GraphPartitionDataModule(
        data, num_parts=1, store=store, partition_options={"balance_masks": True}
    )
    with pytest.raises(PartitionStoreError, match="balance_masks"):
        other.prepare_data()


def test_an_existing_store_supplies_its_settings(tmp_path):
    """Issue 29, item 11: ``store=`` naming an existing store needs none of its settings
    repeated (the default method was refused as "made with other settings")."""
    data = random_graph(30, 60, 2, features=2)
    store = str(tmp_path / "s")
    made = GraphPartitionDataModule(
        data,
        method="metis",
        num_parts=1,
        seed=4,
        epsilon=0.1,
        store=store,
        partition_options={"balance_masks": True},
    )
    made.prepare_data()
    for verify in (True, False):
        dm = GraphPartitionDataModule(data, store=store, verify_dataset=verify)
        assert (dm.method, dm.seed, dm.epsilon) == ("metis", 4, 0.1)
        dm.prepare_data()
        dm.setup("fit")
        assert dm.store.meta["settings"] == made.store.meta["settings"]
    again = GraphPartitionDataModule(data, method="metis", seed=4, num_parts=1, store=store)
    again.prepare_data()  # the same settings, given explicitly
    assert GraphPartitionDataModule(data, store=str(tmp_path / "new")).method == "hypergraph"
    rebuilt = GraphPartitionDataModule(data, method="random", num_parts=1, store=store, force=True)
    rebuilt.prepare_data()  # force: the given settings, a new store
    assert rebuilt.store.meta["settings"]["method"] == "random"


def test_store_folder_follows_the_partitioner_settings(tmp_path, monkeypatch):
    """A partitioner whose settings changed (e.g. a library upgrade) gets a new store folder
    instead of having its old store refused."""
    dm = GraphPartitionDataModule("digits", method="hypergraph", num_parts=2, root=str(tmp_path))
    before = dm.store_path
    assert before.name.startswith("digits-hypergraph-p2-s0-e0.03-")
    # as if the tuned configuration file had been edited
    monkeypatch.setitem(mtkahypar_backend.PRESETS, "tuned", tmp_path / "edited.ini")
    assert dm.store_path != before and dm.store_path.parent == before.parent


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"method": "nope"}, "unknown partition method 'nope'"),
        ({"num_parts": 0}, "num_parts must be an integer >= 1"),
        (
            {"placement": "nearest"},
            "undefined placement option 'nearest'; choose one of naive, mapped, two-level",
        ),
        ({"method": "metis", "placement": "two-level"}, "use method='hypergraph'"),
        ({"method": "vertex-cut", "placement": "mapped"}, "needs a vertex partition"),
        (
            {"method": "auto", "plan_options": {"widths": [4, 2]}, "placement": "two-level"},
            "method='auto' chooses the placement itself",
        ),
    ],
)
def test_datamodule_argument_errors(kwargs, match):
    with pytest.raises(ValueError, match=match):
        GraphPartitionDataModule("digits", **kwargs)


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"exchange": "smoke"}, "unknown exchange mode 'smoke'"),
        ({"loss_reduction": "max"}, "loss_reduction"),
        ({"timeout": -1}, "timeout must be positive"),
        ({"timeout": float("nan")}, "timeout must be positive"),
        ({"retain_freed_memory": 1}, r"retain_freed_memory must be True or False \(got 1\)"),
        # issue 18, item 8: typos were forwarded to DDP, which never used them
        (
            {"exchnage": "cached", "staleness_bund": 3},
            r"'exchnage' \(did you mean 'exchange'\?\); valid: exchange, loss_reduction",
        ),
        (
            {"exchange": "cached", "staleness_bund": 3},
            r"unknown keyword argument 'staleness_bund' \(did you mean 'staleness_bound'",
        ),
        (
            {"find_unused_parameters": True},
            "'find_unused_parameters': GNNStrategy wraps no DistributedDataParallel",
        ),
        ({"ddp_comm_hook": print}, "'ddp_comm_hook': GNNStrategy wraps no"),
        (
            {"staleness_bound": 3},
            r"staleness_bound=3 applies to exchange='cached' only \(got exchange='p2p'\)",
        ),
        (
            {"exchange": "cd-0", "cache_backward": "fresh"},
            "cache_backward='fresh' applies to exchange='cached'",
        ),
        # item 14 / 15
        ({"exchange": "cd-05"}, "without leading zeros"),
        ({"exchange": "cd-\u0665"}, "ASCII digits"),
        ({"exchange": "cd-99999999999999999999"}, "from 1 to 999,999,999"),
        ({"exchange": None}, "exchange must be a mode name"),
        (
            {"exchange": "cached", "staleness_bound": float("inf")},
            "staleness_bound must be a finite",
        ),
        ({"exchange": "cached", "grad_clip": True}, "grad_clip must be a positive norm"),
    ],
)
def test_strategy_argument_errors(kwargs, match):
    with pytest.raises(ValueError, match=match):
        GNNStrategy(**kwargs)


class WholeGraph(pl.LightningDataModule):
    def train_dataloader(self):
        return [random_graph(10, 20, 0, features=2)]


def test_strategy_needs_partitioned_datamodule():
    trainer = pl.Trainer(
        strategy=GNNStrategy(start_method="fork"),
        devices=2,
        accelerator="cpu",
        max_epochs=1,
        logger=False,
        enable_progress_bar=False,
        enable_checkpointing=False,
    )
    with pytest.raises(Exception, match="needs a partitioned datamodule"):
        trainer.fit(NodeClassifier(in_channels=2, num_classes=3), datamodule=WholeGraph())


def test_verify_dataset_false_never_loads_the_graph(tmp_path, monkeypatch):
    data = random_graph(30, 60, 3, features=2)
    GraphPartitionDataModule(
        data, method="random", num_parts=1, store=str(tmp_path / "s")
    ).prepare_data()

    def no_loading(*args, **kwargs):
        raise AssertionError("the dataset was loaded")

    monkeypatch.setattr("lightning_gnn_dist.data.datasets.load_dataset", no_loading)
    trusted = GraphPartitionDataModule(
        data, method="random", num_parts=1, store=str(tmp_path / "s"), verify_dataset=False
    )
    trusted.prepare_data()
    trusted.setup("fit")
    assert trusted.local_partition.num_owned == 30
    with pytest.raises(AssertionError, match="was loaded"):
        GraphPartitionDataModule(
            data, method="random", num_parts=1, store=str(tmp_path / "s")
        ).prepare_data()


def test_a_placed_store_refuses_a_launch_on_another_topology(tmp_path):
    from types import SimpleNamespace

    data = random_graph(40, 120, 3, features=2)
    placed = GraphPartitionDataModule(data, method="random", num_parts=4, root=str(tmp_path))
    placed.trainer = SimpleNamespace(num_nodes=2, world_size=4, global_rank=1)
    placed.prepare_data()
    assert placed.store_path.name.endswith("-n2")  # one store per placement
    assert placed.store.meta["placement"]["ranks_per_node"] == 2
    placed.setup("fit")  # the topology it was placed for
    other = GraphPartitionDataModule(
        data, method="random", num_parts=4, store=str(placed.store_path)
    )
    other.trainer = SimpleNamespace(num_nodes=1, world_size=4, global_rank=0)
    with pytest.raises(PartitionStoreError, match="launch with num_nodes=2 and devices=2"):
        other.setup("fit")


@pytest.mark.parametrize(
    ("method", "placement"), [("random", "mapped"), ("hypergraph", "two-level")]
)
def test_the_placement_reaches_a_store_of_its_own(tmp_path, method, placement):
    from types import SimpleNamespace

    data = random_graph(80, 400, 4, features=2, parallel_edges=True)
    trainer = SimpleNamespace(num_nodes=2, world_size=4, global_rank=1)
    naive = GraphPartitionDataModule(data, method=method, num_parts=4, root=str(tmp_path))
    placed = GraphPartitionDataModule(
        data, method=method, num_parts=4, root=str(tmp_path), placement=placement
    )
    for dm in (naive, placed):
        dm.trainer = trainer
        dm.prepare_data()
    assert placed.store_path.name == naive.store_path.name + f"-{placement}"
    assert naive.store.meta["placement"]["method"] == "naive"
    assert placed.store.meta["placement"]["method"] == placement
    placed.setup("fit")
    assert placed.local_partition.part_id == 1 and f"placement={placement!r}" in repr(placed)
    # a store placed otherwise is refused, not run with the wrong placement
    other = GraphPartitionDataModule(
        data, method=method, num_parts=4, store=str(naive.store_path), placement=placement
    )
    other.trainer = trainer
    with pytest.raises(PartitionStoreError, match=f"placed 'naive', but placement={placement!r}"):
        other.setup("fit")


def test_a_placement_on_one_node_is_refused_before_partitioning(tmp_path):
    from types import SimpleNamespace

    dm = GraphPartitionDataModule(
        random_graph(30, 60, 1, features=2),
        method="random",
        num_parts=2,
        root=str(tmp_path),
        placement="mapped",
    )
    for trainer in (None, SimpleNamespace(num_nodes=1, world_size=2, global_rank=0)):
        dm.trainer = trainer
        for step in (dm.prepare_data, lambda: dm.setup("fit")):
            with pytest.raises(ValueError, match="placement='mapped' decides which parts share a"):
                step()
    assert not any(tmp_path.iterdir())


def test_the_cli_takes_the_placement(capsys):
    import yaml

    from lightning_gnn_dist.cli import main

    with pytest.raises(SystemExit) as exit_:
        main(["fit", "--data.placement", "two-level", "--print_config"])
    assert exit_.value.code == 0
    assert yaml.safe_load(capsys.readouterr().out)["data"]["placement"] == "two-level"


def test_strategy_keeps_process_options_and_drops_unchanged_ddp_defaults():
    """A parser passes every DDP argument at its default; those are dropped, the process
    options kept."""
    strategy = GNNStrategy(
        exchange="cd-3", process_group_backend="gloo", find_unused_parameters=False
    )
    assert strategy.exchange_mode == "cd-3" and strategy._process_group_backend == "gloo"
    cached = GNNStrategy(exchange="cached", staleness_bound=0)
    assert cached.exchange_options["staleness_bound"] == 0


@pytest.mark.parametrize(
    "strategy, data, match",
    [
        ({"exchange": "cached"}, {"loader": "neighbor", "num_neighbors": [3]}, "caches nothing"),
        ({"exchange": "cached"}, {"loader": "subgraph", "subgraph_size": 10}, "caches nothing"),
        ({"exchange": "cd-0"}, {}, "runs on a vertex-cut partition"),
        ({"exchange": "p2p"}, {"method": "vertex-cut"}, "runs on a vertex partition"),
        (
            {"exchange": "cd-0"},
            {"method": "vertex-cut", "num_parts": 3},
            "num_parts=3 but 2 processes",
        ),
    ],
)
def test_a_fit_the_strategy_refuses_ends_before_any_process_starts(tmp_path, strategy, data, match):
    """Issue 18, items 14 and 15: the strategy checks the datamodule in the launcher, before
    forking (no store is written, no rank starts)."""
    trainer = pl.Trainer(
        strategy=GNNStrategy(start_method="fork", **strategy),
        accelerator="cpu",
        devices=2,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
    )
    module = GraphPartitionDataModule(
        "digits", method=data.pop("method", "random"), root=str(tmp_path / "p"), **data
    )
    with pytest.raises(ValueError, match=match):
        trainer.fit(NodeClassifier(in_channels=64, num_classes=10), datamodule=module)
    assert not (tmp_path / "p").exists()


# -- issue 29: in-memory graphs, and every option checked at construction ----------------------


def test_unnamed_graphs_get_a_store_of_their_own(tmp_path):
    """Item 10: two different graphs without a ``name`` shared the folder ``graph-...``; the
    second was refused as "made for another dataset"."""
    first, second = random_graph(30, 60, 1, features=2), random_graph(30, 60, 2, features=2)
    folders = []
    for data in (first, second, first.clone()):
        dm = GraphPartitionDataModule(data, method="random", num_parts=1, root=str(tmp_path))
        dm.prepare_data()
        dm.setup("fit")
        folders.append(dm.store_path.name)
    assert folders[0] != folders[1] and folders[0] == folders[2]  # the same graph: its store
    assert all(name.startswith("graph-") for name in folders)


def test_the_unnamed_graph_is_hashed_once(tmp_path, monkeypatch):
    import lightning_gnn_dist.data.graph as graph

    calls = []
    fingerprint = graph.graph_fingerprint
    monkeypatch.setattr(graph, "graph_fingerprint", lambda d: calls.append(1) or fingerprint(d))
    dm = GraphPartitionDataModule(
        random_graph(30, 60, 1, features=2), method="random", num_parts=1, root=str(tmp_path)
    )
    assert dm.store_path == dm.store_path and repr(dm)
    assert len(calls) == 1


def test_a_graph_without_masks_says_which_split_it_trains_on(tmp_path):
    """Item 12: a ``Data`` without masks trained on a made-up 60/20/20 split without a word;
    now rank 0 warns once, with the split's sizes."""
    from types import SimpleNamespace

    from torch_geometric.data import Data

    full = random_graph(50, 120, 3, features=2)
    bare = Data(x=full.x, y=full.y, edge_index=full.edge_index)
    dm = GraphPartitionDataModule(bare, method="random", num_parts=1, root=str(tmp_path))
    with pytest.warns(UserWarning, match=r"no train_mask.*60/20/20 split \(30 training, 10 "):
        dm.prepare_data()
    for step in (
        dm.prepare_data,
        lambda: GraphPartitionDataModule(
            full, method="random", num_parts=1, root=str(tmp_path)
        ).prepare_data(),
    ):
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # once per module, and never for a graph with masks
            step()
    other_rank = GraphPartitionDataModule(bare, method="random", num_parts=2, root=str(tmp_path))
    other_rank.trainer = SimpleNamespace(global_rank=1, world_size=2, num_nodes=2)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # rank 0 only (a node's local rank 0 prepares too)
        other_rank.prepare_data()


def _data(**fields):
    from torch_geometric.data import Data

    graph = random_graph(20, 40, 0, features=2)
    return Data(**{"x": graph.x, "edge_index": graph.edge_index, "y": graph.y, **fields})


def _bad_x():
    data = _data()
    data.x[3, 1] = float("nan")
    return data


@pytest.mark.parametrize(
    "dataset, task, match",
    [
        (
            lambda: _data(y=torch.linspace(0, 1, 20)),
            "multiclass",
            r"y holds non-integer values \(e.g. 0.0526316\); class labels must be integers",
        ),
        (lambda: _data(y=torch.full((20,), float("inf"))), None, "y holds inf; regression"),
        (lambda: _data(y=torch.zeros(20, 3)), "multiclass", r"one class id per vertex"),
        (lambda: _data(y=torch.full((20, 3), 2.0)), "multilabel", r"y of 0 and 1 .* holds 2"),
        (_bad_x, None, "x holds nan at vertex 3, column 1"),
        (lambda: _data(pos=torch.zeros(7, 2)), None, r"'pos' has shape \(7, 2\): its first"),
        (lambda: _data(e_id=torch.arange(20)), None, "'e_id' has a name the loaders set"),
        (lambda: _data(), "ranking", "undefined task option 'ranking'"),
        (
            lambda: __import__("torch_geometric.data", fromlist=["HeteroData"]).HeteroData(),
            None,
            r"the graph is empty \(no node and no edge types\)",
        ),
        (
            lambda: 5,
            None,
            r"dataset must be a spec string like 'digits', a torch_geometric Data or HeteroData",
        ),
    ],
)
def test_a_dataset_the_module_cannot_train_on_is_refused_at_construction(
    tmp_path, dataset, task, match
):
    """Item 7 (issue 29) and issue 30 item 6: these failed in prepare_data on every rank ("a
    dataset spec is a string like 'digits'" for a HeteroData; float targets as "non-integer
    class labels"), or not at all (NaN features, a misshapen or reserved attribute)."""
    with pytest.raises(ValueError, match=match):
        GraphPartitionDataModule(dataset(), method="random", root=str(tmp_path), task=task)
    assert not any(tmp_path.iterdir())


def test_attributes_that_cannot_be_partitioned_are_named_at_construction(tmp_path):
    with pytest.warns(UserWarning, match="'notes' are not tensors with one row per vertex"):
        GraphPartitionDataModule(_data(notes=["a"]), method="random", root=str(tmp_path))


def test_integer_valued_float_labels_are_class_labels(tmp_path):
    dm = GraphPartitionDataModule(
        _data(
            y=torch.arange(20.0) % 3,
            train_mask=torch.ones(20, dtype=torch.bool),
            val_mask=torch.zeros(20, dtype=torch.bool),
            test_mask=torch.zeros(20, dtype=torch.bool),
        ),
        method="random",
        num_parts=1,
        root=str(tmp_path),
    )
    dm.prepare_data()
    dm.setup("fit")
    assert dm.num_classes == 3


@pytest.mark.parametrize(
    "kwargs, match",
    [  # item 7: accepted, and refused on every rank after launch (or misread)
        ({"codec": {"forwrd": "int8"}}, r"key 'forwrd' looks like a misspelt direction; did you"),
        ({"codec": {"Backward": "int8"}}, r"key 'Backward' looks like a misspelt direction"),
        ({"codec": {0: "int8"}}, r"layer key 0 is not a layer name"),
        ({"codec": {"features": "adaptive"}}, r"codec\['features'\]='adaptive': the neighbour"),
        (
            {"codec": "adaptive", "codec_tolerance": float("inf")},
            r"codec_tolerance must be a finite",
        ),
        ({"codec_tolerance": float("nan")}, r"codec_tolerance must be a finite number >= 0"),
        ({"codec_tolerance": -1}, r"codec_tolerance must be a finite number >= 0 \(got -1\)"),
    ],
)
def test_strategy_codec_errors_at_construction(kwargs, match):
    with pytest.raises(ValueError, match=match):
        GNNStrategy(**kwargs)


@pytest.mark.parametrize(
    "strategy, data, match",
    [  # item 7: what only the model or the loader shows, refused before any process starts
        (
            {"exchange": "rdm", "rdm_order": "dsdsdsdsds"},
            {},
            r"rdm_order='dsdsdsdsds' does not fit NodeClassifier \(2 message-passing layers\)",
        ),
        ({"codec": {"convs.7": "int8"}}, {}, r"codec names layer 'convs.7', which NodeClassifier"),
        (
            {"codec": "adaptive"},
            {"loader": "neighbor", "num_neighbors": [3]},
            "the neighbour loader's feature fetch does not have",
        ),
    ],
)
@pytest.mark.parametrize("built", [True, False], ids=["built", "lazy"])
def test_options_that_do_not_fit_the_model_end_before_launch(
    tmp_path, strategy, data, match, built
):
    trainer = pl.Trainer(
        strategy=GNNStrategy(start_method="fork", **strategy),
        accelerator="cpu",
        devices=2,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
    )
    module = GraphPartitionDataModule("digits", method="random", root=str(tmp_path / "p"), **data)
    model = NodeClassifier(**({"in_channels": 64, "num_classes": 10} if built else {}))
    with pytest.raises(ValueError, match=match):
        trainer.fit(model, datamodule=module)
    assert not (tmp_path / "p").exists()


def test_a_right_rdm_order_and_codec_layer_pass_the_model_check():
    strategy = GNNStrategy(exchange="rdm", rdm_order="DSDS")
    strategy.check_model(NodeClassifier())
    strategy.check_model(NodeClassifier(num_layers=2, in_channels=4, num_classes=2))
    GNNStrategy(codec={"convs.1": "int8", "features": "int4"}).check_model(NodeClassifier())
    with pytest.raises(ValueError, match="rdm_order='DSDS' does not fit NodeClassifier"):
        strategy.check_model(NodeClassifier(num_layers=3))


@pytest.mark.parametrize("method", ["random", "vertex-cut"])
def test_full_batches_carry_every_attribute_and_the_store_records_them(tmp_path, method):
    """Issue 30: each rank's full batch holds its owned rows of every node attribute (a vertex
    cut: every copy's), its edges' attributes in ``edge_index`` order and ``e_id``; the store
    (format 3) records each attribute, the target and the labelled counts a loss divides by."""
    from types import SimpleNamespace

    from tests.loaders.test_loader_attributes import attributed_graph

    graph = attributed_graph()
    graph.name = "attributed"
    known = (~torch.isnan(graph.y)).sum(1)
    seen = []
    for rank in range(3):
        dm = GraphPartitionDataModule(graph, method=method, num_parts=3, root=str(tmp_path))
        dm.trainer = SimpleNamespace(num_nodes=1, world_size=3, global_rank=rank)
        if rank == 0:
            dm.prepare_data()
        dm.setup()
        batch, part = dm.batch, dm.local_partition
        for key in ("y", "pos", "node_time"):
            assert torch.equal(
                batch[key].nan_to_num(-1), graph[key][batch.global_ids].nan_to_num(-1)
            )
        local = part.global_ids
        if method == "random":
            local = torch.cat([local, part.halo_global_ids])
        assert torch.equal(local[batch.edge_index], graph.edge_index[:, batch.e_id])
        for key in ("edge_attr", "edge_weight", "edge_time"):
            assert torch.equal(batch[key], graph[key][batch.e_id])
            assert batch[key].dtype == graph[key].dtype
        seen.append(batch.e_id)
        assert batch.num_train_labels_global == int(known[graph.train_mask].sum())
        assert batch.num_val_global == int(graph.val_mask.sum())
    assert sorted(torch.cat(seen).tolist()) == list(range(graph.num_edges))  # each edge once
    assert (dm.task, dm.num_tasks, dm.num_classes) == ("multilabel", 5, 0)
    assert dm.global_label_count("test_mask") == int(known[graph.test_mask].sum())
    assert dm.node_attrs["y"] == {"dtype": "float32", "shape": [5], "role": "target"}
    assert dm.node_attrs["node_time"] == {"dtype": "int32", "shape": [], "role": "attr"}
    assert dm.edge_attrs["edge_attr"] == {"dtype": "float32", "shape": [3], "role": "attr"}
    assert dm.store.meta["format_version"] == 3
    with pytest.raises(
        PartitionStoreError, match="holds multilabel targets, not task='regression'"
    ):
        GraphPartitionDataModule(
            graph, method="random", store=str(dm.store_path), task="regression"
        )


def test_a_format_2_store_still_opens(tmp_path):
    """A store written before format 3 (no attribute, target or label-count keys) reads as
    multiclass targets with its mask counts."""
    import json

    from lightning_gnn_dist.partition.store import _meta_checksum

    dm = GraphPartitionDataModule(
        "sbm?num_nodes=60", method="random", num_parts=1, root=str(tmp_path)
    )
    dm.prepare_data()
    meta_path = dm.store_path / "meta.json"
    meta = json.loads(meta_path.read_text())
    for key in ("node_attrs", "edge_attrs", "target", "label_counts"):
        del meta[key]
    meta["format_version"] = 2
    meta["meta_sha256"] = _meta_checksum(meta)
    meta_path.write_text(json.dumps(meta))
    old = GraphPartitionDataModule("sbm?num_nodes=60", store=str(dm.store_path))
    old.setup()
    assert (old.task, old.num_tasks, old.num_classes) == ("multiclass", 1, 4)
    assert old.global_label_count("train_mask") == old.global_mask_count("train_mask") > 0
    assert old.batch.num_train_labels_global == old.global_mask_count("train_mask")


def test_regression_and_explicit_task(tmp_path):
    dm = GraphPartitionDataModule(
        "sbm?num_nodes=80&targets=regression:2", method="random", num_parts=1, root=str(tmp_path)
    )
    dm.prepare_data()
    dm.setup()
    assert (dm.task, dm.num_tasks) == ("regression", 2) and dm.batch.y.shape == (80, 2)
    integral = GraphPartitionDataModule(
        "sbm?num_nodes=80", method="random", num_parts=1, root=str(tmp_path), task="regression"
    )
    assert integral.store_path != dm.store_path
    integral.prepare_data()
    integral.setup()
    assert integral.task == "regression" and integral.batch.y.dtype == torch.float32
