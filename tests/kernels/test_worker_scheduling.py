"""The worker protocol reads every worker's scheduling before each call (R11; SPEC section 5,
"Workload worker protocol"): a subject that lowers its sibling's (nice, policy, CPUs) is
refused, an honest pair passes; and the tree's CPU time counts a helper's reaped work."""

from __future__ import annotations

import os
import sys
import textwrap
from pathlib import Path

import pytest

from perfledger.kernels.workload.worker import (
    Scheduling,
    WorkerFailed,
    WorkerSubject,
    run_pairs,
    scheduling_changes,
)

UNITS = {"wall_time": "ms", "cpu_time": "ms"}

HONEST = """
import json, random
from perfledger.subject import serve
def call(state, case, seed, output):
    rng = random.Random(f"{case}:{seed}")
    with open(output, "w") as f:
        json.dump(sum(rng.random() for _ in range(2000)), f)
serve(lambda: None, call)
"""

#: The candidate lowers the reference's worker (its sibling: the same parent, ``ref.py`` in its
#: command line) in its first call, as ``LOWER`` says.
LOWERING = """
import json, os, random
from perfledger.subject import serve
done = [False]
def lower():
    parent = os.getppid()
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as f:
                ppid = int(f.read().rsplit(b")", 1)[1].split()[1])
            with open(f"/proc/{name}/cmdline", "rb") as f:
                cmd = f.read()
        except (OSError, ValueError, IndexError):
            continue
        if ppid != parent or b"ref.py" not in cmd:
            continue
        pid = int(name)
        if LOWER == "nice":
            os.setpriority(os.PRIO_PROCESS, pid, 19)
        elif LOWER == "idle":
            os.sched_setscheduler(pid, os.SCHED_IDLE, os.sched_param(0))
        else:
            os.sched_setaffinity(pid, {min(os.sched_getaffinity(pid))})
def call(state, case, seed, output):
    if not done[0]:
        done[0] = True
        lower()
    rng = random.Random(f"{case}:{seed}")
    with open(output, "w") as f:
        json.dump(sum(rng.random() for _ in range(2000)), f)
serve(lambda: None, call)
"""


def script(tmp_path: Path, name: str, body: str) -> WorkerSubject:
    path = tmp_path / f"{name}.py"
    path.write_text(textwrap.dedent(body))
    return WorkerSubject(name, [sys.executable, str(path)])


def run(ref: WorkerSubject, cand: WorkerSubject):
    return run_pairs(
        ref, cand, cases=["one"], pairs_per_case=2, warmup_calls=0, timeout_s=20.0,
        accuracy={"compare": "exact"}, units=UNITS,
    )  # fmt: skip


def test_honest_pair_keeps_its_scheduling(tmp_path: Path) -> None:
    result = run(script(tmp_path, "ref", HONEST), script(tmp_path, "cand", HONEST))
    assert len(result.pairs()) == 2
    assert all(r["correct"] and c["correct"] for r, c in result.pairs())


@pytest.mark.parametrize(
    ("lower", "said"),
    [("nice", "-> 19"), ("idle", "SCHED_OTHER -> SCHED_IDLE"), ("cpus", "the tree's CPUs")],
)
def test_cheat_lowers_the_other_workers_scheduling_is_refused(
    tmp_path: Path, lower: str, said: str
) -> None:
    if lower == "cpus" and len(os.sched_getaffinity(0)) < 2:
        pytest.skip("one CPU: no affinity to narrow")
    if os.getpriority(os.PRIO_PROCESS, 0) >= 19 or os.sched_getscheduler(0) != os.SCHED_OTHER:
        pytest.skip("the test process itself runs lowered")
    ref = script(tmp_path, "ref", HONEST)
    cand = script(tmp_path, "cand", f"LOWER = {lower!r}\n" + LOWERING)
    with pytest.raises(WorkerFailed) as info:
        run(ref, cand)
    assert info.value.reason == "scheduling"
    assert info.value.label == "ref"  # the lowered worker is named
    assert said in str(info.value), str(info.value)


