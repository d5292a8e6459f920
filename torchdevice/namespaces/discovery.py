"""``torch.<ns>`` device functions: availability, counts, the current device, properties."""
from __future__ import annotations

from typing import Any, Callable, Literal, cast

from .. import router
from ..backend import DeviceProperties
from ..errors import UnsupportedError
from ..router import Target
from ..vocabulary import optional_index
from .rules import EMULATED, TRANSLATED, all_of, declared, op_rule
from .table import declare_native, fronts


@fronts("is_available", declared(
    TRANSLATED,
    "True only while {ns} is the source family (TORCHDEVICE_SOURCE / torchdevice run --source, default cuda), "
    "and then when the {backend} backend has devices, or is accelerator-less with report_available on "
    "(TORCHDEVICE_REPORT_AVAILABLE, default 1); False while another family is the source",
))
def build_is_available(target: Target, ns: str, name: str) -> Callable[..., Any]:
    available = target.available_for(ns)

    def is_available() -> bool:
        return available

    return is_available


@fronts("device_count", declared(
    TRANSLATED, "the {backend} backend's device count; 0 when is_available() is False ({ns} not the source "
    "family, or report_available off)",
))
def build_device_count(target: Target, ns: str, name: str) -> Callable[..., Any]:
    count = target.device_count if target.available_for(ns) else 0

    def device_count() -> int:
        return count

    return device_count


@fronts("init", declared(TRANSLATED, "resolves the {backend} backend (torchdevice's lazy initialization)"))
def build_init(target: Target, ns: str, name: str) -> Callable[..., Any]:
    def init() -> None:
        router.active()

    return init


@fronts("is_initialized", declared(TRANSLATED, "whether the {backend} backend has been resolved"))
def build_is_initialized(target: Target, ns: str, name: str) -> Callable[..., Any]:
    def is_initialized() -> bool:
        return router._active is not None

    return is_initialized


@fronts("current_device", op_rule("streams", "current_device"))
def build_current_device(target: Target, ns: str, name: str) -> Callable[..., Any]:
    current = target.streams.current_device

    def current_device() -> int:
        return current()

    return current_device


@fronts("set_device", op_rule("streams", "set_device"))
def build_set_device(target: Target, ns: str, name: str) -> Callable[..., Any]:
    set_device_op, index = target.streams.set_device, target.index

    def set_device(device: Any) -> None:
        if device is None or (isinstance(device, int) and device < 0):
            return  # a no-op, as torch.cuda.set_device(-1)
        set_device_op(index(device))

    return set_device


@fronts("synchronize", op_rule("streams", "synchronize"))
def build_synchronize(target: Target, ns: str, name: str) -> Callable[..., Any]:
    sync, index = target.streams.synchronize, target.index

    def synchronize(device: Any = None) -> None:
        sync(index(device))

    return synchronize


@fronts("device", all_of(("streams", "set_device"), ("streams", "current_device"),
                        how="context manager over the per-thread current device"), kind="class")
def build_device(target: Target, ns: str, name: str) -> type:
    current, set_device_op, index = target.streams.current_device, target.streams.set_device, target.index

    class device:
        """Context manager that makes ``device`` current for this thread, then restores it.

        A negative index or None leaves everything unchanged, as ``torch.cuda.device``.
        """

        def __init__(self, device: Any) -> None:
            self.idx = optional_index(device, current)  # as CUDA's _get_device_index(optional=True)
            self.prev_idx = -1

        def __enter__(self) -> None:
            if self.idx < 0:
                self.prev_idx = -1
                return
            wanted = index(self.idx)
            self.prev_idx = current()
            if wanted != self.prev_idx:
                set_device_op(wanted)

        def __exit__(self, *exc: object) -> Literal[False]:
            if self.prev_idx >= 0:
                self.idx = current()
                if self.idx != self.prev_idx:
                    set_device_op(self.prev_idx)
            return False

        def __repr__(self) -> str:
            return f"torch.{ns}.device({self.idx})"

    device.__module__ = f"torch.{ns}"
    device.__qualname__ = "device"
    return device


@fronts("device_of", all_of(("streams", "set_device"), ("streams", "current_device"),
                           how="makes the device of a tensor on the {backend} backend current"), kind="class")
