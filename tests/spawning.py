"""Which tests start processes, found from their code (``conftest.py`` marks them ``subprocess``).

A test starts a process when its function, a fixture it uses (directly or through other fixtures), or a
function or class of the test code that one of those refers to, names a process-starting helper of
:mod:`helpers` (:data:`HELPERS`) or a process-starting module (:data:`MODULES`: ``subprocess``,
``multiprocessing``, ``torch.multiprocessing``, ``venv``, ...). Names are read from the code objects
(``co_names``: globals, attributes and imports, also of nested functions and lambdas) and followed
into the test code only: ``tests/``, ``plugins/*/tests/`` and the plugin kit (``torchdevice/testing/``,
whose contract tests the plugins' test classes inherit). The rest of torchdevice is what is tested: an
in-process ``torchdevice run`` stays in-process, and a process torchdevice starts itself (``torchdevice
scan``'s process pool) is not seen -- such a test carries ``@pytest.mark.subprocess`` by hand.

So nobody has to remember the marker: a new test that calls ``helpers.run_python``, or takes a
module fixture that runs ``run_concurrently``, is marked as it is collected; ``tox -e fast`` deselects
it (``-m "not subprocess"``). :class:`ProcessWatch` is the net under this: in a run that deselects
the marked tests, a test that starts a process anyway fails, naming what it started.
"""
from __future__ import annotations

import inspect
import os
import sys
import types
from pathlib import Path

import helpers

ROOT = Path(__file__).resolve().parents[1]
#: the directories whose code is followed: the core's tests, every plugin's, and the plugin kit
#: (torchdevice.testing: the contract tests a plugin's test classes inherit, and their helpers)
TEST_DIRS = (ROOT / "tests", *sorted(ROOT.glob("plugins/*/tests")), ROOT / "torchdevice" / "testing")

#: helpers that start processes (run_concurrently runs such helpers in threads)
HELPERS = frozenset({"run_python", "run_torchdevice", "run_command", "run_concurrently"})
#: modules that start processes, as imported (``import torch.multiprocessing as mp`` names
#: ``torch.multiprocessing``) or as the module a global refers to
MODULES = frozenset({"subprocess", "multiprocessing", "torch.multiprocessing", "venv", "concurrent.futures.process",
                     "torch.distributed.run", "torch.distributed.launcher", "torch.distributed.elastic"})
#: attribute names that start processes whatever they are reached through (``torch.multiprocessing.spawn``
#: reads ``multiprocessing``; ``os.system``, ``os.fork`` ...)
ATTRIBUTES = frozenset({"multiprocessing", "Popen", "fork", "forkpty", "system", "popen", "execv", "execve",
                        "execvp", "spawnv", "spawnve", "posix_spawn", "posix_spawnp", "start_processes"})


def _in_test_code(code: types.CodeType) -> bool:
    path = Path(code.co_filename)
    return any(path.is_relative_to(d) for d in TEST_DIRS)


def _names(code: types.CodeType) -> set[str]:
    """Every name the code and the functions, lambdas and comprehensions nested in it refer to."""
    names = set(code.co_names)
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            names |= _names(const)
    return names


def _spawning_module(obj) -> bool:
    name = getattr(obj, "__name__", "")
    return isinstance(obj, types.ModuleType) and any(name == m or name.startswith(m + ".") for m in MODULES)


