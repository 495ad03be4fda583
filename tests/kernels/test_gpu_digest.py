"""The device BLAKE3 of :mod:`perfledger.kernels.cuda.gpu_digest` on the CPU: its source compiled as
host C (``-DPERFLEDGER_CPU``: the same chunk, parent and compression functions, the same tree)
and compared with the ``blake3`` package, keyed, on sizes that exercise every path (empty,
partial blocks, partial chunks, odd node counts at several levels). Needs a C compiler (skipped
without one); the GPU build is compared with the package on the device
(``tests/kernels/test_isolated_gpu.py``)."""

from __future__ import annotations

import ctypes
import shutil
import subprocess

import blake3
import numpy as np
import pytest

from perfledger.kernels.cuda.gpu_digest import BLAKE3_SOURCE, key_words

CC = shutil.which("cc") or shutil.which("gcc") or shutil.which("clang")


@pytest.fixture(scope="module")
def b3_cpu(tmp_path_factory: pytest.TempPathFactory) -> ctypes._CFuncPtr:
    if CC is None:
        pytest.skip("no C compiler")
    tmp = tmp_path_factory.mktemp("b3")
    source, library = tmp / "b3.c", tmp / "libb3.so"
    source.write_text(BLAKE3_SOURCE)
    subprocess.run(
        [CC, "-O2", "-shared", "-fPIC", "-DPERFLEDGER_CPU", str(source), "-o", str(library)],
        check=True, capture_output=True,
    )  # fmt: skip
    fn = ctypes.CDLL(str(library)).b3_cpu
    fn.argtypes = [ctypes.c_void_p, ctypes.c_longlong, ctypes.c_void_p, ctypes.c_void_p]
    fn.restype = None
    return fn


def _digest(fn: ctypes._CFuncPtr, data: bytes, key: bytes) -> str:
    buf = np.frombuffer(data, dtype=np.uint8).copy() if data else np.zeros(1, dtype=np.uint8)
    words = key_words(key)
    out = np.zeros(8, dtype=np.uint32)
    fn(buf.ctypes.data, len(data), words.ctypes.data, out.ctypes.data)
    return out.astype("<u4").tobytes().hex()


@pytest.mark.parametrize(
    "size",
    [0, 1, 63, 64, 65, 1023, 1024, 1025, 2048, 3 * 1024 + 5, 5 * 1024, 7 * 1024 - 1,
     70_001, (1 << 20) + 3 * 1024 + 17],
)  # fmt: skip
def test_device_blake3_source_equals_the_blake3_package(
    b3_cpu: ctypes._CFuncPtr, size: int
) -> None:
    rng = np.random.default_rng(size)
    data = rng.integers(0, 256, size=size, dtype=np.uint8).tobytes()
    key = rng.integers(0, 256, size=32, dtype=np.uint8).tobytes()
    assert _digest(b3_cpu, data, key) == blake3.blake3(data, key=key).hexdigest()


def test_device_blake3_source_depends_on_every_byte_and_the_key(b3_cpu: ctypes._CFuncPtr) -> None:
    data = bytearray(np.random.default_rng(1).integers(0, 256, 5000, dtype=np.uint8).tobytes())
    key = bytes(range(32))
    base = _digest(b3_cpu, bytes(data), key)
    for i in (0, 1023, 1024, 4999):
        changed = bytearray(data)
        changed[i] ^= 1
        assert _digest(b3_cpu, bytes(changed), key) != base
    assert _digest(b3_cpu, bytes(data), bytes(32)) != base
    with pytest.raises(ValueError, match="32 bytes"):
        key_words(b"short")
