"""The GPU monitor (SPEC.md section 5 "Monitor"; rule R17): a background thread that reads NVML
(default 10 Hz) while samples are taken, an idle check before formal sampling, and a
contamination verdict for each sample window.

Each :class:`Observation` holds, at a ``time.monotonic()`` stamp (seconds): SM and memory clocks
(MHz), the clock-event (throttle) reason bitmask, power (W; NVML's reading is a ~1 s average on
recent GPUs), total energy (J), temperature (C), GPU and memory utilization (%; sampled by the
driver over 1/6 to 1 s) and the PIDs of compute processes.

Foreign activity (R17) in a window ``[start_s, end_s]`` is judged by :func:`window_verdict` from
the observations inside it (or the two that bracket a window shorter than the sampling period):

- ``foreign_process``: a compute process that is not ours. In containers NVML lists host PIDs or
  nothing, so "ours" is learnt by :meth:`Monitor.calibrate` (the processes present right after our
  CUDA context exists); an empty list is *unknown*, never proof of idleness (GUIDE.md).
- ``clock_event:<name>``: a thermal, power or hardware slowdown reason active in more than
  ``event_share`` of the window's observations (the GPU ran below its clocks for a reason not
  ours to control).
- ``no_observations``: the monitor saw nothing of the window (it is then not ``observed``).

Utilization cannot tell our work from foreign work inside a window; it is judged in the idle
check (:meth:`Monitor.idle_check`), where any utilization above ``idle_util_pct`` while we do
nothing is foreign.

The NVML source is pluggable (:class:`NvmlSource`, or any callable returning an
:class:`Observation`) so the verdict logic is tested without a GPU; on a GPU the real NVML runs.
Imports: standard library only (pynvml on use).
"""

from __future__ import annotations

import contextlib
import os
import statistics
import time
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass, field
from typing import Any

from perfledger.kernels.monitor.sampler import PeriodicSampler

#: NVML clock-event reason bits (nvmlClocksEventReason*; same values as the older
#: nvmlClocksThrottleReason* names).
CLOCK_EVENT_BITS = {
    "gpu_idle": 0x1,
    "applications_clocks_setting": 0x2,
    "sw_power_cap": 0x4,
    "hw_slowdown": 0x8,
    "sync_boost": 0x10,
    "sw_thermal_slowdown": 0x20,
    "hw_thermal_slowdown": 0x40,
    "hw_power_brake_slowdown": 0x80,
    "display_clock_setting": 0x100,
}
#: Reasons that mean the GPU was slowed by something other than the work under test.
CONTAMINATING_EVENTS = (
    "sw_power_cap",
    "hw_slowdown",
    "sw_thermal_slowdown",
    "hw_thermal_slowdown",
    "hw_power_brake_slowdown",
)
#: Default sampling rate (Hz).
DEFAULT_HZ = 10.0


@dataclass(frozen=True)
class Observation:
    """One NVML reading; a field NVML could not read is None.

    Attributes:
        t_s: ``time.monotonic()`` at the reading (seconds).
        sm_clock_mhz, mem_clock_mhz: current clocks (MHz).
        clock_events: the clock-event reason bitmask (see :data:`CLOCK_EVENT_BITS`).
        power_w: power draw (W).
        energy_j: total energy since driver load (J).
        temperature_c: GPU temperature (C).
        gpu_util_pct, mem_util_pct: utilization (%).
        pids: PIDs of compute processes on the GPU; None when NVML could not list them.
    """

    t_s: float
    sm_clock_mhz: int | None = None
    mem_clock_mhz: int | None = None
    clock_events: int | None = None
    power_w: float | None = None
    energy_j: float | None = None
    temperature_c: int | None = None
    gpu_util_pct: int | None = None
    mem_util_pct: int | None = None
    pids: tuple[int, ...] | None = None

    def events(self) -> list[str]:
        """Names of the clock-event reasons set in this observation."""
        if self.clock_events is None:
            return []
        return [name for name, bit in CLOCK_EVENT_BITS.items() if self.clock_events & bit]


