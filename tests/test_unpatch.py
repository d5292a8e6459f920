"""unpatch() gives torch back exactly: every attribute of every torch module and class, by identity."""
from __future__ import annotations

import copyreg
import sys
import warnings

import torch
import torch.distributed  # noqa: F401  (the installers patch these; import them before the snapshot)
import torch.nn
import torch.utils.data

import torchdevice


def _owners():
    """Every loaded torch module, and every class defined in one of them."""
    owners = {}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # deprecated aliases (torch.distributed.reduce_op) warn on access
        _collect(owners)
    return owners


def _collect(owners):
    for name, module in list(sys.modules.items()):
        if module is None or not (name == "torch" or name.startswith("torch.")):
            continue
        owners[name] = module
        for attr, value in list(vars(module).items()):
            if isinstance(value, type) and getattr(value, "__module__", "").startswith("torch"):
                owners[f"{name}.{attr}"] = value


def _snapshot():
    return {key: dict(vars(obj)) for key, obj in _owners().items()}


def _diff(before, after):
    changed = []
    for key, old in before.items():
        new = after.get(key, {})
        for attr in set(old) | set(new):
            if attr in ("__slotnames__", "__annotations__", "__warningregistry__"):
                continue  # caches Python itself fills on first use
            if old.get(attr, KeyError) is not new.get(attr, KeyError):
                changed.append(f"{key}.{attr}")
    return changed


def test_unpatch_restores_every_torch_attribute_by_identity(on_target):
    try:
        with torchdevice.patched():
            pass  # first install imports what translation needs: not part of the comparison
        before, pickler = _snapshot(), copyreg.dispatch_table.get(torch.device)
        torchdevice.patch()
        patched = _snapshot()
        torchdevice.unpatch()
        after = _snapshot()
    finally:
        torchdevice.unpatch()
    assert _diff(before, patched), "patch() changed nothing: the comparison would prove nothing"
    assert _diff(before, after) == []
    assert copyreg.dispatch_table.get(torch.device) is pickler


FRESH = """
import copyreg, json, torch
import torch.distributed, torch.nn, torch.utils.data
import torchdevice
from torchdevice import translate
import test_unpatch as t
translate.installers()  # what translation needs, imported but never installed
torchdevice.use("cpu")
before, pickler = t._snapshot(), copyreg.dispatch_table.get(torch.device)
torchdevice.patch()
patched = t._snapshot()
torchdevice.unpatch()
after = t._snapshot()
import sys
def imported_submodule(name):  # torch's own submodule, imported by the first patch (not a leftover)
    owner, _, attr = name.rpartition(".")
    return sys.modules.get(name) is not None and getattr(sys.modules.get(owner), attr, None) is sys.modules[name]
left = [n for n in t._diff(before, after) if not imported_submodule(n)]
print(json.dumps({"patched": len(t._diff(before, patched)), "left": left,
                  "pickler": copyreg.dispatch_table.get(torch.device) is pickler}))
"""


def test_first_unpatch_restores_what_was_there_before_any_patch():
    """The baseline is taken in a fresh process before translation was ever installed, so
    whatever the first unpatch() leaves behind shows up (a warm-up patch would hide it)."""
    import json
    from pathlib import Path

    from helpers import run_python

    result = run_python(FRESH, env={"TORCHDEVICE_PLUGINS": ""}, pythonpath=[Path(__file__).parent])
    assert result.returncode == 0, str(result)
    found = json.loads(result.stdout.strip().splitlines()[-1])
    assert found["patched"] > 100, found  # patch() changed things: the comparison proves something
    assert found["left"] == [] and found["pickler"], found


