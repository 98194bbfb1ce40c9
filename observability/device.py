"""Accelerator memory and utilisation on /metrics, read through NVML (issue 20: many deployments on one accelerator).

Why: the runner's memory budget (runners/memory.py) counts what triserve measured of its own models in the process;
the device's own counters show what the whole card holds (every process on it, the CUDA context, allocator caches)
and how busy it is, so a card filled by a neighbour, or one that is full while triserve thinks it has room, shows.

NVML comes from `pynvml` (PyPI nvidia-ml-py, the `gpu` extra). It is imported when the sampler starts, never at
import time, and every failure is contained: without the library, the driver or a GPU, start_device_sampler()
returns False, starts nothing and the metrics stay absent (absent, not 0: an idle GPU and no GPU must not look the
same). Callers may import start_device_sampler, stop_device_sampler and read_devices; the rest is private.
"""
from __future__ import annotations

import logging
import os
import threading
from dataclasses import dataclass

from prometheus_client import Gauge

log = logging.getLogger("triserve.device")

# livemax: every sampling process (one per runner worker) reads the same card, so the live processes' largest
# reading is the card's; a dead process's last reading is dropped instead of freezing on /metrics.
DEVICE_MEMORY = Gauge("triserve_device_memory_bytes", "Accelerator memory as NVML reports it for the whole device "
                      "(every process on it, not only triserve): used, free, total.", ["device", "state"],
                      multiprocess_mode="livemax")
DEVICE_UTILIZATION = Gauge("triserve_device_utilization_ratio", "Share of the last sample period (NVML: 1/6 s to "
                           "1 s) in which a kernel ran on the accelerator, 0..1. Absent where NVML cannot tell "
                           "(MIG slices, some vGPUs).", ["device"], multiprocess_mode="livemax")
DEVICE_INFO = Gauge("triserve_device_info", "Accelerators NVML sees (value 1): index and product name.",
                    ["device", "name"], multiprocess_mode="livemax")


@dataclass(frozen=True)
class DeviceReading:
    """One device, one sample: what the gauges get."""

    device: str  # NVML index (the container's view: the devices it was given, in NVML's order)
    name: str
    total: int  # bytes
    used: int
    free: int
    utilization: float | None  # 0..1; None where NVML does not support it


def read_devices(nvml) -> list[DeviceReading]:
    """Every device NVML lists (nvmlInit done). Why per-device and per-reading guards: a lost GPU or a MIG-enabled one
    (no utilisation counter) must not hide the others' readings. No gauges are touched here: the unit under test."""
    out = []
    for index in range(nvml.nvmlDeviceGetCount()):
        try:
            handle = nvml.nvmlDeviceGetHandleByIndex(index)
            mem = nvml.nvmlDeviceGetMemoryInfo(handle)
            name = nvml.nvmlDeviceGetName(handle)
        except nvml.NVMLError as exc:
            log.debug("NVML device %d unreadable: %s", index, exc)
            continue
        try:
            utilization: float | None = nvml.nvmlDeviceGetUtilizationRates(handle).gpu / 100.0
        except nvml.NVMLError:
            utilization = None
        out.append(DeviceReading(
            device=str(index), name=name.decode() if isinstance(name, bytes) else str(name),  # bytes before 11.515
            total=int(mem.total), used=int(mem.used), free=int(mem.free), utilization=utilization))
    return out


def publish(readings: list[DeviceReading]) -> None:
    """Set the gauges from one sample."""
    for r in readings:
        for state, value in (("used", r.used), ("free", r.free), ("total", r.total)):
            DEVICE_MEMORY.labels(r.device, state).set(value)
        if r.utilization is not None:
            DEVICE_UTILIZATION.labels(r.device).set(r.utilization)
        DEVICE_INFO.labels(r.device, r.name).set(1)


_lock = threading.Lock()
_stop = threading.Event()
_thread: threading.Thread | None = None
_pid = 0  # the process that started _thread: a forked child inherits the globals, not the thread
_nvml = None
_failing = False  # the last sample failed (its warning was logged)


def _init_nvml():
    """The initialised pynvml module, or None when there is no library, no driver or no device."""
    try:
        import pynvml
    except ImportError:
        return None
    try:
        pynvml.nvmlInit()
        if pynvml.nvmlDeviceGetCount() > 0:
            return pynvml
        pynvml.nvmlShutdown()
    except Exception as exc:  # noqa: BLE001 - any NVML/driver failure means "no device metrics", never a crash
        log.debug("NVML unavailable: %s", exc)
    return None


def _sample(nvml) -> int:
    """One sample published; the number of devices read (0 when the sample failed). A failure is logged once, not
    every interval, until a sample succeeds again."""
    global _failing
    try:
        readings = read_devices(nvml)
        publish(readings)
    except Exception as exc:  # noqa: BLE001 - a failed sample is skipped; the sampler must outlive driver hiccups
        if not _failing:
            log.warning("device sample failed (skipped until it works again): %s", exc)
        _failing = True
        return 0
    _failing = False
    return len(readings)


def start_device_sampler(interval_s: float = 5.0) -> bool:
    """Sample every device now, then every interval_s in one daemon thread per process. True when sampling (also
    when already started in this process); False, with nothing started, where NVML or a GPU is missing. 5 s is
    Prometheus' scrape interval here (configs/prometheus/prometheus.yml)."""
    global _thread, _pid, _nvml
    with _lock:
        if _thread is not None and _thread.is_alive() and _pid == os.getpid():
            return True
        nvml = _init_nvml()
        if nvml is None:
            return False
        _nvml, _pid = nvml, os.getpid()
        _stop.clear()
        devices = _sample(nvml)

        def loop() -> None:
            while not _stop.wait(interval_s):
                _sample(nvml)

        _thread = threading.Thread(target=loop, name="device-sampler", daemon=True)
        _thread.start()
    log.info("device metrics: %d device(s) sampled every %s s", devices, interval_s)
    return True


def stop_device_sampler() -> None:
    """End the sampling thread and release NVML (shutdown hooks, tests); a no-op when none runs."""
    global _thread, _nvml, _failing
    with _lock:
        _stop.set()
        if _thread is not None and _pid == os.getpid():
            _thread.join(timeout=5)
        if _nvml is not None:
            try:
                _nvml.nvmlShutdown()
            except Exception:  # noqa: BLE001 - shutting down; nothing left to report to
                pass
        _thread = _nvml = None
        _failing = False
