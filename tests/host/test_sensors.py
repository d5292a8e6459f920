"""The host's sensors as the cpu backend's answers: ``temperature``, ``power_draw``, ``clock_rate``.

A query gets the host's reading where it exposes one, and where it does not a
:class:`torchdevice.SensorUnavailableError` saying what was tried -- never
UnsupportedError (that is for actions), never a made-up number. The readers are
run against fake sysfs trees in ``tmp_path`` (``torchdevice.host.HWMON``,
``THERMAL``, ``POWERCAP`` pointed there) with a fake clock for the power average;
every expected value is worked out here by hand from the files written.
"""
from __future__ import annotations

import glob
import os
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
from helpers import RAPL_RANGE, write_files

import torchdevice
from torchdevice import cpu, host, translate
from torchdevice.errors import SensorUnavailableError, UnsupportedError


def _deny(monkeypatch, suffix: str):
    """Reading any file whose path ends in ``suffix`` raises PermissionError (as a root-only file does for a
    user; chmod would not stop a test run as root)."""
    real_open = open

    def guarded(path, *args, **kwargs):
        if str(path).endswith(suffix):
            raise PermissionError(13, "Permission denied", str(path))
        return real_open(path, *args, **kwargs)

    monkeypatch.setattr(host, "open", guarded, raising=False)


# -- temperature ------------------------------------------------------------------------------------------


def test_the_temperature_is_the_hottest_coretemp_reading_and_other_devices_are_ignored(sysfs):
    write_files(sysfs["hwmon"], {
        "hwmon0/name": "acpitz\n", "hwmon0/temp1_input": "95000\n",  # the motherboard: not the CPU
        "hwmon1/name": "coretemp\n",
        "hwmon1/temp1_label": "Package id 0\n", "hwmon1/temp1_input": "55000\n",
        "hwmon1/temp2_label": "Core 0\n", "hwmon1/temp2_input": "48000\n",
        "hwmon1/temp3_label": "Core 1\n", "hwmon1/temp3_input": "61600\n",
        "hwmon1/temp3_max": "100000\n",  # not an _input
        "hwmon2/name": "nvme\n", "hwmon2/temp1_input": "70000\n",
    })
    value = host.cpu_temperature()
    assert value == 62 and type(value) is int  # 61.6 degrees C, to the nearest degree


def test_two_packages_give_the_hotter_one(sysfs):
    write_files(sysfs["hwmon"], {
        "hwmon3/name": "coretemp\n", "hwmon3/temp1_input": "44000\n",
        "hwmon4/name": "coretemp\n", "hwmon4/temp1_input": "71200\n", "hwmon4/temp2_input": "66000\n",
    })
    assert host.cpu_temperature() == 71


def test_k10temp_leaves_out_tctl_where_tdie_is_given(sysfs):
    write_files(sysfs["hwmon"], {
        "hwmon0/name": "k10temp\n",
        "hwmon0/temp1_label": "Tctl\n", "hwmon0/temp1_input": "80000\n",  # Tdie + a 27-degree fan offset
        "hwmon0/temp2_label": "Tdie\n", "hwmon0/temp2_input": "53000\n",
        "hwmon0/temp3_label": "Tccd1\n", "hwmon0/temp3_input": "50250\n",
    })
    assert host.cpu_temperature() == 53
    (sysfs["hwmon"] / "hwmon0" / "temp2_label").unlink()
    (sysfs["hwmon"] / "hwmon0" / "temp2_input").unlink()
    assert host.cpu_temperature() == 80  # without Tdie, Tctl is the die's temperature


@pytest.mark.parametrize("name", ["zenpower", "cpu_thermal"])
def test_the_other_cpu_drivers_are_read(sysfs, name):
    write_files(sysfs["hwmon"], {"hwmon0/name": f"{name}\n", "hwmon0/temp1_input": "47400\n"})
    assert host.cpu_temperature() == 47


def test_an_old_driver_keeps_its_attributes_under_device(sysfs):
    write_files(sysfs["hwmon"], {"hwmon0/device/name": "coretemp\n", "hwmon0/device/temp1_input": "39000\n"})
    assert host.cpu_temperature() == 39


