"""torch.compile on sim: dynamo's device interface and inductor's CPU C++ codegen, registered for ``sim``.

Dynamo needs a device interface for every device type a graph touches (streams, events, device
guards, properties), and inductor a codegen backend (a scheduling that writes kernels and a wrapper
that calls them). sim has no compiler of its own, but its memory is host memory, so inductor's CPU
C++ kernels can read and write sim tensors through their data pointers. The generated kernels run
on the calling thread, outside sim's stream queues; the wrapper therefore synchronizes the sim
device before each generated kernel, so the kernel sees everything queued before it (the graph's
inputs, the ``mm``/``addmm`` extern kernels, which run through sim's queued fallback). Work queued
after a kernel runs after it anyway. Python wrapper only: ``cpp_wrapper=True`` is not supported.
"""
from __future__ import annotations

import sys
from typing import Any

import torch

from torchdevice.importhooks import AfterImport

from . import runtime

_registered = False


def register() -> None:
    """Register sim with dynamo and inductor (once)."""
    global _registered
    if _registered:
        return
    from torch._dynamo.device_interface import register_interface_for_device
    from torch._inductor.codegen.common import register_backend_for_device, register_device_op_overrides
    from torch._inductor.codegen.cpp import CppScheduling

    interface = _interface()
    register_interface_for_device(runtime.DEVICE_TYPE, interface)
    for index in range(runtime.device_count()):
        register_interface_for_device(f"{runtime.DEVICE_TYPE}:{index}", interface)
    register_backend_for_device(runtime.DEVICE_TYPE, CppScheduling, _wrapper_codegen())
    register_device_op_overrides(runtime.DEVICE_TYPE, _device_ops())
    _fake_mode_keeps_constants_on_host()
    _scheduler_treats_sim_as_cpu()
    _backend_of_sim_is_cpp()
    _flex_attention_as_on_the_cpu()
    _registered = True


def _backend_of_sim_is_cpp() -> None:
    """Inductor names the code generator of a device type (``get_current_backend``: "cpp" for the CPU,
    "triton" for every type it does not know), and types its kernels' variables by that name. sim's kernels
    are the CPU's C++ ones, so it answers "cpp" for sim; without that, an indexing bounds check (nanoGPT's
    embedding lookups) meets an untyped variable. Patched in the modules that imported the function."""
    import torch._inductor.codegen.common as common
    import torch._inductor.utils as utils

    original = utils.get_current_backend
    if getattr(original, "_sim", False):
        return

    def get_current_backend(device_type: str | None = None) -> str:
        if device_type is None:
            from torch._inductor.virtualized import V

            device_type = V.graph.get_current_device_or_throw().type
        return "cpp" if device_type == runtime.DEVICE_TYPE else original(device_type)

    get_current_backend._sim = True  # type: ignore[attr-defined]
    for module in (utils, common):
        module.get_current_backend = get_current_backend  # type: ignore[attr-defined]


_FLEX_LOWERING = "torch._inductor.kernel.flex.flex_attention"  # registers inductor's flex_attention lowering


def _flex_attention_as_on_the_cpu() -> None:
    """FlexAttention on sim as on the CPU, whose kernels sim runs: torch accepts only CUDA, CPU, XPU, HPU and
    MPS tensors (``_validate_device``), decides its auxiliary outputs per device (``_apply_kernel_options``:
    none on the CPU, which runs inference only) and lowers a CPU query to its C++ template (``lower_cpu``)
    and any other to Triton. For sim each answers as for the CPU, so a compiled ``flex_attention`` runs the
    CPU's C++ kernel on sim memory; what the CPU refuses (the backward, the logsumexp, the max scores) sim
    refuses alike, naming sim. Patched in torch's modules, sim's inputs alone taking the new branch; the
    lowering once inductor imports it (importing it here would cost every sim process half a second)."""
    import torch.nn.attention.flex_attention as flex

    validate, apply_options = flex._validate_device, flex._apply_kernel_options
    if getattr(validate, "_sim", False):
        return

    def _validate_device(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor) -> None:
        if query.device.type != runtime.DEVICE_TYPE:
            return validate(query, key, value)
        if query.requires_grad or key.requires_grad or value.requires_grad:
            raise NotImplementedError(
                "FlexAttention does not support backward on sim: sim runs the CPU's kernels, and torch has no "
                "FlexAttention backward on the CPU. Set the inputs' requires_grad to False.")
        return None

    def _apply_kernel_options(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, return_lse: bool,
                              kernel_options: Any, return_aux: Any = None) -> Any:
        options = apply_options(query, key, value, return_lse, kernel_options, return_aux)
        if runtime.DEVICE_TYPE in (query.device.type, key.device.type, value.device.type):
            if (return_aux.lse if return_aux is not None else return_lse) or options["OUTPUT_MAX"]:
                raise NotImplementedError("FlexAttention on sim (the CPU's kernels) returns neither the logsumexp "
                                          "nor the max scores, as on the CPU.")
            options["OUTPUT_LOGSUMEXP"] = False
        return options

    _validate_device._sim = True  # type: ignore[attr-defined]
    flex._validate_device = _validate_device
    flex._apply_kernel_options = _apply_kernel_options
    if _FLEX_LOWERING in sys.modules:
        _lower_flex_attention_on_sim_as_on_the_cpu()
    else:
        sys.meta_path.insert(0, AfterImport({_FLEX_LOWERING}, lambda _: _lower_flex_attention_on_sim_as_on_the_cpu()))


