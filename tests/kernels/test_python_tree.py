"""The digest of the Python installation (R11, :mod:`perfledger.kernels.python_tree`), part of
the environment identity: its content decides it, wherever it lies; a per-file cache keyed by
size, times and inode spares re-reading; the stamp sees a file written and put back."""

from __future__ import annotations

import os
from pathlib import Path

from perfledger.kernels.env import Environment
from perfledger.kernels.python_tree import installation_roots, python_tree


def _install(root: Path) -> dict[str, str]:
    (root / "lib" / "json").mkdir(parents=True)
    (root / "lib" / "json" / "__init__.py").write_text("x = 1\n")
    (root / "lib" / "__pycache__").mkdir()
    (root / "lib" / "__pycache__" / "a.cpython-311.pyc").write_bytes(b"a cache")
    (root / "lib" / "site-packages").mkdir()  # another interpreter's: not this one's
    (root / "lib" / "site-packages" / "other.py").write_text("y = 2\n")
    (root / "site").mkdir()
    (root / "site" / "numpy.py").write_text("def f():\n    return 1\n")
    (root / "bin").mkdir()
    (root / "bin" / "python").write_bytes(b"\x7fELF interpreter")
    return {
        "interpreter": str(root / "bin" / "python"),
        "stdlib": str(root / "lib"),
        "site0": str(root / "site"),
    }


def test_r11_the_installation_digest_is_its_content_wherever_it_lies(tmp_path: Path) -> None:
    cache = str(tmp_path / "cache" / "tree.msgpack")
    a = python_tree(_install(tmp_path / "a"), cache=cache)
    b = python_tree(_install(tmp_path / "b"), cache=cache)
    assert a.digest == b.digest and a.files == b.files == 3  # caches and foreign sites left out
    (tmp_path / "b" / "lib" / "__pycache__" / "a.cpython-311.pyc").write_bytes(b"other")
    assert python_tree(b.roots, cache=cache).digest == a.digest
    (tmp_path / "b" / "site" / "numpy.py").write_text("def f():\n    return 2\n")
    assert python_tree(b.roots, cache=cache).digest != a.digest


def test_r11_a_second_digest_reads_only_what_changed(tmp_path: Path) -> None:
    cache = str(tmp_path / "cache" / "tree.msgpack")
    roots = _install(tmp_path / "a")
    cold = python_tree(roots, cache=cache)
    warm = python_tree(roots, cache=cache)
    assert cold.bytes_read > 0 and warm.bytes_read == 0 and warm.digest == cold.digest
    numpy = tmp_path / "a" / "site" / "numpy.py"
    numpy.write_text("def f():\n    return 7\n")  # as many bytes
    again = python_tree(roots, cache=cache)
    assert again.bytes_read == numpy.stat().st_size and again.digest != cold.digest


def test_cheat_a_file_edited_and_put_back_with_its_old_time_changes_the_stamp(
    tmp_path: Path,
) -> None:
    cache = str(tmp_path / "cache" / "tree.msgpack")
    roots = _install(tmp_path / "a")
    before = python_tree(roots, cache=cache)
    numpy = tmp_path / "a" / "site" / "numpy.py"
    st = numpy.stat()
    text = numpy.read_text()
    numpy.write_text(text.replace("1", "9"))
    numpy.write_text(text)
    os.utime(numpy, ns=(st.st_atime_ns, st.st_mtime_ns))
    after = python_tree(roots, cache=cache)
    assert after.digest == before.digest  # the content is back ...
    assert after.stamp != before.stamp  # ... and its change time tells it was written


def test_r11_the_environment_identity_covers_the_installation(tmp_path: Path) -> None:
    assert Environment(python_tree="a").identity() != Environment(python_tree="b").identity()
    assert Environment(python_tree="a", python_tree_stamp="x").identity() == (
        Environment(python_tree="a", python_tree_stamp="y").identity()
    )
    roots = installation_roots()
    assert {"interpreter", "stdlib"} <= set(roots)
    assert any(role.startswith("site") for role in roots)


def test_cheat_a_file_added_changes_the_stamp_and_a_compiled_cache_does_not(
    tmp_path: Path,
) -> None:
    cache = str(tmp_path / "cache" / "tree.msgpack")
    roots = _install(tmp_path / "a")
    before = python_tree(roots, cache=cache)
    (tmp_path / "a" / "site" / "__pycache__").mkdir()  # what an honest import writes
    (tmp_path / "a" / "site" / "__pycache__" / "numpy.cpython-311.pyc").write_bytes(b"c")
    assert python_tree(roots, cache=cache).stamp == before.stamp
    planted = tmp_path / "a" / "site" / "helper.py"
    planted.write_text("import time\n")
    after = python_tree(roots, cache=cache)
    assert after.digest != before.digest and after.stamp != before.stamp