def test_garbage_and_error_codes_are_not_temperatures(sysfs):
    write_files(sysfs["hwmon"], {
        "hwmon0/name": "coretemp\n",
        "hwmon0/temp1_input": "garbage\n",
        "hwmon0/temp2_input": "-273000\n",  # a sensor's "no reading"
        "hwmon0/temp3_input": "255000\n",
        "hwmon0/temp4_input": "45000\n",
    })
    assert host.cpu_temperature() == 45


def test_without_a_cpu_hwmon_the_cpu_thermal_zones_are_read(sysfs):
    write_files(sysfs["hwmon"], {"hwmon0/name": "acpitz\n", "hwmon0/temp1_input": "90000\n"})
    write_files(sysfs["thermal"], {
        "thermal_zone0/type": "acpitz\n", "thermal_zone0/temp": "95000\n",
        "thermal_zone1/type": "x86_pkg_temp\n", "thermal_zone1/temp": "52000\n",
        "thermal_zone2/type": "cpu-1-0-usr\n", "thermal_zone2/temp": "57400\n",
        "thermal_zone3/type": "pch_cannonlake\n", "thermal_zone3/temp": "99000\n",
        "cooling_device0/type": "Processor\n",
    })
    assert host.cpu_temperature() == 57
    write_files(sysfs["thermal"], {"thermal_zone2/temp": "not a number\n", "thermal_zone4/type": "soc_dts0\n",
                              "thermal_zone4/temp": "53600\n"})
    assert host.cpu_temperature() == 54
    write_files(sysfs["hwmon"], {"hwmon1/name": "coretemp\n", "hwmon1/temp1_input": "50000\n"})
    assert host.cpu_temperature() == 50  # a CPU driver's hwmon is preferred: the zones are not read then


def test_a_root_only_sensor_is_skipped_and_alone_is_unreadable(sysfs, monkeypatch):
    write_files(sysfs["hwmon"], {"hwmon0/name": "coretemp\n", "hwmon0/temp1_input": "75000\n",
                            "hwmon0/temp2_input": "43000\n"})
    _deny(monkeypatch, "temp1_input")
    assert host.cpu_temperature() == 43
    _deny(monkeypatch, "_input")
    with pytest.raises(host.Unreadable, match="temp1_input: permission denied"):
        host.cpu_temperature()


def test_with_nothing_readable_the_query_raises_sensor_unavailable_naming_what_was_tried(sysfs):
    write_files(sysfs["hwmon"], {"hwmon0/name": "nvme\n", "hwmon0/temp1_input": "40000\n"})
    write_files(sysfs["thermal"], {"thermal_zone0/type": "acpitz\n", "thermal_zone0/temp": "40000\n"})
    memory = cpu.CPUMemory("cpu")
    with pytest.raises(SensorUnavailableError) as info:
        memory.temperature(0)
    error = info.value
    assert not isinstance(error, UnsupportedError) and isinstance(error, RuntimeError)
    assert isinstance(error, torchdevice.TorchDeviceError)
    assert (error.function, error.backend) == ("temperature", "cpu")
    for tried in (str(sysfs["hwmon"]), "nvme", str(sysfs["thermal"]), "acpitz"):
        assert tried in error.tried  # what was looked at, and what was found there
    assert error.instead and str(error).startswith("temperature cannot be read on this host (torchdevice backend "
                                                   "'cpu'): ")


def test_missing_roots_are_named(tmp_path, monkeypatch):
    monkeypatch.setattr(host, "HWMON", str(tmp_path / "no-hwmon"))
    monkeypatch.setattr(host, "THERMAL", str(tmp_path / "no-thermal"))
    with pytest.raises(host.Unreadable) as info:
        host.cpu_temperature()
    assert "no-hwmon: missing" in str(info.value) and "no-thermal: missing" in str(info.value)


# -- temperature: which readings count, and what the error says was tried ---------------------------------


def _unreadable(call) -> str:
    with pytest.raises(host.Unreadable) as info:
        call()
    return str(info.value)


