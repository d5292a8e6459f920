"""torchdevice_mlx.distributed: collectives of torch tensors over mx.distributed's ring, 2 real processes.

The processes are started the way ``mlx.launch --backend ring`` starts them
(``mlx.launch`` itself when it is installed next to this Python; otherwise
the same environment by hand: a JSON hostfile in ``MLX_HOSTFILE`` and
``MLX_RANK``), on 127.0.0.1 only, with a time limit.
"""
from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch

mx = pytest.importorskip("mlx.core")

import torchdevice_mlx.distributed as mdist  # noqa: E402
from torchdevice.errors import UnsupportedError  # noqa: E402

TIMEOUT = 60

WORKER = textwrap.dedent(
    r'''
    import json, os, sys, time
    import torch
    import torch.distributed as dist
    import torchdevice_mlx.distributed as mdist
    from torchdevice.errors import UnsupportedError

    # MLX's ring gives up connecting after about 15 s: start both ranks' init together
    # (after both have paid `import torch`), so a slow import cannot use up that window.
    out_dir, me = sys.argv[1], os.environ["MLX_RANK"]
    open(os.path.join(out_dir, "ready" + me), "w").close()
    deadline = time.monotonic() + 40
    while not all(os.path.exists(os.path.join(out_dir, "ready" + str(i))) for i in range(2)):
        if time.monotonic() > deadline:
            sys.exit("the other rank never started")
        time.sleep(0.02)

    group = mdist.init(backend="ring")
    rank, world = mdist.get_rank(), mdist.get_world_size()
    r = {"rank": rank, "world": world, "initialized": mdist.is_initialized()}

    base = torch.tensor([1.0, -2.0, 3.5]) * (rank + 1)
    for op in ("sum", "max", "min", "avg"):
        t = base.clone()
        mdist.all_reduce(t, op=op)
        r["all_reduce_" + op] = t.tolist()
    t = base.clone()
    mdist.all_reduce(t, op=dist.ReduceOp.MAX)
    r["all_reduce_ReduceOp.MAX"] = t.tolist()
    for name, dtype in (("bf16", torch.bfloat16), ("f64", torch.float64), ("i64", torch.int64)):
        t = (torch.arange(4) + 10 * rank).to(dtype)
        mdist.all_reduce(t)
        r["sum_" + name] = [t.dtype == dtype, t.tolist()]
    third = torch.tensor([1 / 3], dtype=torch.float64) * (rank + 1)
    mdist.all_reduce(third)
    r["f64_exact"] = third.item() == (1 / 3) + (2 / 3)
    try:
        mdist.all_reduce(base.clone(), op="product")
    except UnsupportedError as exc:
        r["product"] = str(exc)

    out = [torch.empty(3) for _ in range(world)]
    mdist.all_gather(out, base)
    r["all_gather"] = [o.tolist() for o in out]
    flat = torch.empty(world * 2, 2, dtype=torch.complex128)
    mine = torch.full((2, 2), complex(rank, -rank), dtype=torch.complex128)
    mdist.all_gather_into_tensor(flat, mine)
    r["all_gather_into_tensor_c128"] = [[z.real, z.imag] for z in flat.reshape(-1).tolist()]

    special = torch.tensor([-0.0, float("nan"), float("inf"), 1e-45], dtype=torch.float32)
    b = special.clone() if rank == 1 else torch.zeros(4)
    mdist.broadcast(b, src=1)
    r["broadcast_bits"] = torch.equal(b.view(torch.int32), special.view(torch.int32))
    nonc = (torch.arange(6.0).view(2, 3) * (rank + 1)).t()  # non-contiguous
    mdist.broadcast(nonc, src=0)
    r["broadcast_noncontiguous"] = nonc.tolist()

    if rank == 0:
        mdist.send(torch.tensor([7, 8, 9], dtype=torch.int16), dst=1)
        got = torch.empty(2, dtype=torch.float64)
        r["recv_src"] = mdist.recv(got, src=1)
        r["recv"] = got.tolist()
    else:
        got = torch.empty(3, dtype=torch.int16)
        mdist.recv(got, src=0)
        r["recv"] = got.tolist()
        mdist.send(torch.tensor([0.1, 0.2], dtype=torch.float64), dst=0)
    mdist.barrier()
    with open(os.path.join(out_dir, f"rank{rank}.json"), "w") as f:
        json.dump(r, f)
    '''
)


def _free_port_pair() -> int:
    """A port p with p and p + 1 free on 127.0.0.1 (the ring's rank r listens on p + r)."""
    for _ in range(50):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        if port >= 65535:
            continue
        try:
            with socket.socket() as a, socket.socket() as b:
                a.bind(("127.0.0.1", port))
                b.bind(("127.0.0.1", port + 1))
            return port
        except OSError:
            continue
    raise RuntimeError("no two consecutive free ports on 127.0.0.1")


