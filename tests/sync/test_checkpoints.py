"""Signed checkpoints and witness co-signatures (docs/checkpoints.md, SPEC.md section 2,
Checkpoints): real keys from ``ssh-keygen``, real ``git verify-tag``, real ``git clone``, real
``perfledger pull`` from remotes someone rewrote. Every forgery is refused with exit 5 naming
it and changing nothing; an honest control runs beside each."""

from __future__ import annotations

import hashlib
import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from synchelpers import fsck_clean, snapshot

pytestmark = pytest.mark.skipif(shutil.which("ssh-keygen") is None, reason="needs OpenSSH")

Run = Callable[..., subprocess.CompletedProcess[Any]]


def _keygen(path: Path, comment: str) -> str:
    subprocess.run(
        ["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", comment, "-f", str(path)],
        check=True, capture_output=True, timeout=60,
    )  # fmt: skip
    kind, key = path.with_suffix(".pub").read_text().split()[:2]
    return f"{kind} {key}"


def _ok(proc: subprocess.CompletedProcess[str]) -> str:
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc.stdout


def _refused(proc: subprocess.CompletedProcess[str], *needles: str) -> None:
    assert proc.returncode == 5, proc.stdout + proc.stderr
    for needle in needles:
        assert needle in proc.stderr, proc.stderr


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory, cli: Run) -> dict[str, Path]:
    """origin.git: 3 events, a checkpoint signed by alice, co-signed by the witness (whose
    copies are in wcopy/); bob.git: a clone of it. Keys and the allowed-signers file."""
    root = tmp_path_factory.mktemp("checkpoints")
    keys = {name: _keygen(root / name, name) for name in ("alice", "witness", "mallory")}
    (root / "signers").write_text(f"alice {keys['alice']}\nwitness {keys['witness']}\n")
    origin = root / "origin.git"
    _ok(cli("init", origin, "--actor", "alice"))
    for text in ("one", "two"):
        _ok(cli("--ledger", origin, "note", text, "--actor", "alice"))
    _ok(cli("--ledger", origin, "checkpoint", "sign", "--key", root / "alice", "--actor", "alice"))
    _ok(cli("--ledger", origin, "checkpoint", "witness", "--key", root / "witness",
            "--signers", root / "signers", "--copy", root / "wcopy", "--actor", "witness"))  # fmt: skip
    _ok(cli("clone", origin, root / "bob.git", "--signers", root / "signers",
            "--require-signer", "alice", "--require-signer", "witness"))  # fmt: skip
    return {"root": root, "origin": origin, "bob": root / "bob.git", "signers": root / "signers"}


def _copy(world: dict[str, Path], tmp_path: Path, *names: str) -> dict[str, Path]:
    """Private copies of the world's ledgers (and the witness's copies)."""
    out = dict(world)
    for name in (*names, "wcopy"):
        src = world["root"] / name if name == "wcopy" else world[name]
        out[name] = tmp_path / src.name
        shutil.copytree(src, out[name], symlinks=True)
    if "bob" in names:  # bob's origin: the copy of origin when there is one, never the world's
        url = out["origin"] if "origin" in names else tmp_path / "no-origin.git"
        subprocess.run(["git", "-C", str(out["bob"]), "remote", "set-url", "origin", str(url)],
                       check=True, capture_output=True, timeout=60)  # fmt: skip
    return out


def _refs(git: Run, repo: Path, kind: str) -> list[str]:
    out = git("-C", repo, "for-each-ref", "--format=%(objectname)", f"refs/perfledger/{kind}/")
    return out.stdout.decode().split()


def _verify_tag(git: Run, repo: Path, signers: Path, sha: str) -> subprocess.CompletedProcess[Any]:
    return git("-C", repo, "-c", "gpg.format=ssh", "-c", f"gpg.ssh.allowedSignersFile={signers}",
               "verify-tag", sha, check=False)  # fmt: skip


def _tag(git: Run, repo: Path, sha: str) -> bytes:
    return git("-C", repo, "cat-file", "tag", sha).stdout


def _publish(git: Run, repo: Path, raw: bytes, kind: str = "checkpoints") -> str:
    """Write a tag object with plain git and publish it under its own sha."""
    proc = subprocess.run(
        ["git", "-C", str(repo), "hash-object", "-t", "tag", "-w", "--stdin"],
        input=raw, capture_output=True, check=True, timeout=60,
    )  # fmt: skip
    sha = proc.stdout.decode().strip()
    git("-C", repo, "update-ref", f"refs/perfledger/{kind}/{sha}", sha)
    return sha


def _signed(payload: bytes, key: Path) -> bytes:
    sig = subprocess.run(
        ["ssh-keygen", "-Y", "sign", "-q", "-f", str(key), "-n", "git"],
        input=payload, capture_output=True, check=True, timeout=60,
    ).stdout  # fmt: skip
    return payload + sig