def test_torch_is_untouched_until_the_commit_which_runs_uninterrupted(on_target, monkeypatch):
    """patch() changes torch in one uninterrupted loop at the end: a thread running torch code
    while translation turns on sees torch either wholly unpatched or wholly patched."""
    import sys as _sys

    from torchdevice import _patching

    seen = {}
    real_commit = _patching.Patcher.commit

    def commit(self):
        seen["before commit"] = _snapshot()
        seen["pending"] = len(self._staged or {})
        real_switch = _sys.setswitchinterval
        intervals = []
        monkeypatch.setattr(_sys, "setswitchinterval", lambda v: (intervals.append(v), real_switch(v)))
        try:
            real_commit(self)
        finally:
            monkeypatch.setattr(_sys, "setswitchinterval", real_switch)
        seen["intervals"] = intervals

    try:
        with torchdevice.patched():
            pass  # imports what translation needs
        before = _snapshot()
        monkeypatch.setattr(_patching.Patcher, "commit", commit)
        torchdevice.patch()
        assert _diff(before, _snapshot())  # the commit did patch torch
        assert not _diff(before, seen["before commit"])  # ... and nothing changed before it
        assert seen["pending"] > 100
        assert seen["intervals"][0] >= 0.5  # other threads held off while attributes change
    finally:
        torchdevice.unpatch()


def test_a_patch_that_fails_half_way_leaves_torch_untouched(on_target, target, monkeypatch):
    from torchdevice import translate

    translate.unpatch()
    before = _snapshot()

    def broken(patcher, target):
        raise RuntimeError("installer failed half way")

    broken_installer = type(sys)("tests_broken_installer")
    broken_installer.install = broken  # type: ignore[attr-defined]
    monkeypatch.setattr(translate, "installers", lambda real=translate.installers: (*real(), broken_installer))
    try:
        try:
            torchdevice.patch()
        except RuntimeError as exc:
            assert str(exc) == "installer failed half way"
        else:
            raise AssertionError("patch() did not raise")
        assert not torchdevice.is_patched() and not _diff(before, _snapshot())
    finally:
        monkeypatch.undo()
    with torchdevice.patched():  # and the next patch works
        assert torch.zeros(1, device="cuda").device == target.device(0)


class _Box:
    pass


def test_patcher_contract():
    from torchdevice._patching import Patcher

    box, other = _Box(), _Box()
    box.a = "a0"
    p = Patcher()
    assert p.set(box, "a", "a1") == "a0" and p.set(box, "a", "a2") == "a1" and p.set(box, "b", "b1") is None
    other.a = "x"
    assert p.original(box, "a") == "a0"  # the value before the first patch, not the last
    try:
        p.original(other, "a")  # same name, another object: never patched
    except KeyError as exc:
        assert str(exc) == repr(f"{other!r}.a was not patched")
    else:
        raise AssertionError("original() of an unpatched attribute did not raise")
    try:
        p.original(box, "c")
    except KeyError:
        pass
    else:
        raise AssertionError("original() of an unpatched name did not raise")
    # staged changes wait for commit; discarded ones never happen, and later sets apply at once
    p.stage()
    assert p.set(box, "a", "staged") == "a2" and p.get(box, "a") == "staged" and box.a == "a2"
    p.discard()
    assert box.a == "a2" and p.get(box, "a") == "a2"
    p.set(box, "a", "after discard")
    assert box.a == "after discard"
    p.restore()
    assert vars(box) == {"a": "a0"} and len(p) == 0


def test_patcher_suspend_and_resume_give_back_and_reapply_every_change():
    """Mutation testing (docs/testing.md): a resume() putting back None for changes set at once passed."""
    from torchdevice._patching import Patcher

    class Box:
        pass

    box, p = Box(), Patcher()
    box.a = "a0"
    p.set(box, "a", "direct")  # applied at once
    p.stage()
    p.set(box, "b", "staged")
    p.commit()
    assert (box.a, box.b) == ("direct", "staged")
    p.suspend()  # what was there before, as restore() would put it back
    assert vars(box) == {"a": "a0"}
    p.resume()
    assert (box.a, box.b) == ("direct", "staged")
    p.restore()
    assert vars(box) == {"a": "a0"} and len(p) == 0


def test_patcher_get_answers_the_default_for_a_missing_attribute():
    from torchdevice._patching import Patcher

    p, box = Patcher(), type("Box", (), {})()
    assert p.get(box, "missing", "fallback") == "fallback"  # as getattr(box, "missing", "fallback")
    assert p.get(box, "missing") is None