def test_a_device_without_a_name_is_skipped_and_the_rest_read(sysfs):
    write_files(sysfs["hwmon"], {"hwmon0/temp1_input": "99000\n",  # no name: not known to be the CPU
                            "hwmon1/name": "coretemp\n", "hwmon1/temp1_input": "45000\n"})
    assert host.cpu_temperature() == 45


def test_every_cpu_package_counts_whatever_its_order(sysfs):
    write_files(sysfs["hwmon"], {"hwmon0/name": "coretemp\n", "hwmon0/temp1_input": "71200\n",
                            "hwmon1/name": "coretemp\n", "hwmon1/temp1_input": "44000\n"})
    assert host.cpu_temperature() == 71


def test_the_temperature_is_rounded_to_the_nearest_degree(sysfs):
    write_files(sysfs["hwmon"], {"hwmon0/name": "k10temp\n", "hwmon0/temp1_input": "62520\n"})
    assert host.cpu_temperature() == 63  # 62.52 degrees


@pytest.mark.parametrize(("milli", "celsius"), [("150000", 150), ("-50000", -50)])
def test_the_plausible_ranges_ends_are_temperatures(sysfs, milli, celsius):
    write_files(sysfs["hwmon"], {"hwmon0/name": "coretemp\n", "hwmon0/temp1_input": milli + "\n"})
    assert host.cpu_temperature() == celsius


def test_the_error_lists_each_sensor_and_why_it_gave_nothing(sysfs, monkeypatch):
    hwmon, thermal = sysfs["hwmon"], sysfs["thermal"]
    write_files(hwmon, {"hwmon0/name": "coretemp\n", "hwmon0/temp1_input": "0\n", "hwmon0/temp2_input": "garbage\n",
                   "hwmon0/temp3_input": "255000\n"})
    real_open = open

    def eio(path, *args, **kwargs):  # a sensor that is present but not reporting
        if str(path).endswith("temp1_input"):
            raise OSError(5, "Input/output error", str(path))
        return real_open(path, *args, **kwargs)

    monkeypatch.setattr(host, "open", eio, raising=False)
    base = f"{hwmon}/hwmon0"
    assert _unreadable(host.cpu_temperature) == (
        f"no CPU temperature reading: {base}/temp1_input: Input/output error; "
        f"{base}/temp2_input: not a number ('garbage'); {base}/temp3_input: 255000 m°C is no temperature; "
        f"{thermal}: no thermal zone of type x86_pkg_temp*, cpu*, soc* (zones: none)")


def test_a_cpu_driver_without_inputs_is_named_and_not_called_missing(sysfs):
    write_files(sysfs["hwmon"], {"hwmon0/name": "coretemp\n", "hwmon0/temp1_max": "100000\n"})
    message = _unreadable(host.cpu_temperature)
    assert f"{sysfs['hwmon']}/hwmon0: coretemp has no temp*_input" in message
    assert "no CPU sensor" not in message  # there is one: it has no reading


def test_the_error_names_the_drivers_looked_for_and_the_devices_found(sysfs):
    write_files(sysfs["hwmon"], {"hwmon0/name": "acpitz\n", "hwmon0/temp1_input": "40000\n",
                            "hwmon1/name": "nvme\n", "hwmon1/temp1_input": "41000\n"})
    write_files(sysfs["thermal"], {"thermal_zone0/type": "acpitz\n", "thermal_zone0/temp": "40000\n",
                              "thermal_zone1/temp": "40000\n",  # a zone without a type
                              "thermal_zone2/type": "pch_cannonlake\n", "thermal_zone2/temp": "40000\n"})
    message = _unreadable(host.cpu_temperature)
    assert f"{sysfs['hwmon']}: no CPU sensor (coretemp/k10temp/zenpower/cpu_thermal) among acpitz, nvme" in message
    assert "(zones: acpitz, pch_cannonlake)" in message
    assert "macOS" not in message


def test_with_no_devices_the_error_says_so(sysfs):
    message = _unreadable(host.cpu_temperature)
    assert f"{sysfs['hwmon']}: no CPU sensor (coretemp/k10temp/zenpower/cpu_thermal) among no devices" in message


