"""``GraphPartitionDataModule(method="auto")`` and ``GNNStrategy(exchange="auto")``: the plan
is stored beside the candidates' partitions, every rank runs rank 0's plan, a resumed run reads
it back instead of planning again, and bad options are refused."""

import json
from types import SimpleNamespace

import pytest
import pytorch_lightning as pl

from lightning_gnn_dist import GNNStrategy, GraphPartitionDataModule, NodeClassifier
from lightning_gnn_dist.costmodel import Network
from lightning_gnn_dist.costmodel.plan import Candidate, Plan, store_folder
from lightning_gnn_dist.lightning.compat import LightningNeutral
from tests.distributed import run_ranks
from tests.helpers import fit_quietly, random_graph
from tests.lightning.test_exactness import DATASET

COSTS = {"aggregate_seconds": 1e-9, "dense_seconds": 2e-10, "elementwise_seconds": 1e-9}
SLOW = Network(bandwidth_bytes_per_s=1e6, latency_s=1e-4).to_dict()


def _options(**extra):
    return {"widths": [6, 8, 3], "costs": COSTS, "methods": ["metis", "random"], **extra}


@pytest.mark.parametrize(
    "kwargs, error, match",
    [
        ({"method": "auto"}, ValueError, "needs the model's layer widths"),
        (
            {"method": "auto", "plan_options": {"widths": [6, 3], "top": 1}},
            ValueError,
            r"unknown plan option\(s\) \['top'\]; valid: widths, network",
        ),
        (
            {
                "method": "auto",
                "plan_options": _options(),
                "loader": "neighbor",
                "num_neighbors": [2],
            },
            ValueError,
            "plans full-batch training",
        ),
        (
            {"method": "auto", "plan_options": _options(), "partition_options": {"x": 1}},
            ValueError,
            "partition_options do not apply",
        ),
        ({"method": "metis", "plan_options": _options()}, ValueError, "method='auto' only"),
    ],
)
def test_auto_options_are_checked(kwargs, error, match):
    with pytest.raises(error, match=match):
        GraphPartitionDataModule("digits", num_parts=2, **kwargs)


def test_strategy_auto_takes_everything_from_the_plan():
    with pytest.raises(ValueError, match="takes its codec and rdm order from the stored plan"):
        GNNStrategy(exchange="auto", codec="int8")
    strategy = GNNStrategy(exchange="auto")
    with pytest.raises(ValueError, match=r"runs the plan .* \(method='metis'\)"):
        strategy._apply_plan(SimpleNamespace(plan=None, method="metis"))
    plan = Plan((), 0, "", {})
    for candidate, mode, options in [
        (
            Candidate("metis", "rdm", rdm_order="dsds"),
            "rdm",
            {"rdm_order": "dsds", "replication": None},
        ),
        (Candidate("metis", "p2p", "int8"), "p2p", {}),
    ]:
        row = SimpleNamespace(candidate=candidate)
        strategy._apply_plan(SimpleNamespace(plan=Plan((row,), 0, "why", {})))
        assert (strategy.exchange_mode, strategy.exchange_options) == (mode, options)
        assert strategy.requested_exchange == "auto"
    assert strategy.codec_policy.spec == "int8"
    assert plan.settings == {}


def _rank(rank, world, root):
    """Each rank plans into its own folder (as on nodes without a shared file system) with
    exchanges that make the two local plans differ; setup leaves every rank with rank 0's."""
    data = random_graph(120, 500, seed=5, features=6, classes=3)
    options = _options(network=SLOW, exchanges=["p2p"] if rank == 0 else ["broadcast"])
    dm = GraphPartitionDataModule(
        data, method="auto", num_parts=2, store=f"{root}/r{rank}", plan_options=options
    )
    dm.trainer = SimpleNamespace(global_rank=rank, world_size=world, strategy=None)
    dm.prepare_data()
    local = dm.plan.pick.name
    dm.setup("fit")
    timed = dm.plan.rows[dm.plan.chosen].measured_seconds  # top_k=3 (default): timed in setup
    return local, dm.plan.pick.name, dm.store_path.name, dm.local_partition.part_id, timed


