"""Find torch.cuda functions that, under translation, still fail with a raw ``torch._C`` AttributeError.

    python scripts/cuda_long_tail.py                      # the public callables of the default modules
    python scripts/cuda_long_tail.py --private torch.cuda.memory

Translation on the cpu backend, in a temporary working directory (some functions write files): every callable
named in a module's ``__all__`` or defined at the top of its source (torch's source for CUDA builds, so the
names exist on a CPU build too) is called with a few guessed argument lists until one is accepted; a raw
AttributeError naming ``torch._C`` is reported (exit 1). Fix one with a row in ``torchdevice/namespaces/``.
A call torch itself rejects (TypeError for every guess) is listed as not reached. ``--private`` calls torch's
internals too, some of which try to download ``flamegraph.pl``.
"""
from __future__ import annotations

import argparse
import ast
import importlib
import inspect
import os
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


def _raw(exc: AttributeError) -> bool:
    return "torch._C" in str(exc)


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
            for attr in sorted(source_names(module)):
                obj = getattr(module, attr, None)
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
                    except BaseException:  # refused some other way (UnsupportedError ...): not a raw error
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
    for api, message in sorted(found.items()):
        print(f"raw AttributeError: {api}: {message}")
    print(f"{len(found)} raw torch._C AttributeError(s)")
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