def test_zone_types_written_with_dashes_are_the_cpus(sysfs):
    write_files(sysfs["thermal"], {"thermal_zone0/type": "x86-pkg-temp\n", "thermal_zone0/temp": "58000\n"})
    assert host.cpu_temperature() == 58


def test_on_macos_the_error_says_why_there_is_no_reading(sysfs, monkeypatch):
    monkeypatch.setattr(host, "sys", SimpleNamespace(platform="darwin"))
    message = _unreadable(host.cpu_temperature)
    assert message.startswith("no CPU temperature reading: ")
    assert message.endswith("; macOS exposes CPU temperatures to no unprivileged reader")


# -- power ------------------------------------------------------------------------------------------------


def _rapl(root: Path, energies: dict[str, int]) -> None:
    names = {"intel-rapl:0": "package-0", "intel-rapl:1": "package-1", "intel-rapl:0:0": "core",
             "intel-rapl:0:1": "dram", "intel-rapl:2": "psys", "intel-rapl-mmio:0": "package-0"}
    for domain, energy in energies.items():
        write_files(root, {f"{domain}/name": names[domain] + "\n", f"{domain}/energy_uj": f"{energy}\n",
                      f"{domain}/max_energy_range_uj": f"{RAPL_RANGE}\n"})


def test_power_is_the_packages_average_over_a_first_sample_then_since_the_previous_call(sysfs, clock):
    root = sysfs["powercap"]
    start = {"intel-rapl:0": 10_000_000, "intel-rapl:1": 20_000_000, "intel-rapl:0:0": 5_000_000,
             "intel-rapl:0:1": 1_000_000, "intel-rapl:2": 30_000_000, "intel-rapl-mmio:0": 10_000_000}
    _rapl(root, start)
    # during the first call's 0.1 s sample: 3 J and 2 J in the packages; the subdomains, the platform (psys)
    # and the MMIO copy of package 0 move too, and must not be added
    clock.during_sleep = lambda: _rapl(root, {"intel-rapl:0": 13_000_000, "intel-rapl:1": 22_000_000,
                                              "intel-rapl:0:0": 7_000_000, "intel-rapl:0:1": 9_000_000,
                                              "intel-rapl:2": 99_000_000, "intel-rapl-mmio:0": 13_000_000})
    power = host.PackagePower()
    first = power.milliwatts()
    assert first == 50_000 and type(first) is int  # 5 J in 0.1 s: 50 W
    assert clock.slept == [pytest.approx(0.1)]
    clock.during_sleep = None
    clock.now += 2.0
    _rapl(root, {"intel-rapl:0": 13_000_000 + 30_000_000, "intel-rapl:1": 22_000_000 + 10_500_000})
    assert power.milliwatts() == 20_250  # 40.5 J in 2 s, measured without sleeping
    assert len(clock.slept) == 1


def test_a_counter_that_wrapped_is_unwrapped_with_its_range(sysfs, clock):
    root = sysfs["powercap"]
    _rapl(root, {"intel-rapl:0": RAPL_RANGE - 328_850})
    clock.during_sleep = lambda: _rapl(root, {"intel-rapl:0": RAPL_RANGE - 328_850 + 100_000})
    power = host.PackagePower()
    assert power.milliwatts() == 1_000  # 0.1 J in 0.1 s
    clock.during_sleep = None
    clock.now += 1.0
    _rapl(root, {"intel-rapl:0": 1_000_000})  # wrapped: 228,850 uJ to the top, then 1,000,000 from 0
    assert power.milliwatts() == 1_229  # 1.22885 J in 1 s
    (root / "intel-rapl:0" / "max_energy_range_uj").write_text("garbage\n")
    clock.now += 1.0
    _rapl(root, {"intel-rapl:0": 5})
    (root / "intel-rapl:0" / "max_energy_range_uj").write_text("garbage\n")
    with pytest.raises(host.Unreadable, match="wrapped and its max_energy_range_uj cannot be read"):
        power.milliwatts()