def _flip_digest(payload: bytes) -> bytes:
    """The payload with the first hex digit of its Event-Digest changed."""
    at = payload.index(b"Event-Digest: sha256:") + len(b"Event-Digest: sha256:")
    return payload[:at] + (b"1" if payload[at : at + 1] == b"0" else b"0") + payload[at + 1 :]


def _payload(raw: bytes) -> bytes:
    return raw[: raw.index(b"-----BEGIN SSH SIGNATURE-----")]


@pytest.mark.slow
def test_checkpoint_is_an_ssh_signed_git_tag_that_git_verify_tag_and_a_git_clone_check(
    world: dict[str, Path], git: Run, cli: Run, tmp_path: Path
) -> None:
    origin, signers = world["origin"], world["signers"]
    (checkpoint,), (witness,) = _refs(git, origin, "checkpoints"), _refs(git, origin, "witnesses")
    assert _verify_tag(git, origin, signers, checkpoint).returncode == 0
    fsck_clean(git, origin)
    assert (
        'Good "git" signature for witness'
        in _verify_tag(git, origin, signers, witness).stderr.decode()
    )
    # control: git itself refuses the same tag against a file without alice
    other = tmp_path / "only-witness"
    other.write_text(signers.read_text().splitlines()[1] + "\n")
    assert _verify_tag(git, origin, other, checkpoint).returncode != 0
    # the digest is recomputed from the commits' trailers with standard tools
    fields = dict(
        line.split(": ", 1) for line in _tag(git, origin, checkpoint).decode().splitlines()
        if ": " in line
    )  # fmt: skip
    log = git("-C", origin, "log", "--format=%(trailers:key=Lamport,valueonly,separator=) "
              "%(trailers:key=Event-Id,valueonly,separator=)", fields["Ledger-Head"]).stdout  # fmt: skip
    rows = sorted(
        (int(a), b) for a, b in (r.split() for r in log.decode().splitlines() if r.strip())
    )
    ids = "".join(f"{event_id}\n" for _, event_id in rows).encode()
    assert fields["Event-Digest"] == "sha256:" + hashlib.sha256(ids).hexdigest()
    assert fields["Event-Count"] == str(len(rows)) == "3"
    # a plain git clone carries the refs; perfledger verifies the clone
    mirror = tmp_path / "mirror.git"
    git("clone", "--mirror", "-q", origin, mirror)
    out = _ok(cli("--ledger", mirror, "verify", "--signers", signers, "--require-signer",
                  "alice", "--require-signer", "witness", "--max-unsigned-events", "0"))  # fmt: skip
    assert "signed by alice, witness" in out


@pytest.mark.slow
def test_push_and_pull_carry_checkpoints_and_a_moved_checkpoint_ref_is_refused(
    world: dict[str, Path], git: Run, cli: Run, tmp_path: Path
) -> None:
    w = _copy(world, tmp_path, "origin", "bob")
    bob, origin, signers = w["bob"], w["origin"], w["signers"]
    assert _refs(git, bob, "witnesses") == _refs(git, origin, "witnesses")  # carried by clone
    _ok(cli("--ledger", bob, "note", "three", "--actor", "bob"))
    _ok(cli("--ledger", bob, "checkpoint", "sign", "--key", w["root"] / "alice", "--actor", "bob"))
    pushed = _ok(cli("--ledger", bob, "push", "--json"))
    assert '"tags_pushed":["' in pushed
    assert sorted(_refs(git, origin, "checkpoints")) == sorted(_refs(git, bob, "checkpoints"))
    _ok(cli("--ledger", origin, "verify", "--signers", signers, "--require-signer", "alice"))
    # the new checkpoint is not witnessed: a reader who demands the witness refuses it
    _refused(cli("--ledger", origin, "verify", "--signers", signers, "--require-signer",
                 "witness"), "lacks a signature by witness")  # fmt: skip
    # someone moves a checkpoint ref to another tag: a ref's name is its value
    first, second = sorted(_refs(git, origin, "checkpoints"))
    git("-C", origin, "update-ref", f"refs/perfledger/checkpoints/{first}", second)
    _refused(cli("--ledger", origin, "verify"), "never rewritten")
    before = snapshot(bob)
    _refused(cli("--ledger", bob, "pull"), "never rewritten", "nothing was pulled")
    assert snapshot(bob) == before


