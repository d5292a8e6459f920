"""The boundary rule: the program is told it runs on its source device; torch sees the real machine.

While translating, a question that *describes the machine* -- ``is_available``,
``device_count``, ``current_device``, ``get_device_properties``,
``get_device_capability``, ``get_device_name``, ``is_bf16_supported``,
``is_initialized`` and ``torch.backends.<ns>.is_built`` -- gets two answers:

* **the program** (any caller outside torch's package) gets the translated one,
  describing the target in the source device's shape;
* **torch's own machinery** (inductor, dynamo, the profiler, ``torch.utils``,
  serialization, ``torch.backends``, ...: any caller inside torch's package) gets
  torch's real answer, so it never takes a CUDA-only path on a machine that has
  no CUDA (inductor reading ``gcnArchName``, the profiler recording CUDA events).

Exceptions: torch code that acts *on the program's behalf* keeps the translated
answers (:data:`ON_BEHALF`): seeding through ``torch.manual_seed``
(``torch/random.py``), ``torch.get_device_module`` (``torch/__init__.py``), AMP
(``torch/amp``) and torch's test harness (``torch/testing``, which instantiates a suite's CUDA tests
from ``torch.cuda.is_available()``). torch's distributed machinery (``torch/distributed``:
c10d, DCP, FSDP, DTensor; ``torch/nn/parallel``) is torch's own: it asks ``torch.cuda``
and then ``torch._utils``/``torch.accelerator`` about the same machine, and the tensors
it is handed live on the target, so it sees the real machine (issue 31: DCP was told
CUDA by one and no device by the other; docs/distributed.md has the audit). The namespaces' own modules (``torch/cuda``
...) are torch's real implementation -- what still runs of them is a native helper
or the real answer itself -- so they see the real machine (``torch.cuda.current_device``
asks ``is_initialized()`` before touching the driver).

torch's modules imported while translating (``torch._dynamo`` on the first
``torch.compile``, ``torch.profiler``...) are executed with torch unpatched
(:class:`TorchImports`): module-level code builds tables keyed by ``torch.device``
and the like, and must capture torch's own objects, not torchdevice's stand-ins.
While such an import runs, other threads see torch unpatched too.

``Tensor.is_cuda`` (:mod:`torchdevice.devices`) is a fact about a tensor that torch
routes kernels on, on the program's behalf too: every caller inside torch gets the
real value (:func:`in_torch`), with no exception. The decision is made per calling
file and cached, so a call costs one frame lookup and one dict lookup.
"""
from __future__ import annotations

import functools
import os
import sys
import threading
import types
from typing import TYPE_CHECKING, Any, Callable, TypeVar

import torch

from .forwarding import maker, shape_of
from .importhooks import WrappedLoader, WrappingFinder

if TYPE_CHECKING:
    from ._patching import Patcher
    from .router import Target

_F = TypeVar("_F", bound=Callable[..., Any])

_TORCH_DIR = os.path.dirname(torch.__file__) + os.sep

#: Paths under torch's package whose calls keep the translated answers (see the module docstring).
ON_BEHALF = tuple(
    _TORCH_DIR + p.replace("/", os.sep)
    for p in (
        "__init__.py", "random.py", "amp/", "testing/",
    )
)

#: The machine-describing functions the rule applies to, per fronted namespace.
MACHINE_QUERIES = frozenset({
    "is_available", "device_count", "current_device", "get_device_properties", "get_device_capability",
    "get_device_name", "is_bf16_supported", "is_initialized",
})

_verdicts: dict[str, bool] = {}


def torch_internal(filename: str) -> bool:
    """Whether code in ``filename`` is torch's own machinery, which sees the real machine."""
    verdict = _verdicts.get(filename)
    if verdict is None:
        verdict = _verdicts[filename] = filename.startswith(_TORCH_DIR) and not filename.startswith(ON_BEHALF)
    return verdict


def in_torch(filename: str) -> bool:
    """Whether ``filename`` lies in torch's package (the rule for tensor attributes)."""
    return filename.startswith(_TORCH_DIR)


#: the body of a generated split (:func:`torchdevice.forwarding.maker`)
_SPLIT = """\
    if _internal(_getframe(1).f_code.co_filename):
        return _real({args})
    return _translated({args})
"""
_SPLIT_NAMES = ("_getframe", "_internal", "_real", "_translated")


def split(translated: Callable[..., Any], real: Callable[..., Any],
          internal: Callable[[str], bool] = torch_internal) -> Callable[..., Any]:
    """``translated`` for the program, ``real`` for torch's own machinery (decided by the caller's file:
    ``internal(filename)``, :func:`torch_internal` unless given; :func:`in_torch` for all of torch).

    The result takes exactly ``translated``'s parameters (generated code, no ``*args`` packing),
    so ``inspect.signature`` and a wrong call's ``TypeError`` read as the translated function's.
    """
    # the parameters translated's own code takes (a wrapper's, not those of what it wraps): they are passed on
    shape, defaults = shape_of(translated, follow_wrapped=False)
    make = maker(_SPLIT, _SPLIT_NAMES, shape, f"{__file__}<split>")
    answer = make(sys._getframe, internal, real, translated, *defaults)
    functools.update_wrapper(answer, translated)
    answer.__code__ = answer.__code__.replace(co_name=translated.__name__, co_qualname=translated.__name__)
    answer.__torchdevice_real__ = real  # type: ignore[attr-defined]
    return answer