def test_an_interval_long_enough_to_wrap_twice_is_not_averaged_over(sysfs, clock):
    root = sysfs["powercap"]
    _rapl(root, {"intel-rapl:0": 1_000})
    (root / "intel-rapl:0" / "max_energy_range_uj").write_text("60000000\n")  # 60 J: at 1 kW, 60 ms
    clock.during_sleep = lambda: _rapl(root, {"intel-rapl:0": 5_000_000})
    (root / "intel-rapl:0" / "max_energy_range_uj").write_text("60000000\n")
    power = host.PackagePower()
    power.milliwatts()
    clock.now += 10.0  # could have wrapped many times: the counter's 10 s difference means nothing
    _rapl(root, {"intel-rapl:0": 7_000_000})
    (root / "intel-rapl:0" / "max_energy_range_uj").write_text("60000000\n")
    clock.during_sleep = lambda: (root / "intel-rapl:0" / "energy_uj").write_text("9500000\n")
    assert power.milliwatts() == 25_000  # measured afresh: 2.5 J in 0.1 s
    assert clock.slept == [pytest.approx(0.1), pytest.approx(0.1)]


def test_a_call_right_after_the_previous_waits_for_the_counters_to_move(sysfs, clock):
    root = sysfs["powercap"]
    _rapl(root, {"intel-rapl:0": 0})
    clock.during_sleep = lambda: (root / "intel-rapl:0" / "energy_uj").write_text("1000000\n")
    power = host.PackagePower()
    assert power.milliwatts() == 10_000
    clock.now += 0.004
    clock.during_sleep = lambda: (root / "intel-rapl:0" / "energy_uj").write_text("1100000\n")
    assert power.milliwatts() == 10_000  # 0.1 J in the 10 ms measured
    assert clock.slept[-1] == pytest.approx(0.006)


def test_root_only_energy_is_unreadable_through_the_backend_as_sensor_unavailable(sysfs, clock, monkeypatch):
    _rapl(sysfs["powercap"], {"intel-rapl:0": 1, "intel-rapl:1": 2})
    _deny(monkeypatch, "intel-rapl:1/energy_uj")  # one package unreadable: no partial sum either
    with pytest.raises(SensorUnavailableError) as info:
        cpu.CPUMemory("cpu").power_draw(0)
    assert (info.value.function, info.value.backend) == ("power_draw", "cpu")
    assert "intel-rapl:1/energy_uj: permission denied" in info.value.tried
    assert "energy_uj" in info.value.instead
    assert not clock.slept


@pytest.mark.parametrize(("files", "message"), [
    ({"intel-rapl:0/name": "package-0\n", "intel-rapl:0/energy_uj": "n/a\n"}, "not a count of microjoules"),
    ({"intel-rapl:2/name": "psys\n", "intel-rapl:2/energy_uj": "5\n", "intel-rapl:0:0/name": "core\n",
      "intel-rapl:0:0/energy_uj": "5\n"}, r"no RAPL package domain .*found: intel-rapl:2 \(psys\)"),
    ({"intel-rapl:0/name": "package-0\n"}, "energy_uj: No such file"),
    ({}, "no RAPL package domain"),
])
def test_unusable_powercap_trees_are_unreadable(sysfs, clock, files, message):
    write_files(sysfs["powercap"], files)
    with pytest.raises(host.Unreadable, match=message):
        host.PackagePower().milliwatts()


def test_without_powercap_the_root_is_named(tmp_path, monkeypatch):
    monkeypatch.setattr(host, "POWERCAP", str(tmp_path / "no-powercap"))
    with pytest.raises(host.Unreadable, match="no-powercap: missing"):
        host.PackagePower().milliwatts()


# -- power: which domains are read, how the average is taken, and what the error says ---------------------


def _domain(root: Path, domain: str, energy: int, name: str | None = "package-0", top: str = f"{RAPL_RANGE}") -> None:
    write_files(root, {f"{domain}/energy_uj": f"{energy}\n", f"{domain}/max_energy_range_uj": f"{top}\n"})
    if name is not None:
        write_files(root, {f"{domain}/name": name + "\n"})