def test_every_rank_runs_rank_zeros_stored_plan_and_a_resumed_run_reads_it(tmp_path):
    results = run_ranks(_rank, 2, str(tmp_path), timeout=90)
    assert [r[0] for r in results] == ["metis + p2p", "metis + broadcast"]
    assert {r[1] for r in results} == {"metis + p2p"}
    assert [r[3] for r in results] == [0, 1] and {r[2] for r in results} == {"metis"}
    assert results[0][4] > 0 and results[0][4] == results[1][4]  # one timing, every rank's
    plan_file = tmp_path / "r0" / "plan.json"
    stored = json.loads(plan_file.read_text())
    assert (
        stored["pick"]["method"] == "metis" and (tmp_path / "r0" / "random" / "meta.json").is_file()
    )
    # a resumed run with other inputs (here: other compute costs) reads the decision back
    data = random_graph(120, 500, seed=5, features=6, classes=3)
    other = _options(network=SLOW, exchanges=["p2p"], costs={**COSTS, "dense_seconds": 1.0})
    dm = GraphPartitionDataModule(
        data, method="auto", num_parts=2, store=str(tmp_path / "r0"), plan_options=other
    )
    before = plan_file.stat().st_mtime_ns
    dm.prepare_data()
    assert (
        plan_file.stat().st_mtime_ns == before
        and dm.plan.to_dict() == Plan.from_dict(stored).to_dict()
    )


class PlanRecorder(LightningNeutral, lightning_base="Callback"):
    def __init__(self, path):
        self.path = path

    def on_train_end(self, trainer, pl_module):
        if trainer.is_global_zero:
            strategy, dm = trainer.strategy, trainer.datamodule
            self.path.write_text(
                json.dumps(
                    {
                        "mode": strategy.exchange_mode,
                        "options": strategy.exchange_options,
                        "pick": dm.plan.pick.name,
                        "order": dm.plan.pick.rdm_order,
                        "method": dm.store.meta["settings"]["method"],
                    }
                )
            )


def test_fit_with_method_and_exchange_auto(tmp_path):
    pl.seed_everything(0)
    module = NodeClassifier("gcn", hidden_channels=8, lr=0.01, in_channels=24, num_classes=4)
    dm = GraphPartitionDataModule(
        DATASET,
        method="auto",
        root=str(tmp_path),
        plan_options={
            "widths": [24, 8, 4],
            "costs": COSTS,
            "methods": ["random"],
            "exchanges": ["rdm"],
        },
    )
    out = tmp_path / "plan.json"
    fit_quietly(
        pl.Trainer,
        module,
        dm,
        strategy=GNNStrategy(exchange="auto", start_method="fork"),
        devices=2,
        epochs=2,
        callbacks=[PlanRecorder(out)],
    )
    result = json.loads(out.read_text())
    assert result["mode"] == "rdm" and result["method"] == "random"
    assert result["options"] == {"rdm_order": result["order"], "replication": None}
    assert result["pick"] == f"random + rdm {result['order']}"
    (folder,) = [p for p in tmp_path.iterdir() if p.name.startswith("sbm")]
    assert folder.name.startswith("sbm_num_nodes_600") and "-auto-p2-" in folder.name
    assert (folder / "plan.json").is_file() and (folder / "random" / "meta.json").is_file()


def test_on_two_nodes_the_plan_weighs_hierarchical_and_the_placements(tmp_path):
    """2 nodes x 2 ranks, a slow link between nodes and a fast one inside: the plan lists
    ``hierarchical`` and the two-level partition, picks ``hierarchical``, stores the placement in
    ``plan.json``, and the module reads the pick's store with that placement. On one node the
    same options list neither."""
    data = random_graph(600, 1500, seed=4, features=6, classes=3, parallel_edges=True)
    fast = Network(bandwidth_bytes_per_s=1e10, latency_s=1e-6).to_dict()
    options = _options(
        network={"intra_node": fast, "inter_node": SLOW}, methods=["random", "hypergraph"], top_k=0
    )
    dm = GraphPartitionDataModule(data, method="auto", root=str(tmp_path), plan_options=options)
    dm.trainer = SimpleNamespace(num_nodes=2, world_size=4, global_rank=2, strategy=None)
    dm.prepare_data()
    names = {row.candidate.name for row in dm.plan.rows}
    assert {"hypergraph/two-level + hierarchical", "random + hierarchical"} <= names
    pick = dm.plan.pick
    assert pick.exchange == "hierarchical" and dm.plan_dir.name.endswith("-n2")
    stored = json.loads((dm.plan_dir / "plan.json").read_text())
    assert stored["pick"]["placement"] == pick.placement
    assert stored["settings"]["topology"] == {"num_nodes": 2, "ranks_per_node": 2}
    dm.setup("fit")
    assert dm.store_path == dm.plan_dir / store_folder(pick.partition)
    assert dm.store.meta["placement"]["method"] == pick.placement
    assert dm.local_partition.part_id == 2
    one = GraphPartitionDataModule(data, method="auto", root=str(tmp_path), plan_options=options)
    one.trainer = SimpleNamespace(num_nodes=1, world_size=4, global_rank=0, strategy=None)
    one.prepare_data()
    assert one.plan_dir != dm.plan_dir
    assert all(
        r.candidate.exchange != "hierarchical" and r.candidate.placement == "naive"
        for r in one.plan.rows
    )