def test_scheduling_changes_new_threads_and_autogroup() -> None:
    """A thread born since the start is held to the main thread's start; the tree's CPUs
    together (threads born since included) and the autogroup's nice value are compared."""
    start = Scheduling({10: (0, 0, frozenset({0, 1}))}, 0)
    # a thread bound to one CPU each, all together on the same CPUs: no change
    same = Scheduling({10: (0, 0, frozenset({0})), 11: (0, 0, frozenset({1}))}, 0)
    assert scheduling_changes(start, same, 10) == []
    lowered = Scheduling({10: (0, 0, frozenset({0})), 11: (19, 5, frozenset({0}))}, 10)
    changes = scheduling_changes(start, lowered, 10)
    assert not any(c.startswith("thread 10") for c in changes)  # CPUs: the tree's together
    assert "thread 11 nice 0 -> 19" in changes
    assert any(c.startswith("thread 11 policy") for c in changes)
    assert "the tree's CPUs 0,1 -> 0" in changes
    assert "autogroup nice 0 -> 10" in changes


#: The candidate has a helper process do a share of each call's work (about 4 ms of CPU,
#: under a 10 ms clock tick) and reaps it inside the call: forked at setup and woken by the
#: call (``AT_SETUP``), else forked by the call. It reports the CPU time the kernel gives for
#: its reaped children over the call (``getrusage``, microseconds): the helper's true share.
HELPER = """
import json, os, random, resource, time
from perfledger.subject import serve
def burn():
    t = time.process_time()
    while time.process_time() - t < 0.004:
        pass
def spawn():
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.read(r, 1)
        burn()
        os._exit(0)
    return pid, w
helper = [spawn() if AT_SETUP else None]
def call(state, case, seed, output):
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    pid, w = helper[0] if helper[0] is not None else spawn()
    os.write(w, b"x")
    os.waitpid(pid, 0)
    os.close(w)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    helper[0] = None
    rng = random.Random(f"{case}:{seed}")
    with open(output, "w") as f:
        json.dump(sum(rng.random() for _ in range(2000)), f)
    child = (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime)
    return {"children_s": child}
serve(lambda: None, call)
"""


def test_cpu_time_counts_a_helper_reaped_inside_each_call(tmp_path: Path) -> None:
    """T1: the helper's CPU is read from the worker's CPU group (ns), not from ``cutime``
    (10 ms ticks, most calls +0): every call's reading holds at least its helper's CPU
    (the kernel's own figure, read by the subject inside the same call)."""
    from perfledger.kernels.proc import CpuGroup

    probe = CpuGroup.make(f"perfledger-test-{os.getpid()}")
    if probe is None:
        pytest.skip("no CPU accounting group can be made here (the refusal is tested below)")
    probe.remove()
    ref = script(tmp_path, "ref", HONEST)
    cand = script(tmp_path, "cand", "AT_SETUP = False\n" + HELPER)
    result = run(ref, cand)
    ratios = []
    for _r, c in result.pairs():
        child = c["reported"]["children_s"]
        assert child > 0.003, c["reported"]
        ratios.append(c["cpu_s"] / child)
    # the old reading (ticks) gave about a quarter of the helper's CPU on most calls
    assert min(ratios) >= 0.98, ratios


