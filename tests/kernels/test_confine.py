"""Subjects confined by Landlock and a seccomp filter (perfledger.kernels.confine; R11, issue
34's open channels): native code, which the bootstrap's audit hook does not see, can neither fetch
anything over TCP, UDP or a UNIX socket, nor read SysV shared memory, a POSIX message queue or
another process's memory, nor signal or trace a process outside its own. Real processes, real
servers and real IPC objects of the test process; each channel is shown open unconfined."""

from __future__ import annotations

import ctypes
import json
import os
import secrets
import socket
import subprocess
import sys
import textwrap
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from test_workload_worker import EXACT, UNITS, WORK, script

from perfledger.kernels.confine import (
    confine_self,
    confine_subject,
    confinement,
    landlock_abi,
    seccomp_self,
)
from perfledger.kernels.workload.worker import WorkerRun, run_pairs

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


def _probe(port: int, pid: int, preexec: Callable[[], object] | None) -> dict[str, str]:
    code = NATIVE + f"import json; print(json.dumps({{'tcp': ask({port}, b'small 1'), "
    code += f"'signal': signal({pid})}}))"
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True,
        preexec_fn=preexec,
    )  # fmt: skip
    return json.loads(done.stdout)


@needs_net
@needs_scope
def test_confined_native_code_cannot_connect_over_tcp_nor_signal_another_process(
    answering_server: int,
) -> None:
    other = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        free = _probe(answering_server, other.pid, None)  # the control
        assert not free["tcp"].startswith("refused") and free["signal"] == "sent"
        held = _probe(answering_server, other.pid, confine_self)  # Landlock alone
        assert held["tcp"] == "refused: Permission denied", held
        assert held["signal"] == "Operation not permitted", held
        # a whole subject: the seccomp filter refuses the socket itself, before Landlock
        held = _probe(answering_server, other.pid, confine_subject)
        assert held["tcp"].startswith("refused: "), held
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
    result = _pairs_of_an_asking_candidate(tmp_path, NATIVE, f"ask({answering_server}, ")
    _assert_only_the_candidate_is_wrong(result)


def _pairs_of_an_asking_candidate(tmp_path: Path, prelude: str, ask_call: str) -> WorkerRun:
    """Three pairs of an honest reference against a candidate that does no work: its call
    writes what ``prelude``'s native function answers (``ask_call`` opens the call, the
    question ``b"CASE SEED"`` closes it)."""
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
        prelude
        + textwrap.dedent(f"""
        from perfledger.subject import serve
        def call(state, case, seed, output):
            with open(output, "w") as f:
                f.write({ask_call}f"{{case}} {{seed}}".encode()))
        serve(lambda: None, call)
        """),
    )
    return run_pairs(
        ref, cand, accuracy=EXACT, units=UNITS, cases=["small"], pairs_per_case=3,
        warmup_calls=0, timeout_s=10.0,
    )  # fmt: skip


def _assert_only_the_candidate_is_wrong(result: WorkerRun) -> None:
    """Every candidate call judged wrong, every reference call right."""
    cand_rows = [c for _r, c in result.pairs()]
    assert cand_rows and not any(c["correct"] for c in cand_rows), cand_rows
    assert all(r["correct"] for r, _c in result.pairs())


# --- the seccomp filter: channels Landlock does not close (SECCOMP_RULES) ---------------------

needs_seccomp = pytest.mark.skipif(
    "sockets" not in confinement(), reason="no libseccomp, pyseccomp or kernel seccomp filters"
)

