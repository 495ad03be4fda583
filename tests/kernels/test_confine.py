"""Subjects confined by Landlock (perfledger.kernels.confine; R11, issue 34's open channels):
native code, which the bootstrap's audit hook does not see, can neither fetch anything over TCP,
nor signal or trace a process outside its own. Real processes and a real server on 127.0.0.1."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import textwrap
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from test_workload_worker import EXACT, UNITS, WORK, script

from perfledger.kernels.confine import confine_subject, confinement, landlock_abi
from perfledger.kernels.workload.worker import run_pairs

needs_net = pytest.mark.skipif(landlock_abi() < 4, reason="the kernel's Landlock has no TCP rules")
needs_scope = pytest.mark.skipif(landlock_abi() < 6, reason="the kernel's Landlock has no scopes")

#: Native code (libc through ctypes: no Python audit event for connect, send or kill) that asks a
#: TCP server for a line and tries to signal and read another process.
NATIVE = """
import ctypes, os, struct
libc = ctypes.CDLL(None, use_errno=True)
def ask(port, question):
    fd = libc.socket(2, 1, 0)  # AF_INET, SOCK_STREAM
    addr = struct.pack("=H", 2) + struct.pack("!H4s8x", port, bytes([127, 0, 0, 1]))
    if libc.connect(fd, addr, len(addr)) != 0:
        return "refused: " + os.strerror(ctypes.get_errno())
    libc.send(fd, question, len(question), 0)
    buf = ctypes.create_string_buffer(4096)
    n = libc.recv(fd, buf, 4096, 0)
    libc.close(fd)
    return buf.raw[:max(n, 0)].decode()
def signal(pid):
    return "sent" if libc.kill(pid, 0) == 0 else os.strerror(ctypes.get_errno())
"""


@pytest.fixture
def answering_server() -> Iterator[int]:
    """A TCP server on 127.0.0.1 that answers ``case seed`` with the honest work's result:
    what an agent's helper would serve to a candidate that does no work of its own."""
    namespace: dict[str, object] = {}
    exec(WORK, namespace)
    work = namespace["work"]
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen()

    def serve() -> None:
        while True:
            try:
                conn, _ = server.accept()
            except OSError:
                return
            with conn:
                case, seed = conn.recv(4096).decode().split()
                conn.sendall(json.dumps(work(case, int(seed))).encode())  # type: ignore[operator]

    threading.Thread(target=serve, daemon=True).start()
    yield server.getsockname()[1]
    server.close()


def _probe(port: int, pid: int, confined: bool) -> dict[str, str]:
    code = NATIVE + f"import json; print(json.dumps({{'tcp': ask({port}, b'small 1'), "
    code += f"'signal': signal({pid})}}))"
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True,
        preexec_fn=confine_subject if confined else None,
    )  # fmt: skip
    return json.loads(done.stdout)


@needs_net
@needs_scope
def test_confined_native_code_cannot_connect_over_tcp_nor_signal_another_process(
    answering_server: int,
) -> None:
    other = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        free = _probe(answering_server, other.pid, confined=False)  # the control
        assert not free["tcp"].startswith("refused") and free["signal"] == "sent"
        held = _probe(answering_server, other.pid, confined=True)
        assert held["tcp"] == "refused: Permission denied", held
        assert held["signal"] == "Operation not permitted", held
    finally:
        other.kill()
        other.wait()
    assert {"tcp", "signals", "ptrace"} <= set(confinement())


@needs_net
@pytest.mark.slow
def test_cheat_candidate_fetching_its_outputs_from_a_server_by_native_code_is_wrong(
    tmp_path: Path, answering_server: int
) -> None:
    """The candidate does no work: its native code asks the agent's server for the answer.
    Confined, the connection is refused and every call's output is judged wrong."""
    ref = script(
        tmp_path,
        "ref",
        WORK
        + textwrap.dedent("""
        from perfledger.subject import serve
        def call(state, case, seed, output):
            with open(output, "w") as f:
                json.dump(work(case, seed), f)
        serve(lambda: None, call)
        """),
    )
    cand = script(
        tmp_path,
        "cand",
        NATIVE
        + textwrap.dedent(f"""
        from perfledger.subject import serve
        def call(state, case, seed, output):
            with open(output, "w") as f:
                f.write(ask({answering_server}, f"{{case}} {{seed}}".encode()))
        serve(lambda: None, call)
        """),
    )
    result = run_pairs(
        ref, cand, accuracy=EXACT, units=UNITS, cases=["small"], pairs_per_case=3,
        warmup_calls=0, timeout_s=10.0,
    )  # fmt: skip
    cand_rows = [c for _r, c in result.pairs()]
    assert cand_rows and not any(c["correct"] for c in cand_rows), cand_rows
    assert all(r["correct"] for r, _c in result.pairs())
