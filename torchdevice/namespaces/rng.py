"""``torch.<ns>`` random-number functions: seeds, generator states, default_generators."""
from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from typing import Any, Callable

import torch

from ..router import Target
from .rules import op_rule
from .table import Builder, fronts


@fronts("manual_seed", op_rule("rng", "manual_seed"))
def build_manual_seed(target: Target, ns: str, name: str) -> Callable[..., Any]:
    fn = getattr(target.rng, name)

    def impl(seed: int) -> None:
        fn(int(seed))

    impl.__name__ = impl.__qualname__ = name
    return impl


fronts("manual_seed_all", op_rule("rng", "manual_seed_all"))(build_manual_seed)


def no_argument_op_builder(family: str, op: str) -> Builder:
    """Builder of ``torch.<ns>.<name>()``: the backend's ``family.op()``."""

    def build(target: Target, ns: str, name: str) -> Callable[..., Any]:
        fn = getattr(getattr(target, family), op)

        def impl() -> Any:
            return fn()

        impl.__name__ = impl.__qualname__ = name
        return impl

    build.__qualname__ = f"no_argument_op_builder({family!r}, {op!r})"
    return build


for _name in ("seed", "seed_all", "initial_seed"):
    fronts(_name, op_rule("rng", _name))(no_argument_op_builder("rng", _name))


@fronts("get_rng_state", op_rule("rng", "get_rng_state"))
def build_get_rng_state(target: Target, ns: str, name: str) -> Callable[..., Any]:
    fn, index = target.rng.get_rng_state, target.index

    def get_rng_state(device: Any = None) -> torch.Tensor:
        return fn(index(device))

    return get_rng_state


def _check_state(new_state: object) -> None:
    if not isinstance(new_state, torch.Tensor) or new_state.dtype != torch.uint8:
        raise TypeError(f"new_state must be a torch.ByteTensor, got {type(new_state).__name__}")


@fronts("set_rng_state", op_rule("rng", "set_rng_state"))
def build_set_rng_state(target: Target, ns: str, name: str) -> Callable[..., Any]:
    fn, index = target.rng.set_rng_state, target.index

    def set_rng_state(new_state: torch.Tensor, device: Any = None) -> None:
        _check_state(new_state)
        fn(new_state, index(device))

    return set_rng_state


@fronts("get_rng_state_all", op_rule("rng", "get_rng_state", how="get_rng_state() of every device"))
def build_get_rng_state_all(target: Target, ns: str, name: str) -> Callable[..., Any]:
    fn, count = target.rng.get_rng_state, target.device_count

    def get_rng_state_all() -> list:
        return [fn(i) for i in range(count)]

    return get_rng_state_all


@fronts("set_rng_state_all", op_rule("rng", "set_rng_state", how="set_rng_state() of every device"))
def build_set_rng_state_all(target: Target, ns: str, name: str) -> Callable[..., Any]:
    fn, index = target.rng.set_rng_state, target.index

    def set_rng_state_all(new_states: Iterable[torch.Tensor]) -> None:
        for i, state in enumerate(new_states):
            _check_state(state)
            fn(state, index(i))

    return set_rng_state_all


@fronts("default_generators", op_rule("rng", "default_generator", how="each device's default generator"), kind="value")
def build_default_generators(target: Target, ns: str, name: str) -> Any:
    return _DeviceGenerators(target.rng.default_generator, target.device_count)


class _DeviceGenerators(Sequence):
    """Each device's default generator, looked up when asked: a device namespace fills its
    own tuple only when the device initialises (torch.cuda's is empty until then)."""

    def __init__(self, get: Callable[[int], Any], count: int):
        self._get, self._count = get, count

    def __len__(self) -> int:
        return self._count

    def __getitem__(self, index: int | slice) -> Any:
        if isinstance(index, slice):
            return tuple(self._get(i) for i in range(self._count)[index])
        return self._get(range(self._count)[index])

    def __iter__(self) -> Iterator[Any]:
        return (self._get(i) for i in range(self._count))  # errors propagate (Sequence's would stop)

    def __eq__(self, other: object) -> bool:
        return tuple(self) == (tuple(other) if isinstance(other, Sequence) else other)

    __hash__ = None  # type: ignore[assignment]  # mutable view, like a list

    def __repr__(self) -> str:
        return repr(tuple(self))
