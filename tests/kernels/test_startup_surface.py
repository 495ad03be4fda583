"""The start-up files of a subject's Python watched during a measurement (R11,
:mod:`perfledger.kernels.workload.startup_surface`): real interpreters, real files."""

from __future__ import annotations

import os
import site
import sys
import time
from pathlib import Path

import pytest

from perfledger.errors import RuleRefused
from perfledger.kernels.workload.startup_surface import (
    QUARANTINE_SUFFIX,
    StartupWatch,
    fingerprint,
    interpreter_of,
    python_site_dirs,
)


def test_site_dirs_of_this_python_hold_its_site_packages_and_none_for_other_commands() -> None:
    dirs = python_site_dirs(sys.executable)
    assert os.path.abspath(site.getsitepackages()[0]) in dirs
    assert python_site_dirs("/bin/sh") == [] and python_site_dirs("bash") == []


def test_the_interpreter_of_a_command_line_is_found_past_env() -> None:
    assert interpreter_of(["env", "-i", "A=1", "python3", "run.py"]) == "python3"
    assert interpreter_of(["/usr/bin/python3.11", "-m", "x"]) == "/usr/bin/python3.11"
    assert interpreter_of([]) is None


def test_added_changed_and_removed_startup_files_are_seen(tmp_path: Path) -> None:
    (tmp_path / "keep.pth").write_text("/somewhere\n")
    (tmp_path / "module.py").write_text("x = 1\n")  # not a start-up file
    before = fingerprint([str(tmp_path), str(tmp_path / "missing")])
    assert list(before) == [str(tmp_path / "keep.pth")]
    (tmp_path / "module.py").write_text("x = 2\n")
    assert fingerprint([str(tmp_path)]) == before
    (tmp_path / "sitecustomize").mkdir()
    (tmp_path / "sitecustomize" / "__init__.py").write_text("import time\n")
    added = fingerprint([str(tmp_path)])
    assert str(tmp_path / "sitecustomize" / "__init__.py") in added
    time.sleep(0.01)
    (tmp_path / "keep.pth").write_text("/elsewhere\n")  # same size, new times
    assert (
        fingerprint([str(tmp_path)])[str(tmp_path / "keep.pth")]
        != before[str(tmp_path / "keep.pth")]
    )


def test_watch_refuses_a_pth_file_added_during_the_run() -> None:
    watch = StartupWatch([["env", "A=1", sys.executable, "run.py"], ["/bin/sh", "x.sh"]])
    watch.check()  # nothing changed
    planted = Path(site.getsitepackages()[0]) / f"zz-perfledger-watch-{os.getpid()}.pth"
    try:
        planted.write_text("# nothing to run\n")
        with pytest.raises(RuleRefused) as info:
            watch.check()
        assert info.value.rule == "R11" and planted.name in info.value.message
        # added during the run: moved aside, so Python no longer runs it in a later run
        aside = Path(str(planted) + QUARANTINE_SUFFIX)
        assert not planted.exists() and aside.read_text() == "# nothing to run\n"
        assert str(aside) in info.value.message
    finally:
        planted.unlink(missing_ok=True)
        Path(str(planted) + QUARANTINE_SUFFIX).unlink(missing_ok=True)
    watch.check()  # as it was