def test_without_powercap_on_macos_the_error_says_where_power_is(tmp_path, monkeypatch):
    missing = tmp_path / "no-powercap"
    monkeypatch.setattr(host, "POWERCAP", str(missing))
    monkeypatch.setattr(host, "sys", SimpleNamespace(platform="darwin"))
    assert _unreadable(host.PackagePower.read_packages) == (
        f"{missing}: missing (no powercap RAPL driver exposed, as in most VMs and containers and off Linux); "
        "macOS exposes CPU power to root only (powermetrics)")
    monkeypatch.setattr(host, "sys", SimpleNamespace(platform="linux"))
    assert "macOS" not in _unreadable(host.PackagePower.read_packages)


def test_the_error_lists_the_domains_found_with_their_names(sysfs):
    root = sysfs["powercap"]
    _domain(root, "intel-rapl:0", 5, name="psys")
    _domain(root, "intel-rapl:1", 5, name=None)
    assert _unreadable(host.PackagePower.read_packages) == (
        f"{root}: no RAPL package domain (intel-rapl:N named package-N; found: intel-rapl:0 (psys), "
        "intel-rapl:1 (no name))")


def test_an_empty_powercap_says_it_found_none(sysfs):
    assert _unreadable(host.PackagePower.read_packages).endswith("found: none)")


def test_a_package_after_another_domain_is_read(sysfs):
    root = sysfs["powercap"]
    _domain(root, "intel-rapl:0", 7, name="psys")  # the platform domain listed first, as on some laptops
    _domain(root, "intel-rapl:1", 11, name="package-0")
    assert host.PackagePower.read_packages() == ({"intel-rapl:1": 11}, {"intel-rapl:1": RAPL_RANGE})


def test_a_package_that_did_not_move_adds_nothing(sysfs, clock):
    root = sysfs["powercap"]
    _domain(root, "intel-rapl:0", 4_000_000)
    _domain(root, "intel-rapl:1", 9_000_000, name="package-1")
    clock.during_sleep = lambda: _domain(root, "intel-rapl:1", 9_300_000, name="package-1")
    assert host.PackagePower().milliwatts() == 3_000  # 0.3 J in 0.1 s; package 0 idle (0 J), not wrapped


def test_a_zero_range_is_no_range_to_unwrap_with(sysfs, clock):
    root = sysfs["powercap"]
    _domain(root, "intel-rapl:0", 5_000_000, top="0")
    clock.during_sleep = lambda: _domain(root, "intel-rapl:0", 200, top="0")  # went back: wrapped
    message = _unreadable(host.PackagePower().milliwatts)
    assert "intel-rapl:0/energy_uj wrapped and its max_energy_range_uj cannot be read" in message


def test_a_domain_appearing_while_measuring_is_unreadable(sysfs, clock):
    root = sysfs["powercap"]
    _domain(root, "intel-rapl:0", 1_000)
    clock.during_sleep = lambda: _domain(root, "intel-rapl:1", 2_000, name="package-1")
    message = _unreadable(host.PackagePower().milliwatts)
    assert message == f"{root}: the package domains changed while measuring"


def test_the_average_is_rounded_to_the_nearest_milliwatt(sysfs, clock):
    root = sysfs["powercap"]
    _domain(root, "intel-rapl:0", 0)
    clock.during_sleep = lambda: _domain(root, "intel-rapl:0", 100_000)
    power = host.PackagePower()
    power.milliwatts()
    clock.during_sleep = None
    clock.now += 2.0  # exact: the clock stays in one binade, so the interval is 2.0 to the bit
    _domain(root, "intel-rapl:0", 100_000 + 2_002_999)
    assert power.milliwatts() == 1_001  # 2.002999 J in 2 s: 1001.4995 mW


def test_an_interval_just_inside_the_wrap_bound_is_averaged_over(sysfs, clock):
    root = sysfs["powercap"]
    _domain(root, "intel-rapl:0", 0, top="500000000")  # 500 J: at 1 kW it wraps in 0.5 s at the soonest
    clock.during_sleep = lambda: _domain(root, "intel-rapl:0", 100_000, top="500000000")
    power = host.PackagePower()
    power.milliwatts()
    clock.during_sleep = None
    clock.now += 0.4999998
    _domain(root, "intel-rapl:0", 100_000 + 4_999_998, top="500000000")
    assert power.milliwatts() == 10_000  # 4.999998 J in 0.4999998 s, with no fresh sample
    assert len(clock.slept) == 1