@dataclass(frozen=True)
class Thresholds:
    """Thresholds of the contamination verdict and the idle check (all overridable, recorded).

    Attributes:
        event_share: share (0-1) of a window's observations with a contaminating clock event
            above which the window is contaminated.
        idle_util_pct: utilization (%) above which the GPU is busy during the idle check.
        idle_s: duration of the idle check (seconds).
    """

    event_share: float = 0.2
    idle_util_pct: int = 5
    idle_s: float = 1.0


@dataclass(frozen=True)
class WindowVerdict:
    """The monitor's verdict on one sample window (R17).

    Attributes:
        start_s, end_s: the window (``time.monotonic()`` seconds).
        observed: at least one observation inside or bracketing the window.
        foreign_activity: True when any reason below was found.
        reasons: why (``foreign_process:<pid>``, ``clock_event:<name>``, ``no_observations``).
        observations: how many observations informed the verdict.
        sm_clock_mhz_min, sm_clock_mhz_median: SM clocks seen (MHz), None if none.
        power_w_max, temperature_c_max: extremes seen, None if none.
        energy_j: energy used in the window (J) from NVML's counter, None if unknown.
    """

    start_s: float
    end_s: float
    observed: bool
    foreign_activity: bool
    reasons: tuple[str, ...]
    observations: int
    sm_clock_mhz_min: int | None = None
    sm_clock_mhz_median: float | None = None
    power_w_max: float | None = None
    temperature_c_max: int | None = None
    energy_j: float | None = None

    def to_json(self) -> dict[str, Any]:
        """JSON builtins."""
        return asdict(self)

    def to_request(self) -> dict[str, Any]:
        """The ``monitor`` object of a ``samples.record`` pair (R17)."""
        return {
            "observed": self.observed,
            "foreign_activity": self.foreign_activity,
            "explained": None,
            "flags": list(self.reasons),
        }


def _in_window(obs: list[Observation], start_s: float, end_s: float) -> list[Observation]:
    inside = [o for o in obs if start_s <= o.t_s <= end_s]
    if inside:
        return inside
    before = [o for o in obs if o.t_s < start_s]
    after = [o for o in obs if o.t_s > end_s]
    return ([before[-1]] if before else []) + ([after[0]] if after else [])


def window_verdict(
    observations: Iterable[Observation],
    start_s: float,
    end_s: float,
    *,
    own_pids: frozenset[int] = frozenset(),
    thresholds: Thresholds = Thresholds(),
) -> WindowVerdict:
    """Judge one sample window for foreign activity (R17); pure (no NVML).

    Args:
        observations: the monitor's observations, sorted by ``t_s``.
        start_s, end_s: the window in ``time.monotonic()`` seconds.
        own_pids: PIDs that are ours (see :meth:`Monitor.calibrate`).
        thresholds: see :class:`Thresholds`.
    Returns: the :class:`WindowVerdict`.
    """
    obs = _in_window(sorted(observations, key=lambda o: o.t_s), start_s, end_s)
    if not obs:
        return WindowVerdict(start_s, end_s, False, False, ("no_observations",), 0)
    reasons: list[str] = []
    foreign = sorted({p for o in obs if o.pids for p in o.pids if p not in own_pids})
    reasons += [f"foreign_process:{p}" for p in foreign]
    for name in CONTAMINATING_EVENTS:
        share = sum(1 for o in obs if name in o.events()) / len(obs)
        if share > thresholds.event_share:
            reasons.append(f"clock_event:{name}")
    clocks = [o.sm_clock_mhz for o in obs if o.sm_clock_mhz is not None]
    powers = [o.power_w for o in obs if o.power_w is not None]
    temps = [o.temperature_c for o in obs if o.temperature_c is not None]
    energies = [o.energy_j for o in obs if o.energy_j is not None]
    return WindowVerdict(
        start_s,
        end_s,
        True,
        bool(reasons),
        tuple(reasons),
        len(obs),
        min(clocks) if clocks else None,
        statistics.median(clocks) if clocks else None,
        max(powers) if powers else None,
        max(temps) if temps else None,
        energies[-1] - energies[0] if len(energies) >= 2 else None,
    )


