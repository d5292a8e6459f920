"""sim as a device, natively (``device="sim"``, ``torch.sim``): what a GPU has and the CPU has not.

Every number is checked against a CPU computation of the same thing, and every device rule
against what torch does for a device that is not the CPU.
"""
from __future__ import annotations

import io
import threading
import time

import pytest
import torch

import torchdevice_sim
from torchdevice_sim import config

MIB = 1 << 20


# -- the device type --------------------------------------------------------------------------------


def test_tensors_have_the_sim_device_type_and_index(synced):
    x = torch.ones(3, device="sim:1")
    assert x.device == torch.device("sim", 1) and x.device.type == "sim" and x.is_sim
    assert torch.zeros(2).sim().device == torch.device("sim", 0)
    assert torch._C._get_privateuse1_backend_name() == "sim"


def test_two_devices_by_default_and_an_invalid_ordinal_names_the_count(synced):
    assert synced.device_count() == config.DEFAULT_DEVICES
    with pytest.raises(RuntimeError, match=r"sim:5.*2 device"):
        torch.ones(1, device="sim:5")


def test_properties_are_a_gpus_with_the_capacity_as_total_memory(synced):
    props = synced.get_device_properties(1)
    assert props.total_memory == config.DEFAULT_MEMORY
    assert props.multi_processor_count > 0 and props.clock_rate > 0 and (props.major, props.minor) == (8, 0)


def test_current_device_is_per_thread(synced):
    synced.set_device(1)
    seen = []
    thread = threading.Thread(target=lambda: seen.append(synced.current_device()))
    thread.start()
    thread.join()
    assert seen == [0] and synced.current_device() == 1
    with synced.device(0):
        assert torch.empty(1, device="sim").device.index == 0
    assert synced.current_device() == 1


# -- device discipline ------------------------------------------------------------------------------


def test_mixing_with_a_cpu_tensor_raises_torchs_same_device_error(synced):
    x = torch.ones(4, device="sim")
    with pytest.raises(RuntimeError, match="Expected all tensors to be on the same device.*sim:0 and cpu"):
        x + torch.ones(4)
    with pytest.raises(RuntimeError, match="same device"):
        torch.ones(4, device="sim:1") * x


def test_a_zero_dim_cpu_tensor_is_a_scalar(synced):
    x = torch.arange(4.0, device="sim")
    assert torch.equal((x * torch.tensor(2.0)).cpu(), torch.arange(4.0) * 2)


def test_numpy_of_a_sim_tensor_raises_as_for_a_cuda_tensor(synced):
    with pytest.raises(TypeError, match="can't convert sim:0 device type tensor to numpy"):
        torch.ones(2, device="sim").numpy()


def test_cpu_kernels_refuse_sim_memory_until_copied(synced):
    x = torch.randn(5, device="sim")
    assert torch.equal(x.cpu(), x.to("cpu")) and x.cpu().device.type == "cpu"


# -- numbers ----------------------------------------------------------------------------------------


def test_a_training_step_gives_the_cpus_numbers(synced):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.GELU(), torch.nn.Linear(16, 3))
    data, target = torch.randn(32, 8), torch.randint(0, 3, (32,))
    twin = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.GELU(), torch.nn.Linear(16, 3))
    twin.load_state_dict(model.state_dict())
    twin.to("sim")
    for net, x, y in ((model, data, target), (twin, data.to("sim"), target.to("sim"))):
        opt = torch.optim.AdamW(net.parameters(), lr=1e-2)
        for _ in range(3):
            opt.zero_grad()
            torch.nn.functional.cross_entropy(net(x), y).backward()
            opt.step()
    for a, b in zip(model.parameters(), twin.parameters()):
        assert b.device.type == "sim" and torch.equal(a, b.cpu())


