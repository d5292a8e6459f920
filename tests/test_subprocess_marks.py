"""tests/spawning.py: which tests start processes (marked ``subprocess``, deselected by ``tox -e fast``).

The sample test code is compiled from text under this file's name (so it counts as test code) instead
of being defined here: a test of this module that named a spawning sample would itself be found to
start processes, and leave the fast loop.
"""
from __future__ import annotations

import os
import sys

import pytest
import spawning

SAMPLES = '''
import functools
import subprocess as sp
import torch.multiprocessing as mp
from helpers import run_python


def calls_a_helper():
    return run_python("pass")


def calls_a_module_by_another_name():
    sp.run(["true"])


def through_a_local_function():
    return calls_a_module_by_another_name()


@functools.cache
def cached():
    return calls_a_helper()


def through_a_cached_function():
    return cached()


def in_a_lambda():
    return list(map(lambda code: run_python(code), ["pass"]))


def imports_inside():
    import subprocess
    return subprocess


def torch_spawn():
    mp.spawn(print, nprocs=2)


def attribute_chain():
    import os
    return os.fork


class Runner:
    def go(self):
        return calls_a_helper()


def through_a_class():
    return Runner().go()


def in_process():
    import torch
    return torch.ones(2).sum() + len(sorted([3, 1]))


def in_process_calling_in_process():
    return in_process()


def recursive(n=2):
    return 0 if n == 0 else recursive(n - 1)
'''


def _samples() -> dict:
    namespace: dict = {"__name__": "spawning_samples"}
    exec(compile(SAMPLES, __file__, "exec"), namespace)
    return namespace


@pytest.mark.parametrize(("name", "why"), [
    ("calls_a_helper", ("run_python",)),
    ("calls_a_module_by_another_name", ("sp",)),
    ("through_a_local_function", ("calls_a_module_by_another_name", "sp")),
    ("through_a_cached_function", ("cached", "calls_a_helper", "run_python")),
    ("in_a_lambda", ("run_python",)),
    ("imports_inside", ("subprocess",)),
    ("torch_spawn", ("mp",)),
    ("attribute_chain", ("fork",)),
    ("through_a_class", ("Runner", "Runner.go", "calls_a_helper", "run_python")),
])
def test_a_function_that_starts_a_process_is_found_with_the_names_leading_there(name, why):
    assert spawning.Finder().why(_samples()[name]) == why


@pytest.mark.parametrize("name", ["in_process", "in_process_calling_in_process", "recursive"])
def test_an_in_process_function_is_not_found(name):
    assert spawning.Finder().why(_samples()[name]) is None


def test_code_outside_the_tests_is_not_followed():
    # torchdevice's own code is what the tests test: os.path.join is no test code, whatever it calls
    assert spawning.Finder().why(os.path.join) is None


def test_the_watch_stops_an_armed_test_that_starts_a_process_and_lets_the_others_be(monkeypatch):
    me = os.environ["PYTEST_CURRENT_TEST"].rsplit(" (", 1)[0]
    monkeypatch.setattr(spawning.WATCH, "armed", spawning.WATCH.armed)  # put back afterwards
    spawning.WATCH.arm({"tests/elsewhere.py::test_other"})
    sys.audit("os.system", b"true")  # the event os.system raises before it starts anything
    spawning.WATCH.arm({me})
    with pytest.raises(RuntimeError, match=r"started a process \(os\.system: b'true'\) but is not marked subprocess"):
        sys.audit("os.system", b"true")
    sys.audit("open", "somefile", "r", 0)  # other events pass
