"""``perfledger audit`` re-derives evidence from its attached raw report (R6).

Real ledgers recorded through ``perfledger evidence add --kind``, then forged with the real git
CLI the way a careful attacker would: the event's JSON edited (in its payload *and* its stored
request, so that re-deciding the request agrees), its id recomputed, every later event
re-chained with recomputed ids, the ref moved. ``verify`` passes (the ledger is valid); the
audit must re-parse the attached report and exit 5 with an integrity finding naming the event.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import blake3
import pytest

from perfledger.events.canonical import canonical_bytes
from perfledger.events.envelope import EVENT_ID_DOMAIN
from perfledger.kernels.profilers.evidence import (
    PARSER_VERSION,
    report_facts,
    report_limitations,
)
from perfledger.kernels.profilers.parse import parse_report
from subprocess_env import isolated_env, perfledger_command

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "profilers"
NCU_VERSION = (FIXTURES / "ncu_version.txt").read_text()
#: evidence id -> (kind, fixture, extra flags) recorded in this order after the root.
RECORDED = {
    "ncu-d": ("ncu", "ncu_details_rules.csv", ["--tool-version", NCU_VERSION]),
    "nsys-q": ("nsys", "nsys_synthetic.sqlite", []),
    "torch": ("torch", "torch_trace.json", ["--tool-version", "2.11.0"]),
    "ptxas": ("ptxas", "ptxas_v.txt", ["--tool-version", "13.0.88"]),
    # public reports (fixtures/profilers/public/SOURCES.md): a 2021 Kineto trace, an nsys
    # export with memory copies and a GPU
    "torch-2021": ("torch", "public/kineto2021_resnet50_v100.json.gz", []),
    "nsys-2022": ("nsys", "public/nsys_2022_saxpy_a100.sqlite", []),
}


def _run(env: dict[str, str], *args: str | Path, data: bytes | None = None) -> bytes:
    proc = subprocess.run(
        [str(a) for a in args], env=env, input=data, capture_output=True, check=False, timeout=120
    )
    assert proc.returncode == 0, proc.stderr.decode(errors="replace")
    return proc.stdout


def _pl(env: dict[str, str], ledger: Path, *args: str) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run(
        [*perfledger_command(), "--ledger", str(ledger), *args],
        env=env,
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )
    assert "Traceback" not in proc.stderr, proc.stderr
    return proc


@pytest.fixture
def env(tmp_path: Path) -> dict[str, str]:
    """The isolated environment of every subprocess."""
    return {**isolated_env(tmp_path / "home"), "PERFLEDGER_ACTOR": "tester"}


@pytest.fixture(scope="module")
def recorded_ledger(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A ledger with one parsed report of each of four kinds, then a note (so that the forged
    events have descendants to re-chain), recorded once per module through the CLI."""
    root = tmp_path_factory.mktemp("evidence")
    env = {**isolated_env(root / "home"), "PERFLEDGER_ACTOR": "tester"}
    path = root / "ledger"
    assert _pl(env, root, "init", str(path)).returncode == 0
    for evidence_id, (kind, name, extra) in RECORDED.items():
        proc = _pl(env, path, "evidence", "add", "--kind", kind, str(FIXTURES / name),
                   "--evidence-id", evidence_id, *extra)  # fmt: skip
        assert proc.returncode == 0, proc.stderr
    assert _pl(env, path, "note", "after the evidence").returncode == 0
    return path


@pytest.fixture
def ledger(tmp_path: Path, recorded_ledger: Path) -> Path:
    """A copy of :func:`recorded_ledger` of the test's own (tests forge events in it)."""
    path = tmp_path / "ledger"
    shutil.copytree(recorded_ledger, path, symlinks=True)
    return path


# ----------------------------------------------------------------------------- forging


def _chain(env: dict[str, str], repo: Path) -> list[str]:
    """Commit shas of the (linear) ledger branch, root first."""
    out = _run(env, "git", "-C", repo, "rev-list", "--reverse", "refs/heads/ledger")
    return out.decode().split()


def _write(env: dict[str, str], repo: Path, kind: str, content: bytes) -> str:
    out = _run(env, "git", "-C", repo, "hash-object", "-t", kind, "-w", "--stdin", data=content)
    return out.decode().strip()


