"""Find torch.cuda functions that, under translation, still fail with a raw ``torch._C`` AttributeError or reach CUDA.

    python scripts/cuda_long_tail.py                      # the public callables of the default modules
    python scripts/cuda_long_tail.py --private torch.cuda.memory

Translation on the cpu backend, in a temporary working directory (some functions write files): every callable
named in a module's ``__all__`` or defined at the top of its source (torch's source for CUDA builds, so the
names exist on a CPU build too) is called with a few guessed argument lists until one is accepted; a raw
AttributeError naming ``torch._C`` is reported (exit 1), and so is reading an attribute (every name in the
module's ``dir()``) that raises one. On a CUDA build of torch (``torch.version.cuda`` set, no GPU needed) the
``torch._C._cuda_*`` functions exist, so a call that escapes translation fails differently: an error from
CUDA itself (no driver, no device, a CUDA error code: :data:`CUDA_REACHED`) is reported too. Fix one with a
row in ``torchdevice/namespaces/``. A call torch itself rejects (TypeError for every guess) is listed as not
reached. ``--private`` calls torch's internals too, some of which try to download ``flamegraph.pl``.
"""
from __future__ import annotations

import argparse
import ast
import importlib
import inspect
import os
import re
import signal
import sys
import tempfile
import warnings

MODULES = ("torch.cuda", "torch.cuda.memory", "torch.cuda.nccl", "torch.cuda.amp", "torch.cuda.tunable")


def source_names(module) -> set[str]:
    """``__all__`` and the functions and classes defined at the top of the module's source."""
    names = set(getattr(module, "__all__", ()))
    try:
        tree = ast.parse(inspect.getsource(module))
    except (OSError, TypeError, SyntaxError):
        return names
    return names | {n.name for n in tree.body if isinstance(n, (ast.FunctionDef, ast.ClassDef))}


#: what an error says when the call reached CUDA's runtime or driver instead of the translated backend
CUDA_REACHED = re.compile(
    r"NVIDIA driver|No CUDA GPUs|CUDA driver|CUDA error|cuda runtime|cudaError|Torch not compiled with CUDA|"
    r"no CUDA-capable device|CUDA_VISIBLE_DEVICES|nvrtc|libcuda|cuInit|NVML", re.IGNORECASE)


def _raw(exc: AttributeError) -> bool:
    return "torch._C" in str(exc)


def _reached_cuda(exc: BaseException) -> bool:
    from torchdevice.errors import UnsupportedError

    return not isinstance(exc, UnsupportedError) and bool(CUDA_REACHED.search(str(exc)))


def walk(modules, private: bool) -> tuple[dict[str, str], list[str]]:
    """``({api: message}, [api not reached])`` for every callable of ``modules``, translated."""
    import torch

    import torchdevice

    def overran(*_):
        raise TimeoutError

    signal.signal(signal.SIGALRM, overran)
    found: dict[str, str] = {}
    unreached: list[str] = []
    with torchdevice.use("cpu"), torchdevice.patched():
        t = torch.ones(2, device="cuda")
        guesses = [(), (0,), (t,), ([t],), ([t], [t]), ("cuda",), (1,), (t, 0), ("snapshot.pickle",)]
        for name in modules:
            module = importlib.import_module(name)
            for attr in sorted(set(dir(module)) - set(source_names(module))):
                if attr.startswith("_") and not private:
                    continue
                try:  # reading every other attribute: a lazy one may ask torch._C
                    getattr(module, attr)
                except AttributeError as exc:
                    if _raw(exc):
                        found[f"{name}.{attr}"] = f"reading it: {exc}"
                except BaseException:
                    pass
            for attr in sorted(source_names(module)):
                try:
                    obj = getattr(module, attr, None)
                except AttributeError as exc:
                    if _raw(exc):
                        found[f"{name}.{attr}"] = f"reading it: {exc}"
                    continue
                if attr.startswith("__") or (attr.startswith("_") and not private) or not callable(obj):
                    continue
                api = f"{name}.{attr}"
                for args in guesses:
                    signal.alarm(5)
                    try:
                        result = obj(*args)
                        if hasattr(result, "__enter__") and hasattr(result, "__exit__"):
                            with result:
                                pass
                        break
                    except AttributeError as exc:
                        if _raw(exc):
                            found[api] = str(exc)
                        break
                    except TypeError:
                        continue
                    except BaseException as exc:  # refused some other way (UnsupportedError ...): not a raw error
                        if _reached_cuda(exc):
                            found[api] = f"reached CUDA: {type(exc).__name__}: {str(exc).splitlines()[0][:200]}"
                        break
                    finally:
                        signal.alarm(0)
                else:
                    unreached.append(api)
    return found, unreached


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("modules", nargs="*", default=list(MODULES))
    parser.add_argument("--private", action="store_true", help="also call names starting with '_'")
    args = parser.parse_args(argv)
    warnings.simplefilter("ignore")
    with tempfile.TemporaryDirectory() as folder:
        os.chdir(folder)
        found, unreached = walk(args.modules, args.private)
    for api in unreached:
        print(f"not reached: {api}")
    import torch

    for api, message in sorted(found.items()):
        print(f"{'reached CUDA' if message.startswith('reached CUDA') else 'raw AttributeError'}: {api}: {message}")
    build = f"CUDA {torch.version.cuda} build" if torch.version.cuda else "CPU build"
    print(f"torch {torch.__version__} ({build}): {len(found)} raw torch._C AttributeError(s) or calls that reached CUDA")
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
