"""sim's fast path: common ops run by the C++ fallback without Python, and kernels on an idle
stream run on the calling thread instead of being handed to the stream's worker.

What must hold is what a GPU program sees: the same numbers as the CPU (and as sim's Python path), work
in stream order, events and asynchronous errors as before, and the race checker still reporting.
"""
from __future__ import annotations

import collections
import warnings
from collections.abc import Callable, Iterator

import pytest
import torch
import torch.nn.functional as F

from torchdevice_sim import SimRaceError, _extension, _kernels

Case = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]

CASES: dict[str, Case] = {
    "add": lambda a, b: a + b,
    "mm": lambda a, b: a @ b,
    "relu": lambda a, b: torch.relu(a),
    "scalar": lambda a, b: a * 2.5 - 1,
    "strided": lambda a, b: a.t() + b[:, :1],
    "reduce": lambda a, b: a.sum(0),
    "mean": lambda a, b: a.mean(),
    "mse_loss": lambda a, b: F.mse_loss(a, b),
    "int_division": lambda a, b: (a * 10).to(torch.int64) / 3,
    "cat": lambda a, b: torch.cat([a, b], 1),
    "where": lambda a, b: torch.where(a > 0, a, b),
    "softmax": lambda a, b: torch.softmax(a, -1),
}


def _python_fallback_calls() -> tuple[collections.Counter, Callable[[], None]]:
    """A counter of the ops the Python fallback runs, and the function that stops counting."""
    seen: collections.Counter = collections.Counter()
    original = _kernels.Fallback.__call__

    def counting(self: _kernels.Fallback, op: torch._ops.OpOverload, *args: object, **kwargs: object) -> object:
        seen[str(op)] += 1
        return original(self, op, *args, **kwargs)

    _kernels.Fallback.__call__ = counting  # type: ignore[method-assign]

    def stop() -> None:
        _kernels.Fallback.__call__ = original  # type: ignore[method-assign]

    return seen, stop


@pytest.fixture
def python_path(synced) -> Iterator[None]:
    """sim with its fast path off: every op through the Python fallback."""
    C = _extension.load()
    was = C.set_fast(False)
    try:
        yield
    finally:
        C.set_fast(was)


@pytest.mark.parametrize("name", sorted(CASES))
def test_the_fast_path_gives_the_cpus_numbers(synced, name):
    torch.manual_seed(0)
    a, b = torch.randn(16, 16), torch.randn(16, 16)
    out = CASES[name](a.to("sim"), b.to("sim"))
    expected = CASES[name](a, b)
    assert out.device.type == "sim" and out.dtype == expected.dtype and out.shape == expected.shape
    assert out.stride() == expected.stride()
    assert torch.equal(out.cpu(), expected)


@pytest.mark.parametrize("name", sorted(CASES))
def test_the_fast_path_gives_the_python_paths_numbers(synced, python_path, name):
    torch.manual_seed(0)
    a, b = torch.randn(16, 16), torch.randn(16, 16)
    slow = CASES[name](a.to("sim"), b.to("sim")).cpu()
    C = _extension.load()
    C.set_fast(True)
    fast = CASES[name](a.to("sim"), b.to("sim")).cpu()
    assert torch.equal(fast, slow) and fast.stride() == slow.stride()


def test_common_ops_never_reach_the_python_fallback(synced):
    a, b = torch.randn(64, 64, device="sim"), torch.randn(64, 64, device="sim")
    synced.synchronize()
    seen, stop = _python_fallback_calls()
    try:
        a + b, a @ b, torch.relu(a), a.mul_(2), torch.add(a, b, out=torch.empty(64, 64, device="sim"))
    finally:
        stop()
    assert not seen, f"these went through Python: {dict(seen)}"


def test_in_place_and_out_ops_write_the_tensors_given(synced):
    x, y = torch.ones(8, device="sim"), torch.full((8,), 2.0, device="sim")
    out = torch.empty(8, device="sim")
    returned = torch.add(x, y, out=out)
    assert returned is out and torch.equal(out.cpu(), torch.full((8,), 3.0))
    assert x.mul_(y) is x and torch.equal(x.cpu(), torch.full((8,), 2.0))
    small = torch.empty((), device="sim")  # an out= smaller than the input (a reduction)
    torch.sum(y, 0, out=small)
    assert small.item() == 16.0


def test_a_kernel_on_an_idle_stream_is_done_when_the_launch_returns(synced):
    x = torch.ones(1000, device="sim")
    synced.synchronize()
    y = x + 1
    assert synced.current_stream().query()  # it ran on the calling thread
    event = synced.Event()
    event.record()
    assert event.query()  # an event recorded after it is complete at once
    assert y.sum().item() == 2000