@pytest.mark.parametrize("mode", ["sum", "mean", "max"])
@pytest.mark.parametrize("include_last_offset", [False, True])
def test_embedding_bag_gives_the_cpus_values_and_gradients_and_cudas_bag_of_each_index(synced, mode, include_last_offset):
    """The CPU kernel's numbers; its auxiliary outputs as CUDA's kernel makes them (and the meta kernel, which
    compiled code trusts): ``offset2bag`` filled, the backward reads it (left uninitialised, it crashed the
    process), ``bag_size`` one entry per offset. Bags 0 to 3 over 7 indices, bag 1 empty."""
    weight = torch.randn(10, 4, generator=torch.Generator().manual_seed(0), requires_grad=True)
    indices = torch.tensor([1, 2, 4, 5, 4, 9, 3])
    offsets = torch.tensor([0, 2, 2, 5, 7] if include_last_offset else [0, 2, 2, 5])
    padding_idx = None if mode == "max" else 4
    on_sim = weight.detach().to("sim").requires_grad_()
    bags = [torch.nn.functional.embedding_bag(indices.to(w.device), w, offsets.to(w.device), mode=mode,
                                              include_last_offset=include_last_offset, padding_idx=padding_idx)
            for w in (weight, on_sim)]
    for bag in bags:
        bag.pow(2).sum().backward()
    assert torch.equal(bags[0], bags[1].cpu()) and torch.equal(weight.grad, on_sim.grad.cpu())
    code = {"sum": 0, "mean": 1, "max": 2}[mode]
    aux = torch.ops.aten._embedding_bag(on_sim, indices.to("sim"), offsets.to("sim"), False, code, False, None,
                                        include_last_offset)
    meta = torch.ops.aten._embedding_bag(weight.to("meta"), indices.to("meta"), offsets.to("meta"), False, code,
                                         False, None, include_last_offset)
    assert [t.shape for t in aux] == [t.shape for t in meta]
    assert aux[1].tolist() == [0, 0, 2, 2, 2, 3, 3]
    if mode == "mean":  # the bags' sizes, which the mean's backward divides by
        assert aux[2].tolist()[:4] == [2, 0, 3, 2]


@pytest.mark.parametrize("cls", [torch.nn.LSTM, torch.nn.GRU])
@pytest.mark.parametrize("bias", [True, False])
def test_recurrent_layers_run_their_fused_cells_with_the_cpus_numbers(synced, cls, bias):
    """On a device other than the CPU, nn.LSTM and nn.GRU call the fused cells (_thnn_fused_lstm_cell ...), which
    only CUDA has kernels for: sim computes them as CUDA's kernels do. float64, so that the CPU's other order of
    additions (biases inside its linears) stays within 1e-12: packed sequences, 2 layers, both directions,
    outputs, final states and every gradient."""
    torch.manual_seed(0)
    net = cls(7, 5, num_layers=2, bidirectional=True, batch_first=True, bias=bias).double()
    twin = cls(7, 5, num_layers=2, bidirectional=True, batch_first=True, bias=bias).double()
    twin.load_state_dict(net.state_dict())
    twin.to("sim")
    x, lengths = torch.randn(4, 6, 7, dtype=torch.float64), torch.tensor([6, 5, 3, 2])
    results = []
    for model, inputs in ((net, x), (twin, x.to("sim"))):
        out, state = model(torch.nn.utils.rnn.pack_padded_sequence(inputs, lengths, batch_first=True))
        out, _ = torch.nn.utils.rnn.pad_packed_sequence(out, batch_first=True)
        h = state[0] if isinstance(state, tuple) else state
        (out.pow(2).sum() + h.sum()).backward()
        results.append([out.detach().cpu(), h.detach().cpu(), *(p.grad.cpu() for p in model.parameters())])
    for a, b in zip(*results):
        torch.testing.assert_close(b, a, rtol=1e-12, atol=1e-12)


def test_an_out_tensor_the_cpu_kernel_resizes_gets_the_result_on_the_device(synced):
    """Ops without a meta kernel run synchronously on host views; where the CPU kernel resizes an out= tensor
    (linalg_lstsq.out, called by torch.linalg.lstsq, grows its empty outs) the device tensor takes the result's
    sizes and strides. It kept its old, empty size before: an empty solution, silently."""
    a = torch.randn(5, 3, generator=torch.Generator().manual_seed(0))
    b = torch.randn(5, 2, generator=torch.Generator().manual_seed(1))
    expected, got = torch.linalg.lstsq(a, b), torch.linalg.lstsq(a.to("sim"), b.to("sim"))
    for e, g in zip(expected, got):
        assert g.device.type == "sim" and (g.shape, g.stride()) == (e.shape, e.stride())
        torch.testing.assert_close(g.cpu(), e)  # LAPACK's gelsy: not bit-reproducible run to run, even on the CPU
    out = torch.empty(0, device="sim")
    torch.linalg.eigvalsh(torch.diag(torch.tensor([3.0, 1.0, 2.0])).to("sim"), out=out)
    assert out.cpu().tolist() == [1.0, 2.0, 3.0]


