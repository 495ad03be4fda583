"""The perfledger CLI with the monitor of the original's baseline and A/A a quiet stand-in
(R17): for tests of what a baseline or an A/A records (R4, R5, R11) that run the real CLI in a
subprocess, so that the shared host's other load (up to several busy cores here) does not refuse
them. Formal stages keep their real monitor. The R17 tests of those windows run the real monitor
(tests/app/test_self_timed_monitor.py, tests/app/test_original_copies.py).

Run as ``python tests/quiet_monitor_cli.py ARGS...`` (:func:`subprocess_env.quiet_monitor_command`)."""

from __future__ import annotations

from typing import Any

from perfledger.app import measure_aa, measure_baseline


class _Quiet:
    """A window that no other process touched."""

    def __init__(self, start_s: float, end_s: float) -> None:
        self.start_s, self.end_s = start_s, end_s

    def to_json(self) -> dict[str, Any]:
        return {"start_s": self.start_s, "end_s": self.end_s, "observed": True,
                "foreign_activity": False, "reasons": ["stand_in"]}  # fmt: skip


class QuietMonitor:
    """A monitor that sees a quiet host in every window."""

    def adopt(self, pid: int) -> None:
        return None

    def disown(self, pid: int) -> None:
        return None

    def stop(self) -> None:
        return None

    def settings(self) -> dict[str, Any]:
        return {"source": "stand-in (tests/quiet_monitor_cli.py)"}

    def verdict(self, start_s: float, end_s: float) -> _Quiet:
        return _Quiet(start_s, end_s)


def quiet_original_monitor(primary: str) -> tuple[QuietMonitor, None]:
    """In place of :func:`perfledger.app.measure_workload.original_monitor`."""
    return QuietMonitor(), None


if __name__ == "__main__":
    measure_baseline.original_monitor = quiet_original_monitor  # type: ignore[assignment]
    measure_aa.original_monitor = quiet_original_monitor  # type: ignore[assignment]
    from perfledger.commands.cli.app import main

    main()
