"""AMP under translation: autocast and GradScaler written for CUDA run real mixed precision on the target
(the CPU's autocast in bfloat16 on the cpu backend; a device type's own autocast, in its default dtype, on
sim), compared with the same code written natively for the target."""
from __future__ import annotations

import contextlib
import pickle
import warnings

import pytest
import torch
from helpers import NATIVE_CUDA_AVAILABLE

import torchdevice
from torchdevice import amp, trace, translate


@pytest.fixture
def patched(on_target):
    translate.unpatch()
    translate.patch()
    try:
        yield translate.target()
    finally:
        translate.unpatch()


@contextlib.contextmanager
def native():
    """Translation off for the block: references are computed by torch alone."""
    translate.unpatch()
    try:
        yield
    finally:
        translate.patch()


def _model_and_data(seed=0, device="cuda"):
    """A model and data drawn on the host, then moved to ``device`` (``cuda`` in translated code, the
    target's device in native code)."""
    g = torch.Generator().manual_seed(seed)
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 4))
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(torch.randn(p.shape, generator=g) * 0.3)
    x = torch.randn(8, 16, generator=g)
    y = torch.randn(8, 4, generator=g)
    return model.to(device), x.to(device), y.to(device)


def _implicit_dtype(target) -> torch.dtype:
    """The dtype the target's own autocast uses when none is given, as torch alone reports it (the CPU's
    bfloat16; float16 for sim, as for CUDA)."""
    if not translate.is_patched():
        return torch.get_autocast_dtype(target.device_type)
    with native():
        return torch.get_autocast_dtype(target.device_type)


def _train(device, scaler_factory, autocast_factory, steps=3):
    model, x, y = _model_and_data(device=device)
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    scaler = scaler_factory()
    losses = []
    for _ in range(steps):
        opt.zero_grad()
        with autocast_factory():
            out = model(x)
            loss = torch.nn.functional.mse_loss(out.float(), y)
        scaler.scale(loss).backward()
        scaler.step(opt)
        scaler.update()
        losses.append(loss.item())
    return losses, [p.detach().cpu() for p in model.parameters()], scaler


def test_autocast_cuda_runs_the_targets_autocast(patched, target):
    model, x, _ = _model_and_data()
    implicit = _implicit_dtype(target)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with torch.autocast("cuda"):
            out = model(x)
            assert torch.is_autocast_enabled("cuda")
            assert torch.is_autocast_enabled()  # the legacy no-argument form means CUDA
            assert torch.get_autocast_dtype("cuda") is implicit
        with native(), torch.autocast(target.device_type, dtype=implicit):
            ref = model(x)
    assert out.dtype is implicit and out.device == ref.device == target.device(0)
    assert torch.equal(out.cpu(), ref.cpu())
    assert not torch.is_autocast_enabled("cuda")


def test_all_spellings_translate(patched, target):
    model, x, _ = _model_and_data()
    implicit = _implicit_dtype(target)
    with torch.amp.autocast("cuda"):
        assert model(x).dtype is implicit
    with torch.amp.autocast(device_type="cuda", enabled=True):
        assert model(x).dtype is implicit
    with pytest.warns(FutureWarning, match="torch.cuda.amp.autocast"):  # torch says so on CUDA too
        ctx = torch.cuda.amp.autocast()
    with ctx:
        assert model(x).dtype is implicit

    @torch.autocast("cuda")
    def forward(inp):
        return model(inp)

    assert forward(x).dtype is implicit
    with torch.autocast("mps"), torch.autocast("xpu"):  # code written for other accelerators too
        assert model(x).dtype is implicit


def test_explicit_dtype_is_honoured(patched, target):
    model, x, _ = _model_and_data()
    with torch.autocast("cuda", dtype=torch.float16):
        out = model(x)
    with native(), torch.autocast(target.device_type, dtype=torch.float16):
        ref = model(x)
    assert out.dtype is torch.float16 and torch.equal(out.cpu(), ref.cpu())
    with pytest.warns(FutureWarning):
        ctx = torch.cuda.amp.autocast(dtype=torch.float16)
    with ctx:
        assert model(x).dtype is torch.float16
    with torch.autocast("cuda", enabled=False):
        assert model(x).dtype is torch.float32


