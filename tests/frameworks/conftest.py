"""``--all``: also run the framework tests marked ``frameworks_full`` (``tox -e frameworks -- --all``).

Without it those tests are skipped, so CI (the ``py311`` env, which installs the frameworks) runs a
subset that covers each claim once. The option exists when pytest is pointed at this directory
(``pytest tests/frameworks --all``), as tox does.
"""
from __future__ import annotations

import pytest


def pytest_addoption(parser):
    parser.addoption("--all", action="store_true", default=False,
                     help="tests/frameworks: also run the tests marked frameworks_full (the full set)")


def pytest_configure(config):
    config.addinivalue_line("markers", "frameworks_full: a framework test run only with --all (tests/frameworks)")


def pytest_collection_modifyitems(config, items):
    if config.getoption("--all", default=False):
        return
    skip = pytest.mark.skip(reason="full framework set only: tox -e frameworks -- --all")
    for item in items:
        if item.get_closest_marker("frameworks_full") is not None:
            item.add_marker(skip)
