"""scripts/peer_transformers.py: the comparison it exits on, and how it reads each side (no transformers needed:
the peer run itself is by hand, see docs/testing.md)."""
from __future__ import annotations

import io
import json
import tarfile
from pathlib import Path

import pytest
from helpers import load_file

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "peer_transformers.py"


@pytest.fixture(scope="module")
def peer():
    return load_file("peer_transformers", SCRIPT)


def test_a_native_pass_that_does_not_pass_translated_is_a_regression(peer):
    native = {"a": "passed", "b": "passed", "c": "skipped", "d": "failed", "e": "passed"}
    translated = {"a": "passed", "b": "failed", "c": "passed", "d": "passed"}  # e missing: the run stopped
    regressions, only_translated = peer.compare(native, translated)
    assert regressions == ["b", "e"]
    assert only_translated == [("c", "passed")]
    assert peer.compare(native, dict(native))[0] == []


def test_the_table_has_a_row_per_side_with_its_counts_and_wall_time(peer):
    sides = {"native": {"a": "passed", "b": "skipped"}, "translated (sim)": {"a": "failed", "b": "passed"}}
    table = peer.table(sides, {"native": 61.4, "translated (sim)": 5.0})
    assert "| native | 1 | 0 | 1 | 1 min 1 s |" in table and "| translated (sim) | 1 | 1 | 0 | 0 min 5 s |" in table


def test_every_backend_is_compared_with_the_native_side(peer, tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(peer, "stage", lambda python, workdir, models: workdir)
    found = {"": {"t": "passed", "gpu": "skipped"}, "cpu": {"t": "passed", "gpu": "passed"}, "sim": {"t": "failed"}}
    monkeypatch.setattr(peer, "run_side", lambda python, workdir, translated, backend, extra, racecheck: found[backend])
    assert peer.main(["--backends", "cpu,sim", "--workdir", str(tmp_path), "--json", str(tmp_path / "r.json")]) == 1
    out = capsys.readouterr().out
    assert "cpu: every test that passes natively passes translated" in out and "passed  gpu" in out
    assert "sim: 1 test(s) pass natively but not translated:\n  failed  t" in out
    assert json.loads((tmp_path / "r.json").read_text())["sides"]["translated (sim)"] == {"t": "failed"}
    found["sim"] = {"t": "passed"}
    assert peer.main(["--backends", "cpu,sim", "--workdir", str(tmp_path)]) == 0


def test_a_run_where_nothing_passed_natively_proves_nothing(peer):
    assert peer.proves_nothing({"a": "failed", "b": "skipped"}) is not None
    assert peer.proves_nothing({}) is not None
    assert peer.proves_nothing({"a": "failed", "b": "passed"}) is None


def test_a_side_that_wrote_no_report_stops_the_run(peer, tmp_path, monkeypatch):
    monkeypatch.setattr(peer.subprocess, "run", lambda *a, **k: None)  # pytest "crashed": no XML written
    with pytest.raises(SystemExit, match="native run wrote no report"):
        peer.run_side("python", tmp_path, False, "cpu", [])


def test_junit_outcomes_keep_the_worst_report_of_a_test(peer, tmp_path):
    xml = tmp_path / "r.xml"
    xml.write_text(
        '<testsuites><testsuite name="pytest">'
        '<testcase classname="t.A" name="ok"/>'
        '<testcase classname="t.A" name="skip"><skipped message="gpu"/></testcase>'
        '<testcase classname="t.A" name="bad"><failure message="x"/></testcase>'
        '<testcase classname="t.A" name="teardown"><error message="teardown failed"/></testcase>'
        '<testcase classname="t.A" name="teardown"/>'
        '</testsuite></testsuites>')
    assert peer.outcomes(xml) == {"t.A::ok": "passed", "t.A::skip": "skipped", "t.A::bad": "failed",
                                  "t.A::teardown": "failed"}


def test_stage_takes_the_sdists_common_tests_stubs_and_glue(peer, tmp_path, monkeypatch):
    monkeypatch.setattr(peer, "_installed_version", lambda python: "9.9.9")
    (tmp_path / "sdist").mkdir()
    with tarfile.open(tmp_path / "sdist" / "transformers-9.9.9.tar.gz", "w:gz") as tar:
        for name, text in (("tests/test_modeling_common.py", "X = 1\n"), ("tests/models/bert/deep.py", "")):
            data = text.encode()
            info = tarfile.TarInfo(f"transformers-9.9.9/{name}")
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    tests = peer.stage("python", tmp_path, ["bert", "gpt2"])
    assert (tests / "test_modeling_common.py").read_text() == "X = 1\n"
    assert not (tests / "models").exists()  # only the top-level common files
    assert "class ExportTesterMixin" in (tests / "exporters" / "test_export.py").read_text()
    assert "class GenerationTesterMixin" in (tests / "generation" / "test_utils.py").read_text()
    assert sorted(p.name for p in (tests / "peer").glob("test_peer_*.py")) == ["test_peer_bert.py",
                                                                              "test_peer_gpt2.py"]
