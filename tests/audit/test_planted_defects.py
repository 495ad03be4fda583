"""Planted-defect ledgers: a real ledger whose history is rewritten with git plumbing
(``tests/audit/forge.py``: every id, trailer, parent and Lamport clock recomputed, so that
``git fsck --strict --full`` passes), then checked through the real CLI, on the ledger itself and
on the auditor's ``git clone`` over ``git daemon``: the defect is reported (exit 5, the event
named, what is wrong), never passed.

Classes covered here (others are in ``test_audit_replay.py``, ``tests/git/test_tamper.py``,
``test_verify_forged_commits.py``, ``test_verify_tree_entries.py``):

- a rule version lowered (the event's ``schema``), so that an older, weaker rule would re-check
  a forged decision;
- a commit message that says something the event does not (a subject over the payload, a
  paragraph added): outside the hashed event, but what ``git log`` and ``perfledger log`` show.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import forge
import pytest
from rm_session import scripted_ledger

from perfledger.commands.audit import schema_floor
from perfledger.events.workflow import SCHEMA_VERSIONS
from subprocess_env import isolated_env, perfledger_command

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "sync"))
from gitservers import git_daemon


@pytest.fixture(scope="module")
def pristine(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The scripted session's ledger (real decide + append into git), made once."""
    return scripted_ledger(tmp_path_factory.mktemp("pristine") / "ledger.git")


@pytest.fixture
def served(tmp_path: Path) -> Path:
    """The directory ``git daemon`` serves; each test forges its copy there."""
    path = tmp_path / "served"
    path.mkdir()
    return path


@pytest.fixture
def env(tmp_path: Path) -> dict[str, str]:
    """An environment without user git config or PERFLEDGER_* variables."""
    home = tmp_path / "home"
    home.mkdir()
    return isolated_env(home)


@pytest.fixture
def daemon(served: Path, env: dict[str, str]) -> Iterator[str]:
    """A real ``git daemon`` on 127.0.0.1 serving :func:`served`."""
    with git_daemon(str(served), env) as prefix:
        yield prefix


def _copy(pristine: Path, served: Path) -> Path:
    target = served / "forged.git"
    subprocess.run(["cp", "-a", str(pristine), str(target)], check=True)
    return target


def _cli(env: dict[str, str], *args: str | Path) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run([*perfledger_command(), *map(str, args)], env=env, capture_output=True,
                          text=True, timeout=300, check=False)  # fmt: skip
    assert "Traceback" not in proc.stderr, proc.stderr
    return proc


def _auditors_clone(daemon: str, tmp_path: Path, env: dict[str, str]) -> Path:
    """The auditor's path: a bare ``git clone`` of the served ledger over ``git://``."""
    clone = tmp_path / "auditor.git"
    subprocess.run(["git", "clone", "--quiet", "--bare", "--branch", "ledger",
                    f"{daemon}/forged.git", str(clone)], env=env, check=True)  # fmt: skip
    return clone


def _audit(env: dict[str, str], ledger: Path) -> tuple[int, dict]:
    proc = _cli(env, "--ledger", ledger, "audit", "--json")
    return proc.returncode, json.loads(proc.stdout)


@pytest.mark.slow
def test_forger_rewrites_history_byte_for_byte(pristine: Path, served: Path) -> None:
    """The forger writes what perfledger writes: an unedited rewrite is the same head, so what
    the tests below plant differs from a real ledger only where they edit it."""
    ledger = _copy(pristine, served)
    head = forge.git(ledger, "rev-parse", forge.REF)
    forge.write_history(ledger, forge.read_history(ledger))
    assert forge.git(ledger, "rev-parse", forge.REF) == head