class NvmlSource:
    """Reads one :class:`Observation` of GPU ``index`` through NVML (``import pynvml``).

    Raises: RuntimeError from the constructor when NVML cannot be initialised.
    """

    def __init__(self, index: int = 0) -> None:
        try:
            import pynvml  # noqa: PLC0415 (NVML: optional)
        except ImportError as exc:
            raise RuntimeError(f"pynvml not importable (install nvidia-ml-py): {exc}") from None
        try:
            pynvml.nvmlInit()
            self._handle = pynvml.nvmlDeviceGetHandleByIndex(index)
        except Exception as exc:
            raise RuntimeError(f"NVML unavailable for GPU {index}: {exc}") from None
        self._nvml = pynvml
        self._events = getattr(pynvml, "nvmlDeviceGetCurrentClocksEventReasons", None) or getattr(
            pynvml, "nvmlDeviceGetCurrentClocksThrottleReasons", None
        )

    def _try(self, read: Callable[[], Any]) -> Any:
        try:
            return read()
        except Exception:  # NotSupported etc.: recorded as None, never guessed
            return None

    def __call__(self) -> Observation:
        """Read one observation now."""
        n, h = self._nvml, self._handle
        util = self._try(lambda: n.nvmlDeviceGetUtilizationRates(h))
        power = self._try(lambda: n.nvmlDeviceGetPowerUsage(h))
        energy = self._try(lambda: n.nvmlDeviceGetTotalEnergyConsumption(h))
        procs = self._try(lambda: n.nvmlDeviceGetComputeProcesses(h))
        events = self._try(lambda: self._events(h)) if self._events else None
        return Observation(
            t_s=time.monotonic(),
            sm_clock_mhz=self._try(lambda: int(n.nvmlDeviceGetClockInfo(h, n.NVML_CLOCK_SM))),
            mem_clock_mhz=self._try(lambda: int(n.nvmlDeviceGetClockInfo(h, n.NVML_CLOCK_MEM))),
            clock_events=int(events) if events is not None else None,
            power_w=power / 1000.0 if power is not None else None,
            energy_j=energy / 1000.0 if energy is not None else None,
            temperature_c=self._try(
                lambda: int(n.nvmlDeviceGetTemperature(h, n.NVML_TEMPERATURE_GPU))
            ),
            gpu_util_pct=int(util.gpu) if util is not None else None,
            mem_util_pct=int(util.memory) if util is not None else None,
            pids=tuple(int(p.pid) for p in procs) if procs is not None else None,
        )

    def close(self) -> None:
        """Shut NVML down (NVML reference-counts init/shutdown)."""
        with contextlib.suppress(Exception):
            self._nvml.nvmlShutdown()


@dataclass
class IdleCheck:
    """The idle check's result (before formal sampling).

    Attributes:
        idle: True when nothing foreign was seen.
        reasons: why not (``gpu_util:<pct>``, ``foreign_process:<pid>``, ``clock_event:<name>``,
            ``no_observations``).
        observations: how many were taken.
        processes_unknown: NVML listed no process at all (unknown, not idle; GUIDE.md).
    """

    idle: bool
    reasons: list[str] = field(default_factory=list)
    observations: int = 0
    processes_unknown: bool = False