def _with_id(envelope: dict[str, Any]) -> tuple[dict[str, Any], bytes]:
    """The envelope with its id recomputed, and its canonical bytes."""
    body = {k: v for k, v in envelope.items() if k != "id"}
    envelope = {**body, "id": blake3.blake3(EVENT_ID_DOMAIN + canonical_bytes(body)).hexdigest()}
    return envelope, canonical_bytes(envelope)


def _subject(data: bytes) -> bytes:
    """The commit subject perfledger writes for the event ``data`` (canonical JSON)."""
    from perfledger.events.envelope import decode_envelope
    from perfledger.events.kinds import get_kind, upcast
    from perfledger.ledger.objects import commit_message

    envelope = decode_envelope(data)
    payload = upcast(envelope.kind, envelope.schema, envelope.payload)
    return commit_message(envelope, get_kind(envelope.kind).summary(payload)).split(b"\n")[0]


def _set_entry(
    env: dict[str, str], repo: Path, tree: str, name: bytes, mode: bytes, sha: str | None
) -> str:
    """A new tree: ``tree`` with entry ``name`` set to (mode, sha), or removed (sha None)."""
    entries = {}
    for line in filter(None, _run(env, "git", "-C", repo, "ls-tree", "-z", tree).split(b"\0")):
        meta, entry_name = line.split(b"\t", 1)
        entries[entry_name] = meta
    if sha is None:
        del entries[name]
    else:
        kind = b"tree" if mode == b"040000" else b"blob"
        entries[name] = mode + b" " + kind + b" " + sha.encode()
    listing = b"".join(meta + b"\t" + n + b"\0" for n, meta in entries.items())
    return _run(env, "git", "-C", repo, "mktree", "-z", data=listing).decode().strip()


def _forge(
    env: dict[str, str],
    repo: Path,
    evidence_id: str,
    edit: Callable[[dict[str, Any]], None],
    swap_report: bytes | None = None,
    drop_artifacts: bool = False,
) -> str:
    """Rewrite the event recording ``evidence_id`` with ``edit`` (on its envelope, as JSON),
    recompute its id, re-chain every later event (parents and ids recomputed) and move the
    ref. ``swap_report``: bytes that replace its ``report`` artifact (blob, tree and manifest);
    ``drop_artifacts``: its ``artifacts/`` removed from its tree. Returns the forged id."""
    chain = _chain(env, repo)
    renamed: dict[str, str] = {}
    new_parent: str | None = None
    forged_id = ""
    for sha in chain:
        data = _run(env, "git", "-C", repo, "cat-file", "blob", f"{sha}:event.json")
        envelope = json.loads(data)
        is_target = (
            envelope["kind"] == "EvidenceRecorded"
            and envelope["payload"]["evidence_id"] == evidence_id
        )
        if not is_target and not renamed:
            new_parent = sha
            continue
        old_id = envelope["id"]
        old_report = envelope["artifacts"].get("report", {}).get("blake3")
        if is_target and swap_report is not None:
            envelope["artifacts"]["report"] = {
                "blake3": blake3.blake3(swap_report).hexdigest(),
                "media_type": envelope["artifacts"]["report"]["media_type"],
                "size": len(swap_report),
            }
        if is_target:
            edit(envelope)
        envelope["parents"] = sorted(renamed.get(p, p) for p in envelope["parents"])
        envelope, data = _with_id(envelope)
        renamed[old_id] = envelope["id"]
        if is_target:
            forged_id = envelope["id"]
        raw = _run(env, "git", "-C", repo, "cat-file", "commit", sha)
        tree = raw[5:45].decode()  # the commit's first line: tree <sha>
        new_tree = _set_entry(env, repo, tree, b"event.json", b"100644",
                              _write(env, repo, "blob", data))  # fmt: skip
        if is_target and swap_report is not None:
            art = _run(env, "git", "-C", repo, "rev-parse", f"{tree}:artifacts").decode().strip()
            art = _set_entry(env, repo, art, old_report.encode(), b"100644", None)
            name = blake3.blake3(swap_report).hexdigest().encode()
            art = _set_entry(
                env, repo, art, name, b"100644", _write(env, repo, "blob", swap_report)
            )
            new_tree = _set_entry(env, repo, new_tree, b"artifacts", b"040000", art)
        if is_target and drop_artifacts:
            new_tree = _set_entry(env, repo, new_tree, b"artifacts", b"040000", None)
        raw = raw.replace(tree.encode(), new_tree.encode(), 1)
        if is_target:  # the subject summarises the payload (verify binds it): say the edit
            head, _, message = raw.partition(b"\n\n")
            raw = head + b"\n\n" + _subject(data) + message[message.index(b"\n") :]
        raw = raw.replace(f"Event-Id: {old_id}".encode(), f"Event-Id: {envelope['id']}".encode())
        old_parent = raw[raw.index(b"\nparent ") + 8 :][:40]
        raw = raw.replace(b"parent " + old_parent, b"parent " + str(new_parent).encode(), 1)
        new_parent = _write(env, repo, "commit", raw)
    _run(env, "git", "-C", repo, "update-ref", "refs/heads/ledger", str(new_parent), chain[-1])
    assert forged_id
    return forged_id


