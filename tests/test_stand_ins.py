"""A function torchdevice puts in torch's place looks like the one it replaces to code that inspects it:
where torch's own wraps another (``functools.wraps``, ``contextlib.contextmanager``), the stand-in has
the same ``__wrapped__``. torch 2.14's dynamo reads ``torch.cuda.use_mem_pool.__wrapped__`` whenever it
traces a context manager; the unsupported-function stand-in had none, and ``torch.compile`` of a CUDA
program under translation failed with AttributeError."""
from __future__ import annotations

import contextlib
import types

import torch

from torchdevice import translate
from torchdevice._patching import Patcher


@contextlib.contextmanager
def _torchs(pool=None):
    yield pool


def test_a_function_replacing_a_wrapping_one_gets_its_wrapped():
    owner = types.SimpleNamespace(cm=_torchs, plain=len)
    patcher = Patcher()

    def stand_in(*args, **kwargs):
        raise RuntimeError("unsupported")

    patcher.set(owner, "cm", stand_in)
    assert owner.cm is stand_in and stand_in.__wrapped__ is _torchs.__wrapped__

    def own(*args):
        return 0

    own.__wrapped__ = print  # a stand-in that wraps something itself keeps what it wraps
    patcher.set(owner, "cm", own)
    assert own.__wrapped__ is print

    def other(x):
        return x

    patcher.set(owner, "plain", other)  # the original wraps nothing: nothing added
    assert "__wrapped__" not in vars(other)
    patcher.restore()
    assert owner.cm is _torchs and owner.plain is len


def test_staged_changes_get_it_too():
    owner = types.SimpleNamespace(cm=_torchs)
    patcher = Patcher()

    def stand_in():
        pass

    patcher.stage()
    patcher.set(owner, "cm", stand_in)
    patcher.commit()
    assert owner.cm.__wrapped__ is _torchs.__wrapped__
    patcher.restore()


def test_every_replaced_torch_function_that_wraps_keeps_wrapped_while_translating(on_target):
    with translate.patched():
        saved = list(translate._patcher._saved)
        checked = []
        for obj, name, original in saved:
            if isinstance(original, types.FunctionType) and "__wrapped__" in vars(original):
                current = getattr(obj, name)
                if current is original:
                    continue
                checked.append(name)
                assert hasattr(current, "__wrapped__"), f"{obj!r}.{name} lost __wrapped__"
        assert "use_mem_pool" in checked  # torch.cuda.use_mem_pool, a context manager, is replaced on cpu


def test_torch_compile_of_a_context_manager_under_translation(on_target):
    """dynamo traces a context manager (it reads torch.cuda.use_mem_pool.__wrapped__ there since torch 2.14)."""

    def step(x):
        with torch.enable_grad():
            return (x * 2).sum()

    with translate.patched():
        torch._dynamo.reset()
        try:
            compiled = torch.compile(step, backend="eager", fullgraph=True)
            assert compiled(torch.ones(3, device="cuda")).item() == 6.0
        finally:
            torch._dynamo.reset()
