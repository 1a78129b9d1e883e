import os
import signal

import psutil
import pytest

os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")
os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("LGD_PROGRESS", "0")

# A shell without job control starts `pytest &` with SIGINT ignored, and the children inherit
# that: the Ctrl-C tests (emulate, rank 0 interrupted) would then wait in vain. Run as in a
# foreground terminal.
if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)


# Under pytest-xdist (`make test` runs two workers, a file at a time) the longest files start
# first, so that no worker is left with one of them at the end: seconds on a quiet 2-core machine.
LONGEST_FILES = {
    "tests/lightning/test_rank_failures.py": 200,
    "tests/test_docs.py": 130,
    "tests/test_examples.py": 90,
    "tests/lightning/test_launchers.py": 40,
    "tests/cli/test_emulate.py": 25,
    "tests/nn/test_rdm.py": 22,
}


def pytest_collection_modifyitems(config, items):
    if os.environ.get("PYTEST_XDIST_WORKER"):  # every worker sorts alike: one collection
        root = config.rootpath
        items.sort(key=lambda item: -LONGEST_FILES.get(item.path.relative_to(root).as_posix(), 0))


@pytest.fixture(autouse=True)
def _no_stray_children():
    """Kill child processes a test leaves behind, so a hang fails one test instead of CI; restore
    the environment (Lightning's launchers write MASTER_PORT and friends into it)."""
    environ = dict(os.environ)
    yield
    for child in psutil.Process().children(recursive=True):
        try:
            child.kill()
        except psutil.NoSuchProcess:
            pass
    os.environ.clear()
    os.environ.update(environ)


# -- nothing left behind (issue 8) -----------------------------------------------------------
from tests import leaks  # noqa: E402

leaks.start_session()


@pytest.fixture(autouse=True)
def _nothing_left_behind(request):
    """Fail a test that leaves a process (a child, or an orphan of this session) or a temporary
    folder behind (in the session's ``TMPDIR``, or a partition store's hidden ``.NAME.tmp-*``
    sibling in ``tmp_path``). Its teardown runs before ``_no_stray_children`` kills what is left:
    pytest sets up the autouse fixtures of one file in name order and tears them down reversed."""
    before = leaks.temp_entries()
    tmp_path = request.getfixturevalue("tmp_path") if "tmp_path" in request.fixturenames else None
    yield
    problems = []
    processes = leaks.lingering_processes(grace=3.0)
    if processes:
        problems.append(f"processes left running: {processes}")
    leaked = leaks.new_temp_entries(before)
    if leaked:
        problems.append(f"temporary folders left in TMPDIR: {leaked}")
    hidden = leaks.store_temp_folders(tmp_path) if tmp_path is not None else []
    if hidden:
        problems.append(f"store temporary folders left: {[str(p) for p in hidden]}")
    if problems:
        pytest.fail("; ".join(problems), pytrace=False)