class TorchImports(WrappingFinder):
    """Import torch's own modules with torch unpatched (see the module docstring).

    Installed first on ``sys.meta_path`` while translating. It finds nothing itself: it asks
    the finders after it and wraps the loader of a ``torch.*`` module so that executing the
    module (and every module that import pulls in) runs between the patcher's
    ``suspend()`` and ``resume()``.
    """

    def __init__(self, patcher: Patcher) -> None:
        super().__init__()
        self.patcher = patcher
        self._lock = threading.Lock()
        self._depth = 0

    def watches(self, fullname: str) -> bool:
        return fullname.startswith("torch.")

    def wrap(self, loader: Any) -> WrappedLoader:
        return _UnpatchedLoader(loader, self)

    def enter(self) -> None:
        with self._lock:
            self._depth += 1
            if self._depth == 1:
                self.patcher.suspend()

    def leave(self) -> None:
        with self._lock:
            self._depth -= 1
            if self._depth == 0:
                try:
                    warm()
                finally:
                    self.patcher.resume()


class _UnpatchedLoader(WrappedLoader):
    """A module's own loader, executing it inside :meth:`TorchImports.enter`/``leave``."""

    def __init__(self, loader: Any, imports: TorchImports) -> None:
        super().__init__(loader)
        self._imports = imports

    def execute(self, module: types.ModuleType) -> None:
        self._imports.enter()
        try:
            self.loader.exec_module(module)
        finally:
            self._imports.leave()


#: torch caches filled lazily, on first use, from torch's attributes: module -> how to fill them.
#: They are filled while torch is unpatched (at patch() if the module is loaded, else when it is
#: imported), so a later use while translating finds torch's own objects in them, never ours.
WARMERS: dict[str, Callable[[Any], object]] = {
    # dynamo's table of torch functions to put in graphs (by identity) and of Tensor's builtin methods
    "torch._dynamo.trace_rules": lambda m: (m.get_torch_obj_rule_map(), m.get_tensor_method()),
    # dynamo's classes constructed in graphs (torch.cuda.Stream, Event, the legacy torch.cuda.FloatTensor ...)
    # and folded to constants (torch.device ...)
    "torch._dynamo.variables.user_defined": lambda m: (m.UserDefinedClassVariable._in_graph_classes(),
                                                       m.UserDefinedClassVariable._constant_fold_classes()),
}


def warm() -> None:
    """Fill the caches of :data:`WARMERS` whose modules are loaded; call with torch unpatched. A filled
    cache is left as it is (they are ``functools.lru_cache``s), an emptied one is filled again."""
    for name, fill in WARMERS.items():
        module = sys.modules.get(name)
        if module is not None and hasattr(module, "__file__"):
            try:
                fill(module)
            except AttributeError:
                continue  # the module is still being imported (a cycle): filled at the next import


def rewarm() -> None:
    """Fill :data:`WARMERS`' caches again, torch unpatched, after torch code run while translating emptied
    them: ``init_process_group`` clears dynamo's trace rules, which dynamo would then refill with ours."""
    unpatched(warm)()


_guard: TorchImports | None = None


def install_imports(patcher: Patcher) -> TorchImports:
    """Put a :class:`TorchImports` for ``patcher`` first on ``sys.meta_path``; return it."""
    global _guard
    finder = _guard = TorchImports(patcher)
    sys.meta_path.insert(0, finder)
    return finder


def uninstall_imports(finder: TorchImports | None) -> None:
    global _guard
    _guard = None
    if finder is not None and finder in sys.meta_path:
        sys.meta_path.remove(finder)


def unpatched(fn: _F) -> _F:
    """``fn`` run with torch unpatched while translating: for torch machinery that runs no program
    code and reads torch's attributes by identity (inductor keys its lowerings by torch functions)."""

    @functools.wraps(fn)
    def run(*args: Any, **kwargs: Any) -> Any:
        guard = _guard
        if guard is None:
            return fn(*args, **kwargs)
        guard.enter()
        try:
            return fn(*args, **kwargs)
        finally:
            guard.leave()

    return run  # type: ignore[return-value]  # functools.wraps: fn's own signature


def install(patcher: Patcher, target: Target) -> None:
    """Run inductor unpatched: ``torch.compile``'s default backend compiles the graph dynamo
    captured (the program's code, already translated) with torch's own objects. And split torch's helper
    ``torch._utils._get_available_device_type``: a program asking it (torchtitan does) is told its source
    device type, as ``torch.<source>.is_available()`` tells it; torch's own callers get the real machine."""
    wrapper = getattr(torch, "_TorchCompileInductorWrapper", None)
    if wrapper is not None:
        patcher.set(wrapper, "__call__", unpatched(patcher.get(wrapper, "__call__")))
    real = patcher.get(torch._utils, "_get_available_device_type")

    def _get_available_device_type() -> str | None:
        return target.source if getattr(torch, target.source).is_available() else real()

    patcher.set(torch._utils, "_get_available_device_type", split(_get_available_device_type, real))
