"""What the tests share: paths, running the job, servers, datasets and fixtures.

Fixtures are in `tests.common.fixtures` (a pytest plugin the top conftest loads); everything
else is imported from its module.
"""