def test_checkpoint_signed_by_an_unknown_key_is_refused(
    world: dict[str, Path], git: Run, cli: Run, tmp_path: Path
) -> None:
    w = _copy(world, tmp_path, "origin")
    origin, signers = w["origin"], w["signers"]
    _ok(cli("--ledger", origin, "note", "three", "--actor", "mallory"))
    _ok(cli("--ledger", origin, "checkpoint", "sign", "--key", w["root"] / "mallory"))
    _refused(cli("--ledger", origin, "verify", "--signers", signers), "not in")
    mallory = set(_refs(git, origin, "checkpoints")) - set(
        _refs(git, world["origin"], "checkpoints")
    )
    assert _verify_tag(git, origin, signers, mallory.pop()).returncode != 0  # git agrees
    # control: the same history signed by alice verifies
    honest = _copy(world, tmp_path / "honest", "origin")["origin"]
    _ok(cli("--ledger", honest, "note", "three", "--actor", "alice"))
    _ok(cli("--ledger", honest, "checkpoint", "sign", "--key", w["root"] / "alice"))
    _ok(cli("--ledger", honest, "verify", "--signers", signers))


@pytest.mark.slow
def test_forged_signature_and_lying_count_or_digest_are_refused(
    world: dict[str, Path], git: Run, cli: Run, tmp_path: Path
) -> None:
    root, signers = world["root"], world["signers"]
    (checkpoint,) = _refs(git, world["origin"], "checkpoints")
    raw = _tag(git, world["origin"], checkpoint)
    cases = {
        # alice's signature kept, one signed byte changed: a forged signature
        "forged": (raw.replace(b"(perfledger ", b"(perfledger=", 1), "does not verify"),
        # alice's real signature over a count replay does not give
        "count": (_signed(_payload(raw).replace(b"Event-Count: 3", b"Event-Count: 2"),
                          root / "alice"), "replay of its commit gives 3 events"),
        "digest": (_signed(_flip_digest(_payload(raw)), root / "alice"),
                   "replay of its commit gives"),
        # a second signature appended (git verifies the last one): mallory's, over alice's tag
        "appended": (_signed(raw, root / "mallory"), "not in"),
        # unsigned bytes after alice's signature
        "trailing": (raw + b"Event-Count: 2\n", "carries no SSH signature"),
    }  # fmt: skip
    for name, (forged, needle) in cases.items():
        origin = _copy(world, tmp_path / name, "origin")["origin"]
        sha = _publish(git, origin, forged)
        _refused(cli("--ledger", origin, "verify", "--signers", signers), needle, sha[:12])
        if name in ("forged", "appended"):
            assert _verify_tag(git, origin, signers, sha).returncode != 0  # git agrees
        if name == "trailing":  # git verifies the signed part and ignores what follows it
            assert _verify_tag(git, origin, signers, sha).returncode == 0
    _ok(cli("--ledger", world["origin"], "verify", "--signers", signers))  # the honest one


def _rewrite(git: Run, cli: Run, repo: Path, *, delete_refs: bool) -> None:
    """Mallory's rewrite: the ledger branch moved back below the checkpoint, a forged event on
    top (and, optionally, the checkpoint and witness refs deleted)."""
    head = git("-C", repo, "rev-parse", "ledger").stdout.decode().strip()
    git("-C", repo, "update-ref", "refs/heads/ledger", f"{head}~1")
    shutil.rmtree(repo / "perfledger", ignore_errors=True)
    _ok(cli("--ledger", repo, "note", "forged two", "--actor", "alice"))
    if delete_refs:
        for ref in git("-C", repo, "for-each-ref", "--format=%(refname)", "refs/perfledger/"
                       ).stdout.decode().split():  # fmt: skip
            git("-C", repo, "update-ref", "-d", ref)


@pytest.mark.slow
def test_pull_and_clone_refuse_a_remote_rewritten_below_a_witnessed_checkpoint(
    world: dict[str, Path], git: Run, cli: Run, tmp_path: Path
) -> None:
    w = _copy(world, tmp_path, "bob")
    bob, signers, wcopy = w["bob"], w["signers"], w["wcopy"]
    for delete_refs in (False, True):
        forged = tmp_path / f"forged-{delete_refs}.git"
        git("clone", "--mirror", "-q", world["origin"], forged)
        _rewrite(git, cli, forged, delete_refs=delete_refs)
        before = snapshot(bob)
        # bob pulls from it as a new remote (no tracking ref to catch the rewrite)
        proc = cli("--ledger", bob, "pull", forged, "--signers", signers, "--trust", wcopy)
        _refused(proc, "not in this ledger's history", "nothing was pulled")
        _refused(cli("--ledger", bob, "pull", forged, "--signers", signers,
                     "--require-signer", "witness"), "nothing was pulled")  # fmt: skip
        assert snapshot(bob) == before
        # a fresh clone with the witness's copies refuses it and leaves nothing
        target = tmp_path / f"fresh-{delete_refs}.git"
        _refused(cli("clone", forged, target, "--signers", signers, "--trust", wcopy),
                 "rewritten below a signed checkpoint")  # fmt: skip
        assert not target.exists()
        # the witness will not co-sign anything on it
        _refused(cli("--ledger", forged, "checkpoint", "witness", "--key", w["root"] / "witness",
                     "--signers", signers, "--copy", wcopy), "not in this ledger's history")  # fmt: skip
    # control: the honest origin passes the same demands
    _ok(cli("--ledger", bob, "pull", world["origin"], "--signers", signers, "--trust", wcopy,
            "--require-signer", "witness", "--max-unsigned-events", "0"))  # fmt: skip