@pytest.mark.slow
def test_planted_schema_downgrade_of_a_champion_is_an_integrity_finding(
    pristine: Path, served: Path, daemon: str, tmp_path: Path, env: dict[str, str]
) -> None:
    """A ChampionSelected rewritten to schema 1 (R14's obligations do not block it, the rule
    before R14_BLOCKS_CHAMPION) after events written by a perfledger that records schema 2:
    verify passes (the hashes are consistent), audit names the event and the one that shows
    the newer code."""
    ledger = _copy(pristine, served)
    events = forge.read_history(ledger)
    i = forge.find(events, "ChampionSelected", experiment_id="e1")
    assert events[i].envelope["schema"] == SCHEMA_VERSIONS["ChampionSelected"]
    events[i].envelope["schema"] = 1
    ids = forge.write_history(ledger, events)
    forge.fsck(ledger)
    for where in (ledger, _auditors_clone(daemon, tmp_path, env)):
        assert _cli(env, "--ledger", where, "verify").returncode == 0
        code, report = _audit(env, where)
        assert code == 5 and not report["ok"], report
        found = [(f["event_id"], f["rule"]) for f in report["findings"]]
        assert found == [(ids[i], "integrity")], report["findings"]
        message = report["findings"][0]["message"]
        assert "ChampionSelected schema 1" in message and "lowered" in message
        assert ids.index(message.split("but event ")[1].split(" ")[0]) < i  # an ancestor
        # the newest ChampionSelected rule an ancestor's code shows (a rule bumped after its
        # ancestors were written, such as R5's measured champion, shows only in later events)
        shown = int(message.split(" or later")[0].rsplit("schema ", 1)[1])
        assert 2 <= shown <= SCHEMA_VERSIONS["ChampionSelected"], message


@pytest.mark.slow
def test_planted_samples_schema_downgrade_names_an_earlier_event_of_newer_code(
    pristine: Path, served: Path, env: dict[str, str]
) -> None:
    """Samples lowered to schema 2 (no raw-table binding, R5) after events whose perfledger
    records samples under the current schema: a finding naming the samples and such an earlier event."""
    ledger = _copy(pristine, served)
    events = forge.read_history(ledger)
    i = forge.find(events, "SamplesRecorded", samples_id="e2-target")
    events[i].envelope["schema"] = 2
    ids = forge.write_history(ledger, events)
    forge.fsck(ledger)
    code, report = _audit(env, ledger)
    assert code == 5
    mine = [f for f in report["findings"] if f["event_id"] == ids[i] and f["rule"] == "integrity"]
    assert mine, report["findings"]
    message = mine[0]["message"]
    newest = SCHEMA_VERSIONS["SamplesRecorded"]  # the earlier samples' own version
    assert "SamplesRecorded schema 2" in message and f"schema {newest} or later" in message
    assert ids.index(message.split("but event ")[1].split(" ")[0]) < i


def test_every_current_rule_version_says_what_it_implies() -> None:
    """A version bump must add its row to ``schema_floor.IMPLIES`` (else a downgrade of the
    other kinds written by the same code goes unseen), and no row may ask for more than this
    code writes (else an honest ledger would be a finding)."""
    for kind, version in SCHEMA_VERSIONS.items():
        assert (kind, version) in schema_floor.IMPLIES, (kind, version)
    for (kind, version), implied in schema_floor.IMPLIES.items():
        assert version <= SCHEMA_VERSIONS[kind]
        for other, floor in implied.items():
            assert floor <= SCHEMA_VERSIONS.get(other, 1), (kind, version, other)


@pytest.mark.slow
def test_forged_commit_subject_over_an_inconclusive_verdict_fails_verify(
    pristine: Path, served: Path, daemon: str, tmp_path: Path, env: dict[str, str]
) -> None:
    """A verdict's commit subject rewritten to say ``pass`` (the event says ``fail``): what
    ``git log`` and ``perfledger log`` show is bound to the event, so verify fails naming it,
    on the ledger, on a git clone and on ``perfledger clone``."""
    ledger = _copy(pristine, served)
    events = forge.read_history(ledger)
    i = forge.find(events, "VerdictRecorded", samples_id="e2-target")
    assert events[i].payload["status"] != "pass"
    events[i].subject = "VerdictRecorded: e2-target: pass"
    ids = forge.write_history(ledger, events)
    forge.fsck(ledger)
    for where in (ledger, _auditors_clone(daemon, tmp_path, env)):
        proc = _cli(env, "--ledger", where, "verify", "--json")
        assert proc.returncode == 5, proc.stdout + proc.stderr
        error = json.loads(proc.stdout)["error"]
        assert ids[i] in error["message"]
        assert "'VerdictRecorded: e2-target: pass' does not say" in error["message"]
        code, report = _audit(env, where)
        assert code == 5 and report["findings"][0]["event_id"] == ids[i]
    proc = _cli(env, "clone", f"{daemon}/forged.git", tmp_path / "pl-clone")
    assert proc.returncode == 5 and ids[i] in proc.stderr + proc.stdout