def test_data_dependent_ops_and_item(synced):
    x = torch.tensor([0.0, 2.0, 0.0, 3.0], device="sim")
    assert x.nonzero().device.type == "sim"
    assert torch.equal(x.nonzero().cpu(), torch.tensor([[1], [3]]))
    assert torch.equal(x[x > 1].cpu(), torch.tensor([2.0, 3.0]))
    assert x.sum().item() == 5.0 and bool(torch.equal(x, x.clone()))


def test_dtype_conversions_views_and_copies(synced):
    base = torch.arange(12.0).reshape(3, 4)
    x = base.to("sim")
    assert torch.equal(x.t().contiguous().cpu(), base.t().contiguous())
    assert torch.equal(x[1:, ::2].cpu(), base[1:, ::2])
    assert x.half().dtype == torch.float16 and torch.equal(x.double().cpu(), base.double())
    y = torch.empty(3, 4, device="sim")
    y.copy_(base)
    assert torch.equal(y.cpu(), base)
    assert torch.equal(x.to("sim:1").cpu(), base) and x.to("sim:1").device.index == 1


# -- memory -----------------------------------------------------------------------------------------


def test_memory_allocated_moves_by_exactly_the_bytes_on_that_device_only(synced):
    before = [synced.memory_allocated(i) for i in range(2)]
    x = torch.empty(MIB, dtype=torch.float32, device="sim:1")
    assert synced.memory_allocated(1) - before[1] == 4 * MIB
    assert synced.memory_allocated(0) == before[0]
    del x
    assert synced.memory_allocated(1) == before[1]


def test_reserved_peak_stats_and_mem_get_info(synced):
    synced.empty_cache()
    synced.reset_peak_memory_stats(0)
    base = synced.memory_allocated(0)
    x = torch.empty(2 * MIB, dtype=torch.uint8, device="sim")
    del x
    synced.synchronize(0)
    stats = synced.memory_stats(0)
    assert synced.max_memory_allocated(0) - base == 2 * MIB
    assert synced.memory_reserved(0) >= synced.memory_allocated(0) + 2 * MIB  # cached, reusable
    assert stats["allocated_bytes.all.current"] == synced.memory_allocated(0)
    free, total = synced.mem_get_info(0)
    assert total == config.DEFAULT_MEMORY and free == total - synced.memory_reserved(0)
    synced.empty_cache()
    assert synced.memory_reserved(0) < 2 * MIB + synced.memory_allocated(0) + 1


def test_out_of_memory_is_catchable_at_the_capacity_and_leaks_nothing(synced):
    before = synced.memory_allocated(0)
    with pytest.raises(torch.OutOfMemoryError, match=r"sim out of memory\. Tried to allocate 9\.00 GiB"):
        torch.empty(9 * 1024**3, dtype=torch.uint8, device="sim")
    assert synced.memory_allocated(0) == before
    assert synced.memory_stats(0)["num_ooms"] >= 1
    assert torch.ones(2, device="sim").sum().item() == 2  # the program goes on


def test_memory_freed_while_queued_work_reads_it_is_not_reused_early(synced):
    """Two streams alternating, temporaries freed as soon as their last kernel is queued: a block
    must wait for every queue of its device. (A sweep that self-moved its pending list emptied the
    waits and handed blocks out early: 24 of 30 runs were wrong.)"""
    clock = synced.get_device_properties(0).clock_rate
    torch.manual_seed(0)
    weight, data = torch.randn(256, 256), torch.randn(8, 64, 256)
    expected = [torch.tanh(chunk @ weight).sum(0) for chunk in data.unbind(0)]
    on_device = weight.to("sim")
    for _ in range(10):
        streams = [synced.Stream(), synced.Stream()]
        results = []
        for i, chunk in enumerate(data.to("sim").unbind(0)):
            stream = streams[i % 2]
            stream.wait_stream(synced.current_stream())
            with synced.stream(stream):
                if i == 0:
                    synced._sleep(int(clock * 30))  # hold one queue back so that frees pend
                results.append(torch.tanh(chunk @ on_device).sum(dim=0))
        synced.synchronize()
        assert all(torch.equal(r.cpu(), e) for r, e in zip(results, expected))