class Monitor(PeriodicSampler[Observation]):
    """A background thread sampling a source (default: NVML of GPU 0) at ``hz``.

    Use as a context manager (``with Monitor() as m:``) or :meth:`start`/:meth:`stop`;
    :meth:`verdict` judges a window, :meth:`observations` returns what was seen.

    Args:
        source: a callable returning an :class:`Observation` (default :class:`NvmlSource`).
        hz: samples per second (> 0).
        thresholds: see :class:`Thresholds`.
    Raises: RuntimeError when the default source cannot open NVML; ValueError for ``hz <= 0``.
    """

    def __init__(
        self,
        source: Callable[[], Observation] | None = None,
        *,
        hz: float = DEFAULT_HZ,
        thresholds: Thresholds = Thresholds(),
        device_index: int = 0,
    ) -> None:
        super().__init__(lambda: self.source(), hz=hz, thread_name="perfledger-monitor")
        self.source = source if source is not None else NvmlSource(device_index)
        self.thresholds = thresholds
        self.own_pids: frozenset[int] = frozenset({os.getpid()})

    def __enter__(self) -> Monitor:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
        close = getattr(self.source, "close", None)
        if close is not None:
            close()

    def adopt(self, pid: int) -> None:
        """Count ``pid`` (a worker perfledger started to run a subject) among our own processes
        from now on: its GPU work is the measurement's, not foreign activity (R17)."""
        self.own_pids = self.own_pids | {pid}

    def calibrate(self) -> frozenset[int]:
        """Learn which compute processes are ours: call it right after this process created its
        CUDA context and before anything else should run. When our own PID is listed, ours is
        just that PID; otherwise (a container showing host PIDs) every PID listed now is taken
        as ours. Returns the set."""
        obs = self.read_now()
        pids = set(obs.pids or ())
        own = {os.getpid()} if os.getpid() in pids else pids | {os.getpid()}
        self.own_pids = frozenset(own)
        return self.own_pids

    def idle_check(self, duration_s: float | None = None) -> IdleCheck:
        """Observe for ``duration_s`` (default ``thresholds.idle_s``) while this process does
        nothing on the GPU; idle when utilization stays at or below ``idle_util_pct``, no foreign
        process is listed and no contaminating clock event is seen."""
        duration = self.thresholds.idle_s if duration_s is None else duration_s
        start = time.monotonic()
        taken: list[Observation] = []
        while True:
            taken.append(self.read_now())
            if time.monotonic() - start >= duration:
                break
            time.sleep(1.0 / self.hz)
        if not taken:
            return IdleCheck(False, ["no_observations"])
        reasons: list[str] = []
        busy = max((o.gpu_util_pct or 0) for o in taken)
        if busy > self.thresholds.idle_util_pct:
            reasons.append(f"gpu_util:{busy}")
        foreign = sorted({p for o in taken for p in (o.pids or ()) if p not in self.own_pids})
        reasons += [f"foreign_process:{p}" for p in foreign]
        seen = {e for o in taken for e in o.events()}
        reasons += [f"clock_event:{e}" for e in CONTAMINATING_EVENTS if e in seen]
        unknown = all(not o.pids for o in taken)
        return IdleCheck(not reasons, reasons, len(taken), unknown)

    def verdict(self, start_s: float, end_s: float) -> WindowVerdict:
        """The contamination verdict of the window ``[start_s, end_s]`` (monotonic seconds)."""
        return window_verdict(
            self.observations(),
            start_s,
            end_s,
            own_pids=self.own_pids,
            thresholds=self.thresholds,
        )

    def settings(self) -> dict[str, Any]:
        """The monitor's settings (recorded in the samples' metadata)."""
        return {"hz": self.hz, **asdict(self.thresholds), "own_pids": sorted(self.own_pids)}


__all__ = [
    "CLOCK_EVENT_BITS",
    "CONTAMINATING_EVENTS",
    "DEFAULT_HZ",
    "IdleCheck",
    "Monitor",
    "NvmlSource",
    "Observation",
    "Thresholds",
    "WindowVerdict",
    "window_verdict",
]
