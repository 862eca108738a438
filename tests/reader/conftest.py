"""Every reader test reads through a layout cache of its own."""

import pytest


@pytest.fixture(autouse=True)
def _own_layout_cache(isolated_cache):
    return isolated_cache