@pytest.mark.slow
def test_forged_paragraph_in_a_commit_message_fails_verify(
    pristine: Path, served: Path, env: dict[str, str]
) -> None:
    """A paragraph added between a champion's subject and its trailers."""
    ledger = _copy(pristine, served)
    events = forge.read_history(ledger)
    i = forge.find(events, "ChampionSelected", experiment_id="e1")
    events[i].commit_body = "Reviewed-by: the performance board"
    ids = forge.write_history(ledger, events)
    forge.fsck(ledger)
    proc = _cli(env, "--ledger", ledger, "verify")
    assert proc.returncode == 5
    assert f"event {ids[i]}" in proc.stderr and "Reviewed-by: the performance board" in proc.stderr


@pytest.mark.slow
def test_commit_subject_of_an_earlier_summary_still_verifies(
    pristine: Path, served: Path, env: dict[str, str]
) -> None:
    """Ledgers written before a kind's summary changed keep verifying: a TargetFrozen subject in
    the earlier form (``min effect 0.1``, now ``min effect 10 %``), as the recorded H200
    session has it."""
    ledger = _copy(pristine, served)
    events = forge.read_history(ledger)
    i = forge.find(events, "TargetFrozen")
    target = events[i].payload["target"]
    events[i].subject = (f"TargetFrozen: {target['target_id']}: {target['primary']['name']} "
                         f"({target['primary']['statistic']}, min effect {target['min_effect']:g})")  # fmt: skip
    forge.write_history(ledger, events)
    proc = _cli(env, "--ledger", ledger, "verify")
    assert proc.returncode == 0, proc.stdout + proc.stderr


@pytest.mark.slow
def test_planted_head_on_another_branch_tells_the_auditor_how_to_audit_the_clone(
    pristine: Path, served: Path, daemon: str, tmp_path: Path, env: dict[str, str]
) -> None:
    """The served repository's HEAD names another branch (an older head, say), so a plain
    ``git clone`` checks that out and has the ledger only as ``origin/ledger``: the CLI says so
    and how to audit the ledger (exit 2), instead of suggesting ``perfledger init``; following
    the hint audits it."""
    ledger = _copy(pristine, served)
    forge.git(ledger, "branch", "older", f"{forge.REF}~3")
    forge.git(ledger, "symbolic-ref", "HEAD", "refs/heads/older")
    clone = tmp_path / "plain-clone"
    subprocess.run(["git", "clone", "--quiet", f"{daemon}/forged.git", str(clone)], env=env,
                   check=True)  # fmt: skip
    proc = _cli(env, "--ledger", clone, "audit")
    assert proc.returncode == 2
    assert "remote 'origin' has one" in proc.stderr and "perfledger init" not in proc.stderr
    assert f"git -C {clone} branch ledger origin/ledger" in proc.stderr
    subprocess.run(["git", "-C", str(clone), "branch", "ledger", "origin/ledger"], env=env,
                   check=True)  # fmt: skip
    assert _cli(env, "--ledger", clone, "audit").returncode == 0


