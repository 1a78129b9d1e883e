import os

import psutil
import pytest

os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")
os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("LGD_PROGRESS", "0")


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
