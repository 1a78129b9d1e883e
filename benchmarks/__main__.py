"""``python -m benchmarks COMMAND``: commands over every benchmark.

``list``                 each benchmark and its committed reports
``render-all [--check]`` rewrite every committed table (and figure) from its JSON; ``--check``
                         writes nothing and fails when a table differs from its JSON's rendering
``quick-all``            run every benchmark with ``--quick`` (a smoke test, ``*_quick.*`` outputs)
"""

from __future__ import annotations

import argparse
import importlib
import subprocess
import sys
from pathlib import Path

from benchmarks import NAMES
from benchmarks.harness import RESULTS, Benchmark, read_json


def _benchmark(name: str) -> Benchmark:
    return importlib.import_module(f"benchmarks.{name}").BENCHMARK


def committed_reports() -> list[Path]:
    """Every report in ``results/`` but the ``--quick`` ones (which git ignores)."""
    return sorted(p for p in RESULTS.glob("*.json") if not p.stem.endswith("_quick"))


def render_all(check: bool) -> int:
    stale = []
    for path in committed_reports():
        report = read_json(path)
        bench = _benchmark(report["benchmark"])
        stem = path.with_suffix("")
        if check:
            md = stem.with_suffix(".md")
            if not md.is_file() or md.read_text() != bench.markdown(report):
                stale.append(md.name)
        else:
            bench.write_outputs(report, stem)
        print(f"{'checked' if check else 'rendered'} {stem.name} ({bench.name})")
    if stale:
        print(f"differ from their JSON: {', '.join(stale)}; run python -m benchmarks render-all")
    return 1 if stale else 0


def quick_all() -> int:
    failed = []
    for name in NAMES:
        print(f"== {name} --quick", flush=True)
        if subprocess.run([sys.executable, "-m", f"benchmarks.{name}", "--quick"]).returncode:
            failed.append(name)
    print("all quick runs passed" if not failed else f"failed: {', '.join(failed)}")
    return 1 if failed else 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("list", help="benchmarks and their committed reports")
    render = sub.add_parser("render-all", help="rewrite every committed table from its JSON")
    render.add_argument("--check", action="store_true", help="compare only; exit 1 on a difference")
    sub.add_parser("quick-all", help="run every benchmark with --quick")
    args = parser.parse_args(argv)
    if args.command == "render-all":
        return render_all(args.check)
    if args.command == "quick-all":
        return quick_all()
    reports: dict[str, list[str]] = {}
    for path in committed_reports():
        reports.setdefault(read_json(path)["benchmark"], []).append(path.stem)
    for name in NAMES:
        doc = (_benchmark(name).doc or "").strip().splitlines()[0]
        print(f"{name:20} {doc}\n{'':20} reports: {', '.join(reports.get(name, [])) or '–'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