def _rewrite_commit(ledger: Path, index: int, edit: Callable[[bytes, bytes], bytes]) -> str:
    """Rewrite the commit of the ``index``-th event with ``edit(header, message) -> raw`` and
    re-chain every later commit onto it (their events are untouched: only the commit objects
    change); returns the rewritten commit's sha."""
    repo = forge.git_dir(ledger)
    shas = forge.git(repo, "rev-list", "--reverse", forge.REF).split()
    parent = ""
    rewritten = ""
    for k, sha in enumerate(shas[index:]):
        raw = subprocess.run(["git", f"--git-dir={repo}", "cat-file", "commit", sha],
                             capture_output=True, check=True).stdout  # fmt: skip
        header, _, message = raw.partition(b"\n\n")
        if parent:
            header = header.replace(header.split(b"\n")[1], b"parent " + parent.encode(), 1)
        raw = edit(header, message) if k == 0 else header + b"\n\n" + message
        parent = forge.git(repo, "hash-object", "-t", "commit", "-w", "--stdin", data=raw)
        rewritten = rewritten or parent
    forge.git(repo, "update-ref", forge.REF, parent)
    return rewritten


@pytest.mark.slow
def test_forged_encoding_header_on_an_event_commit_fails_verify(
    pristine: Path, served: Path, env: dict[str, str]
) -> None:
    """An ``encoding`` header (git re-reads the message in that encoding when showing it) on a
    champion's commit: outside the hashed event, so verify refuses any header perfledger does
    not write, naming the event."""
    ledger = _copy(pristine, served)
    events = forge.read_history(ledger)
    i = forge.find(events, "ChampionSelected", experiment_id="e1")
    _rewrite_commit(ledger, i, lambda header, message: header + b"\nencoding ISO-8859-1\n\n"
                    + message)  # fmt: skip
    forge.fsck(ledger)
    proc = _cli(env, "--ledger", ledger, "verify")
    assert proc.returncode == 5
    assert events[i].envelope["id"] in proc.stderr and "['encoding']" in proc.stderr


@pytest.mark.slow
def test_forged_merge_message_fails_verify(
    pristine: Path, served: Path, tmp_path: Path, env: dict[str, str]
) -> None:
    """Two clones each append a note, a pull joins them with a merge commit; the merge's message
    is then rewritten (``Merge: final audit approved by the board``). Merges carry no event, so
    verify checks their message is the one perfledger writes for the heads they join."""
    ledger = _copy(pristine, served)
    other = tmp_path / "other"
    assert _cli(env, "clone", ledger, other).returncode == 0
    assert _cli(env, "--ledger", other, "note", "from the other clone").returncode == 0
    assert _cli(env, "--ledger", ledger, "note", "meanwhile").returncode == 0
    assert _cli(env, "--ledger", ledger, "pull", other).returncode == 0
    assert _cli(env, "--ledger", ledger, "verify").returncode == 0
    repo = forge.git_dir(ledger)
    merge = forge.git(repo, "rev-parse", forge.REF)
    raw = subprocess.run(["git", f"--git-dir={repo}", "cat-file", "commit", merge],
                         capture_output=True, check=True).stdout  # fmt: skip
    assert raw.count(b"\nparent ") == 2 and b"Joins: " in raw
    header = raw.partition(b"\n\n")[0]
    forged = forge.git(repo, "hash-object", "-t", "commit", "-w", "--stdin",
                       data=header + b"\n\nMerge: final audit approved by the board\n")  # fmt: skip
    forge.git(repo, "update-ref", forge.REF, forged)
    forge.fsck(ledger)
    proc = _cli(env, "--ledger", ledger, "verify")
    assert proc.returncode == 5, proc.stdout + proc.stderr
    assert f"merge commit {forged}" in proc.stderr and "approved by the board" in proc.stderr


