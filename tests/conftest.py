"""The suite's settings: one torch thread, a layout cache of its own, the ``slow`` marker, and the
shared fixtures (`tests.common.fixtures`). Helpers are imported from `tests.common`."""

from __future__ import annotations

import os
from typing import Any

import pytest

pytest_plugins = ["tests.common.fixtures"]

# One torch (OpenMP/MKL) thread, here and in every subprocess a test starts: the suite's
# tensors are tiny, so a second intra-op thread only contends with the other process on a
# 2-core machine (and with DataLoader workers). Set before torch is first imported, which
# reads these at start-up; `pytest_configure` also tells a torch that is already loaded.
for _var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")


def pytest_configure(config: pytest.Config) -> None:
    # `python -m pytest -q` runs everything; `-m "not slow"` is the quick inner loop.
    config.addinivalue_line(
        "markers", "slow: runs a Beam pipeline (the whole job, in process or not, or one step "
                   "on the FnApiRunner), starts a server, a cluster, torchrun or worker "
                   "processes, runs a transformers model, or replays whole streams (every "
                   "resume cut, pinned batches, an engine against its reference library over "
                   "many texts) (left out by -m 'not slow')")
    import sys

    if "torch" in sys.modules:
        sys.modules["torch"].set_num_threads(1)


@pytest.fixture(autouse=True, scope="session")
def _layout_cache(tmp_path_factory: pytest.TempPathFactory) -> Any:
    """The reader's layout cache for the whole run, in a temporary directory rather than the
    user's ~/.cache (subprocesses, such as the examples, inherit it)."""
    old = os.environ.get("TOKEN_WINDOWS_CACHE")
    os.environ["TOKEN_WINDOWS_CACHE"] = str(tmp_path_factory.mktemp("layout-cache"))
    yield
    if old is None:
        os.environ.pop("TOKEN_WINDOWS_CACHE", None)
    else:
        os.environ["TOKEN_WINDOWS_CACHE"] = old