def _lower_flex_attention_on_sim_as_on_the_cpu() -> None:
    """Inductor's flex_attention lowering, a sim query taking the CPU's C++ template."""
    from torch._inductor import lowering
    from torch._inductor.kernel.flex.flex_cpu import lower_cpu

    op = torch.ops.higher_order.flex_attention
    lower = lowering.lowerings[op]
    if getattr(lower, "_sim", False):
        return

    def flex_attention(query: Any, key: Any, value: Any, *args: Any, **kwargs: Any) -> Any:
        if query.get_device().type == runtime.DEVICE_TYPE:
            return lower_cpu(query, key, value, *args, **kwargs)
        return lower(query, key, value, *args, **kwargs)

    flex_attention._sim = True  # type: ignore[attr-defined]
    lowering.lowerings[op] = flex_attention


def _scheduler_treats_sim_as_cpu() -> None:
    """Inductor's scheduler keeps some fusion passes (loop reordering and reindexing) off CPU nodes, whose
    C++ scheduling groups loops differently from the GPU's; sim nodes use that C++ scheduling, so they are
    CPU nodes to the scheduler (without it, compiling a softmax/cross-entropy fails in
    ``_try_reindex_pointwise_for_reduction``)."""
    from torch._inductor.scheduler import BaseSchedulerNode

    original = BaseSchedulerNode.is_cpu
    if getattr(original, "_sim", False):
        return

    def is_cpu(self: Any) -> bool:
        device = self.get_device()
        return original(self) or (device is not None and device.type == runtime.DEVICE_TYPE)

    is_cpu._sim = True  # type: ignore[attr-defined]
    BaseSchedulerNode.is_cpu = is_cpu  # type: ignore[method-assign]


def _fake_mode_keeps_constants_on_host() -> None:
    """Let FakeTensorMode make ``torch.tensor(..., device="sim")`` on the host and fake the move, as it does
    for CUDA on a machine without one.

    With a PrivateUse1 device available, FakeTensorMode really copies such constants to the device, with
    Python dispatch excluded; torch then runs sim's Python fallback through the active mode's trampoline,
    which knows only per-operator Python kernels and fails an internal assert ("func != nullptr"). Inductor
    does exactly that while it builds its attention patterns. Keeping the constants on the host avoids the
    device call; CUDA, HPU and any other PrivateUse1 backend keep torch's own answer.
    """
    from torch._subclasses.fake_tensor import FakeTensorMode

    original = FakeTensorMode.avoid_device_init
    if getattr(original, "_sim", False):
        return

    def avoid_device_init(self: Any) -> bool:
        if torch._C._get_privateuse1_backend_name() == runtime.DEVICE_TYPE:
            return not (torch.cuda.is_available() or (hasattr(torch, "hpu") and torch.hpu.is_available()))
        return original.fget(self)  # type: ignore[attr-defined]  # mypy reads a property got from the class as its getter

    avoid_device_init._sim = True  # type: ignore[attr-defined]
    FakeTensorMode.avoid_device_init = property(avoid_device_init)  # type: ignore[method-assign, assignment]


