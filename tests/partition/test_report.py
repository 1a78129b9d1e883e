"""The partition tables as a terminal shows them (issue 29, item 15: the title wrapped
mid-phrase over the two narrow columns)."""

import pytest
from rich.console import Console

from lightning_gnn_dist.partition.report import metrics_table

SUMMARY = {"method": "random", "num_parts": 4, "avg_send_rows": 1312.0, "imbalance": 1.012}


def _render(title: str, width: int) -> list[str]:
    console = Console(width=width, record=True)
    console.print(metrics_table(SUMMARY, title))
    return [line.strip() for line in console.export_text().splitlines()]


@pytest.mark.parametrize(
    "title",
    [
        "digits: 1797 vertices, 24678 edges, P = 4",  # partition (the command)
        "partition of sbm?num_nodes=120&num_classes=3&avg_degree=6\nrandom, P = 2",  # report
    ],
)
@pytest.mark.parametrize("width", [80, 120])
def test_the_title_keeps_its_lines_at_terminal_widths(title, width):
    lines = _render(title, width)
    for line in title.splitlines():
        assert line in lines  # not wrapped over two lines
    assert "1312.000" in "".join(lines)


def test_a_narrow_console_wraps_the_title_between_words():
    title = "digits: 1797 vertices, 24678 edges, P = 4"
    text = " ".join(_render(title, 30))
    for word in title.split():
        assert word in text.split()
