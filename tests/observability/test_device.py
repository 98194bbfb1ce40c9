"""Device metrics through NVML: readings mapped onto the gauges, and silence (never an exception) without a GPU.

A fake `pynvml` module stands in for the library (injected into sys.modules), so this runs on machines without one.
"""
from __future__ import annotations

import sys
import threading
import time
import types
from dataclasses import dataclass

import pytest
from prometheus_client import REGISTRY

from triserve.observability import device

GIB = 2 ** 30


class FakeNVMLError(Exception):
    pass


@dataclass
class _Mem:
    total: int
    used: int
    free: int


@dataclass
class _Util:
    gpu: int  # percent, as NVML reports it
    memory: int = 0


def fake_nvml(devices: list[dict], init_error: bool = False) -> types.SimpleNamespace:
    """A pynvml stand-in: each device a dict(name, total, used, util) (util None: not supported, like a MIG slice;
    lost True: every call on it fails, like a GPU that fell off the bus). Records its calls."""
    calls: list[str] = []

    def init():
        calls.append("init")
        if init_error:
            raise FakeNVMLError("NVML Shared Library Not Found")

    def handle(index):
        if devices[index].get("lost"):
            raise FakeNVMLError("GPU is lost")
        return index

    def util(index):
        if devices[index]["util"] is None:
            raise FakeNVMLError("Not Supported")
        return _Util(gpu=devices[index]["util"])

    def memory(index):
        calls.append("memory")
        d = devices[index]
        return _Mem(total=d["total"], used=d["used"], free=d["total"] - d["used"])

    return types.SimpleNamespace(
        NVMLError=FakeNVMLError, calls=calls, nvmlInit=init, nvmlShutdown=lambda: calls.append("shutdown"),
        nvmlDeviceGetCount=lambda: len(devices), nvmlDeviceGetHandleByIndex=handle,
        nvmlDeviceGetMemoryInfo=memory, nvmlDeviceGetName=lambda i: devices[i]["name"],
        nvmlDeviceGetUtilizationRates=util)


H200 = {"name": "NVIDIA H200", "total": 141 * GIB, "used": 100 * GIB, "util": 87}
MIG = {"name": b"NVIDIA A100-SXM4-40GB", "total": 40 * GIB, "used": 4 * GIB, "util": None}  # bytes: old pynvml


def metric(metric_name: str, /, **labels: str) -> float | None:
    return REGISTRY.get_sample_value(metric_name, labels)


@pytest.fixture(autouse=True)
def no_sampler():
    device.stop_device_sampler()
    yield
    device.stop_device_sampler()


def test_readings_are_mapped_onto_the_gauges():
    nvml = fake_nvml([H200, MIG])
    readings = device.read_devices(nvml)
    assert readings == [
        device.DeviceReading("0", "NVIDIA H200", 141 * GIB, 100 * GIB, 41 * GIB, 0.87),
        device.DeviceReading("1", "NVIDIA A100-SXM4-40GB", 40 * GIB, 4 * GIB, 36 * GIB, None),
    ]
    device.publish(readings)
    assert metric("triserve_device_memory_bytes", device="0", state="used") == 100 * GIB
    assert metric("triserve_device_memory_bytes", device="0", state="free") == 41 * GIB
    assert metric("triserve_device_memory_bytes", device="0", state="total") == 141 * GIB
    assert metric("triserve_device_utilization_ratio", device="0") == pytest.approx(0.87)
    assert metric("triserve_device_info", device="0", name="NVIDIA H200") == 1
    # no utilisation counter: memory is still there, the ratio is absent (not a misleading 0)
    assert metric("triserve_device_memory_bytes", device="1", state="total") == 40 * GIB
    assert metric("triserve_device_utilization_ratio", device="1") is None
    assert metric("triserve_device_info", device="1", name="NVIDIA A100-SXM4-40GB") == 1


def test_a_lost_device_does_not_hide_the_others():
    readings = device.read_devices(fake_nvml([{**H200, "lost": True}, H200]))
    assert [r.device for r in readings] == ["1"]


def test_sampler_starts_once_per_process_and_keeps_sampling(monkeypatch):
    nvml = fake_nvml([{**H200, "used": 7 * GIB}])
    monkeypatch.setitem(sys.modules, "pynvml", nvml)
    assert device.start_device_sampler(interval_s=0.02) is True
    assert metric("triserve_device_memory_bytes", device="0", state="used") == 7 * GIB  # sampled at start
    assert device.start_device_sampler(interval_s=0.02) is True  # idempotent: no second thread, no second init
    assert nvml.calls.count("init") == 1
    assert [t.name for t in threading.enumerate()].count("device-sampler") == 1
    deadline = time.monotonic() + 5
    while nvml.calls.count("memory") < 3 and time.monotonic() < deadline:
        time.sleep(0.01)
    assert nvml.calls.count("memory") >= 3  # the thread samples every interval
    device.stop_device_sampler()
    assert "shutdown" in nvml.calls
    assert "device-sampler" not in [t.name for t in threading.enumerate()]


@pytest.mark.parametrize("case", ["no library", "no driver", "no device"])
def test_without_nvml_or_gpu_the_sampler_reports_nothing_and_never_raises(monkeypatch, case):
    if case == "no library":
        monkeypatch.setitem(sys.modules, "pynvml", None)  # `import pynvml` raises ImportError
        nvml = None
    else:
        nvml = fake_nvml([], init_error=case == "no driver")
        monkeypatch.setitem(sys.modules, "pynvml", nvml)
    assert device.start_device_sampler(interval_s=0.01) is False
    assert "device-sampler" not in [t.name for t in threading.enumerate()]
    if case == "no device":
        assert nvml is not None and nvml.calls == ["init", "shutdown"]


def test_a_failing_sample_is_skipped_and_logged_once(monkeypatch, caplog):
    nvml = fake_nvml([H200])
    monkeypatch.setitem(sys.modules, "pynvml", nvml)
    assert device.start_device_sampler(interval_s=0.01) is True
    count = nvml.nvmlDeviceGetCount
    failures = []

    def broken():
        failures.append(1)
        raise FakeNVMLError("Driver Not Loaded")

    with caplog.at_level("WARNING", logger="triserve.device"):
        nvml.nvmlDeviceGetCount = broken  # the driver went away under the running sampler
        deadline = time.monotonic() + 5
        while len(failures) < 3 and time.monotonic() < deadline:
            time.sleep(0.01)
        assert len(failures) >= 3
        assert [t.name for t in threading.enumerate()].count("device-sampler") == 1  # still alive
        assert len([r for r in caplog.records if "device sample failed" in r.message]) == 1  # not every interval
        nvml.nvmlDeviceGetCount = count
        deadline = time.monotonic() + 5
        while device._failing and time.monotonic() < deadline:
            time.sleep(0.01)
        assert not device._failing  # sampling again


def test_this_machine():
    """The real library (if installed) on this machine: True with a sampling thread on a GPU host, False and
    nothing started elsewhere; never an exception."""
    started = device.start_device_sampler(interval_s=60)
    assert ("device-sampler" in [t.name for t in threading.enumerate()]) is started
    if started:
        assert metric("triserve_device_memory_bytes", device="0", state="total") > 0