# -- issue 29, item 6: the plan file is what runs; planning leaves the training stream alone ----


def _planned(tmp_path, **extra):
    data = random_graph(120, 500, seed=5, features=6, classes=3)
    dm = GraphPartitionDataModule(
        data,
        method="auto",
        num_parts=2,
        store=str(tmp_path / "plan"),
        plan_options=_options(top_k=0, **extra),
    )
    dm.trainer = SimpleNamespace(global_rank=0, world_size=2, strategy=None)
    dm.prepare_data()
    return data, dm


def test_an_edited_pick_is_what_runs(tmp_path):
    data, dm = _planned(tmp_path)
    plan_file = tmp_path / "plan" / "plan.json"
    content = json.loads(plan_file.read_text())
    other = next(r["candidate"] for r in content["rows"] if r["candidate"] != content["pick"])
    content["pick"] = {"method": other["method"], "exchange": other["exchange"]}
    plan_file.write_text(json.dumps(content))
    again = GraphPartitionDataModule(
        data, method="auto", num_parts=2, store=str(tmp_path / "plan"), plan_options=_options()
    )
    again.trainer = SimpleNamespace(global_rank=1, world_size=2, strategy=None)
    again.prepare_data()
    again.setup("fit")
    pick = again.plan.pick
    assert (pick.method, pick.exchange) == (other["method"], other["exchange"])
    assert again.plan.rows[again.plan.chosen].candidate == pick
    assert again.store_path.name == store_folder(pick.partition)
    assert again.plan.reason.startswith(f"{pick.name}: picked in the plan file")


@pytest.mark.parametrize(
    "edit, match",
    [
        ({"chosen": 99}, r"field 'chosen'=99 is not the row of field 'pick'"),
        ({"pick": {"method": "metis", "exchange": "smoke"}}, r"field 'pick.exchange'='smoke'"),
        ({"pick": {"method": "nope", "exchange": "p2p"}}, r"is none of the plan's candidates"),
        ({"pick": "metis + p2p"}, r"field 'pick' must be an object"),
        ({"rows": []}, r"field 'rows' must be a non-empty list"),
        ({"format": 7}, r"plan format 7, this version reads 1"),
    ],
)
def test_a_plan_file_that_cannot_run_is_refused_naming_the_field(tmp_path, edit, match):
    data, _ = _planned(tmp_path)
    plan_file = tmp_path / "plan" / "plan.json"
    plan_file.write_text(json.dumps({**json.loads(plan_file.read_text()), **edit}))
    dm = GraphPartitionDataModule(
        data, method="auto", num_parts=2, store=str(tmp_path / "plan"), plan_options=_options()
    )
    dm.trainer = SimpleNamespace(global_rank=0, world_size=2, strategy=None)
    with pytest.raises(ValueError, match=match) as error:
        dm.prepare_data()
    assert str(plan_file) in str(error.value) and "\n" not in str(error.value)


class ParameterRecorder(LightningNeutral, lightning_base="Callback"):
    def __init__(self, path):
        self.path = path

    def on_train_end(self, trainer, pl_module):
        if trainer.is_global_zero:
            flat = [p.detach().flatten().tolist() for p in pl_module.parameters()]
            self.path.write_text(
                json.dumps({"params": flat, "plan": trainer.datamodule.plan.pick.name})
            )


def test_a_run_that_plans_trains_as_one_that_reuses_the_plan(tmp_path):
    """Planning (calibration on rank 0, timed steps on every rank) draws nothing from the
    training's random streams: with dropout, the first run (plans) and the second (reads
    plan.json) end with the same parameters."""
    results = []
    for run in range(2):
        pl.seed_everything(0)
        module = NodeClassifier("gcn", hidden_channels=8, lr=0.05, in_channels=24, num_classes=4)
        dm = GraphPartitionDataModule(
            DATASET,
            method="auto",
            root=str(tmp_path / "parts"),
            plan_options={"widths": [24, 8, 4], "methods": ["random"], "exchanges": ["p2p"]},
        )
        out = tmp_path / f"run{run}.json"
        fit_quietly(
            pl.Trainer,
            module,
            dm,
            strategy=GNNStrategy(exchange="auto", start_method="fork"),
            devices=2,
            epochs=3,
            callbacks=[ParameterRecorder(out)],
        )
        results.append(json.loads(out.read_text()))
    assert results[0]["plan"] == results[1]["plan"] == "random + p2p"
    assert results[0]["params"] == results[1]["params"]
