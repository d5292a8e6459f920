"""Build the C++ half of sim once per (source, torch, Python) and load it.

The extension is compiled with torch's own ``torch.utils.cpp_extension`` tooling (g++ or clang
and ninja), as a vendor's out-of-tree device is, the first time sim is used, and cached under
``$TORCHDEVICE_SIM_CACHE`` (default ``~/.cache/torchdevice-sim``) in a folder named after a hash
of everything it depends on. Processes starting at once (DDP ranks, pytest workers) build it
once: the build holds a file lock.
"""
from __future__ import annotations

import fcntl
import hashlib
import importlib.util
import os
import shutil
import sys
from pathlib import Path
from types import ModuleType

import torch

SOURCE = Path(__file__).with_name("csrc") / "sim.cpp"
CFLAGS = ["-O2"]  # the kernels are torch's CPU kernels; what is compiled here is per-op bookkeeping (the fast path)


def cache_root() -> Path:
    """Where built extensions are kept: ``$TORCHDEVICE_SIM_CACHE``, else ``~/.cache/torchdevice-sim``."""
    configured = os.environ.get("TORCHDEVICE_SIM_CACHE")
    if configured:
        return Path(configured)
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "torchdevice-sim"


def build_key() -> str:
    """A hash of the source, the flags, torch's version and the interpreter: what the binary depends on."""
    digest = hashlib.sha256(SOURCE.read_bytes())
    for part in (torch.__version__, sys.version, sys.platform, " ".join(CFLAGS)):
        digest.update(part.encode())
    return digest.hexdigest()[:16]


def missing_tools() -> list[str]:
    """The build tools this machine lacks (a C++ compiler, ninja); empty when sim can be built."""
    missing = []
    if not (os.environ.get("CXX") or shutil.which("c++") or shutil.which("g++") or shutil.which("clang++")):
        missing.append("a C++ compiler (c++, g++ or clang++)")
    try:
        from torch.utils.cpp_extension import is_ninja_available

        if not is_ninja_available():
            missing.append("ninja (pip install ninja)")
    except ImportError:  # pragma: no cover - every supported torch has it
        missing.append("torch.utils.cpp_extension")
    return missing


def binary() -> Path:
    """Where the build of the current source lives (it exists once built)."""
    key = build_key()
    return cache_root() / key / f"torchdevice_sim_C_{key}.so"


def load() -> ModuleType:
    """Return the extension module, building it first if this machine has no current build."""
    binary_path = binary()
    name, folder = binary_path.stem, binary_path.parent
    if name in sys.modules:
        return sys.modules[name]
    folder.mkdir(parents=True, exist_ok=True)
    if not binary_path.exists():
        with open(folder / "build.lock", "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)  # one builder; the others wait and then load its binary
            if not binary_path.exists():
                _build(name, folder)
    return _import(name, binary_path)


def _build(name: str, folder: Path) -> None:
    from torch.utils.cpp_extension import load as build

    print(f"torchdevice-sim: building the sim device extension in {folder} (once, about a minute)", file=sys.stderr)
    build(name=name, sources=[str(SOURCE)], build_directory=str(folder), extra_cflags=CFLAGS, verbose=False)


def _import(name: str, binary: Path) -> ModuleType:
    spec = importlib.util.spec_from_file_location(name, binary)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    sys.modules[name] = module
    return module
