"""Device arguments under translation, compared with native torch.

The rule: every device argument behaves as native torch does with the source family read as
the target (the same device, or the same exception class), whatever the order of calls.
The native side runs first, unpatched, on inputs where ``cuda`` is replaced by the target's
device; the translated side then runs on the original inputs, in order and shuffled.
"""
from __future__ import annotations

import enum
import io
import random

import numpy as np
import pytest
import torch
from helpers import device_translation_onto_meta

import torchdevice
from torchdevice import devices, translate

RealDevice = torch.device


class StrDevice(str, enum.Enum):
    CUDA = "cuda"
    CPU = "cpu"


class Ordinal(enum.IntEnum):
    ZERO = 0
    ONE = 1


class Named(str):
    pass


def _inputs() -> list:
    fixed = [
        "cuda", "cuda:0", "cuda:1", "CUDA", "cuda:x", "cuda:-1", "cpu", "cpu:0", "meta", "nope",
        0, 1, 2, -1, 2**63, True, False, 0.0, 1.0, 0j, np.int64(0), np.int64(1), np.str_("cuda"),
        np.str_("cuda:1"), StrDevice.CUDA, StrDevice.CPU, Ordinal.ZERO, Ordinal.ONE, Named("cuda:0"),
        b"cuda", b"cpu", RealDevice("cpu"), ("cuda", 0), [0], object(),
        # real device objects made before patching, far ordinals, things with __index__ that are no ordinal
        RealDevice("cuda", 0), RealDevice("cuda", 1), RealDevice("cuda"), 200, 2**40, torch.tensor(0),
        np.bool_(True),
    ]
    rng = random.Random(1234)
    drawn = []
    for _ in range(60):
        kind = rng.choice(["str", "int", "np", "float"])
        n = rng.randrange(-2, 4)
        drawn.append({"str": f"cuda:{n}", "int": n, "np": np.int64(n), "float": float(n)}[kind])
    return fixed + drawn


def _as_native(value, count: int, target: str = "cpu", indexed: bool = False):
    """``value`` with the source family read as the target (``target``, ``count`` devices; the index
    kept where the target's tensors carry one, ``indexed``); or a marker that an out-of-range index
    must raise. The sim plugin's tests use it with ``target="sim", indexed=True``."""

    def device(index: int | None):
        return target if index is None or not indexed else f"{target}:{index}"

    if isinstance(value, torch.Tensor):
        return value  # not a device ordinal: torch decides
    if isinstance(value, RealDevice):
        if value.type != "cuda":
            return value
        if value.index is not None and value.index >= count:
            return RuntimeError
        return RealDevice(target, value.index) if indexed else target
    if isinstance(value, bytes):
        value = value.decode()
    if isinstance(value, str):
        text = str.__str__(value)
        if text.startswith("cuda"):
            rest = text[4:]
            if rest.startswith(":") and rest[1:].isdigit():
                return device(int(rest[1:])) if int(rest[1:]) < count else RuntimeError
            return target + rest
        return text
    if type(value) is not bool and type(value).__name__ != "bool_" and hasattr(type(value), "__index__"):
        index = int(value)
        if index < 0:
            return RuntimeError
        if index >= 2**63:
            return ValueError
        return device(index) if index < count else RuntimeError
    return value


CALLS = {
    "torch.device": lambda d: torch.device(d),
    "zeros": lambda d: torch.zeros(1, device=d).device,
    "empty_like": lambda d: torch.empty_like(torch.ones(1), device=d).device,
    "new_zeros": lambda d: torch.ones(1).new_zeros(2, device=d).device,
    "Tensor.to": lambda d: torch.ones(1).to(d).device,
    "Module.to": lambda d: next(torch.nn.Linear(1, 1).to(d).parameters()).device,
    "Generator": lambda d: torch.Generator(device=d).device,
}


def _outcome(call, value):
    try:
        result = call(value)
    except Exception as error:  # the class is what is compared
        for cls in (TypeError, ValueError, RuntimeError):
            if isinstance(error, cls):
                return cls.__name__
        return type(error).__name__
    return result.type if isinstance(result, RealDevice) else repr(result)


def _native_outcomes(inputs, count):
    out = {}
    for i, value in enumerate(inputs):
        native = _as_native(value, count)
        for name, call in CALLS.items():
            if isinstance(native, type) and issubclass(native, Exception):
                out[i, name] = native.__name__
            else:
                out[i, name] = _outcome(call, native)
    return out


def _translated_outcomes(inputs, order):
    return {(i, name): _outcome(call, inputs[i]) for i in order for name, call in CALLS.items()}


@pytest.mark.filterwarnings("ignore:Complex modules")
@pytest.mark.parametrize("count", [1, 2])
def test_device_arguments_behave_as_native_in_any_order(on_cpu, monkeypatch, count):
    if count > 1:
        monkeypatch.setenv("LOCAL_WORLD_SIZE", str(count))  # host backends: one device per local rank
        torchdevice.use("cpu")  # re-resolve with the new count
    translate.unpatch()
    inputs = _inputs()
    native = _native_outcomes(inputs, count)
    with torchdevice.patched():
        assert torch.cuda.device_count() == count
        in_order = _translated_outcomes(inputs, range(len(inputs)))
    order = list(range(len(inputs)))
    random.Random(7).shuffle(order)
    with torchdevice.patched():
        shuffled = _translated_outcomes(inputs, order)
    differ = {k: (native[k], in_order[k]) for k in native if native[k] != in_order[k]}
    # torch.device(non-device) has no native analogue to read through "cuda": a str that is no
    # device raises in both; objects that are no device at all raise TypeError in both.
    assert not differ, {(repr(inputs[i]), n): v for (i, n), v in differ.items()}
    assert shuffled == in_order