def build_device_of(target: Target, ns: str, name: str) -> type:
    device_cls = target.state[f"{ns}.device"]
    device_type = target.device_type

    class device_of(device_cls):  # type: ignore[misc,valid-type]  # (this install's device class)
        """Context manager that makes the device of ``obj`` (a tensor or storage) current."""

        def __init__(self, obj: Any) -> None:
            idx = obj.get_device() if obj.device.type == device_type else -1
            super().__init__(idx if idx is not None and idx >= 0 else -1)

    device_of.__module__ = f"torch.{ns}"
    device_of.__qualname__ = "device_of"
    return device_of


_PROPS = "from the {backend} backend's device properties ({what})"


@fronts("get_device_properties", declared(
    TRANSLATED, "torchdevice.DeviceProperties of the {backend} device (CUDA's field names: name, "
    "total_memory, major/minor (None without a compute capability), multi_processor_count)",
))
def build_get_device_properties(target: Target, ns: str, name: str) -> Callable[..., Any]:
    props, index = target.properties, target.index

    def get_device_properties(device: Any = None) -> DeviceProperties:
        return props(index(device))

    return get_device_properties


@fronts("get_device_name", declared(TRANSLATED, _PROPS.replace("{what}", "name")))
def build_get_device_name(target: Target, ns: str, name: str) -> Callable[..., Any]:
    props, index = target.properties, target.index

    def get_device_name(device: Any = None) -> str:
        return props(index(device)).name

    return get_device_name


@fronts("is_bf16_supported", declared(TRANSLATED, _PROPS.replace("{what}", "bf16_supported")))
def build_is_bf16_supported(target: Target, ns: str, name: str) -> Callable[..., Any]:
    props, current = target.properties, target.streams.current_device

    def is_bf16_supported(including_emulation: bool = True) -> bool:
        return bool(props(current()).bf16_supported)

    return is_bf16_supported


@fronts("recommended_max_memory", declared(
    TRANSLATED, "the {backend} device's total memory (get_device_properties().total_memory): the backend "
    "gives no smaller recommended working-set figure",
))
def build_recommended_max_memory(target: Target, ns: str, name: str) -> Callable[..., Any]:
    props, current = target.properties, target.streams.current_device

    def recommended_max_memory() -> int:
        return int(props(current()).total_memory)

    return recommended_max_memory


@fronts("get_device_capability", declared(
    TRANSLATED, "the {backend} device's capability, or where it has none the CUDA feature level it offers: "
    "(8, 0) with bfloat16, else (7, 0); TORCHDEVICE_CAPABILITY=MAJOR.MINOR overrides (torchdevice.capability)",
))
def build_get_device_capability(target: Target, ns: str, name: str) -> Callable[..., Any]:
    props, index = target.properties, target.index

    def get_device_capability(device: Any = None) -> tuple[int, int]:
        return cast("tuple[int, int]", props(index(device)).capability)  # capability.complete filled it in

    return get_device_capability



@fronts("is_tf32_supported", declared(
    TRANSLATED, "False: TF32 is a tensor-core format of NVIDIA (and some AMD) GPUs, which the {backend} backend "
    "does not compute in; torch.backends.cuda.matmul.allow_tf32 has no effect there",
))
def build_is_tf32_supported(target: Target, ns: str, name: str) -> Callable[..., Any]:
    def is_tf32_supported() -> bool:
        return False

    return is_tf32_supported



@fronts("can_device_access_peer", declared(
    EMULATED, "validates both devices; a device is not its own peer (False, as CUDA answers); between two "
    "distinct devices it raises UnsupportedError (the backend reports no peer access)",
))
def build_can_device_access_peer(target: Target, ns: str, name: str) -> Callable[..., Any]:
    index, backend = target.index, target.name
    api = f"torch.{ns}.{name}"

    def can_device_access_peer(device: Any, peer_device: Any) -> bool:
        if index(device) == index(peer_device):
            return False
        raise UnsupportedError(api, backend, "the backend reports no peer-access information between devices")

    return can_device_access_peer


declare_native(("cast", "lru_cache"), "a Python helper (typing.cast / functools.lru_cache) re-exported by torch.{ns}; "
        "unrelated to the device")
declare_native("classproperty", "torch._utils.classproperty, a helper torch.{ns} re-exports; unrelated to the device")
declare_native(("get_arch_list", "get_gencode_flags"),
        "a fact about this torch build: the {ns} architectures it was compiled for (none on a build without {ns})")