def _launch(tmp_path: Path, script: Path, out: Path) -> tuple[int, str]:
    port = _free_port_pair()
    launcher = Path(sys.executable).with_name("mlx.launch")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("MLX_", "TORCHDEVICE_"))}
    if launcher.exists():
        cmd = [str(launcher), "--backend", "ring", "--hosts", "127.0.0.1", "-n", "2",
               "-p", str(port), "--python", sys.executable, str(script), str(out)]
        procs = [subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                  text=True, start_new_session=True)]
    else:  # what mlx.launch sets up for the ring backend
        hostfile = tmp_path / "hosts.json"
        hostfile.write_text(json.dumps([[f"127.0.0.1:{port}"], [f"127.0.0.1:{port + 1}"]]))
        procs = [
            subprocess.Popen([sys.executable, str(script), str(out)],
                             env={**env, "MLX_HOSTFILE": str(hostfile), "MLX_RANK": str(rank)},
                             stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True)
            for rank in range(2)
        ]
    output, code = "", 0
    try:
        for p in procs:
            text, _ = p.communicate(timeout=TIMEOUT)
            output += text
            code = code or p.returncode
    except subprocess.TimeoutExpired:
        for p in procs:
            try:
                os.killpg(p.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        pytest.fail(f"MLX ring processes did not finish in {TIMEOUT} s:\n{output}")
    return code, output


@pytest.fixture(scope="module")
def results(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("mlx_ring")
    script = tmp / "worker.py"
    script.write_text(WORKER)
    out = tmp / "out"
    out.mkdir()
    code, output = _launch(tmp, script, out)
    assert code == 0, output
    return [json.loads((out / f"rank{r}.json").read_text()) for r in range(2)]


def test_two_processes_joined_the_ring(results):
    assert [(r["rank"], r["world"], r["initialized"]) for r in results] == [(0, 2, True), (1, 2, True)]


def test_all_reduce_sum_max_min_avg(results):
    # rank 0 holds [1, -2, 3.5], rank 1 twice that
    for r in results:
        assert r["all_reduce_sum"] == [3.0, -6.0, 10.5]
        assert r["all_reduce_max"] == [2.0, -2.0, 7.0]
        assert r["all_reduce_min"] == [1.0, -4.0, 3.5]
        assert r["all_reduce_avg"] == [1.5, -3.0, 5.25]
        assert r["all_reduce_ReduceOp.MAX"] == [2.0, -2.0, 7.0]


def test_all_reduce_keeps_dtype_and_precision(results):
    for r in results:
        assert r["sum_bf16"] == [True, [10.0, 12.0, 14.0, 16.0]]
        assert r["sum_f64"] == [True, [10.0, 12.0, 14.0, 16.0]]
        assert r["sum_i64"] == [True, [10, 12, 14, 16]]
        assert r["f64_exact"] is True  # float64 reduced as float64, not rounded through float32


def test_product_is_unsupported_and_says_why(results):
    for r in results:
        assert "product" in r and "sum, max and min" in r["product"]


def test_all_gather(results):
    for r in results:
        assert r["all_gather"] == [[1.0, -2.0, 3.5], [2.0, -4.0, 7.0]]
        assert r["all_gather_into_tensor_c128"] == [[0.0, 0.0]] * 4 + [[1.0, -1.0]] * 4


def test_broadcast_is_bit_exact(results):
    for r in results:
        assert r["broadcast_bits"] is True
        assert r["broadcast_noncontiguous"] == [[0.0, 3.0], [1.0, 4.0], [2.0, 5.0]]


def test_send_recv(results):
    assert results[1]["recv"] == [7, 8, 9]
    assert results[0]["recv"] == [0.1, 0.2] and results[0]["recv_src"] == 1


# -- in this process: argument checks that need no peer --------------------------------------


class _FakeGroup:
    def __init__(self, rank, size):
        self._rank, self._size = rank, size

    def rank(self):
        return self._rank

    def size(self):
        return self._size


def test_send_to_a_non_neighbour_is_unsupported():
    with pytest.raises(UnsupportedError, match="neighbours"):
        mdist.send(torch.ones(1), 2, group=_FakeGroup(0, 4))


def test_unknown_op_and_integer_avg_are_unsupported():
    with pytest.raises(UnsupportedError, match="product"):
        mdist.all_reduce(torch.ones(1), op="product", group=_FakeGroup(0, 1))
    with pytest.raises(UnsupportedError, match="avg"):
        mdist.all_reduce(torch.ones(1, dtype=torch.int32), op="avg", group=_FakeGroup(0, 1))
    with pytest.raises(UnsupportedError, match="complex128"):
        mdist.all_reduce(torch.ones(1, dtype=torch.complex128), group=_FakeGroup(0, 1))


def test_single_process_group_is_a_noop_reduction():
    group = mx.distributed.init(strict=False)  # no launch environment: a group of one
    t = torch.tensor([1.5, 2.5], dtype=torch.bfloat16)
    mdist.all_reduce(t, group=group)
    assert t.tolist() == [1.5, 2.5] and t.dtype == torch.bfloat16
