"""The package's shape (design §8): arrows point down, no import circles, Lightning in one place.

Every ``import`` statement of every module counts, also those inside functions and under
``TYPE_CHECKING``: a lazy import is still an arrow a reader has to follow.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "lightning_gnn_dist"
ROOT = "lightning_gnn_dist"

#: Sub-packages from the bottom up: a module may import its own package and lower levels only.
LEVELS: dict[str, int] = {
    "utils": 0,
    "data": 1,
    "partition": 2,
    "comm": 3,
    "plots": 3,
    "loaders": 4,
    "nn": 4,
    "costmodel": 5,
    "lightning": 6,
    "testing": 7,
    # the commands sit on top: `emulate` runs the emulated cluster of testing/
    "cli": 8,
}
#: Top-level modules: above everything.
TOP_LEVEL = 9
#: Distributions that are Lightning: only ``lightning_gnn_dist.lightning`` may import them.
LIGHTNING_DISTRIBUTIONS = (
    "lightning",
    "pytorch_lightning",
    "lightning_fabric",
    "lightning_utilities",
)


def _module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _modules() -> dict[str, Path]:
    return {_module_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}


def _imports(name: str, path: Path, modules: dict[str, Path]) -> tuple[set[str], set[str]]:
    """``(internal modules, external top-level names)`` that ``path`` imports."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    internal, external = set(), set()

    def add(target: str) -> None:
        if target == ROOT or target.startswith(ROOT + "."):
            while target not in modules:  # an attribute of a module: the module
                target = target.rpartition(".")[0]
            if target != name:
                internal.add(target)
        else:
            external.add(target.split(".")[0])

    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            for alias in node.names:
                add(alias.name)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(anchor + ([base] if base else []))
            for alias in node.names:
                full = f"{base}.{alias.name}"
                add(full if full in modules else base)
    return internal, external


def _graph() -> tuple[dict[str, set[str]], dict[str, set[str]]]:
    modules = _modules()
    internal, external = {}, {}
    for name, path in modules.items():
        internal[name], external[name] = _imports(name, path, modules)
    return internal, external


def _package(module: str) -> str | None:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 and parts[1] in LEVELS else None


def _level(module: str) -> int:
    package = _package(module)
    return TOP_LEVEL if package is None else LEVELS[package]


def _cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan, iterative)."""
    index, low, on_stack, stack, result, counter = {}, {}, set(), [], [], [0]
    for start in edges:
        if start in index:
            continue
        work = [(start, iter(sorted(edges[start])))]
        index[start] = low[start] = counter[0]
        counter[0] += 1
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = counter[0]
                    counter[0] += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(edges[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    result.append(sorted(component))
    return result


def test_every_subpackage_has_a_level():
    packages = {p.name for p in PACKAGE.iterdir() if (p / "__init__.py").exists()}
    assert packages <= set(LEVELS), f"give {sorted(packages - set(LEVELS))} a level in LEVELS"


def test_no_import_circles():
    internal, _ = _graph()
    assert _cycles(internal) == []


def test_arrows_point_down():
    internal, _ = _graph()
    upward = [
        f"{module} -> {target}"
        for module, targets in internal.items()
        for target in sorted(targets)
        if _package(module) != _package(target) and _level(target) >= _level(module)
    ]
    assert upward == []


def test_only_the_lightning_package_imports_lightning():
    _, external = _graph()
    offenders = {
        module: sorted(set(names) & set(LIGHTNING_DISTRIBUTIONS))
        for module, names in external.items()
        if _package(module) != "lightning" and set(names) & set(LIGHTNING_DISTRIBUTIONS)
    }
    assert offenders == {}


@pytest.mark.parametrize(
    "source, expected",
    [
        ({"a": {"b"}, "b": {"a"}}, [["a", "b"]]),
        ({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}, [["a", "b", "c"]]),
        ({"a": {"b"}, "b": set()}, []),
    ],
)
def test_cycle_finder_finds_cycles(source, expected):
    assert _cycles(source) == expected


def test_the_checks_see_lazy_and_relative_imports(tmp_path):
    """A function-local import and a relative one both count as arrows."""
    modules = {"lightning_gnn_dist.data.x": None, "lightning_gnn_dist.lightning.y": None}
    source = tmp_path / "x.py"
    source.write_text("def f():\n    from ..lightning import y\n    import pytorch_lightning\n")
    internal, external = _imports("lightning_gnn_dist.data.x", source, modules)
    assert internal == {"lightning_gnn_dist.lightning.y"}
    assert external == {"pytorch_lightning"}


def test_old_import_paths_warn_and_work():
    import importlib
    import sys

    from lightning_gnn_dist import _deprecated
    from lightning_gnn_dist.lightning.strategy import GNNStrategy

    for old, new in _deprecated.MOVED_MODULES.items():
        sys.modules.pop(old, None)
        with pytest.warns(DeprecationWarning, match=f"{old} moved to {new}"):
            module = importlib.import_module(old)
        target = importlib.import_module(new)
        public = [n for n in dir(target) if not n.startswith("__")]
        assert public and all(getattr(module, n) is getattr(target, n) for n in public[:20])
    from lightning_gnn_dist.strategy import GNNStrategy as old_strategy

    assert old_strategy is GNNStrategy
    vars(importlib.import_module("lightning_gnn_dist.data")).pop("NeighborLoader", None)
    with pytest.warns(DeprecationWarning, match="lightning_gnn_dist.loaders.NeighborLoader"):
        from lightning_gnn_dist.data import NeighborLoader  # noqa: F401
