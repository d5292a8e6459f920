"""torch.<ns>.default_generators under translation, with a namespace that fills its tuple late.

torch.cuda's ``default_generators`` is ``()`` until CUDA initialises (seen on an H100 with
torch 2.11: patching then failed with IndexError). The stand-in below behaves the same way.
"""
from __future__ import annotations

import types

import pytest
import torch

from torchdevice.namespaces import _DeviceGenerators
from torchdevice.torch_backend import NamespaceView, TorchRNG


def _late_namespace(count: int):
    gens = tuple(torch.Generator() for _ in range(count))
    ns = types.SimpleNamespace(default_generators=(), inits=0)

    def _lazy_init():
        ns.inits += 1
        ns.default_generators = gens

    ns._lazy_init = _lazy_init
    return ns, gens


def test_default_generator_initialises_a_late_namespace():
    module, gens = _late_namespace(2)
    rng = TorchRNG("late", NamespaceView(module, ["default_generators", "manual_seed"], label="late"))
    assert rng.default_generator(1) is gens[1]
    assert module.inits == 1
    assert rng.default_generator(0) is gens[0] and module.inits == 1


def test_device_generators_sequence_is_lazy_and_behaves_like_the_tuple():
    module, gens = _late_namespace(2)
    rng = TorchRNG("late", NamespaceView(module, ["default_generators"], label="late"))
    lazy = _DeviceGenerators(rng.default_generator, 2)
    assert module.inits == 0 and len(lazy) == 2  # nothing initialised by building it
    assert lazy[0] is gens[0] and lazy[-1] is gens[1] and lazy[0:2] == gens
    assert lazy == gens and list(lazy) == list(gens)
    with pytest.raises(IndexError):
        lazy[2]


def test_iteration_propagates_lookup_errors():
    def broken(index):
        raise IndexError("device tuple not filled")

    with pytest.raises(IndexError, match="not filled"):
        tuple(_DeviceGenerators(broken, 1))