def test_cache_is_not_poisoned_by_equal_values_of_other_types(on_cpu):
    with torchdevice.patched():
        with pytest.raises(TypeError):
            torch.zeros(1, device=True)
        assert torch.zeros(1, device=np.int64(0)).device.type == "cpu"
        assert torch.zeros(1, device=0).device.type == "cpu"
        with pytest.raises(TypeError):
            torch.zeros(1, device=False)
        with pytest.raises(TypeError):
            torch.zeros(1, device=0.0)
        with pytest.raises(TypeError):
            torch.device(True)


def test_bare_ordinal_and_negative_index(on_cpu):
    with torchdevice.patched():
        assert torch.device(0) == RealDevice("cpu")
        assert torch.device(np.int64(0)) == RealDevice("cpu")
        with pytest.raises(RuntimeError, match="negative"):
            torch.zeros(1, device=-1)
        with pytest.raises(RuntimeError):
            torch.device(-1)


def test_positional_device_subclasses_translate_like_factories(on_cpu):
    with torchdevice.patched():
        for value in (StrDevice.CUDA, np.str_("cuda"), Named("cuda:0"), Ordinal.ZERO, np.int64(0), b"cuda"):
            assert torch.ones(1).to(value).device.type == "cpu", value
            assert next(torch.nn.Linear(1, 1).to(value).parameters()).device.type == "cpu", value
        assert torch.ones(1).to(torch.float64).dtype == torch.float64  # dtypes are not devices


def test_load_with_a_rank_remap_table_that_misses_the_saved_location(on_cpu, tmp_path):
    buffer = io.BytesIO()
    torch.save({"w": torch.arange(3.0)}, buffer)
    data = buffer.getvalue().replace(b"cpu", b"cuda:0", 0)  # keep the blob valid
    path = tmp_path / "ckpt.pt"
    path.write_bytes(data)
    with torchdevice.patched():
        # torch.save on cpu records location "cpu"; simulate a cuda:0 checkpoint through the table
        loaded = torch.load(path, map_location={"cuda:1": "cuda:0"})
        assert loaded["w"].device.type == "cpu" and loaded["w"].tolist() == [0.0, 1.0, 2.0]
        missed = devices._remap_table({"cuda:1": "cuda:0"}, {"cuda"})
        storage = torch.UntypedStorage(4)
        assert missed(storage, "cuda:0").device.type == "cpu"  # not in the table: to the target
        assert missed(storage, "cuda:1").device.type == "cpu"  # in the table: its value, mapped


# -- an indexed target (device type meta, 2 devices): the index must be kept -------------------


@pytest.fixture
def meta_target():
    with device_translation_onto_meta() as target:
        yield target


def test_indexed_target_keeps_the_index(meta_target):
    assert torch.device("cuda:1") == RealDevice("meta", 1)
    assert torch.device("cuda", 1) == RealDevice("meta", 1)
    assert torch.device(1) == RealDevice("meta", 1)
    assert torch.device("cuda") == RealDevice("meta")
    assert devices.map_device("cuda:1") == RealDevice("meta", 1)
    assert devices.map_device(np.int64(1)) == RealDevice("meta", 1)
    # meta tensors report no index, so the mapping is checked at the argument torch receives
    seen = []
    real_to = torch.Tensor.to

    def spy(self, *args, **kwargs):
        seen.append(args[0] if args else kwargs.get("device"))
        return real_to(self, "cpu")

    wrapped = devices._positional_device(spy, "Tensor.to")
    wrapped(torch.ones(1), "cuda:1")
    wrapped(torch.ones(1), 1)
    assert seen == [RealDevice("meta", 1), RealDevice("meta", 1)]
    with pytest.raises(RuntimeError):
        torch.device("cuda:2")  # beyond the 2 devices


# -- torch's device context and default device (its constructor set holds real functions) ------


def _meta_world():
    with torch.device("meta"):
        linear = torch.nn.Linear(2, 2)
    out = {"context": linear.weight.device.type, "like": torch.empty_like(linear.weight).device.type}
    torch.set_default_device("meta")
    try:
        out["default"] = torch.zeros(1).device.type
        out["default_arange"] = torch.arange(3).device.type
    finally:
        torch.set_default_device(None)
    out["after"] = torch.zeros(1).device.type
    return out


def test_meta_device_context_and_default_device_as_native(on_cpu):
    translate.unpatch()
    native = _meta_world()
    # as at `import torch` with zero-code activation: torch's set is first built while patched
    torch.utils._device._device_constructors.cache_clear()
    assert native == {"context": "meta", "like": "meta", "default": "meta", "default_arange": "meta", "after": "cpu"}
    with torchdevice.patched():
        assert _meta_world() == native
        torch.set_default_device("cuda")
        try:
            assert torch.zeros(1).device.type == "cpu"  # the target
        finally:
            torch.set_default_device(None)
    assert _meta_world() == native  # and after unpatch
    constructors = torch.utils._device._device_constructors()
    assert torch.zeros in constructors and all(getattr(f, "__wrapped__", None) is None for f in constructors)