def test_work_launched_on_a_busy_stream_does_not_overtake_the_queue(synced):
    x = torch.zeros(1000, device="sim")
    synced._sleep(int(synced.get_device_properties(0).clock_rate * 100))  # 100 ms ahead of everything
    x.add_(1)
    y = x * 3
    event = synced.Event()
    event.record()
    assert not synced.current_stream().query() and not event.query()
    assert torch.equal(y.cpu(), torch.full((1000,), 3.0))
    assert event.query()


def test_an_idle_stream_runs_its_work_at_once_while_another_is_busy(synced):
    busy, idle = synced.Stream(), synced.Stream()
    x = torch.ones(100, device="sim")
    synced.synchronize()
    with synced.stream(busy):
        synced._sleep(int(synced.get_device_properties(0).clock_rate * 200))
    with synced.stream(idle):
        y = x + 1
        assert idle.query() and not busy.query()
        idle.wait_stream(busy)  # now it waits behind the sleep
        z = y * 2
        assert not idle.query()
    synced.synchronize()  # z was written on `idle`: the default stream's copy must wait for it, as on a GPU
    assert torch.equal(z.cpu(), torch.full((100,), 4.0))


def test_an_error_in_a_kernel_run_at_once_is_reported_at_the_next_call(synced):
    """A kernel failing on the device (an index out of range: a GPU's device-side assert) does not raise at
    its launch; the next call on the stream reports it, as when the kernel was queued."""
    x = torch.ones(4, device="sim")
    bad = torch.tensor([7], device="sim")
    synced.synchronize()
    x.gather(0, bad)  # launched: no error yet
    with pytest.raises(RuntimeError, match="queued earlier on stream 0 of sim:0 failed.*out of bounds"):
        synced.synchronize()
    assert torch.equal((x + 1).cpu(), torch.full((4,), 2.0))  # reported once; the stream works on


def test_the_race_checker_still_reports_a_race_between_idle_streams(checked):
    """Kernels run at once on idle streams are never concurrent in fact, but the program still lacks the
    ordering a GPU needs: the checker reasons about order, not timing."""
    x = torch.zeros(100, device="sim")
    x.add_(1)
    side = checked.Stream()
    with checked.stream(side), pytest.raises(SimRaceError, match="read-after-write"):
        x * 2
    side.wait_stream(checked.current_stream())
    with checked.stream(side):
        assert (x * 2).sum().item() == 200


def test_a_pointwise_ops_scalar_changes_its_numbers_not_its_plan(synced):
    """Plans (Meta results) of pointwise ops ignore Scalar values, as an optimizer's step size changes every
    step; the values still reach the kernel, and ops whose shape a Scalar sets keep a plan per value."""
    a = torch.randn(32)
    x = a.to("sim")
    for value in (0.5, 2.0, -3.0, 7):
        assert torch.equal(x.mul(value).cpu(), a.mul(value))
        assert torch.equal(torch.add(x, x, alpha=value).cpu(), torch.add(a, a, alpha=value))
    for end in (5, 7, 3):
        assert torch.equal(torch.arange(end, device="sim").cpu(), torch.arange(end))


def _adam_like_step(params: list[torch.Tensor], grads: list[torch.Tensor], avg: list[torch.Tensor], step: int) -> list:
    """Adam's foreach ops (torch.optim.Adam on an accelerator), with the step's Scalar[] bias corrections."""
    torch._foreach_lerp_(avg, grads, 0.1)
    torch._foreach_mul_(params, 0.99)
    denom = torch._foreach_sqrt(avg)  # a fresh list
    torch._foreach_add_(denom, 1e-8)
    torch._foreach_addcdiv_(params, grads, denom, [-0.001 / (1 - 0.9**step)] * len(params))
    return denom


def test_foreach_ops_run_whole_on_the_fast_path_with_the_cpus_numbers(synced):
    """A foreach op is one launch (its composite kernel would make one per tensor), and gives the CPU's
    numbers; its Scalar[] values change every step and still reach the kernel."""
    torch.manual_seed(0)
    cpu = [[torch.rand(5, 3), torch.rand(7)] for _ in range(3)]  # params, grads, averages (sqrt: not negative)
    sim = [[t.to("sim") for t in ts] for ts in cpu]
    seen, stop = _python_fallback_calls()
    results = []
    try:
        for step in (1, 2, 3):
            results.append((list(_adam_like_step(*cpu, step)), list(_adam_like_step(*sim, step))))
    finally:
        stop()
    assert not seen, f"these went through Python: {dict(seen)}"
    for expected, got in [*results, (cpu[0] + cpu[2], sim[0] + sim[2])]:
        for e, g in zip(expected, got, strict=True):
            assert g.device.type == "sim" and g.stride() == e.stride() and torch.equal(g.cpu(), e)
    for name in ("_foreach_lerp_.Scalar", "_foreach_addcdiv_.ScalarList", "_foreach_sqrt"):  # sim's own kernel
        assert torch._C._dispatch_has_kernel_for_dispatch_key(f"aten::{name}", "PrivateUse1"), name