def test_memory_fraction_caps_allocations(synced):
    synced.set_per_process_memory_fraction(0.001, 1)  # about 8 MiB of 8 GiB
    try:
        with pytest.raises(torch.OutOfMemoryError, match="memory fraction"):
            torch.empty(64 * MIB, dtype=torch.uint8, device="sim:1")
    finally:
        synced.set_per_process_memory_fraction(1.0, 1)
    with pytest.raises(ValueError, match="Invalid fraction"):
        synced.set_per_process_memory_fraction(2.0, 1)


# -- streams and events -----------------------------------------------------------------------------


def test_sleep_makes_the_queue_busy_and_synchronize_waits(synced):
    stream = synced.current_stream()
    cycles = int(synced.get_device_properties(0).clock_rate * 300)  # 300 ms
    start = time.perf_counter()
    synced._sleep(cycles)
    assert time.perf_counter() - start < 0.1, "queueing work must not block the host"
    assert not stream.query()
    synced.synchronize()
    assert stream.query() and time.perf_counter() - start >= 0.29


def test_events_record_without_blocking_and_time_the_queue_in_ms(synced):
    start, end = synced.Event(enable_timing=True), synced.Event(enable_timing=True)
    cycles = int(synced.get_device_properties(0).clock_rate * 200)
    t0 = time.perf_counter()
    start.record()
    synced._sleep(cycles)
    end.record()
    assert time.perf_counter() - t0 < 0.1 and not end.query()
    end.synchronize()
    assert end.query() and 190 <= start.elapsed_time(end) < 2000


def test_events_on_an_idle_stream_time_the_host_between_the_records(synced):
    """An idle stream reaches an event when it is recorded, as a GPU's does: the time between two records
    with nothing queued is the host's time between them, whenever the stream's worker gets to run
    (found by the core suite's event tests on sim: under load a 20 ms gap timed 11.6 ms)."""
    start, end = synced.Event(enable_timing=True), synced.Event(enable_timing=True)
    t0 = time.perf_counter()
    start.record()
    t1 = time.perf_counter()
    time.sleep(0.05)
    t2 = time.perf_counter()
    end.record()
    t3 = time.perf_counter()
    end.synchronize()
    assert (t2 - t1) * 1000 <= start.elapsed_time(end) <= (t3 - t0) * 1000


def test_timing_an_unrecorded_or_untimed_event_is_torchs_value_error(synced):
    timed, plain = synced.Event(enable_timing=True), synced.Event()
    with pytest.raises(ValueError, match="recorded"):
        timed.elapsed_time(synced.Event(enable_timing=True))
    timed.record()
    plain.record()
    with pytest.raises(ValueError, match="enable_timing=True"):
        timed.elapsed_time(plain)
    generic = torch.Event("sim", enable_timing=True)  # torch's own event class over sim's
    with pytest.raises(ValueError, match="recorded"):
        generic.elapsed_time(torch.Event("sim", enable_timing=True))


def test_kernels_run_in_order_after_pending_work(synced):
    x = torch.zeros(1000, device="sim")
    synced._sleep(int(synced.get_device_properties(0).clock_rate * 100))
    y = x + 1
    assert not synced.current_stream().query()  # the add waits behind the sleep
    assert y.sum().item() == 1000  # item waits for it


def test_wait_stream_and_wait_event_order_two_queues(synced):
    side = synced.Stream()
    clock = synced.get_device_properties(0).clock_rate
    x = torch.ones(100, device="sim")
    side.wait_stream(synced.current_stream())  # x is written on the default stream
    with synced.stream(side):
        synced._sleep(int(clock * 150))
        y = x * 3
    synced.current_stream().wait_stream(side)
    z = y + 1  # queued on the default stream, after side's work
    assert torch.equal(z.cpu(), torch.full((100,), 4.0))
    with synced.stream(side):
        synced._sleep(int(clock * 150))
        w = x * 5
    event = side.record_event()
    synced.current_stream().wait_event(event)
    v = w + 1  # queued on the default stream behind the event
    assert not event.query()
    assert torch.equal(v.cpu(), torch.full((100,), 6.0)) and event.query()