def test_cheat_helper_reaped_in_a_call_without_cpu_group_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Where no CPU group can be made, a ``cpu_time`` run whose worker reaps a process of its
    tree during a call is refused, pointing at whole-command mode; a ``wall_time`` run is
    not (its CPU reading decides nothing)."""
    from perfledger.kernels.proc import CpuGroup

    monkeypatch.setattr(CpuGroup, "make", classmethod(lambda cls, name: None))
    ref = script(tmp_path, "ref", HONEST)
    cand = script(tmp_path, "cand", "AT_SETUP = True\n" + HELPER)
    with pytest.raises(WorkerFailed) as info:
        run(ref, cand)
    assert info.value.reason == "cpu_accounting"
    assert info.value.label == "cand"
    assert "--protocol command" in info.value.hint
    assert "clock ticks" in str(info.value)
    result = run_pairs(
        ref, cand, cases=["one"], pairs_per_case=2, warmup_calls=0, timeout_s=20.0,
        accuracy={"compare": "exact"}, units={"wall_time": "ms"},
    )  # fmt: skip
    assert all(c["correct"] for _r, c in result.pairs())


#: The subject's call asks the hog (a process outside its tree) to act and waits for it.
WAITS_FOR_HOG = """
import json, os
from perfledger.subject import serve
here = os.path.dirname(os.path.abspath(__file__))
def call(state, case, seed, output):
    open(os.path.join(here, "go"), "w").close()
    with open(os.path.join(here, "done"), "rb") as done:  # a FIFO: waits without using CPU
        done.read(1)
    with open(output, "w") as f:
        json.dump(1, f)
serve(lambda: None, call)
"""

#: argv: the directory to watch, the group's directory ('' for none), whether to leave it.
HOG = """
import os, sys, time
here, group, leave = sys.argv[1], sys.argv[2], sys.argv[3] == "leave"
while not os.path.exists(os.path.join(here, "go")):
    time.sleep(0.001)
os.remove(os.path.join(here, "go"))
if group:
    with open(os.path.join(group, "cgroup.procs"), "w") as f:
        f.write(str(os.getpid()))
spent = time.process_time()
while time.process_time() - spent < 0.02:
    pass
if group and leave:
    with open(os.path.join(os.path.dirname(group), "cgroup.procs"), "w") as f:
        f.write(str(os.getpid()))
with open(os.path.join(here, "done"), "wb") as done:
    done.write(b"x")
time.sleep(30 if group and not leave else 0)
"""


#: Starts its arguments as a process of its own and prints the pid (the process is then
#: re-parented away from the test's process when this one exits).
SPAWN = (
    "import subprocess, sys; "
    "print(subprocess.Popen(sys.argv[1:], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, "
    "start_new_session=True).pid)"
)


@pytest.mark.parametrize("hog", ["joins_and_leaves", "joins_and_stays", "control"])
def test_cheat_process_outside_the_tree_burning_cpu_in_the_workers_group_is_not_counted(
    tmp_path: Path, hog: str
) -> None:
    """G: any process of the same user may write a group's ``cgroup.procs``: an agent's hog
    joins the reference worker's CPU group during its call and burns 20 ms of CPU there, to be
    charged to the reference's ``cpu_time``. A call that reaped nothing takes its processes'
    own clocks, so the hog's CPU is not counted whether it leaves the group (or never joins:
    the control); a hog still in the group after the call fails it."""
    import contextlib
    import subprocess

    from perfledger.kernels.workload import outputs
    from perfledger.kernels.workload.worker import Worker

    (tmp_path / "subject.py").write_text(textwrap.dedent(WAITS_FOR_HOG))
    os.mkfifo(tmp_path / "done")
    with Worker("ref", [sys.executable, str(tmp_path / "subject.py")]) as worker:
        group = worker._group
        if group is None:
            pytest.skip("no CPU accounting group can be made here")
        how = "leave" if hog == "joins_and_leaves" else "stay"
        argv = [str(tmp_path), "" if hog == "control" else group.path, how]
        # the agent's process, not this one's child: started by a middle process that exits
        middle = subprocess.run(
            [sys.executable, "-c", SPAWN, sys.executable, "-c", HOG, *argv],
            capture_output=True, text=True, check=True,
        )  # fmt: skip
        hog_pid = int(middle.stdout)
        place = outputs.OutputPlace()
        try:
            if hog == "control":
                timing = worker.call("one", 1, place.path, collect=place.read_bytes)
                assert timing.cpu_s < 0.01, timing
                return
            with pytest.raises(WorkerFailed) as info:
                worker.call("one", 1, place.path, collect=place.read_bytes)
        finally:
            place.remove()
            with contextlib.suppress(ProcessLookupError):
                os.kill(hog_pid, 9)
    assert info.value.reason == "cpu_accounting", info.value
    if hog == "joins_and_stays":
        assert "outside its tree are in its CPU accounting group" in str(info.value), info.value
    else:  # the hog's 20 ms are in the group and in no clock of the tree: neither is taken
        assert "than the clocks of its tree's processes hold" in str(info.value), info.value


#: A call whose work (3 ms of CPU: below a clock tick, so its reaper's tick count moves only
#: on some calls) runs in a CLONE_VM child, out of its reaper's page
#: fault count (red38 H). ``how``: ``direct``, the worker reaps it; ``born``, the worker makes
#: R, R makes W, W works, R reaps W and is left a zombie (R was not there at the call's start).
CLONE_VM_WORK = """
import ctypes, json, os, sys, time
from perfledger.subject import serve
how = sys.argv[1]
libc = ctypes.CDLL(None, use_errno=True)
STACK = 8 << 20
stacks = [ctypes.create_string_buffer(STACK) for _ in range(2)]
for s in stacks:
    ctypes.memset(s, 1, STACK)  # faulted in before `ready`: the children make no page fault