@pytest.mark.slow
def test_forged_commit_index_does_not_change_what_audit_finds(
    pristine: Path, served: Path, tmp_path: Path, env: dict[str, str]
) -> None:
    """A champion of e2 (whose target verdict failed) forged on a side branch and merged; then
    the derived commit index in the ledger's directory is forged to place that event at another
    commit. The audit re-checks the event against the state of its verified ancestors, read
    from git, so its findings on the ledger are those on a fresh clone (which has no derived
    data): the derived index chooses nothing."""
    import msgspec

    ledger = _copy(pristine, served)
    events = forge.read_history(ledger)
    template = events[forge.find(events, "ChampionSelected", experiment_id="e1")].envelope
    created = events[forge.find(events, "ExperimentCreated", experiment_id="e2")].payload
    fork = forge.find(events, "VerdictRecorded", samples_id="e2-target")
    assert events[fork].payload["status"] == "fail"
    envelope = json.loads(json.dumps(template))
    envelope["payload"].update(experiment_id="e2", samples_id="e2-target", previous="e1",
                               candidate_hash=created["candidate"]["content_hash"])  # fmt: skip
    envelope["request"]["body"].update(samples_id="e2-target", expected_current="e1")
    envelope["ts"] = events[fork].envelope["ts"]
    # sorted after the main line's next event, so that the replay meets it with a non-ancestor
    # already folded and re-checks it against the state of its own ancestors
    envelope["parents"] = [events[fork].envelope["id"]]
    envelope["lamport"] = events[fork].envelope["lamport"] + 1
    for attempt in range(1000):
        envelope["payload"]["reason"] = envelope["request"]["body"]["reason"] = f"r{attempt}"
        if forge.event_id(envelope) > events[fork + 1].envelope["id"]:
            break
    forged = forge.branch_and_merge(ledger, fork, envelope, "ChampionSelected: t1: e2 (select)")
    forge.fsck(ledger)
    assert _cli(env, "--ledger", ledger, "verify").returncode == 0
    index = forge.git_dir(ledger) / "perfledger" / "index-v3.msgpack"
    index.unlink(missing_ok=True)  # saved again at the current head by the next command
    assert _cli(env, "--ledger", ledger, "state", "--json").returncode == 0
    data = msgspec.msgpack.decode(index.read_bytes())
    assert data["head"].decode() == forge.git(ledger, "rev-parse", forge.REF)
    elsewhere = data["by_event"][template["id"]]  # the main line's champion commit
    data["by_event"][forged] = elsewhere
    index.write_bytes(msgspec.msgpack.encode(data))
    clone = tmp_path / "fresh.git"
    subprocess.run(["git", "clone", "--quiet", "--bare", str(ledger), str(clone)], check=True)
    code, report = _audit(env, ledger)
    clone_code, clone_report = _audit(env, clone)
    assert code == clone_code == 5
    assert report["findings"] == clone_report["findings"]
    assert [f["event_id"] for f in report["findings"]] == [forged]
    assert report["findings"][0]["rule"] in ("R13", "R14"), report["findings"]


@pytest.mark.slow
def test_planted_replace_ref_that_git_log_shows_fails_verify(
    pristine: Path, served: Path, env: dict[str, str]
) -> None:
    """``git replace`` substitutes a verdict's commit with one whose subject and event.json say
    ``pass``: every git tool in the ledger's directory shows the replacement (git fsck passes),
    while perfledger reads the real objects. verify refuses the repository, saying how to
    remove the replacement; once removed it verifies."""
    ledger = _copy(pristine, served)
    events = forge.read_history(ledger)
    i = forge.find(events, "VerdictRecorded", samples_id="e2-target")
    repo = forge.git_dir(ledger)
    commit = forge.git(repo, "rev-list", "--reverse", forge.REF).split()[i]
    raw = subprocess.run(["git", f"--git-dir={repo}", "cat-file", "commit", commit],
                         capture_output=True, check=True).stdout  # fmt: skip
    fake = forge.git(repo, "hash-object", "-t", "commit", "-w", "--stdin",
                     data=raw.replace(b": fail\n", b": pass\n"))  # fmt: skip
    forge.git(repo, "replace", commit, fake)
    forge.fsck(ledger)
    assert "VerdictRecorded: e2-target: pass" in forge.git(repo, "log", "--format=%s", forge.REF)
    proc = _cli(env, "--ledger", ledger, "verify")
    assert proc.returncode == 5
    assert commit in proc.stderr and f"git replace -d {commit}" in proc.stderr
    assert _audit(env, ledger)[0] == 5
    forge.git(repo, "replace", "-d", commit)
    assert _cli(env, "--ledger", ledger, "verify").returncode == 0


