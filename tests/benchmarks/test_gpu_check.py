"""``python -m benchmarks.gpu_check --device cpu --quick``: the device check runs end to end (a
smoke test of the script the device tool runs; issue 35)."""

import json

import pytest
import torch

from benchmarks.gpu_check import main, no_cuda_message


def test_gpu_check_runs_end_to_end_on_cpu(tmp_path):
    assert main(["--device", "cpu", "--quick", "--repeats", "1", "--out", f"{tmp_path}/"]) == 0
    report = json.loads((tmp_path / "gpu_check.json").read_text())
    assert report["passed"] is True and report["finished"] is True
    modes = {row["mode"]: row for row in report["equality"]}
    assert set(modes) == {"p2p", "p2p-int8", "cached", "rdm", "neighbor", "subgraph"}
    assert all(row["max_abs_difference"] <= 1e-4 for row in modes.values()), modes
    assert {row["codec"] for row in report["codecs"]} == {"fp16", "bf16", "int8", "int4"}
    assert all(row["passed"] for row in report["codecs"]), report["codecs"]
    assert report["two_process"]["passed"] is True
    # The exact full-batch step's layers make no host round trip once the graph is built.
    assert report["host_syncs"]["full_batch_p2p_step1"]["total"] == 0
    # ... nor the neighbour step (its GCN graph built without reading the device).
    assert report["host_syncs"]["neighbor_step1"]["total"] == 0
    markdown = (tmp_path / "gpu_check.md").read_text()
    assert "Overall: **passed**" in markdown and "## Two processes on this one device" in markdown


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has a CUDA device")
def test_device_cuda_without_a_gpu_stops_with_one_line(tmp_path, capsys):
    with pytest.raises(SystemExit) as stop:
        main(["--device", "cuda", "--quick", "--out", f"{tmp_path}/"])
    message = str(stop.value.code)
    assert message == no_cuda_message() and "\n" not in message
    assert message.startswith("--device cuda: torch ") and "--device cpu" in message
    assert list(tmp_path.iterdir()) == []  # nothing ran, nothing was written