def test_a_missing_wait_stream_reads_data_not_yet_written_as_on_a_gpu(synced):
    # The race a CPU backend hides: work on a side stream does not wait for the default stream unless told.
    clock = synced.get_device_properties(0).clock_rate
    x = torch.zeros(100, device="sim")
    synced.synchronize()
    synced._sleep(int(clock * 400))  # the default stream is busy...
    x.fill_(1.0)  # ...so this write is still queued
    side = synced.Stream()
    with synced.stream(side):
        racy = x * 2  # no side.wait_stream(): reads x before the fill
    side.synchronize()
    assert torch.equal(racy.cpu(), torch.zeros(100))
    side.wait_stream(synced.current_stream())
    with synced.stream(side):
        ordered = x * 2
    synced.current_stream().wait_stream(side)
    assert torch.equal(ordered.cpu(), torch.full((100,), 2.0))


def test_a_copy_between_devices_runs_after_both_queues_and_before_later_work_on_the_source(synced):
    # As CUDA's peer copy: the destination's current stream waits for the source's, and the source's
    # current stream waits for the copy, so a write queued on the source device after it cannot overtake it.
    clock = synced.get_device_properties(0).clock_rate
    x = torch.arange(100.0, device="sim:0")
    with synced.device(1):
        synced._sleep(int(clock * 200))  # sim:1's queue is busy: the copy waits behind the sleep
    y = x.to("sim:1")
    x.fill_(-1.0)  # queued on sim:0 after the copy
    assert torch.equal(y.cpu(), torch.arange(100.0))
    assert torch.equal(x.cpu(), torch.full((100,), -1.0))


def test_non_blocking_copy_to_pinned_memory_is_asynchronous(synced):
    clock = synced.get_device_properties(0).clock_rate
    src = torch.arange(1000.0, device="sim")
    dst = torch.zeros(1000).pin_memory()
    assert dst.is_pinned()
    synced._sleep(int(clock * 200))
    dst.copy_(src, non_blocking=True)
    assert dst.sum().item() == 0, "the copy is queued behind the sleep: the host sees the old bytes"
    synced.synchronize()
    assert torch.equal(dst, torch.arange(1000.0))


def test_torch_accelerator_host_cache_calls_reach_sims_host_allocator(sim):
    """torch.accelerator.empty_host_cache() asks torch's host allocator of the current accelerator (sim):
    with none registered it crashed the process (a segfault)."""
    torch.ones(2, device="sim:0")
    torch.accelerator.empty_host_cache()  # nothing cached: returns
    pinned = torch.zeros(64).pin_memory()
    assert pinned.is_pinned() and torch.equal(pinned, torch.zeros(64))


def test_a_blocking_copy_to_the_host_waits_for_the_queue(synced):
    clock = synced.get_device_properties(0).clock_rate
    src = torch.arange(10.0, device="sim")
    synced._sleep(int(clock * 100))
    assert torch.equal(src.cpu(), torch.arange(10.0))


def test_torch_stream_and_event_are_the_generic_ones(synced):
    stream = torch.Stream(device="sim:1")
    assert stream.device_index == 1 and stream != synced.current_stream(1)
    event = torch.Event(device="sim:1", enable_timing=True)
    event.record(stream)
    event.synchronize()
    assert event.query() and stream.query()


# -- random numbers ---------------------------------------------------------------------------------


def test_each_device_has_its_own_generator(synced):
    synced.manual_seed_all(1234)
    a1 = torch.randn(3, device="sim:1")
    with synced.device(0):
        synced.manual_seed(99)  # seeds device 0 only
    a2 = torch.randn(3, device="sim:1")
    with synced.device(0):
        assert synced.initial_seed() == 99
    with synced.device(1):
        assert synced.initial_seed() == 1234
    synced.manual_seed_all(1234)
    b1, b2 = torch.randn(3, device="sim:1"), torch.randn(3, device="sim:1")
    assert torch.equal(a1.cpu(), b1.cpu()) and torch.equal(a2.cpu(), b2.cpu())
    assert not torch.equal(a1.cpu(), a2.cpu())


def test_rng_state_round_trips_and_matches_a_cpu_generator_seeded_alike(synced):
    synced.manual_seed_all(7)
    state = synced.get_rng_state(1)
    first = torch.rand(5, device="sim:1")
    synced.set_rng_state(state, 1)
    assert torch.equal(first.cpu(), torch.rand(5, device="sim:1").cpu())
    assert not torch.equal(first.cpu(), torch.rand(5, device="sim:1").cpu())  # the offset moved on


def _seed_offset(state: torch.Tensor) -> tuple[int, int]:
    return int(state[:8].view(torch.int64)), int(state[8:].view(torch.int64))


