"""The running :mod:`lazyfs` filesystem of the power-loss tests, as the tests drive it."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

LAZYFS = Path(__file__).with_name("lazyfs.py")


class LazyMount:
    """A running :mod:`lazyfs` process: ``path`` is the mount point, ``backing`` the durable
    state it loads at mount and writes at a crash or a clean unmount."""

    def __init__(self, backing: Path, path: Path, log: Path) -> None:
        self.backing = backing
        self.path = path
        self.log = log
        self.proc: subprocess.Popen[bytes] | None = None

    def mount(self) -> None:
        """Start the filesystem over ``backing`` and wait until it is mounted (10 s at most).

        Raises: RuntimeError with the filesystem's log when it did not mount."""
        assert self.proc is None
        with open(self.log, "ab") as log:
            self.proc = subprocess.Popen(
                [sys.executable, str(LAZYFS), str(self.backing), str(self.path)],
                stdout=log,
                stderr=log,
            )
        deadline = time.monotonic() + 10
        while not os.path.ismount(self.path):
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.proc.kill()
                self.proc.wait()
                self.proc = None
                raise RuntimeError(f"lazyfs did not mount: {self.log.read_text()[-2000:]}")
            time.sleep(0.02)

    def control(self, command: str) -> None:
        """Send a command to the filesystem (see :mod:`lazyfs`: crash, fault, sync)."""
        fd = os.open(self.path / ".lazyfs", os.O_WRONLY)
        try:
            os.write(fd, command.encode())
        finally:
            os.close(fd)

    def crash(self, seed: int | None = None, fraction: float = 0.0) -> None:
        """Power loss: freeze the durable state now (see :mod:`lazyfs`); every later operation
        on the mount fails with EIO. Call :meth:`unmount` once its users are killed."""
        self.control("crash" if seed is None else f"crash {seed} {fraction}")

    def unmount(self) -> None:
        """Unmount (lazily: processes killed a moment ago may still hold files) and wait for the
        filesystem to exit; a clean unmount makes everything durable, one after a crash not."""
        if self.proc is None:
            return
        subprocess.run(["fusermount3", "-u", "-z", str(self.path)], check=False)
        try:
            self.proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.proc = None

    def remount(self) -> None:
        """Unmount, then mount the durable state again (the machine back after the power)."""
        self.unmount()
        self.mount()