#: Native code (libc through ctypes) that asks for an answer over each channel the seccomp filter
#: closes; each returns the answer, or "refused: <errno name>" at the first call that failed.
CHANNELS = """
import ctypes, errno, os, socket, struct
libc = ctypes.CDLL(None, use_errno=True)
libc.shmat.restype = ctypes.c_void_p
libc.shmat.argtypes = [ctypes.c_int, ctypes.c_void_p, ctypes.c_int]
def refused():
    return "refused: " + errno.errorcode[ctypes.get_errno()]
def unix_addr(path):
    raw = path.encode()
    return struct.pack("=H", 1) + raw + b"\\0" * (108 - len(raw))
def udp(port, question=b"small 1"):
    fd = libc.socket(2, 2, 0)  # AF_INET, SOCK_DGRAM
    if fd < 0:
        return refused()
    addr = struct.pack("=H", 2) + struct.pack("!H4s8x", port, bytes([127, 0, 0, 1]))
    libc.sendto(fd, question, len(question), 0, addr, len(addr))
    buf = ctypes.create_string_buffer(4096)
    n = libc.recv(fd, buf, 4096, 0)  # before buf.raw is read
    return buf.raw[:max(n, 0)].decode()
def unix_dgram(path):
    fd = libc.socket(1, 2, 0)  # AF_UNIX, SOCK_DGRAM: reaches a named socket with no connect
    if fd < 0:
        return refused()
    libc.bind(fd, struct.pack("=H", 1), 2)  # an abstract name of its own, for the answer
    addr = unix_addr(path)
    libc.sendto(fd, b"small 1", 7, 0, addr, len(addr))
    buf = ctypes.create_string_buffer(4096)
    n = libc.recv(fd, buf, 4096, 0)  # before buf.raw is read
    return buf.raw[:max(n, 0)].decode()
def sysv_shm(shmid):
    at = libc.shmat(shmid, None, 0o10000)  # SHM_RDONLY
    if at is None or at == ctypes.c_void_p(-1).value:
        return refused()
    return ctypes.string_at(at).decode()
def posix_mq(name):
    q = libc.mq_open(name.encode(), os.O_RDONLY)
    if q < 0:
        return refused()
    buf = ctypes.create_string_buffer(8192)
    n = libc.mq_receive(q, buf, 8192, None)
    return buf.raw[:max(n, 0)].decode()
class IoVec(ctypes.Structure):
    _fields_ = [("base", ctypes.c_void_p), ("len", ctypes.c_size_t)]
def vm_read(pid, address, size):
    buf = ctypes.create_string_buffer(size)
    local, remote = IoVec(ctypes.addressof(buf), size), IoVec(address, size)
    n = libc.process_vm_readv(pid, ctypes.byref(local), 1, ctypes.byref(remote), 1, 0)
    return buf.raw[:n].decode() if n > 0 else refused()
def raw_call(name, *args):
    nr = {"io_uring_setup": 425, "keyctl": 250, "userfaultfd": 323, "kcmp": 312,
          "pidfd_getfd": 438, "msgget": 68}[name]
    return "ran" if libc.syscall(nr, *args) >= 0 else refused()
"""

ANSWER = "42.5"


def _ask(call: str, mode: str) -> str:
    """Run ``CHANNELS`` + ``print(<call>)`` in a new process: unconfined (``none``), under the
    seccomp filter alone (``seccomp``) or under everything a subject gets (``subject``)."""
    preexec = {"none": None, "seccomp": seccomp_self, "subject": confine_subject}[mode]
    done = subprocess.run(
        [sys.executable, "-c", CHANNELS + f"print({call})"], capture_output=True, text=True,
        check=True, timeout=30, preexec_fn=preexec,
    )  # fmt: skip
    return done.stdout.strip()


def _held_and_free(call: str) -> None:
    """The channel works unconfined (the control) and is refused with EPERM under the seccomp
    filter alone and under a subject's whole confinement."""
    assert _ask(call, "none") == ANSWER
    assert _ask(call, "seccomp") == "refused: EPERM"
    assert _ask(call, "subject") == "refused: EPERM"


@pytest.fixture
def udp_server() -> Iterator[int]:
    """A UDP server on 127.0.0.1 that answers every datagram with ``ANSWER``."""
    server = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    server.bind(("127.0.0.1", 0))
    server.settimeout(0.2)

    def serve() -> None:
        while server.fileno() >= 0:
            try:
                _data, peer = server.recvfrom(4096)
                server.sendto(ANSWER.encode(), peer)
            except (TimeoutError, OSError):
                continue

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    yield server.getsockname()[1]
    server.close()
    thread.join(timeout=5)