def test_rng_state_is_cudas_philox_seed_and_offset_advancing_as_cudas_kernels(synced):
    """16 bytes (seed, offset) as CUDA's; the offset moves by 4 per pass of CUDA's grid over the elements."""
    from torchdevice_sim._kernels import offset_advance

    synced.manual_seed_all(2**40 + 3)
    state = synced.get_rng_state(0)
    assert state.dtype == torch.uint8 and state.shape == (16,) and _seed_offset(state) == (2**40 + 3, 0)
    torch.rand(5, device="sim:0")
    torch.nn.functional.dropout(torch.ones(300_000, device="sim:0"), 0.5)
    assert offset_advance(5) + offset_advance(300_000) == 4 + 4 * 5  # 300,000 elements: 5 passes of 65,536
    assert _seed_offset(synced.get_rng_state(0)) == (2**40 + 3, 24)
    assert _seed_offset(synced.get_rng_state(1)) == (2**40 + 3, 0)  # device 1 drew nothing
    moved = state.clone()
    moved[8:] = torch.tensor([8], dtype=torch.int64).view(torch.uint8)
    synced.set_rng_state(moved, 0)
    at_8 = torch.rand(3, device="sim:0").cpu()
    synced.set_rng_state(moved, 0)
    assert torch.equal(at_8, torch.rand(3, device="sim:0").cpu())
    synced.manual_seed(2**40 + 3)  # (current device 0) the offset restarts at 0
    assert _seed_offset(synced.get_rng_state(0)) == (2**40 + 3, 0)
    with pytest.raises(RuntimeError, match="wrong size"):
        synced.set_rng_state(torch.get_rng_state(), 0)
    with pytest.raises(RuntimeError, match="multiple of 4"):
        moved[8:] = torch.tensor([6], dtype=torch.int64).view(torch.uint8)
        synced.set_rng_state(moved, 0)


def test_a_generator_made_on_sim_has_the_same_format_and_its_draws_replay(synced):
    g = torch.Generator("sim:1").manual_seed(11)
    assert g.device == torch.device("sim", 1) and g.get_state().shape == (16,)
    a = torch.randn(4, device="sim:1", generator=g).cpu()
    assert g.get_offset() == 4
    g.set_offset(0)
    assert torch.equal(a, torch.randn(4, device="sim:1", generator=g).cpu())
    clone = g.clone_state()
    assert torch.equal(clone.get_state(), g.get_state())


def test_dropout_draws_from_the_device_generator_and_leaves_the_cpus_alone(synced):
    torch.manual_seed(5)
    cpu_state = torch.get_rng_state()
    synced.manual_seed_all(3)
    a = torch.nn.functional.dropout(torch.ones(100, device="sim"), 0.5)
    assert torch.equal(torch.get_rng_state(), cpu_state)
    synced.manual_seed_all(3)
    b = torch.nn.functional.dropout(torch.ones(100, device="sim"), 0.5)
    assert torch.equal(a.cpu(), b.cpu()) and 0 < (a == 0).sum().item() < 100


# -- AMP and serialization ----------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_autocast_runs_matmuls_in_half_precision(synced, dtype):
    a, b = torch.randn(8, 8, device="sim"), torch.randn(8, 8, device="sim")
    with torch.autocast("sim", dtype=dtype):
        out = a @ b
        summed = torch.softmax(out, dim=-1)
    assert out.dtype == dtype and summed.dtype == torch.float32  # CUDA's lists: softmax runs in fp32
    assert torch.equal(out.cpu(), (a.cpu().to(dtype) @ b.cpu().to(dtype)))


def test_grad_scaler_unscales_and_skips_inf_steps(synced):
    param = torch.nn.Parameter(torch.ones(4, device="sim"))
    opt = torch.optim.SGD([param], lr=1.0)
    scaler = torch.amp.GradScaler("sim", init_scale=4.0)
    scaler.scale((param * 2).sum()).backward()
    scaler.step(opt)
    scaler.update()
    assert torch.equal(param.detach().cpu(), torch.full((4,), -1.0))
    opt.zero_grad()
    scaler.scale((param * float("inf")).sum()).backward()
    scaler.step(opt)
    scaler.update()
    assert torch.equal(param.detach().cpu(), torch.full((4,), -1.0)) and scaler.get_scale() == 2.0