def test_foreach_ops_over_two_devices_run_per_tensor(synced):
    """A list spanning both sim devices is no single launch: the composite loop runs each tensor's op on its
    own device, as before (CUDA's foreach kernels fall back to that loop too)."""
    if synced.device_count() < 2:
        pytest.skip("needs two sim devices")
    a, b = torch.ones(4, device="sim:0"), torch.ones(4, device="sim:1")
    torch._foreach_add_([a, b], 2.0)
    assert torch.equal(a.cpu(), torch.full((4,), 3.0)) and torch.equal(b.cpu(), torch.full((4,), 3.0))
    assert [t.device.index for t in torch._foreach_sqrt([a, b])] == [0, 1]


def test_foreach_ops_report_races_to_the_checker(checked):
    """With the race checker on, a foreach op's per-tensor kernels are checked as before."""
    x = torch.zeros(100, device="sim")
    x.add_(1)
    side = checked.Stream()
    with checked.stream(side), pytest.raises(SimRaceError, match="write-after-write|read-after-write"):
        torch._foreach_add_([x], 2.0)


STRUCTURED: dict[str, Callable[..., torch.Tensor]] = {  # functional and in-place variants of structured ops
    "add": lambda a, b, t: torch.add(a, b, alpha=2),
    "broadcast": lambda a, b, t: a.t() + b[:1],
    "add_": lambda a, b, t: a.add_(b[:, :1]),
    "addmm": lambda a, b, t: torch.addmm(b[0], a, b.t()),
    "mm_transposed": lambda a, b, t: a.t() @ b[:, :5],  # out smaller than an input
    "sum": lambda a, b, t: a.sum(1, keepdim=True),
    "mse_loss": lambda a, b, t: F.mse_loss(a, b),  # its CPU out= kernel grows a 0-dim out while it works
    "log_softmax": lambda a, b, t: torch.log_softmax(a, 0),
    "threshold_backward": lambda a, b, t: torch.ops.aten.threshold_backward(a, b, 0.0),
    "nll_loss": lambda a, b, t: F.nll_loss(a, t),
    "bool_result": lambda a, b, t: torch.eq(a > 0, b[0] > 0),
    "no_elements": lambda a, b, t: a[:0] + b[:0],
}


@pytest.mark.parametrize("name", sorted(STRUCTURED))
def test_structured_ops_run_sims_kernel_with_the_cpus_numbers_and_the_meta_layout(synced, name):
    """A structured op's functional and in-place variants have sim's kernel (the fast path, the CPU's out=
    kernel writing the fresh device tensor) instead of torch's wrapper running the meta function each call:
    the CPU's numbers bitwise, the Meta kernel's layout (what torch.compile's fake tensors promise), no
    warning (an out= kernel growing a non-empty out warns), nothing through Python."""
    torch.manual_seed(0)
    inputs = [torch.randn(16, 16), torch.randn(16, 16), torch.randint(0, 16, (16,))]
    expected = STRUCTURED[name](*[t.clone() for t in inputs])
    meta = STRUCTURED[name](*[t.to("meta") for t in inputs])
    on_sim = [t.to("sim") for t in inputs]
    synced.synchronize()
    seen, stop = _python_fallback_calls()
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            got = STRUCTURED[name](*on_sim)
    finally:
        stop()
    assert not seen, f"these went through Python: {dict(seen)}"
    assert got.device.type == "sim" and got.dtype == expected.dtype and got.shape == expected.shape
    assert got.stride() == meta.stride()
    assert torch.equal(got.cpu(), expected)


def test_structured_ops_have_sims_kernel():
    for name in ("add.Tensor", "add_.Tensor", "addmm", "mm", "sum.dim_IntList", "threshold_backward", "_log_softmax"):
        assert torch._C._dispatch_has_kernel_for_dispatch_key(f"aten::{name}", "PrivateUse1"), name


def test_structured_ops_the_fast_path_leaves_take_torchs_wrapper(synced):
    """Devices mixed, a shape error: the call takes torch's wrapper as before, with its errors."""
    x = torch.ones(4, device="sim")
    assert torch.equal((x + torch.tensor(2.0)).cpu(), torch.full((4,), 3.0))  # a CPU scalar is fine
    with pytest.raises(RuntimeError, match="device"):
        x + torch.ones(4)
    with pytest.raises(RuntimeError, match="size of tensor a"):
        x + torch.ones(5, device="sim")
    with pytest.raises(RuntimeError, match="mat1 and mat2 shapes cannot be multiplied"):
        torch.mm(torch.ones(2, 3, device="sim"), torch.ones(2, 3, device="sim"))