def _both(envelope: dict[str, Any]) -> list[dict[str, Any]]:
    """The recorded payload and the stored request's body: a forger edits both alike."""
    return [envelope["payload"], envelope["request"]["body"]]


def _audit(env: dict[str, str], ledger: Path) -> tuple[int, dict[str, Any]]:
    proc = _pl(env, ledger, "--json", "audit")
    return proc.returncode, json.loads(proc.stdout)


def _assert_integrity_finding(env: dict[str, str], ledger: Path, event_id: str) -> str:
    """verify passes (valid ledger, ids recomputed); audit exits 5 with exactly one integrity
    finding, naming ``event_id``. Returns its message."""
    proc = _pl(env, ledger, "verify")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    code, report = _audit(env, ledger)
    assert code == 5 and report["ok"] is False, report
    [finding] = report["findings"]
    assert finding["event_id"] == event_id and finding["rule"] == "integrity", finding
    assert finding["kind"] == "EvidenceRecorded"
    return str(finding["message"])


# ----------------------------------------------------------------------------- tests


@pytest.mark.slow
def test_parsed_evidence_of_every_kind_re_derives_clean(ledger: Path, env: dict[str, str]) -> None:
    """Untouched, every recorded report re-parses to its recorded facts: audit is clean, with
    no note (each was recorded under this parser version)."""
    code, report = _audit(env, ledger)
    assert code == 0 and report["findings"] == [] and report["notes"] == [], report
    assert report["evidence"] == {"rederived": len(RECORDED), "as_written": 0, "as_written_ids": []}
    shown = json.loads(_pl(env, ledger, "--json", "evidence", "show", "ncu-d").stdout)
    assert shown["evidence"]["capture"]["parser"] == PARSER_VERSION


@pytest.mark.slow
@pytest.mark.parametrize("evidence_id", ["ncu-d", "nsys-q", "nsys-2022"])
def test_evidence_recorded_under_parser_version_1_re_derives_by_that_version(
    ledger: Path, env: dict[str, str], evidence_id: str
) -> None:
    """An event recorded by parser version 1 (one fact per ncu rule, no text facts, no compute
    capability, no nsys memory operations) is re-derived by version 1's derivation, not today's:
    clean as recorded; the same event claiming version 2 while holding version 1's facts is a
    finding naming what differs."""
    kind, fixture, flags = RECORDED[evidence_id]
    options = {"tool_version": flags[1]} if flags else {}
    parsed = parse_report(kind, FIXTURES / fixture, **options)
    old_facts = report_facts(parsed, parser="1")
    old_limitations = report_limitations(parsed, parser="1")
    # the versions differ on this report
    assert (old_facts, old_limitations) != (report_facts(parsed), report_limitations(parsed))

    def as_version_1(envelope: dict[str, Any]) -> None:
        for part in _both(envelope):
            part["capture"]["parser"] = "1"
            part["facts"] = old_facts
            part["limitations"] = old_limitations

    _forge(env, ledger, evidence_id, as_version_1)
    code, report = _audit(env, ledger)
    assert code == 0 and report["findings"] == [], report

    def claims_version_2(envelope: dict[str, Any]) -> None:
        for part in _both(envelope):
            part["capture"]["parser"] = "2"

    forged = _forge(env, ledger, evidence_id, claims_version_2)
    message = _assert_integrity_finding(env, ledger, forged)
    assert "facts" in message or "limitations" in message