def _unix_server(path: Path, kind: socket.SocketKind) -> Iterator[str]:
    server = socket.socket(socket.AF_UNIX, kind)
    server.bind(str(path))
    server.settimeout(0.2)
    if kind == socket.SOCK_STREAM:
        server.listen()

    def serve() -> None:
        while server.fileno() >= 0:
            try:
                if kind == socket.SOCK_STREAM:
                    conn, _ = server.accept()
                    with conn:
                        conn.sendall(ANSWER.encode())
                else:
                    _data, peer = server.recvfrom(4096)
                    server.sendto(ANSWER.encode(), peer)
            except (TimeoutError, OSError):
                continue

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    yield str(path)
    server.close()
    thread.join(timeout=5)


@pytest.fixture
def unix_dgram_server(tmp_path: Path) -> Iterator[str]:
    """A UNIX datagram socket named in the file system that answers ``ANSWER``."""
    yield from _unix_server(tmp_path / "answers.dgram", socket.SOCK_DGRAM)


_LIBC = ctypes.CDLL(None, use_errno=True)
_LIBC.shmat.restype = ctypes.c_void_p
_LIBC.shmat.argtypes = [ctypes.c_int, ctypes.c_void_p, ctypes.c_int]


@pytest.fixture
def sysv_segment() -> Iterator[int]:
    """A SysV shared memory segment this process made, holding ``ANSWER``; its id."""
    shmid = _LIBC.shmget(0, 4096, 0o1000 | 0o600)  # IPC_PRIVATE, IPC_CREAT
    assert shmid >= 0, os.strerror(ctypes.get_errno())
    try:
        at = _LIBC.shmat(shmid, None, 0)
        ctypes.memmove(at, ANSWER.encode() + b"\0", len(ANSWER) + 1)
        _LIBC.shmdt(ctypes.c_void_p(at))
        yield shmid
    finally:
        _LIBC.shmctl(shmid, 0, None)  # IPC_RMID


@pytest.fixture
def posix_queue() -> Iterator[str]:
    """A POSIX message queue this process made, holding ``ANSWER`` once; its name."""
    name = f"/perfledger-test-{os.getpid()}-{secrets.token_hex(4)}"
    q = _LIBC.mq_open(name.encode(), os.O_CREAT | os.O_RDWR, 0o600, None)
    if q < 0:
        pytest.skip(f"no POSIX message queues here: {os.strerror(ctypes.get_errno())}")
    try:
        for _ in range(3):  # one for each process that asks
            assert _LIBC.mq_send(q, ANSWER.encode(), len(ANSWER), 0) == 0
        yield name
    finally:
        _LIBC.mq_close(q)
        _LIBC.mq_unlink(name.encode())


@needs_seccomp
def test_udp_to_a_server_the_agent_runs_is_refused(udp_server: int) -> None:
    _held_and_free(f"udp({udp_server})")


@needs_seccomp
def test_pathname_unix_datagram_socket_is_refused(unix_dgram_server: str) -> None:
    _held_and_free(f"unix_dgram({unix_dgram_server!r})")


@needs_seccomp
def test_sysv_shared_memory_of_another_process_is_refused(sysv_segment: int) -> None:
    _held_and_free(f"sysv_shm({sysv_segment})")


@needs_seccomp
def test_posix_message_queue_of_another_process_is_refused(posix_queue: str) -> None:
    _held_and_free(f"posix_mq({posix_queue!r})")


@needs_seccomp
def test_reading_another_process_memory_is_refused() -> None:
    secret = ctypes.create_string_buffer(ANSWER.encode())
    call = f"vm_read({os.getpid()}, {ctypes.addressof(secret)}, {len(ANSWER)})"
    if _ask(call, "none") != ANSWER:
        pytest.skip("this host lets no process read its parent's memory (Yama, no CAP_SYS_PTRACE)")
    assert _ask(call, "seccomp") == "refused: EPERM"
    assert _ask(call, "subject") == "refused: EPERM"