def test_structured_ops_report_races_to_the_checker(checked):
    """With the race checker on, a structured op's functional variant is checked as before."""
    x = torch.zeros(100, device="sim")
    x.add_(1)
    side = checked.Stream()
    with checked.stream(side), pytest.raises(SimRaceError, match="read-after-write"):
        torch.mm(x.view(10, 10), x.view(10, 10))


def test_copies_between_host_and_device_take_the_fast_path(synced):
    """`.to(device)`, `.cpu()`, `copy_` (other dtype, other strides, a CPU scalar broadcast) and copies within a
    device run without Python, with the CPU's numbers; a copy with pageable host memory is done on return."""
    torch.manual_seed(0)
    a = torch.randn(5, 7)
    seen, stop = _python_fallback_calls()
    try:
        x = a.to("sim")
        back = x.cpu()  # done on return: no synchronize before reading it
        converted = x.to(torch.float64).cpu()
        strided = torch.empty(7, 5, device="sim").t()
        strided.copy_(a)
        filled = torch.empty(3, device="sim").copy_(torch.tensor(2.5))
        within = x.clone()
    finally:
        stop()
    assert not seen, f"these went through Python: {dict(seen)}"
    assert torch.equal(back, a) and torch.equal(converted, a.double())
    assert strided.stride() == (1, 5) and torch.equal(strided.cpu(), a)
    assert torch.equal(filled.cpu(), torch.full((3,), 2.5)) and torch.equal(within.cpu(), a)


def test_copies_the_fast_path_leaves_run_as_before(synced):
    """A copy between two devices (ordered after both devices' streams) takes the Python copy; a lazily
    conjugated source is resolved before (torch's Conjugate key); the numbers are the CPU's."""
    z = torch.randn(4, dtype=torch.complex64)
    assert torch.equal(z.to("sim").conj().cpu().resolve_conj(), z.conj().resolve_conj())
    if synced.device_count() < 2:
        pytest.skip("needs two sim devices")
    x = z.to("sim:0")
    seen, stop = _python_fallback_calls()
    try:
        y = x.to("sim:1")
    finally:
        stop()
    assert seen["aten._copy_from.default"] == 1 and torch.equal(y.cpu(), z)


def test_copies_report_races_to_the_checker(checked):
    """With the race checker on, a copy into a tensor another stream is writing is still a race."""
    x = torch.zeros(100, device="sim")
    x.add_(1)
    side = checked.Stream()
    with checked.stream(side), pytest.raises(SimRaceError, match="write-after-write"):
        x.copy_(torch.ones(100))


def test_item_waits_for_the_stream_without_python(synced):
    """`.item()` after queued work reads the finished value, without the Python fallback; busy stream included."""
    x = torch.ones(64, 64, device="sim")
    side = synced.Stream()
    seen, stop = _python_fallback_calls()
    try:
        with synced.stream(side):
            synced._sleep(1_000_000)  # the side stream busy: the next kernels queue behind it
            total = (x @ x).sum()
            value = total.item()
        flag = torch.tensor(True, device="sim").item()
    finally:
        stop()
    assert not seen, f"these went through Python: {dict(seen)}"
    assert value == 64.0 * 64 * 64 and flag is True


def test_a_kernel_returning_a_zero_tensor_gives_zeros(synced):
    """sgn's backward on a real input returns torch's ZeroTensor (no memory of its own): copied in as zeros."""
    x = torch.randn(5, device="sim", requires_grad=True)
    (grad,) = torch.autograd.grad(torch.sgn(x).sum(), [x])
    assert torch.equal(grad.cpu(), torch.zeros(5))


@pytest.mark.parametrize("fast", [True, False], ids=["fast path", "python path"])
def test_a_copy_onto_overlapping_memory_is_refused_as_on_the_cpu(synced, fast):
    """A source partly overlapping the written tensor, or a written tensor whose elements share memory: the CPU's
    (and CUDA's) copy_ refuses both; sim gave whatever the host's loop order gave."""
    C = _extension.load()
    was = C.set_fast(fast)
    try:
        x = torch.arange(10.0, device="sim")
        with pytest.raises(RuntimeError, match="refer to a single memory location"):
            x[1:].copy_(x[:-1])
        with pytest.raises(RuntimeError, match="refers to a single memory location"):
            torch.zeros(3, 1, device="sim").expand(3, 4).copy_(torch.ones(3, 4))
        x[5:].copy_(x[:5])  # apart: fine
    finally:
        C.set_fast(was)
    assert torch.equal(x.cpu(), torch.tensor([0.0, 1, 2, 3, 4, 0, 1, 2, 3, 4]))