def test_a_checkpoint_loads_natively_and_onto_device_1(synced, tmp_path):
    state = {"w": torch.arange(6.0, device="sim").reshape(2, 3)}
    path = tmp_path / "ck.pt"
    torch.save(state, path)
    assert b"torchdevice" not in path.read_bytes()
    on_cpu = torch.load(path, map_location="cpu")
    assert on_cpu["w"].device.type == "cpu" and torch.equal(on_cpu["w"], torch.arange(6.0).reshape(2, 3))
    assert torch.load(path)["w"].device == torch.device("sim", 0)
    assert torch.load(path, map_location="sim:1")["w"].device == torch.device("sim", 1)
    buffer = io.BytesIO()
    torch.save(torch.ones(2, device="sim:1"), buffer)
    buffer.seek(0)
    assert torch.load(buffer).device == torch.device("sim", 1)


# -- loading ------------------------------------------------------------------------------------------


def test_load_is_idempotent_and_the_plugin_is_on_request_only(synced):
    assert torchdevice_sim.load() is synced
    found = torchdevice_sim.plugin.availability()
    assert found.available and not found.automatic


@pytest.mark.parametrize("var, value, words", [
    (config.MEMORY_VAR, "lots", "TORCHDEVICE_SIM_MEMORY='lots' is not a size"),
    (config.DEVICES_VAR, "0", "TORCHDEVICE_SIM_DEVICES='0' is not a device count"),
])
def test_a_bad_variable_makes_sim_unavailable_naming_it(monkeypatch, var, value, words):
    monkeypatch.setenv(var, value)
    found = torchdevice_sim.plugin.availability()
    assert not found.available and words in found.reason


def test_sizes_parse_with_binary_and_decimal_units():
    assert config.parse_size("2GiB") == 2 * 1024**3
    assert config.parse_size("1.5GB") == 1_500_000_000
    assert config.parse_size("512MiB") == 512 * MIB


@pytest.mark.parametrize("masked", [False, True])
def test_attention_gives_the_cpus_numbers_forward_and_backward(synced, masked):
    torch.manual_seed(0)
    q, k, v = (torch.randn(2, 4, 16, 8, requires_grad=True) for _ in range(3))
    mask = torch.randn(16, 16) if masked else None
    twins = [t.detach().to("sim").requires_grad_() for t in (q, k, v)]
    sdpa = torch.nn.functional.scaled_dot_product_attention
    out = sdpa(q, k, v, attn_mask=mask, is_causal=not masked)
    out_sim = sdpa(*twins, attn_mask=None if mask is None else mask.to("sim"), is_causal=not masked)
    out.square().sum().backward()
    out_sim.square().sum().backward()
    assert out_sim.device.type == "sim" and torch.equal(out, out_sim.cpu())
    for cpu, sim in zip((q, k, v), twins):
        assert torch.equal(cpu.grad, sim.grad.cpu())


def test_results_stay_on_the_device_of_their_inputs_whatever_device_is_current(synced):
    synced.set_device(0)
    x = torch.arange(4.0, device="sim:1")
    on_device_0 = synced.memory_allocated(0)
    results = (x + 1, x.sum(), torch.nn.functional.embedding(torch.tensor([1, 2], device="sim:1"), x.view(4, 1)))
    assert all(result.device == torch.device("sim", 1) for result in results)
    assert synced.memory_allocated(0) == on_device_0  # nothing was allocated on the current device


_CPU_KERNEL_CASES = {
    "group_norm channels_last": lambda x: torch.nn.functional.group_norm(x.to(memory_format=torch.channels_last), 4),
    "group_norm": lambda x: torch.nn.functional.group_norm(x, 2),
    "layer_norm channels_last": lambda x: torch.nn.functional.layer_norm(x.to(memory_format=torch.channels_last), [4, 4]),
    "addr": lambda x: torch.addr(x[0, 0], x[0, 1, 0], x[0, 2, 0]),
    "all over dims": lambda x: x * (x > -1).all(dim=(1, 2)).float()[:, None, None],
    # CompositeImplicitAutograd beside the CPU kernel: the decomposition rounds each step (llama's SwiGLU under
    # bf16 autocast gave torchtitan's data-parallel runs other gradients on sim)
    "silu bfloat16": lambda x: torch.nn.functional.silu(x.bfloat16()),
    "silu": torch.nn.functional.silu,
    "mish": torch.nn.functional.mish,
}