def test_a_clock_that_did_not_advance_is_unreadable(sysfs, clock):
    _domain(sysfs["powercap"], "intel-rapl:0", 1_000)
    clock.rate = 0.0  # a coarse monotonic clock: the same reading before and after the sample
    message = _unreadable(host.PackagePower().milliwatts)
    assert message == "no time passed between two readings of the energy counters"


# -- clock ------------------------------------------------------------------------------------------------


def test_an_unreadable_clock_raises_sensor_unavailable(tmp_path, monkeypatch):
    monkeypatch.setattr(host, "CPU0", str(tmp_path / "cpu0"))
    monkeypatch.setattr(host, "CPUINFO", str(tmp_path / "cpuinfo"))
    with pytest.raises(SensorUnavailableError) as info:
        cpu.CPUMemory("cpu").clock_rate(0)
    assert (info.value.function, info.value.backend) == ("clock_rate", "cpu")
    assert str(tmp_path / "cpuinfo") in info.value.tried and "get_device_properties" in info.value.instead
    (tmp_path / "cpuinfo").write_text("processor\t: 0\ncpu MHz\t\t: 1234.9\n")
    assert cpu.CPUMemory("cpu").clock_rate(0) == 1234


# -- through torch.cuda while translating -----------------------------------------------------------------


@pytest.fixture
def translating():
    torchdevice.use("cpu")
    translate.patch()
    try:
        yield
    finally:
        translate.unpatch()
        torchdevice.use(None)


def test_torch_cuda_reads_the_sensors_and_names_itself_in_the_error(sysfs, translating):
    with pytest.raises(SensorUnavailableError) as info:
        torch.cuda.temperature()
    assert info.value.function == "torch.cuda.temperature" and info.value.backend == "cpu"
    assert str(info.value).startswith("torch.cuda.temperature cannot be read on this host")
    write_files(sysfs["hwmon"], {"hwmon0/name": "coretemp\n", "hwmon0/temp1_input": "64000\n"})
    assert torch.cuda.temperature() == 64 and torch.cuda.temperature(0) == 64
    with pytest.raises(UnsupportedError, match="torch.cuda.memory_usage .*memory-bus busy time"):
        torch.cuda.memory_usage()  # no host exposes it: still refused


def _expects_a_reading(patterns: list[str]) -> bool:
    """Whether any of the files exists and is readable by this process (decided here, not by torchdevice)."""
    return any(os.access(path, os.R_OK) for pattern in patterns for path in glob.glob(pattern))


def test_the_real_host_answers_plausibly_or_says_it_cannot(translating):
    temperature_files = ["/sys/class/hwmon/*/temp*_input", "/sys/class/hwmon/*/device/temp*_input",
                         "/sys/class/thermal/thermal_zone*/temp"]
    try:
        celsius = torch.cuda.temperature()
    except SensorUnavailableError as exc:
        assert exc.function == "torch.cuda.temperature" and exc.tried and exc.instead
    else:
        assert type(celsius) is int and 0 < celsius < 130
        assert _expects_a_reading(temperature_files), "a temperature with no sensor file to read"
    if not _expects_a_reading(temperature_files):
        with pytest.raises(SensorUnavailableError):
            torch.cuda.temperature()
    try:
        milliwatts = torch.cuda.power_draw()
    except SensorUnavailableError as exc:
        assert exc.function == "torch.cuda.power_draw" and exc.tried and exc.instead
    else:
        assert type(milliwatts) is int and 0 < milliwatts < 2_000_000  # a package below 2 kW
        assert _expects_a_reading(["/sys/class/powercap/intel-rapl:*/energy_uj"])
    if not _expects_a_reading(["/sys/class/powercap/intel-rapl:*/energy_uj"]):
        with pytest.raises(SensorUnavailableError):
            torch.cuda.power_draw()
