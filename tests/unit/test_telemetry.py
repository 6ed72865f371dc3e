"""Telemetry, NVML, host memory split and the host lock, with fakes (no GPU here)."""

from __future__ import annotations

import os

import psutil
import pytest
from nvml_fake import FakePynvml

from llamaforge import gpu, hostlock
from llamaforge.bench import telemetry
from llamaforge.bench.monitor import Monitor, proc_rss_split
from llamaforge.errors import BenchError
from llamaforge.findings import conditions


def test_nvml_unavailable_means_empty_not_invented():
    n = gpu.Nvml(module=FakePynvml(fail_init=True))
    assert not n.ok and n.handles == []
    s = telemetry.TelemetrySampler(n)
    s.sample([])
    assert "gpu" not in s.summary() and conditions.flags(s.summary()) == []


def test_nvml_telemetry_fields_and_unsupported_query_stays_none():
    n = gpu.Nvml(module=FakePynvml(n=2, no_power=True))
    t = n.telemetry()
    assert len(t) == 2
    assert t[0]["sm_clock_mhz"] == 1980 and t[0]["mem_clock_mhz"] == 3201 and t[0]["temperature_c"] == 61
    assert t[0]["power_w"] is None and t[0]["gpu_util_pct"] == 97
    n.close()


def test_nvml_inventory_is_what_a_run_records_with_theoretical_bandwidth():
    with gpu.Nvml(module=FakePynvml(2, no_power=True)) as n:
        inv, versions = n.inventory(), n.versions()
    assert versions == ("570.86", "12.8") and [g["index"] for g in inv] == [0, 1]
    g = inv[0]
    assert g["name"] == "NVIDIA H200" and g["memory_total_mib"] == 140 * 1024 and g["clock_mem_max_mhz"] == 3201
    assert g["memory_bandwidth_gbps"] == round(3201e6 * 2 * 5120 / 8 / 1e9, 1)
    assert "compute_capability" not in g                     # the fake does not support it: absent, not invented
    with gpu.Nvml(module=FakePynvml(fail_init=True)) as n:
        assert n.inventory() == [] and n.versions() == (None, None)


def test_throttle_names_decodes_the_bitmask():
    assert gpu.throttle_names(0x4 | 0x40) == ["sw_power_cap", "hw_thermal_slowdown"]
    assert gpu.throttle_names(0) == []


def test_sampler_flags_throttled_and_shared_but_not_own_processes():
    me = os.getpid()
    fake = FakePynvml(procs=[(me, 100), (424242, 2000)], throttle=0x4)
    s = telemetry.TelemetrySampler(gpu.Nvml(module=fake))
    for _ in range(3):
        s.sample([psutil.Process(me)])
    summ = s.summary()
    assert summ["gpu"][0]["throttle_reasons"] == {"sw_power_cap": 1.0}
    assert [o["pid"] for o in summ["other_gpu_processes"]] == [424242]
    assert summ["gpu"][0]["power_w"] == {"min": 350.0, "median": 350.0, "max": 350.0}
    assert conditions.flags(summ)[:1] == ["throttled"] and "shared" in conditions.flags(summ)
    assert "PID 424242" in conditions.describe(summ)


def test_idle_or_settings_throttle_reasons_are_not_a_slowdown():
    s = telemetry.TelemetrySampler(gpu.Nvml(module=FakePynvml(throttle=0x1 | 0x2)))
    s.sample([])
    assert "throttled" not in conditions.flags(s.summary())


def test_loaded_flag_from_other_processes_cpu_use():
    tel = {"host": {"other_cpu_cores": {"min": 0.9, "median": 1.2, "max": 1.9}}}
    assert conditions.flags(tel) == ["loaded"]
    tel["host"]["other_cpu_cores"]["median"] = 0.1
    assert conditions.flags(tel) == []


def test_other_gpu_processes_excludes_given_pids():
    n = gpu.Nvml(module=FakePynvml(procs=[(1, 10), (os.getpid(), 20)]))
    others = gpu.other_gpu_processes(exclude={os.getpid()}, nvml=n)
    assert [o["pid"] for o in others] == [1]


def test_proc_rss_split_reads_anonymous_and_file_backed_of_a_real_process():
    split = proc_rss_split(os.getpid())
    assert split is not None
    anon, file = split
    rss = psutil.Process().memory_info().rss
    assert anon > 0 and file > 0
    assert anon + file <= rss * 1.5 + 64 * 2**20   # RssShmem is the rest; sampled at slightly different times
    assert proc_rss_split(2**31 - 7) is None


def test_monitor_records_host_split_and_telemetry_for_a_process():
    m = Monitor(os.getpid(), use_nvml=False)
    m.sample()
    m.sample()
    res = m.stop()
    assert res.rss_anon_peak_mib and res.rss_file_peak_mib
    assert res.host_mem()["rss_anon_peak_mib"] == res.rss_anon_peak_mib
    assert res.telemetry["samples"] == 2 and "gpu" not in res.telemetry


def test_host_lock_refuses_a_second_holder_with_who_holds_it(tmp_path):
    path = tmp_path / "l.lock"
    with hostlock.HostLock("first", path=path):
        with pytest.raises(BenchError) as e:
            hostlock.HostLock("second", path=path).acquire()
        assert f"PID {os.getpid()}" in str(e.value) and "--allow-busy" in e.value.fix
    with hostlock.HostLock("third", path=path):   # released: free again
        assert hostlock.holder(path)["what"] == "third"
    assert hostlock.holder(path) == {}              # released: the holder line is cleared


def test_host_lock_waits_then_gives_up(tmp_path):
    path = tmp_path / "l.lock"
    first = hostlock.HostLock("a", path=path).acquire()
    try:
        with pytest.raises(BenchError):
            hostlock.HostLock("b", path=path, wait_s=0.3).acquire()
    finally:
        first.release()
    assert hostlock.HostLock("c", path=path, wait_s=0.3).acquire().release() is None


def test_device_names_decode_and_shutdown_once():
    fake = FakePynvml(n=2)
    with gpu.Nvml(module=fake) as n:
        assert n.names() == ["NVIDIA H200", "NVIDIA H200"]
        assert [round(u) for u, _t, _f in n.memory()] == [10240, 10240]
    assert fake.shutdowns == 1