def test_float32_autocast_is_silent_and_computes_in_float32(on_target, target):
    """CUDA accepts autocast(dtype=float32) silently; CPU autocast warns and disables itself."""
    translate.unpatch()
    model, x, _ = _model_and_data(device=target.device(0))
    native = model(x)  # float32, computed without torchdevice
    with translate.patched(), warnings.catch_warnings():
        warnings.simplefilter("error")
        warnings.filterwarnings("ignore", category=FutureWarning)  # torch.cuda.amp's deprecation, native too
        for make in (lambda: torch.autocast("cuda", dtype=torch.float32),
                     lambda: torch.cuda.amp.autocast(dtype=torch.float32)):
            with make():
                out = model(x)
            assert out.dtype is torch.float32 and torch.equal(out.cpu(), native.cpu())


def test_env_overrides_implicit_dtype(on_target, target, monkeypatch):
    implicit = _implicit_dtype(target)
    monkeypatch.setenv(amp.ENV_AMP_DTYPE, "float16")
    translate.unpatch()
    with translate.patched():
        model, x, _ = _model_and_data()
        with torch.autocast("cuda"):
            assert model(x).dtype is torch.float16
        with torch.autocast("cuda", dtype=torch.bfloat16):
            assert model(x).dtype is torch.bfloat16
    monkeypatch.setenv(amp.ENV_AMP_DTYPE, "int8")
    with pytest.warns(RuntimeWarning, match="TORCHDEVICE_AMP_DTYPE='int8' is not valid"):
        translate.patch()  # a bad AMP dtype affects AMP only: translation is on, default dtype
    try:
        assert translate.is_patched() and torch.zeros(1, device="cuda").device == target.device(0)
        model, x, _ = _model_and_data()
        with torch.autocast("cuda"):
            assert model(x).dtype is implicit  # the target's implicit dtype
    finally:
        translate.unpatch()


def test_gradscaler_really_scales_and_matches_native_code(patched, target):
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        losses, params, scaler = _train(
            "cuda", lambda: torch.amp.GradScaler("cuda"), lambda: torch.autocast("cuda"))
    implicit, kind = _implicit_dtype(target), target.device_type
    with native():
        ref_losses, ref_params, ref_scaler = _train(
            target.device(0), lambda: torch.amp.GradScaler(kind), lambda: torch.autocast(kind, dtype=implicit))
    # scaled from 2**16, backed off as natively (float16 gradients overflow there at first; bfloat16's do not)
    assert scaler.is_enabled() and scaler.get_scale() == ref_scaler.get_scale() <= 2.0**16
    assert losses == ref_losses
    assert all(torch.equal(a, b) for a, b in zip(params, ref_params))
    with pytest.warns(FutureWarning, match="torch.cuda.amp.GradScaler"):
        legacy = torch.cuda.amp.GradScaler(init_scale=1024.0)
    assert legacy.is_enabled() and legacy.get_scale() == 1024.0
    assert isinstance(legacy, torch.amp.GradScaler) and isinstance(legacy, torch.cuda.amp.GradScaler)
    assert torch.amp.GradScaler().is_enabled()  # "cuda" is the default device