@pytest.mark.parametrize("case", sorted(_CPU_KERNEL_CASES))
def test_ops_with_a_cpu_kernel_and_a_composite_one_run_the_cpus_forward_and_backward(synced, case):
    """The dispatcher prefers an op's composite kernel to sim's fallback: without sim's own kernel group_norm ran
    its decomposition, which refuses channels_last, layer_norm gave other numbers, and so did silu's and mish's
    backward (CompositeImplicitAutograd)."""
    fn = _CPU_KERNEL_CASES[case]
    x = torch.randn(2, 8, 4, 4, generator=torch.Generator().manual_seed(0), requires_grad=True)
    twin = x.detach().to("sim").requires_grad_()
    out, out_sim = fn(x), fn(twin)
    assert out_sim.device.type == "sim" and out_sim.stride() == out.stride()
    assert torch.equal(out, out_sim.cpu())
    out.square().sum().backward()
    out_sim.square().sum().backward()
    if "channels_last" in case:
        # torch's backward formula hands a non-CPU device contiguous grads (CUDA's kernel wants them), the CPU
        # channels_last ones: the CPU kernel's two paths agree to rounding, as a GPU's does with the CPU
        torch.testing.assert_close(x.grad, twin.grad.cpu())
    else:
        assert torch.equal(x.grad, twin.grad.cpu())


def test_a_memory_size_beyond_an_int64_names_the_variable_and_the_range():
    with pytest.raises(ValueError, match=r"TORCHDEVICE_SIM_MEMORY='99999999999999999999GB' is out of range: .*1MiB to "
                                         r"9223372036854775807 bytes"):
        config.parse_size("99999999999999999999GB")
    with pytest.raises(ValueError, match="TORCHDEVICE_SIM_MEMORY='1KiB' is out of range"):
        config.parse_size("1KiB")


@pytest.mark.parametrize("value", ["2", "0,0", "a", "-1", "0,,1"])
def test_visible_devices_parse_as_cudas_and_a_bad_value_names_the_variable(value):
    assert config.parse_visible("V", "1,0", 2) == (1, 0) and config.parse_visible("V", " ", 2) == ()
    with pytest.raises(ValueError, match=rf"V='{value}' is not valid: use distinct indices of sim's 2 devices"):
        config.parse_visible("V", value, 2)


def test_data_parallel_over_both_devices_forward_and_backward(synced, data_parallel_check):
    data_parallel_check("sim")


LAZY_BITS = """
import torch, torchdevice_sim
torchdevice_sim.load()
x = torch.randn(4, dtype=torch.cfloat)
s = x.to("sim")
assert torch.equal(s.conj().cpu(), x.conj().resolve_conj())  # conjugate bit, device to host
assert torch.equal(s.conj().imag.cpu(), x.conj().imag.resolve_neg())  # negative bit
d = torch.empty(4, dtype=torch.cfloat, device="sim")
d.copy_(s.conj())  # device to device, source with the bit
assert torch.equal(d.cpu(), x.conj().resolve_conj())
d = torch.empty(4, dtype=torch.cfloat, device="sim").conj()
d.copy_(s)  # destination with the bit: its memory holds the conjugate
assert torch.equal(d.resolve_conj().cpu(), x) and torch.equal(d.conj().cpu(), x.conj())
assert torch.equal(x.conj().to("sim").cpu(), x.conj().resolve_conj())  # host to device
a = torch.randn(3, 4, dtype=torch.cfloat, device="sim", requires_grad=True)  # a rotary embedding's backward
f = torch.randn(3, 4, dtype=torch.cfloat, device="sim")
torch.view_as_real(a * f).sum().backward()
host = a.detach().cpu().requires_grad_()
torch.view_as_real(host * f.cpu()).sum().backward()
assert torch.equal(a.grad.cpu(), host.grad)
print("ok")
"""


def test_copies_of_tensors_with_lazy_conjugate_or_negative_bits_give_their_values(runner, tmp_path):
    """A copy to, from or within sim of a tensor whose conjugate or negative bit is still lazy gives the values the
    tensor reads as, as on the CPU (it overflowed the stack before: torch's fallback for the bits cloned, and the
    clone copied with the bit still set; llama's rotary embedding backward does such a copy). In a process of its
    own, as the failure was a SIGSEGV."""
    program = tmp_path / "lazy_bits.py"
    program.write_text(LAZY_BITS)
    assert runner.run([str(program)]).stdout.strip() == "ok"