@pytest.mark.slow
def test_checkpoints_that_fork_are_refused_and_the_head_may_not_run_too_far(
    world: dict[str, Path], git: Run, cli: Run, tmp_path: Path
) -> None:
    w = _copy(world, tmp_path, "origin", "bob")
    bob, origin, signers, alice = w["bob"], w["origin"], w["signers"], w["root"] / "alice"
    _ok(cli("--ledger", bob, "note", "bob's", "--actor", "bob"))
    _ok(cli("--ledger", bob, "note", "bob's again", "--actor", "bob"))
    _refused(cli("--ledger", bob, "verify", "--signers", signers, "--max-unsigned-events", "1"),
             "2 events past the last checkpoint")  # fmt: skip
    _ok(cli("--ledger", bob, "verify", "--signers", signers, "--max-unsigned-events", "2"))
    _ok(cli("--ledger", bob, "checkpoint", "sign", "--key", alice))
    _ok(cli("--ledger", origin, "note", "origin's", "--actor", "alice"))
    _ok(cli("--ledger", origin, "note", "origin's again", "--actor", "alice"))
    _ok(cli("--ledger", origin, "checkpoint", "sign", "--key", alice))
    before = snapshot(bob)
    _refused(cli("--ledger", bob, "pull", "--signers", signers), "does not extend",
             "nothing was pulled")  # fmt: skip
    assert snapshot(bob) == before
    # control: a checkpoint only bob's side signed (origin unsigned past the common one) joins
    clean = _copy(world, tmp_path / "clean", "origin", "bob")
    _ok(cli("--ledger", clean["bob"], "note", "bob's", "--actor", "bob"))
    _ok(cli("--ledger", clean["bob"], "checkpoint", "sign", "--key", alice))
    _ok(cli("--ledger", clean["origin"], "note", "origin's", "--actor", "alice"))
    _ok(cli("--ledger", clean["bob"], "sync", "--signers", signers))
    _ok(cli("--ledger", clean["origin"], "verify", "--signers", signers))


@pytest.mark.slow
def test_checkpoints_travel_over_a_git_daemon_and_git_fetch_carries_them(
    world: dict[str, Path], git: Run, cli: Run, tmp_path: Path, served: Path, daemon: str
) -> None:
    shutil.copytree(world["origin"], served / "origin.git", symlinks=True)
    url = f"{daemon}/origin.git"
    bob = tmp_path / "bob.git"
    _ok(cli("clone", url, bob, "--signers", world["signers"], "--require-signer", "witness"))
    assert len(_refs(git, bob, "checkpoints")) == len(_refs(git, bob, "witnesses")) == 1
    _ok(cli("--ledger", bob, "note", "over the wire", "--actor", "bob"))
    _ok(cli("--ledger", bob, "checkpoint", "sign", "--key", world["root"] / "alice"))
    _ok(cli("--ledger", bob, "sync"))  # receive-pack takes the new tag and its ref
    assert sorted(_refs(git, served / "origin.git", "checkpoints")) == sorted(
        _refs(git, bob, "checkpoints")
    )
    fsck_clean(git, served / "origin.git")
    # plain git fetches the namespace over the same daemon; git verifies what it fetched
    plain = tmp_path / "plain.git"
    git("init", "-q", "--bare", plain)
    git("-C", plain, "fetch", "-q", url, "+refs/perfledger/*:refs/perfledger/*")
    for sha in _refs(git, plain, "checkpoints") + _refs(git, plain, "witnesses"):
        assert _verify_tag(git, plain, world["signers"], sha).returncode == 0


def test_checkpoint_list_names_signers_and_demands_without_signers_are_bad_requests(
    world: dict[str, Path], cli: Run
) -> None:
    listed = _ok(cli("--ledger", world["origin"], "checkpoint", "list", "--signers",
                     world["signers"], "--json"))  # fmt: skip
    assert '"signers":["alice","witness"]' in listed and '"unsigned_events":0' in listed
    proc = cli("--ledger", world["origin"], "verify", "--require-signer", "witness")
    assert proc.returncode == 2 and "need --signers" in proc.stderr, proc.stderr
    proc = cli("--ledger", world["origin"], "checkpoint", "witness", "--key",
               world["root"] / "nokey", "--signers", world["signers"], "--copy", "x")  # fmt: skip
    assert proc.returncode == 2 and "no SSH key" in proc.stderr, proc.stderr