tops = [(ctypes.addressof(s) + STACK - 256) & ~0xF for s in stacks]
CB = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p)
libc.clone.argtypes = [CB, ctypes.c_void_p, ctypes.c_int, ctypes.c_void_p]
FLAGS = 0x100 | 0x4000 | 17  # CLONE_VM | CLONE_VFORK | SIGCHLD: one runs Python at a time
def work(_arg):
    start = time.process_time()
    while time.process_time() - start < 0.003:
        pass
    return 0
work_cb = CB(work)
def middle(_arg):
    pid = libc.clone(work_cb, tops[1], FLAGS, None)
    os.waitpid(pid, 0)
    return 0
middle_cb = CB(middle)
def call(state, case, seed, output):
    if how == "direct":
        os.waitpid(libc.clone(work_cb, tops[0], FLAGS, None), 0)
    else:
        libc.clone(middle_cb, tops[0], FLAGS, None)  # left a zombie
    with open(output, "w") as f:
        json.dump(1, f)
serve(lambda: None, call)
"""


@pytest.mark.parametrize("how", ["direct", "born"])
def test_cheat_work_in_a_clone_vm_child_is_never_measured_low(tmp_path: Path, how: str) -> None:
    """red38 H: a CLONE_VM child shares the worker's faulted-in memory, so reaping it moves no
    page fault count, and its CPU is in no live process's clock; made by a process born during
    the call (``born``), it is reaped where no count was read at the call's start. Each call
    either counts the child's 3 ms (the group's usage, taken for a call that reaped a
    process, the born one's included) or fails (``cpu_accounting``: the group used more than
    the tree's clocks hold); it is never measured below the work."""
    from perfledger.kernels.workload import outputs
    from perfledger.kernels.workload.worker import Worker

    (tmp_path / "subject.py").write_text(CLONE_VM_WORK)
    with Worker("cand", [sys.executable, str(tmp_path / "subject.py"), how]) as worker:
        if worker._group is None:
            pytest.skip("no CPU accounting group can be made here")
        seen = []
        for seed in range(8):
            place = outputs.OutputPlace()
            try:
                timing = worker.call("one", seed, place.path, collect=place.read_bytes)
            except WorkerFailed as failed:
                assert failed.reason == "cpu_accounting", failed
                assert "than the clocks of its tree's processes hold" in str(failed), failed
                return
            finally:
                place.remove()
            seen.append(timing.cpu_s)
            assert timing.cpu_s >= 0.0027, (how, seen)
    raise AssertionError(f"no call failed, none measured low: {seen}")  # 8 calls cross < 3 ticks