def test_gradscaler_skips_step_on_inf_and_backs_off(patched):
    model = torch.nn.Linear(2, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    scaler = torch.amp.GradScaler("cuda", init_scale=8.0)
    model.cuda()
    before = [p.detach().cpu() for p in model.parameters()]
    loss = model(torch.tensor([[float("inf"), 1.0]], device="cuda")).sum()
    scaler.scale(loss).backward()
    scaler.step(opt)
    scaler.update()
    assert scaler.get_scale() == 4.0  # backoff_factor 0.5
    assert all(torch.equal(a, b.detach().cpu()) for a, b in zip(before, model.parameters()))


def test_scaler_state_and_pickle(patched):
    scaler = torch.amp.GradScaler("cuda", init_scale=512.0)
    model = torch.nn.Linear(2, 1).cuda()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    scaler.scale(model(torch.ones(1, 2, device="cuda")).sum()).backward()
    scaler.step(opt)
    scaler.update()
    state = scaler.state_dict()
    fresh = torch.amp.GradScaler("cuda")
    fresh.load_state_dict(pickle.loads(pickle.dumps(state)))
    assert fresh.get_scale() == 512.0
    assert isinstance(torch.autocast("cuda"), torch.amp.autocast_mode.autocast)


def test_state_queries_and_setters(patched, target):
    kind = target.device_type
    torch.set_autocast_enabled("cuda", True)
    try:
        assert torch.is_autocast_enabled(kind) and torch.is_autocast_enabled("cuda")
    finally:
        torch.set_autocast_enabled("cuda", False)
    assert not torch.is_autocast_enabled(kind)
    old = torch.get_autocast_dtype(kind)
    torch.set_autocast_dtype("cuda", torch.float16)
    try:
        assert torch.get_autocast_dtype(kind) is torch.float16
        assert torch.get_autocast_gpu_dtype() is torch.float16
    finally:
        torch.set_autocast_dtype(kind, old)
    assert torch.amp.is_autocast_available("cuda")
    assert torch.is_autocast_enabled("cpu") is False  # untranslated types pass through


def test_custom_fwd_casts_on_target(patched):
    class Double(torch.autograd.Function):
        @staticmethod
        @torch.amp.custom_fwd(device_type="cuda", cast_inputs=torch.float32)
        def forward(ctx, x):
            ctx.dtype_seen = x.dtype
            return x * 2

        @staticmethod
        @torch.amp.custom_bwd(device_type="cuda")
        def backward(ctx, grad):
            return grad * 2

    x = torch.ones(3, dtype=torch.bfloat16, device="cuda", requires_grad=True)
    with torch.autocast("cuda"):
        y = Double.apply(x)
    assert y.dtype is torch.float32  # cast_inputs applied: autocast was on for the target
    y.sum().backward()
    assert x.grad is not None


def test_unpatch_restores_identity_and_behaviour(on_target):
    translate.unpatch()
    names = [n for n in dir(torch) if "autocast" in n]
    before = {n: getattr(torch, n) for n in names}
    inits = {cls: vars(cls).get("__init__") for cls in (
        torch.amp.autocast_mode.autocast, torch.cuda.amp.autocast,
        torch.amp.GradScaler, torch.cuda.amp.GradScaler)}
    amp_funcs = {n: getattr(torch.amp, n) for n in ("custom_fwd", "custom_bwd", "is_autocast_available")}
    common = torch.cuda.amp.common.amp_definitely_not_available
    translate.patch()
    assert torch.autocast.__init__ is not inits[torch.amp.autocast_mode.autocast]
    translate.unpatch()
    assert all(getattr(torch, n) is v for n, v in before.items())
    assert all(vars(cls).get("__init__") is v for cls, v in inits.items())
    assert all(getattr(torch.amp, n) is v for n, v in amp_funcs.items())
    assert torch.cuda.amp.common.amp_definitely_not_available is common
    if NATIVE_CUDA_AVAILABLE:  # a GPU runner: torch's own CUDA autocast, silently on
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            ctx = torch.autocast("cuda")
        assert ctx._enabled is True and ctx.fast_dtype is torch.float16
    else:  # torch's own behaviour without CUDA again
        with pytest.warns(UserWarning, match="CUDA is not available"):
            ctx = torch.autocast("cuda")
        assert ctx._enabled is False


def test_translated_calls_are_traced(patched):
    trace.reset()
    trace.start_report()
    try:
        with torch.autocast("cuda"):
            pass
        torch.amp.GradScaler("cuda")
        with torch.autocast("cpu"):  # native: not a translated call
            pass
    finally:
        trace.stop_report()
    uses = {u.api: u for u in trace.report_data()}
    trace.reset()
    assert uses["torch.autocast"].calls == 1
    assert uses["torch.autocast"].how.startswith("translated")
    (site,) = uses["torch.amp.GradScaler"].sites
    assert site.startswith(__file__) or site.rsplit(":", 1)[0].endswith("test_autocast.py")


def test_status_for_describes_every_patched_api(patched, target):
    status = amp.status_for(translate.target())
    assert status["torch.autocast"][0] == torchdevice.Status.TRANSLATED
    assert str(_implicit_dtype(target)).removeprefix("torch.") in status["torch.autocast"][1]
    assert status["torch.cuda.amp.GradScaler"][0] == torchdevice.Status.TRANSLATED