def _interface() -> type:
    """Dynamo's DeviceInterface for sim, answered by torch.sim."""
    from torch._dynamo.device_interface import DeviceInterface

    sim = runtime

    class SimInterface(DeviceInterface):
        device = sim.device  # type: ignore[assignment]
        Event = sim.Event  # type: ignore[assignment]
        Stream = sim.Stream  # type: ignore[assignment]

        class Worker:
            @staticmethod
            def set_device(device: int) -> None:
                sim.set_device(device)

            @staticmethod
            def current_device() -> int:
                return sim.current_device()

            @staticmethod
            def get_device_properties(device: torch.types.Device = None) -> Any:
                return sim.get_device_properties(device)

        current_device = staticmethod(sim.current_device)
        set_device = staticmethod(sim.set_device)
        device_count = staticmethod(sim.device_count)
        is_available = staticmethod(sim.is_available)
        stream = staticmethod(sim.stream)
        current_stream = staticmethod(sim.current_stream)
        set_stream = staticmethod(sim.set_stream)
        synchronize = staticmethod(sim.synchronize)
        get_device_properties = staticmethod(sim.get_device_properties)  # type: ignore[assignment]
        memory_allocated = staticmethod(sim.memory_allocated)

        @staticmethod
        def exchange_device(device: int) -> int:
            previous = sim.current_device()
            sim.set_device(device)
            return previous

        maybe_exchange_device = exchange_device

        @staticmethod
        def _set_stream_by_id(stream_id: int, device_index: int, device_type: int) -> None:
            sim.set_stream(sim.Stream(stream_id=stream_id, device_index=device_index, device_type=device_type))

        @staticmethod
        def get_raw_stream(device_idx: int) -> int:
            return sim.current_stream(device_idx).stream_id

        @staticmethod
        def get_compute_capability(device: torch.types.Device = None) -> Any:
            props = sim.get_device_properties(device)
            return props.major * 10 + props.minor

        @staticmethod
        def is_bf16_supported(including_emulation: bool = False) -> bool:
            return True

    return SimInterface


def _device_ops() -> Any:
    """The Python lines inductor's wrapper writes for device guards and synchronization on sim."""
    from torch._inductor.codegen.common import DeviceOpOverrides

    module = f"torch.{runtime.DEVICE_TYPE}"

    class SimDeviceOpOverrides(DeviceOpOverrides):
        def import_get_raw_stream_as(self, name: str) -> str:
            return f"def {name}(index): return {module}.current_stream(index).stream_id"

        def set_device(self, device_idx: int) -> str:
            return f"{module}.set_device({device_idx})"

        def synchronize(self) -> str:
            return f"{module}.synchronize()"

        def device_guard(self, device_idx: int) -> str:
            return f"{module}.device({device_idx})"

        def current_stream(self) -> str:
            return f"{module}.current_stream()"

    return SimDeviceOpOverrides()


def _wrapper_codegen() -> type:
    """Inductor's Python wrapper, calling the CPU C++ kernels on sim tensors after synchronizing the device."""
    from torch._inductor.codegen.wrapper import PythonWrapperCodegen
    from torch._inductor.virtualized import V

    class SimWrapperCodegen(PythonWrapperCodegen):
        @staticmethod
        def create(is_subgraph: bool, subgraph_name: Any, parent_wrapper: Any, partition_signatures: Any = None) -> Any:
            if is_subgraph:
                return PythonWrapperCodegen.create(is_subgraph, subgraph_name, parent_wrapper, partition_signatures)
            return SimWrapperCodegen()

        def make_allocation(self, name: str, device: torch.device, *args: Any, **kwargs: Any) -> str:
            line = super().make_allocation(name, device, *args, **kwargs)
            if device.type == runtime.DEVICE_TYPE and device.index is not None:
                # inductor names only the device type and relies on a device guard, which it writes for GPUs only
                line = line.replace(f"device='{device.type}'", f"device='{device}'", 1)
            return line

        def _generate_kernel_call_helper(self, kernel_name: str, call_args: Any, *, device: Any = None, **kwargs: Any) -> None:
            device = device or V.graph.get_current_device_or_throw()
            if device.type == runtime.DEVICE_TYPE:
                # the kernel reads sim memory directly: wait for what the device's queues still hold
                self.writeline(f"torch.{runtime.DEVICE_TYPE}.synchronize({'' if device.index is None else device.index})")
                device = torch.device("cpu")
            super()._generate_kernel_call_helper(kernel_name, call_args, device=device, **kwargs)

    return SimWrapperCodegen
