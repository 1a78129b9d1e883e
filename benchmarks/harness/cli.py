"""The command line every benchmark shares, and the run that records its provenance.

A benchmark module defines one :class:`Benchmark` and ends with
``if __name__ == "__main__": raise SystemExit(BENCHMARK.main())``. Flags for every benchmark:

``--quick``         the smoke configuration; outputs go to ``results/<name>_quick.{json,md}``
``--repeats N``     interleaved rounds of the variants compared (benchmarks that time variants)
``--out STEM``      output path without suffix (default ``benchmarks/results/<name>[_quick]``)
``--json-only``     write the JSON, not the markdown
``--render``        rewrite the markdown (and figures) from the existing JSON; runs nothing
``--cache-dir DIR`` where built inputs (partition stores) are kept between runs
``--sections a,c``  run only these sections, keep the others from the existing JSON, if any
                    (benchmarks with sections)
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import shlex
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from benchmarks.harness.machine import load_average, machine_info
from benchmarks.harness.report import provenance, read_json, write_json, write_text

RESULTS = Path(__file__).resolve().parents[1] / "results"


def now() -> str:
    """UTC time, ISO 8601, to the second."""
    return datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")


def log(message: str) -> None:
    """A progress line on stdout with the wall-clock time."""
    print(f"[{time.strftime('%H:%M:%S')}] {message}", flush=True)


def csv(convert: Callable[[str], Any] = str) -> Callable[[str], list[Any]]:
    """An argparse ``type`` for comma-separated lists: ``--parts 4,16`` → ``[4, 16]``."""
    return lambda text: [convert(item.strip()) for item in text.split(",") if item.strip()]


class Run:
    """One invocation: its arguments, where it writes, and the report being built.

    Attributes:
        args: the parsed command line (the benchmark's own flags included).
        quick: ``--quick`` was given.
        repeats: interleaved rounds: ``--repeats``, else the benchmark's default for the mode.
        stem: output path without suffix.
        cache_dir: ``--cache-dir``, created (default ``<tmp>/lightning_gnn_dist_bench``, shared by
            the benchmarks: stores are keyed by dataset and settings).
        report: the report so far (with ``--sections``, the existing report's other sections;
            without an existing report, those sections are absent and not rendered).
    """

    def __init__(self, bench: Benchmark, args: argparse.Namespace, command: str) -> None:
        self.bench, self.args, self.command = bench, args, command
        self.quick: bool = args.quick
        default = bench.quick_repeats if args.quick else bench.repeats
        self.repeats: int = getattr(args, "repeats", None) or default or 1
        self.stem: Path = args.out
        self.cache_dir: Path = args.cache_dir
        self.cache_dir.mkdir(parents=True, exist_ok=True)
        self.selected: set[str] = set(getattr(args, "sections", None) or bench.sections)
        self.report: dict[str, Any] = {}
        previous = self.stem.with_suffix(".json")
        if bench.sections and self.selected != set(bench.sections) and previous.is_file():
            self.report = read_json(previous)  # the sections not run now are kept
            if self.report.get("quick", False) != self.quick:
                raise SystemExit(f"{previous} holds another mode's run; run every section")
            self.report.pop("harness_note", None)  # a report from before the harness, rerun now
        self.report.update(
            benchmark=bench.name,
            command=command,
            date=now(),
            quick=self.quick,
            machine=machine_info(bench.packages),
            load_average={"start": load_average(), "end": None},
        )
        self._start = time.perf_counter()

    def wants(self, section: str) -> bool:
        """Whether ``section`` runs in this invocation (``--sections``; all by default)."""
        return section in self.selected

    @contextlib.contextmanager
    def section(self, name: str) -> Iterator[None]:
        """Time a section and record its command, date, seconds and load averages."""
        entry = {"command": self.command, "date": now(), "load_average": {"start": load_average()}}
        start = time.perf_counter()
        yield
        entry["wall_seconds"] = time.perf_counter() - start
        entry["load_average"]["end"] = load_average()
        self.report.setdefault("section_runs", {})[name] = entry

    def save(self, final: bool = False) -> None:
        """Write the report (JSON, and the markdown unless ``--json-only``). Long benchmarks call
        it after every cell so a stopped run keeps what it measured."""
        self.report["wall_seconds"] = time.perf_counter() - self._start
        self.report["load_average"]["end"] = load_average()
        self.report["finished"] = final
        write_json(self.stem.with_suffix(".json"), self.report)
        if not self.args.json_only:
            self.bench.write_outputs(self.report, self.stem, figures=final)


@dataclass
class Benchmark:
    """A benchmark: its name, how it runs, and how its report becomes markdown.

    Args:
        name: results stem and ``report["benchmark"]``; the module is ``benchmarks.<name>``.
        doc: the module docstring (its first line is the ``--help`` description).
        run: ``run(r: Run) -> None``; fills ``r.report`` (call ``r.save()`` to checkpoint).
        render: ``render(report) -> str``, the markdown; must read only the report.
        add_arguments: adds the benchmark's own flags to the parser. (default: none)
        sections: section names for ``--sections``. (default: none)
        repeats: default rounds of a full run; ``None`` when nothing is timed against a
            baseline (then there is no ``--repeats``). (default: ``None``)
        quick_repeats: default rounds of a ``--quick`` run. (default: 1)
        draw: ``draw(report, stem)`` writes figures next to the markdown. (default: none)
        packages: extra package versions to record (see :func:`machine_info`).
    """

    name: str
    doc: str
    run: Callable[[Run], None]
    render: Callable[[dict[str, Any]], str]
    add_arguments: Callable[[argparse.ArgumentParser], None] | None = None
    sections: Sequence[str] = ()
    repeats: int | None = None
    quick_repeats: int = 1
    draw: Callable[[dict[str, Any], Path], None] | None = None
    packages: Sequence[str] = ()

    def parser(self) -> argparse.ArgumentParser:
        parser = argparse.ArgumentParser(
            prog=f"python -m benchmarks.{self.name}",
            description=self.doc,
            formatter_class=argparse.RawDescriptionHelpFormatter,
        )
        parser.add_argument("--quick", action="store_true", help="smoke configuration")
        if self.repeats is not None:
            parser.add_argument(
                "--repeats",
                type=int,
                help=f"interleaved rounds (default: {self.repeats}; --quick: {self.quick_repeats})",
            )
        parser.add_argument("--out", type=Path, help="output path without suffix")
        parser.add_argument("--json-only", action="store_true", help="no markdown")
        parser.add_argument(
            "--cache-dir",
            type=Path,
            default=Path(tempfile.gettempdir()) / "lightning_gnn_dist_bench",
            help="partition stores kept between runs (default: %(default)s)",
        )
        parser.add_argument(
            "--render", action="store_true", help="rewrite the markdown from the existing JSON"
        )
        if self.sections:
            parser.add_argument(
                "--sections",
                type=csv(),
                help=f"subset of {','.join(self.sections)}; the others are kept from the JSON",
            )
        if self.add_arguments is not None:
            self.add_arguments(parser)
        return parser

    def markdown(self, report: dict[str, Any]) -> str:
        """The markdown of a report: the benchmark's title line, the provenance paragraph, then
        the benchmark's body (``render`` returns the title line first, then the body)."""
        title, _, body = self.render(report).partition("\n")
        return f"{title}\n\n{provenance(report)}{body}"

    def write_outputs(self, report: dict[str, Any], stem: Path, figures: bool = True) -> None:
        write_text(stem.with_suffix(".md"), self.markdown(report))
        if figures and self.draw is not None:
            self.draw(report, stem)

    def main(self, argv: Sequence[str] | None = None) -> int:
        argv = list(sys.argv[1:] if argv is None else argv)
        parser = self.parser()
        args = parser.parse_args(argv)
        unknown = set(getattr(args, "sections", None) or ()) - set(self.sections)
        if unknown:
            parser.error(
                f"unknown sections {sorted(unknown)}; choose from {', '.join(self.sections)}"
            )
        stem = args.out or RESULTS / (self.name + ("_quick" if args.quick else ""))
        args.out = stem.with_suffix("") if stem.suffix in (".json", ".md") else stem
        if args.render:
            self.write_outputs(read_json(args.out.with_suffix(".json")), args.out)
            print(f"wrote {args.out.with_suffix('.md')}")
            return 0
        run = Run(self, args, shlex.join(["python", "-m", f"benchmarks.{self.name}", *argv]))
        self.run(run)
        run.save(final=True)
        log(f"wrote {args.out}.json" + ("" if args.json_only else " and .md"))
        return 0
