"""The benchmark harness: one command line, interleaved rounds, ratios, provenance, reports.

A benchmark is a module with one :class:`Benchmark`::

    from benchmarks.harness import Benchmark, Run, markdown_table, ratio, run_rounds

    def run(r: Run) -> None:
        results = run_rounds({"plain": time_plain, "ours": time_ours}, r.repeats)  # [round] lists
        r.report["ours_over_plain"] = ratio(results["ours"], results["plain"]).as_dict()

    def render(report: dict) -> str:
        return "# Title\\n\\n" + ...          # the title line first; the harness adds provenance

    BENCHMARK = Benchmark("my_bench", __doc__, run, render, repeats=3)
    if __name__ == "__main__":
        raise SystemExit(BENCHMARK.main())

``python -m benchmarks.my_bench [--quick] [--repeats N] [--out STEM] [--json-only] [--render]``
then writes ``benchmarks/results/my_bench.{json,md}``; see ``benchmarks/README.md``.
"""

from benchmarks.harness.cli import RESULTS, Benchmark, Run, csv, log, now
from benchmarks.harness.machine import REPO, describe_machine, load_average, machine_info
from benchmarks.harness.report import (
    figure_path,
    fmt,
    markdown_table,
    provenance,
    read_json,
    write_json,
    write_text,
)
from benchmarks.harness.rounds import (
    Ratio,
    interleaved,
    pooled,
    pooled_median,
    ratio,
    ratio_cell,
    run_rounds,
)

__all__ = [
    "REPO",
    "RESULTS",
    "Benchmark",
    "Ratio",
    "Run",
    "csv",
    "describe_machine",
    "figure_path",
    "fmt",
    "interleaved",
    "load_average",
    "log",
    "machine_info",
    "markdown_table",
    "now",
    "pooled",
    "pooled_median",
    "provenance",
    "ratio",
    "ratio_cell",
    "read_json",
    "run_rounds",
    "write_json",
    "write_text",
]
