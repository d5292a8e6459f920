"""The host's Linux readers of ``/proc`` and sysfs (else macOS's sysctl): the fields of a ``/proc`` status
file, the CPU topology (threads per core), the L2 cache size and the maximum clock.

They run against fake trees in ``tmp_path`` (``host.CPU0`` and ``CPUINFO`` pointed there) and a
scripted ``sysctl_int``; every expected value is worked out here by hand from what was written.
"""
from __future__ import annotations

import pytest
from helpers import write_files

from torchdevice import host

# -- /proc fields ---------------------------------------------------------------------------------------


def test_a_process_name_that_looks_like_a_field_adds_no_field(tmp_path):
    status = tmp_path / "status"
    status.write_text("Name:\tworker: 5 kB\nVmPeak:\t  2048 kB\nVmRSS:\t   512 kB\nThreads:\t4\n")
    assert host.read_kib_fields(str(status), "cpu", "memory_reserved") == {"VmPeak": 2048 * 1024,
                                                                             "VmRSS": 512 * 1024}


# -- CPU topology, caches and clocks from sysfs, else sysctl ---------------------------------------------


@pytest.fixture
def cpu0(tmp_path, monkeypatch):
    """An empty cpu0 directory and no /proc/cpuinfo, in place of the host's."""
    root = tmp_path / "cpu0"
    root.mkdir()
    monkeypatch.setattr(host, "CPU0", str(root))
    monkeypatch.setattr(host, "CPUINFO", str(tmp_path / "cpuinfo"))
    monkeypatch.setattr(host, "sysctl_int", lambda name: None)
    return root


@pytest.mark.parametrize(("siblings", "threads"), [("0-1", 2), ("0,4", 2), ("2-3", 2), ("0-3,8-11", 8),
                                                   ("5", 1), ("0-1,4", 3)])
def test_threads_per_core_counts_the_siblings_list(cpu0, siblings, threads):
    write_files(cpu0, {"topology/thread_siblings_list": siblings + "\n"})
    assert host.threads_per_core() == threads


def test_threads_per_core_from_sysctl_is_a_whole_ratio_and_needs_both_counts(cpu0, monkeypatch):
    monkeypatch.setattr(host, "sysctl_int", {"hw.logicalcpu": 16, "hw.physicalcpu": 8}.get)
    threads = host.threads_per_core()
    assert threads == 2 and type(threads) is int
    monkeypatch.setattr(host, "sysctl_int", {"hw.logicalcpu": 16}.get)
    assert host.threads_per_core() == 1
    monkeypatch.setattr(host, "sysctl_int", {"hw.physicalcpu": 8}.get)
    assert host.threads_per_core() == 1


@pytest.mark.parametrize(("size", "expected"), [("2048K", 2 << 20), ("2M", 2 << 20), ("1G", 1 << 30),
                                                ("524288", 524288)])
def test_l2_cache_size_is_the_level_2_entry_in_bytes(cpu0, size, expected):
    write_files(cpu0, {"cache/index0/level": "1\n", "cache/index0/size": "48K\n",
                  "cache/index1/level": "1\n", "cache/index1/size": "32K\n",
                  "cache/index2/level": "2\n", "cache/index2/size": size + "\n",
                  "cache/index3/level": "3\n", "cache/index3/size": "30720K\n"})
    assert host.l2_cache_size() == expected


def test_l2_cache_size_falls_back_to_sysctl_then_zero(cpu0, monkeypatch):
    write_files(cpu0, {"cache/index0/level": "1\n", "cache/index0/size": "64K\n"})
    monkeypatch.setattr(host, "sysctl_int", {"hw.l2cachesize": 4 << 20}.get)
    assert host.l2_cache_size() == 4 << 20
    monkeypatch.setattr(host, "sysctl_int", lambda name: None)
    assert host.l2_cache_size() == 0


def test_the_max_clock_is_cpufreqs_maximum_not_the_current_clock(cpu0):
    write_files(cpu0, {"cpufreq/cpuinfo_max_freq": "4500000\n", "cpufreq/scaling_cur_freq": "1200000\n"})
    assert host.max_clock_khz() == 4_500_000


def test_without_a_maximum_the_max_clock_is_the_current_clock_in_khz(cpu0, tmp_path):
    write_files(cpu0, {"cpufreq/scaling_cur_freq": "2994374\n"})
    assert host.max_clock_khz() == 2_994_000  # 2994 whole MHz
    write_files(cpu0, {"cpufreq/cpuinfo_max_freq": "n/a\n", "cpufreq/scaling_cur_freq": "garbage\n"})
    (tmp_path / "cpuinfo").write_text("processor\t: 0\ncpu MHz\t\t: 2394.374\n")
    assert host.max_clock_khz() == 2_394_000


def test_without_sysfs_or_cpuinfo_the_max_clock_is_sysctls_hz_in_whole_khz(cpu0, monkeypatch):
    monkeypatch.setattr(host, "sysctl_int", {"hw.cpufrequency_max": 2_400_000_500}.get)
    khz = host.max_clock_khz()
    assert khz == 2_400_000 and type(khz) is int
    monkeypatch.setattr(host, "sysctl_int", lambda name: None)
    assert host.max_clock_khz() == 0
