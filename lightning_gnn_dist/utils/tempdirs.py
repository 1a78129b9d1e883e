"""Temporary folders that name their owner, so the next run can remove those of killed runs;
and removal of what libraries leave in the temporary folder (:func:`remove_process_temp_files`).

A folder is called ``PREFIX<host>-<pid>-<random>``. A process killed with ``SIGKILL`` cannot
remove its folders; :func:`remove_stale` (called by the next run before it makes its own)
removes every folder of that prefix whose owner was a process of this host that no longer
exists. Folders of live processes (a concurrent writer) and of other hosts (a shared file
system) are left alone.

PyG writes the modules it generates from its templates into the temporary folder and never
deletes them. :func:`tag_generated_modules` makes their names carry their owner the same way
(``lightning-gnn-dist-pyg-<host>-<pid>-<module>_<random>.py``): the process removes its own at
exit (:func:`remove_process_temp_files`), and the next process that generates one (or starts
ranks) removes those of killed processes (:func:`remove_stale_generated_modules`).
"""

from __future__ import annotations

import contextlib
import errno
import os
import re
import secrets
import shutil
import socket
import sys
import tempfile
from pathlib import Path
from types import ModuleType
from typing import Any

GENERATED_PREFIX = "lightning-gnn-dist-pyg-"
"""Name prefix of the modules PyG generates in a process that imported the package."""


def _host() -> str:
    return re.sub(r"[^A-Za-z0-9.]+", "_", socket.gethostname()) or "host"


def make_owned_dir(parent: str | os.PathLike, prefix: str, mode: int = 0o777) -> Path:
    """Create ``parent/PREFIX<host>-<pid>-<random>`` and return it.

    Args:
        parent: folder to create it in (must exist).
        prefix: name prefix; :func:`remove_stale` takes the same one.
        mode: permissions, filtered by the umask as ``mkdir`` does. The default ``0o777`` (not
            :func:`tempfile.mkdtemp`'s ``0o700``) lets a store renamed from the folder follow
            the umask like any other folder. (default: ``0o777``)
    """
    for _ in range(100):
        path = Path(parent) / f"{prefix}{_host()}-{os.getpid()}-{secrets.token_hex(4)}"
        try:
            path.mkdir(mode=mode)
            return path
        except FileExistsError:
            continue
    raise FileExistsError(errno.EEXIST, f"no free temporary name {prefix}* in", str(parent))


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # exists, owned by someone else
        return True
    return True


def remove_stale(parent: str | os.PathLike, prefix: str) -> list[Path]:
    """Remove the folders ``parent/PREFIX<this host>-<pid>-*`` whose process is gone.

    Args:
        parent: folder to scan; a missing one has nothing stale.
        prefix: the prefix given to :func:`make_owned_dir`.

    Returns:
        The folders removed.
    """
    pattern = re.compile(rf"{re.escape(prefix)}{re.escape(_host())}-(\d+)-[0-9a-f]+")
    try:
        entries = list(Path(parent).iterdir())
    except OSError:
        return []
    removed = []
    for entry in entries:
        match = pattern.fullmatch(entry.name)
        if match and not _alive(int(match.group(1))) and entry.is_dir():
            shutil.rmtree(entry, ignore_errors=True)
            removed.append(entry)
    return removed


def _generated_prefix(pid: int | None = None) -> str:
    """File-name prefix of the modules PyG generates in process ``pid`` (default: this one)."""
    return f"{GENERATED_PREFIX}{_host()}-{os.getpid() if pid is None else pid}-"


def remove_stale_generated_modules(parent: str | os.PathLike | None = None) -> list[Path]:
    """Remove the modules PyG generated (:func:`tag_generated_modules`) in ``parent`` (default:
    the temporary folder) for processes of this host that no longer exist (killed ones: a
    process removes its own at exit).

    Returns:
        The files removed.
    """
    pattern = re.compile(rf"{re.escape(GENERATED_PREFIX)}{re.escape(_host())}-(\d+)-.+\.py")
    try:
        entries = list(Path(parent or tempfile.gettempdir()).iterdir())
    except OSError:
        return []
    removed = []
    for entry in entries:
        match = pattern.fullmatch(entry.name)
        if match and not _alive(int(match.group(1))):
            with contextlib.suppress(OSError):
                entry.unlink()
                removed.append(entry)
    return removed


_SWEPT_BY: list[int] = []  # the pid that removed the stale modules (a forked child sweeps again)


class _OwnerTaggedTempfile:
    """Stands in for the ``tempfile`` module inside ``torch_geometric.template``: the files of
    ``NamedTemporaryFile`` are named after their owner (prefix ``lightning-gnn-dist-pyg-<host>-
    <pid>-``); everything else is ``tempfile``'s own."""

    def __getattr__(self, name: str) -> Any:
        return getattr(tempfile, name)

    @staticmethod
    def NamedTemporaryFile(*args: Any, prefix: str | None = None, **kwargs: Any):  # noqa: N802
        if _SWEPT_BY != [os.getpid()]:  # the first module this process generates
            _SWEPT_BY[:] = [os.getpid()]
            remove_stale_generated_modules(kwargs.get("dir"))
        return tempfile.NamedTemporaryFile(
            *args, prefix=_generated_prefix() + (prefix or "tmp"), **kwargs
        )


def tag_generated_modules(template_module: ModuleType) -> None:
    """Make ``torch_geometric.template`` (``template_module``) name the files of the modules it
    generates after this process, so that they can be told from those of other processes: the
    process removes its own at exit, the next one removes those of a killed process. Called by
    the package when PyG's ``template`` module is imported; a PyG that writes its modules in
    another way is left as it is."""
    if getattr(template_module, "tempfile", None) is tempfile:
        template_module.tempfile = _OwnerTaggedTempfile()


def remove_process_temp_files() -> list[Path]:
    """Remove what libraries left in the temporary folder for this process: the modules PyG
    generated from its templates (``lightning-gnn-dist-pyg-<host>-<pid>-<module>_<random>.py``,
    see :func:`tag_generated_modules`; ``<module>_<Class>_propagate_<random>.py`` when generated
    before the package was imported: written by
    ``torch_geometric.template.module_from_template`` and never deleted; Python no longer needs
    the file once the module is imported) and torch's inductor cache folder when it is empty
    (``torchinductor_<user>``, made when ``torch_geometric`` is imported). Registered at exit by
    the package; ranks ended at once call it themselves.

    Returns:
        What was removed.
    """
    temp = Path(tempfile.gettempdir()).resolve()
    own = _generated_prefix()
    removed = []
    for name, module in list(sys.modules.items()):
        file = getattr(module, "__file__", None)
        if not file:
            continue
        path = Path(file)
        untagged = ("_propagate" in name or "_edge_updater" in name) and path.name.startswith(
            f"{name}_"
        )
        if (path.name.startswith(own) or untagged) and path.parent.resolve() == temp:
            with contextlib.suppress(OSError):
                path.unlink()
                removed.append(path)
    inductor = os.environ.get("TORCHINDUCTOR_CACHE_DIR")  # set by torch where it made one
    if inductor and Path(inductor).parent.resolve() == temp:
        with contextlib.suppress(OSError):
            Path(inductor).rmdir()  # only when empty
            removed.append(Path(inductor))
    return removed