@pytest.mark.slow
@pytest.mark.parametrize("evidence_id", list(RECORDED))
def test_edited_fact_with_recomputed_ids_is_an_integrity_finding(
    ledger: Path, env: dict[str, str], evidence_id: str
) -> None:
    """One fact's value changed in payload and request, ids recomputed: the attached report
    says otherwise."""

    def edit(envelope: dict[str, Any]) -> None:
        for part in _both(envelope):
            fact = next(f for f in part["facts"] if isinstance(f["value"], float))
            fact["value"] = fact["value"] * 2 + 1.0

    forged = _forge(env, ledger, evidence_id, edit)
    message = _assert_integrity_finding(env, ledger, forged)
    assert "facts" in message and "R6" in message


@pytest.mark.slow
def test_added_limitation_is_an_integrity_finding(ledger: Path, env: dict[str, str]) -> None:
    """Facts intact, a limitation added (payload and request): the report yields none."""

    def edit(envelope: dict[str, Any]) -> None:
        for part in _both(envelope):
            part["limitations"] = [*part["limitations"], "forged limitation"]

    forged = _forge(env, ledger, "torch", edit)
    assert "limitations" in _assert_integrity_finding(env, ledger, forged)


@pytest.mark.slow
def test_tool_version_the_report_contradicts_is_an_integrity_finding(
    ledger: Path, env: dict[str, str]
) -> None:
    """An nsys SQLite export states its own version: a recorded version edited to another
    (payload and request) is contradicted by the report."""

    def edit(envelope: dict[str, Any]) -> None:
        for part in _both(envelope):
            part["tool"]["version"] = "2024.1.1"

    forged = _forge(env, ledger, "nsys-q", edit)
    assert "tool" in _assert_integrity_finding(env, ledger, forged)


@pytest.mark.slow
def test_swapped_report_is_an_integrity_finding(ledger: Path, env: dict[str, str]) -> None:
    """The attached report replaced by another real ncu report (artifact manifest updated,
    ids recomputed), the recorded report hash left as it was: the hashes disagree."""
    other = (FIXTURES / "ncu_raw.csv").read_bytes()
    forged = _forge(env, ledger, "ncu-d", lambda envelope: None, swap_report=other)
    message = _assert_integrity_finding(env, ledger, forged)
    assert "report_hash" in message and "swapped" in message


@pytest.mark.slow
def test_swapped_report_with_its_hash_updated_is_an_integrity_finding(
    ledger: Path, env: dict[str, str]
) -> None:
    """The report swapped and its hash updated too (payload and request): the facts no longer
    follow from the attached report."""
    other = (FIXTURES / "ncu_raw.csv").read_bytes()
    digest = "blake3:" + blake3.blake3(other).hexdigest()

    def edit(envelope: dict[str, Any]) -> None:
        for part in _both(envelope):
            part["report_hash"] = digest
            part["capture"]["source_hash"] = digest

    forged = _forge(env, ledger, "ncu-d", edit, swap_report=other)
    message = _assert_integrity_finding(env, ledger, forged)
    assert "facts" in message


@pytest.mark.slow
def test_report_swapped_for_one_that_does_not_parse_is_an_integrity_finding(
    ledger: Path, env: dict[str, str]
) -> None:
    """A report replaced by bytes its parser refuses (hash updated): named, not a crash."""
    other = b"not, an, ncu, report\n1, 2, 3, 4\n"
    digest = "blake3:" + blake3.blake3(other).hexdigest()

    def edit(envelope: dict[str, Any]) -> None:
        for part in _both(envelope):
            part["report_hash"] = digest
            part["capture"]["source_hash"] = digest

    forged = _forge(env, ledger, "ncu-d", edit, swap_report=other)
    message = _assert_integrity_finding(env, ledger, forged)
    assert "no longer parses" in message