def test_forged_verdict_field_is_named_with_both_values_not_an_equal_status() -> None:
    """A verdict whose status is right but another field was forged (its samples' provenance
    relabelled): the finding says that field's recorded and decided values, not
    ``recorded status 'pass', derived from its samples 'pass'``."""
    from perfledger.commands.audit.replay import _difference

    recorded = {"status": "pass", "samples_provenance": "perfledger"}
    message = _difference(
        "VerdictRecorded", recorded, {**recorded, "samples_provenance": "outside"}
    )
    assert "recorded samples_provenance 'perfledger', decided 'outside'" in message
    assert "recorded status" not in message


@pytest.mark.slow
@pytest.mark.parametrize(
    ("moved", "before", "rule"),
    [
        # R14 (ChampionSelected schema 3): its target samples have no verdict before it
        (("ChampionSelected", {"experiment_id": "e1"}), ("VerdictRecorded", {"samples_id": "e1-target"}), "R14"),
        (("VerdictRecorded", {"samples_id": "e2-target"}), ("SamplesRecorded", {"samples_id": "e2-target"}), "R12"),
    ],
)  # fmt: skip
def test_planted_event_moved_before_what_it_rests_on_is_found_on_a_git_clone(
    pristine: Path,
    served: Path,
    daemon: str,
    tmp_path: Path,
    env: dict[str, str],
    moved: tuple[str, dict],
    before: tuple[str, dict],
    rule: str,
) -> None:
    """An event moved earlier in the middle of the history, every later parent, Lamport clock
    and id recomputed (verify passes): re-decided against the state before its new place, it
    breaks its rule, on the auditor's git clone too."""
    ledger = _copy(pristine, served)
    events = forge.read_history(ledger)
    i = forge.find(events, moved[0], **moved[1])
    j = forge.find(events, before[0], **before[1])
    assert j < i
    events.insert(j, events.pop(i))
    ids = forge.write_history(ledger, events)
    forge.fsck(ledger)
    clone = _auditors_clone(daemon, tmp_path, env)
    assert _cli(env, "--ledger", clone, "verify").returncode == 0
    code, report = _audit(env, clone)
    assert code == 5
    assert (ids[j], rule) in [(f["event_id"], f["rule"]) for f in report["findings"]], report


@pytest.mark.slow
@pytest.mark.parametrize(
    ("how", "says"),
    [(["--depth", "3"], "shallow git clone"), (["--filter=blob:none"], "partial git clone")],
)
def test_planted_incomplete_auditors_clone_is_named_not_reported_as_a_missing_object(
    pristine: Path,
    served: Path,
    daemon: str,
    tmp_path: Path,
    env: dict[str, str],
    how: list[str],
    says: str,
) -> None:
    """An auditor's shallow (``--depth``) or partial (``--filter``) git clone of an untouched
    ledger lacks objects; verify and audit say which kind of clone it is and how to clone whole
    (exit 5), never ``git object ... is missing`` as if the ledger were damaged."""
    ledger = _copy(pristine, served)
    forge.git(ledger, "config", "uploadpack.allowFilter", "true")
    clone = tmp_path / "incomplete.git"
    subprocess.run(["git", "clone", "--quiet", "--bare", "--branch", "ledger", *how,
                    f"{daemon}/forged.git", str(clone)], env=env, check=True)  # fmt: skip
    proc = _cli(env, "--ledger", clone, "verify")
    assert proc.returncode == 5 and says in proc.stderr, proc.stderr
    assert "without --" in proc.stderr and "is missing" not in proc.stderr
    code, report = _audit(env, clone)
    # refused when the ledger opens (as every command is), or as the audit's first finding
    said = report["error"] if "error" in report else report["findings"][0]
    assert code == 5 and says in said["message"]
