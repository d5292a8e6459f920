"""Router state for tests: :func:`router_sandbox`, :func:`registered` (a plugin registered for a
``with`` block), and ``torchdevice info`` run in a fresh interpreter (:func:`info_json`, :func:`info_text`)."""
from __future__ import annotations

import contextlib
import functools
import json
import os
import subprocess
import sys
from typing import Iterator, cast

from .. import plugins, router
from ..backend import (
    BackendSpec,
)

ENV_VARS = ("TORCHDEVICE_BACKEND", "TORCHDEVICE_PRIORITY", "TORCHDEVICE_PLUGINS", "TORCHDEVICE_DISABLE_PLUGINS")


@contextlib.contextmanager
def router_sandbox() -> Iterator[None]:
    """Run the block with automatic selection and no ``TORCHDEVICE_*`` variables; restore all after.

    Restores the variables, the ``use()`` choice (when still valid) and the
    recorded problems, and drops every cached resolution on the way in and out.
    """
    saved_env = {var: os.environ.pop(var) for var in ENV_VARS if var in os.environ}
    previous = router.requested()
    problems_before = list(plugins.problems)
    router.use(None)
    try:
        yield
    finally:
        os.environ.update(saved_env)
        plugins.problems[:] = problems_before
        try:
            router.use(previous)
        except Exception:
            router.use(None)
        router.invalidate()


def _declared_names(plugin: object) -> list[str]:
    declare = getattr(plugin, "torchdevice_backends", None)
    if declare is None:
        return []
    try:
        return [spec.name for spec in declare() or () if isinstance(spec, BackendSpec)]
    except Exception:
        return []


@contextlib.contextmanager
def registered(plugin: object, name: str | None = None) -> Iterator[str]:
    """Register ``plugin`` with the router for the block (inside a :func:`router_sandbox`).

    Any registered plugin that declares one of ``plugin``'s backend names
    (the installed entry point of the same backend, typically) is
    unregistered for the block and put back afterwards. Yields the
    registration name. A plugin already registered is used as it is.
    """
    plugins.load()
    with router_sandbox():
        if plugins.pm.is_registered(plugin):
            yield cast(str, plugins.pm.get_name(plugin))
            return
        mine = set(_declared_names(plugin))
        displaced = []
        for other_name, other in list(plugins.pm.list_name_plugin()):
            if other is not None and mine & set(_declared_names(other)):
                displaced.append((other_name, other, plugins.plugin_info.get(other_name)))
                plugins.unregister(other_name)
        reg_name = None
        try:
            reg_name = plugins.register(plugin, name=name or (sorted(mine)[0] if mine else None))
            yield reg_name
        finally:
            if reg_name is not None and plugins.pm.has_plugin(reg_name):
                plugins.unregister(reg_name)
            for other_name, other, info in displaced:
                plugins.register(other, name=other_name, info=info)


def _clean_env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if not k.startswith("TORCHDEVICE_")}


@functools.lru_cache(maxsize=None)
def _run_info(json_output: bool) -> tuple[int, str, str]:
    args = [sys.executable, "-m", "torchdevice", "info"] + (["--json"] if json_output else [])
    proc = subprocess.run(args, env=_clean_env(), capture_output=True, text=True, timeout=300)
    return proc.returncode, proc.stdout, proc.stderr


def info_json() -> dict:
    """``torchdevice info --json`` run in a fresh interpreter (no ``TORCHDEVICE_*`` variables); cached."""
    code, out, err = _run_info(True)
    try:
        return json.loads(out)
    except json.JSONDecodeError:
        raise AssertionError(f"torchdevice info --json exited {code}, not JSON:\n{out}\n{err}") from None


def info_text() -> str:
    """``torchdevice info`` (the table) run in a fresh interpreter; cached."""
    return _run_info(False)[1]