class Finder:
    """``why(fn)``: the chain of names by which ``fn`` starts a process, or ``None``; cached per code object."""

    def __init__(self):
        self._cache: dict[types.CodeType, tuple[str, ...] | None] = {}

    def why(self, fn, owner: type | None = None) -> tuple[str, ...] | None:
        fn = inspect.unwrap(getattr(fn, "__func__", fn))
        code = getattr(fn, "__code__", None)
        if code is None or not _in_test_code(code):
            return None
        if code in self._cache:
            return self._cache[code]
        self._cache[code] = None  # a recursion back to this function adds nothing
        found = self._search(fn, code, owner)
        self._cache[code] = found
        return found

    def _search(self, fn, code, owner) -> tuple[str, ...] | None:
        namespace = fn.__globals__
        helper_functions = {getattr(helpers, name) for name in HELPERS}
        for name in sorted(_names(code)):
            if name in HELPERS or name in MODULES or name in ATTRIBUTES:
                return (name,)
            obj = namespace.get(name)
            if obj is None and owner is not None:
                obj = inspect.getattr_static(owner, name, None)  # a method, also one inherited
            if obj is None:
                continue
            if _spawning_module(obj) or (callable(obj) and obj in helper_functions):
                return (name,)
            if isinstance(obj, (staticmethod, classmethod)):
                obj = obj.__func__
            if callable(obj) and hasattr(obj, "__wrapped__"):
                obj = inspect.unwrap(obj)  # functools.cache, functools.wraps decorators
            if isinstance(obj, (types.FunctionType, types.MethodType)):
                inner = self.why(obj, owner)
            elif isinstance(obj, type):
                inner = self.why_class(obj)
            else:
                continue
            if inner is not None:
                return (name, *inner)
        return None

    def why_class(self, cls: type) -> tuple[str, ...] | None:
        """A class of the test code starts processes when one of its own methods does."""
        for attr, value in vars(cls).items():
            if isinstance(value, (staticmethod, classmethod)):
                value = value.__func__
            if isinstance(value, types.FunctionType):
                inner = self.why(value, cls)
                if inner is not None:
                    return (f"{cls.__name__}.{attr}", *inner)
        return None

    def why_item(self, item) -> tuple[str, ...] | None:
        """Why a collected test starts a process: through its function, or through a fixture of its closure."""
        function = getattr(item, "obj", None)
        if function is None:
            return None
        found = self.why(function, getattr(item, "cls", None))
        if found is not None:
            return (item.name, *found)
        name2fixturedefs = getattr(getattr(item, "_fixtureinfo", None), "name2fixturedefs", {})
        for fixture in getattr(item, "fixturenames", ()):
            for fixturedef in name2fixturedefs.get(fixture, ()):
                found = self.why(fixturedef.func, getattr(item, "cls", None))
                if found is not None:
                    return (f"fixture {fixture}", *found)
        return None


class ProcessWatch:
    """An audit hook (``subprocess.Popen``, ``os.fork``, ``os.system``, ``os.exec``, ``os.posix_spawn``,
    ``os.spawn``): once :meth:`arm` has named the tests that must stay in-process, a process started by
    one of them raises, naming the test and what it started, so the detection above gets fixed (or the
    test marked) instead of the fast loop slowly filling with subprocess tests. The hook is added on the
    first :meth:`arm` (audit hooks cannot be removed; a run that arms nothing pays for no hook)."""

    EVENTS = frozenset({"subprocess.Popen", "os.fork", "os.forkpty", "os.system", "os.exec", "os.posix_spawn",
                        "os.spawn"})

    def __init__(self):
        self.armed: frozenset[str] = frozenset()
        self._hooked = False

    def arm(self, nodeids) -> None:
        self.armed = frozenset(nodeids)
        if not self._hooked:
            sys.addaudithook(self._hook)
            self._hooked = True

    def _hook(self, event: str, args: tuple) -> None:
        if event not in self.EVENTS or not self.armed:
            return
        current = os.environ.get("PYTEST_CURRENT_TEST", "")
        nodeid = current.rsplit(" (", 1)[0]
        if nodeid in self.armed:
            what = " ".join(str(a) for a in (args[1] if event == "subprocess.Popen" and args[1:] else args))[:200]
            raise RuntimeError(
                f"{nodeid} started a process ({event}: {what}) but is not marked subprocess: "
                "tests/spawning.py did not see it start one; teach it to, or mark the test "
                "@pytest.mark.subprocess")


#: the one watch of the process (conftest.py arms it for `-m "not subprocess"`)
WATCH = ProcessWatch()