@needs_seccomp
@pytest.mark.skipif(os.uname().machine != "x86_64", reason="system call numbers of x86-64")
@pytest.mark.parametrize(
    "call",
    [
        "raw_call('io_uring_setup', 1, ctypes.byref(ctypes.create_string_buffer(120)))",
        "raw_call('keyctl', 0, -4, 0)",  # KEYCTL_GET_KEYRING_ID of the user keyring
        "raw_call('userfaultfd', os.O_CLOEXEC)",
        # KCMP_FILE against its parent (a static id: every xdist worker collects the same)
        "raw_call('kcmp', os.getppid(), os.getpid(), 0, 0, 0)",
        "raw_call('msgget', 0, 0o1600)",  # a private SysV message queue
    ],
)
def test_other_calls_that_reach_outside_are_refused(call: str) -> None:
    """Each is refused with EPERM under the filter; unconfined it runs or fails otherwise (the
    kernel may lack it), so the filter, not the host, refused it."""
    assert _ask(call, "none") != "refused: EPERM"
    assert _ask(call, "seccomp") == "refused: EPERM"


@needs_seccomp
def test_a_normal_subject_runs_confined_and_its_children_inherit_the_filter() -> None:
    """numpy, a fork pool, a socketpair, asyncio and a child program all work; a grandchild
    started by exec still runs under the filter (``Seccomp: 2``, filter mode)."""
    code = textwrap.dedent("""
        import asyncio, multiprocessing, socket, subprocess, numpy
        a = numpy.arange(90000.0).reshape(300, 300)
        assert float((a @ a).sum()) > 0
        x, y = socket.socketpair()
        x.send(b"hi")
        assert y.recv(2) == b"hi"
        async def nothing():
            return 1
        assert asyncio.run(nothing()) == 1
        with multiprocessing.get_context("fork").Pool(2) as pool:
            assert pool.map(abs, [-1, -2]) == [1, 2]
        status = subprocess.run(["cat", "/proc/self/status"], capture_output=True, text=True)
        print([l for l in status.stdout.splitlines() if l.startswith("Seccomp:")][0])
    """)
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
        preexec_fn=confine_subject,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["Seccomp:", "2"]


@needs_seccomp
@pytest.mark.slow
def test_cheat_candidate_fetching_its_outputs_over_udp_by_native_code_is_wrong(
    tmp_path: Path,
) -> None:
    """The candidate does no work: its native code asks a UDP server the agent runs for the
    answer. Confined, its socket is refused and every call's output is judged wrong."""
    namespace: dict[str, object] = {}
    exec(WORK, namespace)
    work = namespace["work"]
    server = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    server.bind(("127.0.0.1", 0))
    server.settimeout(0.2)

    def serve() -> None:
        while server.fileno() >= 0:
            try:
                data, peer = server.recvfrom(4096)
                case, seed = data.decode().split()
                server.sendto(json.dumps(work(case, int(seed))).encode(), peer)  # type: ignore[operator]
            except (TimeoutError, OSError):
                continue

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    port = server.getsockname()[1]
    try:
        result = _pairs_of_an_asking_candidate(tmp_path, CHANNELS, f"udp({port}, ")
    finally:
        server.close()
        thread.join(timeout=5)
    _assert_only_the_candidate_is_wrong(result)
    assert {"sockets", "sysv_ipc", "posix_mqueues", "process_memory"} <= set(
        result.settings["confinement"]
    )


def test_without_libseccomp_confinement_says_so_and_subjects_still_start() -> None:
    """Where pyseccomp cannot be imported (or libseccomp.so.2 is absent: it raises at import),
    the words of the seccomp filter are not recorded and a subject still starts, unfiltered."""
    code = textwrap.dedent("""
        import subprocess, sys
        sys.modules["pyseccomp"] = None  # what an absent package looks like to import
        from perfledger.kernels.confine import SECCOMP_RULES, confine_subject, confinement
        assert not set(SECCOMP_RULES) & set(confinement()), confinement()
        done = subprocess.run(["grep", "Seccomp", "/proc/self/status"], capture_output=True,
                              text=True, check=True, preexec_fn=confine_subject)
        print(done.stdout, end="")
    """)
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    own = [line for line in Path("/proc/self/status").read_text().splitlines() if "Seccomp" in line]
    assert done.stdout.splitlines() == own  # no filter more than this process has