@pytest.mark.slow
def test_evidence_claiming_an_unknown_parser_version_is_a_finding(
    ledger: Path, env: dict[str, str]
) -> None:
    """A parser version this perfledger does not have cannot be re-derived: the audit fails
    closed (a finding, rule R6), so a forger cannot escape the check by naming another version."""

    def edit(envelope: dict[str, Any]) -> None:
        for part in _both(envelope):
            part["capture"]["parser"] = "99"
            part["facts"][0]["note"] = "derived differently by parser 99"

    forged = _forge(env, ledger, "ptxas", edit)
    assert _pl(env, ledger, "verify").returncode == 0
    code, report = _audit(env, ledger)
    assert code == 5, report
    [finding] = report["findings"]
    assert finding["event_id"] == forged and finding["rule"] == "R6"
    assert "version 99" in finding["message"]


@pytest.mark.slow
def test_edited_facts_with_the_capture_removed_are_still_re_derived(
    ledger: Path, env: dict[str, str]
) -> None:
    """Dropping the capture (as evidence recorded before captures existed) while the report
    stays attached does not escape: the report is re-parsed by the parsers its tool names."""

    def edit(envelope: dict[str, Any]) -> None:
        for part in _both(envelope):
            del part["capture"]
            part["facts"][0]["value"] = 12345.0

    forged = _forge(env, ledger, "nsys-q", edit)
    assert "facts" in _assert_integrity_finding(env, ledger, forged)


@pytest.mark.slow
def test_parsed_evidence_without_its_report_is_a_finding(ledger: Path, env: dict[str, str]) -> None:
    """The report artifact removed (manifest and tree), facts edited, the layout kept: facts
    claimed as parsed with nothing to re-derive them from are a finding (rule R6)."""

    def edit(envelope: dict[str, Any]) -> None:
        envelope["artifacts"] = {}
        for part in _both(envelope):
            part["facts"][0]["value"] = 1.0

    forged = _forge(env, ledger, "torch", edit, drop_artifacts=True)
    assert _pl(env, ledger, "verify").returncode == 0
    code, report = _audit(env, ledger)
    assert code == 5
    [finding] = report["findings"]
    assert finding["event_id"] == forged and finding["rule"] == "R6"
    assert "attaches no report" in finding["message"]


@pytest.mark.slow
def test_audit_lists_evidence_recorded_as_written(
    ledger: Path, env: dict[str, str], tmp_path: Path
) -> None:
    """Evidence from a hand-written request has no report to re-derive from: the audit is
    clean and lists it as written, beside the count of re-derived evidence."""
    request = tmp_path / "evidence.json"
    request.write_text(
        json.dumps(
            {
                "evidence_id": "typed",
                "layer": "kernel",
                "tool": {"name": "ncu", "version": "2025.3.1.0"},
                "facts": [{"name": "k0.dram__throughput", "value": 91.5, "unit": "%"}],
            }
        )
    )
    assert _pl(env, ledger, "evidence", "add", "--request", str(request)).returncode == 0
    code, report = _audit(env, ledger)
    assert code == 0, report
    assert report["evidence"] == {
        "rederived": len(RECORDED),
        "as_written": 1,
        "as_written_ids": ["typed"],
    }


@pytest.mark.slow
def test_ncu_capture_that_exited_non_zero_re_derives_clean(
    tmp_path: Path, ledger: Path, env: dict[str, str]
) -> None:
    """``evidence ncu`` whose ncu exited 3 records the report and a limitation naming the
    status; the audit derives that limitation too (clean), and still catches an edited fact."""
    bindir = tmp_path / "bin"
    bindir.mkdir()
    stand_in = bindir / "ncu"  # replays the real H200 capture (ncu is not installed here)
    stand_in.write_text(
        "#!/bin/sh\n"
        f'if [ "$1" = "--version" ]; then cat "{FIXTURES / "ncu_version.txt"}"; exit 0; fi\n'
        f'cat "{FIXTURES / "ncu_details_rules.csv"}"\nexit 3\n'
    )
    stand_in.chmod(0o755)
    env = {**env, "PATH": f"{bindir}:{env['PATH']}"}
    proc = _pl(env, ledger, "--json", "evidence", "ncu", "--evidence-id", "cap", "--", "./app")
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["payload"]["limitations"] == ["ncu exited with status 3"]
    code, report = _audit(env, ledger)
    assert code == 0 and report["findings"] == [], report

    def edit(envelope: dict[str, Any]) -> None:
        for part in _both(envelope):
            part["limitations"] = []

    forged = _forge(env, ledger, "cap", edit)
    assert "limitations" in _assert_integrity_finding(env, ledger, forged)
