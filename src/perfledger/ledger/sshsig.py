"""SSH signatures as git makes and checks them (``gpg.format=ssh``), through OpenSSH's own
``ssh-keygen -Y sign`` / ``-Y find-principals`` / ``-Y verify``: the program git itself calls,
so a signature perfledger writes is one ``git verify-tag`` accepts, and no cryptography is
written here. The namespace is git's (``git``) for checkpoints, ``perfledger-review`` for
reviews (:data:`REVIEW_NAMESPACE`); the signers file is git's ``gpg.ssh.allowedSignersFile``
format (``principal keytype key``, one a line). :func:`signature_key` reads the signer's public
key out of an armored signature (the SSHSIG format carries it); it checks nothing.
"""

from __future__ import annotations

import base64
import hashlib
import os
import shutil
import subprocess
import tempfile

from perfledger.errors import BadRequest, IntegrityError

#: The signature namespace git uses for commits and tags (``ssh-keygen -n``).
NAMESPACE = "git"
#: The namespace of a review's signature (R12, R17): a signature made for git (or any other
#: use) does not verify as a review's.
REVIEW_NAMESPACE = "perfledger-review"
#: Wall-clock limit of one ssh-keygen call, seconds (it signs or checks a few hundred bytes).
SSH_KEYGEN_TIMEOUT_S = 30
SIGNATURE_BEGIN = b"-----BEGIN SSH SIGNATURE-----"
SIGNATURE_END = b"-----END SSH SIGNATURE-----"


def _ssh_keygen() -> str:
    """The path of ``ssh-keygen``. Raises: BadRequest when OpenSSH is not installed."""
    path = shutil.which("ssh-keygen")
    if path is None:
        raise BadRequest(
            "ssh-keygen (OpenSSH) is not installed: it signs and checks checkpoints",
            hint="install OpenSSH's client tools (e.g. apt-get install openssh-client)",
        )
    return path


def sign(payload: bytes, key_path: str, *, namespace: str = NAMESPACE) -> bytes:
    """Sign ``payload`` with the private SSH key at ``key_path`` in ``namespace`` (git's).
    Returns: the armored signature (``-----BEGIN SSH SIGNATURE-----`` ... END, newline-ended).
    Raises: BadRequest when the key is missing or ssh-keygen refuses it (a passphrase-protected
        key needs an ssh-agent, as for git).
    """
    if not os.path.isfile(key_path):
        raise BadRequest(f"no SSH key at {key_path}", hint="pass --key PATH to a private key")
    done = subprocess.run(
        [_ssh_keygen(), "-Y", "sign", "-q", "-f", key_path, "-n", namespace],
        input=payload,
        capture_output=True,
        check=False,
        timeout=SSH_KEYGEN_TIMEOUT_S,
    )
    if done.returncode != 0 or not done.stdout.startswith(SIGNATURE_BEGIN):
        raise BadRequest(
            f"ssh-keygen could not sign with {key_path}: "
            f"{done.stderr.decode(errors='replace').strip()}",
            hint="use an unencrypted key file, or a key loaded in ssh-agent",
        )
    return done.stdout


def signers(
    payload: bytes, signature: bytes, signers_file: str, *, what: str, namespace: str = NAMESPACE
) -> list[str]:
    """Check ``signature`` over ``payload`` against the allowed signers in ``signers_file``
    (in ``namespace``, git's by default).
    Returns: the principals (names in the file) listed with the key that made it, for which
        the signature verifies (a key listed under two names speaks for both).
    Raises: IntegrityError naming ``what`` when the key is not in the file or the signature
        does not verify (a forged or altered payload); BadRequest when the file is missing.
    """
    if not os.path.isfile(signers_file):
        raise BadRequest(
            f"no allowed-signers file at {signers_file}",
            hint="pass --signers FILE naming an existing allowed-signers file (git's format)",
        )
    with tempfile.NamedTemporaryFile(prefix="perfledger-sig-") as sig:
        sig.write(signature)
        sig.flush()
        found = subprocess.run(
            [_ssh_keygen(), "-Y", "find-principals", "-s", sig.name, "-f", signers_file],
            capture_output=True,
            check=False,
            timeout=SSH_KEYGEN_TIMEOUT_S,
        )
        principals = found.stdout.decode(errors="replace").split()
        if found.returncode != 0 or not principals:
            raise IntegrityError(
                f"{what} is signed by a key that is not in {signers_file}",
                hint="add the signer's public key to the allowed-signers file if you trust it",
            )
        good = [p for p in principals if _verifies(payload, sig.name, signers_file, p, namespace)]
    if not good:
        raise IntegrityError(
            f"{what}: the signature of {principals[0]} does not verify (forged, or the signed "
            "content was altered)",
            hint="the checkpoint cannot be trusted: find out who wrote it",
        )
    return good


def _verifies(
    payload: bytes, sig_path: str, signers_file: str, principal: str, namespace: str = NAMESPACE
) -> bool:
    """True when ``ssh-keygen -Y verify`` accepts the signature for ``principal``."""
    checked = subprocess.run(
        [_ssh_keygen(), "-Y", "verify", "-f", signers_file, "-I", principal, "-n", namespace,
         "-s", sig_path],
        input=payload,
        capture_output=True,
        check=False,
        timeout=SSH_KEYGEN_TIMEOUT_S,
    )  # fmt: skip
    return checked.returncode == 0


def _read_string(blob: bytes, at: int) -> tuple[bytes, int]:
    """One SSH wire-format string (uint32 length, bytes) of ``blob`` at ``at``, and the offset
    after it. Raises: ValueError when it runs past the end."""
    if at + 4 > len(blob):
        raise ValueError("truncated")
    size = int.from_bytes(blob[at : at + 4], "big")
    end = at + 4 + size
    if end > len(blob):
        raise ValueError("truncated")
    return blob[at + 4 : end], end


def signature_key(signature: bytes) -> tuple[str, str, str]:
    """The signer of an armored SSH signature, read from its SSHSIG blob (PROTOCOL.sshsig):
    ``(public key as "keytype base64", fingerprint "SHA256:...", namespace)``. Checks nothing
    cryptographic (:func:`check_novalidate`, :func:`signers` do).
    Raises: BadRequest when ``signature`` is not an armored SSHSIG signature."""
    text = signature.strip()
    if not (text.startswith(SIGNATURE_BEGIN) and text.endswith(SIGNATURE_END)):
        raise BadRequest(
            "the signature is not an armored SSH signature (-----BEGIN SSH SIGNATURE-----)",
            hint=f"sign with `ssh-keygen -Y sign -n {REVIEW_NAMESPACE} -f KEY`",
        )
    try:
        blob = base64.b64decode(b"".join(text[len(SIGNATURE_BEGIN) : -len(SIGNATURE_END)].split()))
        if blob[:6] != b"SSHSIG":
            raise ValueError("no SSHSIG magic")
        key, at = _read_string(blob, 10)  # magic, uint32 version
        namespace, _ = _read_string(blob, at)
        key_type, _ = _read_string(key, 0)
    except ValueError as exc:  # binascii.Error is a ValueError
        raise BadRequest(
            f"the signature is not a readable SSH signature: {exc}",
            hint=f"sign with `ssh-keygen -Y sign -n {REVIEW_NAMESPACE} -f KEY`",
        ) from None
    digest = base64.b64encode(hashlib.sha256(key).digest()).decode().rstrip("=")
    public = f"{key_type.decode(errors='replace')} {base64.b64encode(key).decode()}"
    return public, f"SHA256:{digest}", namespace.decode(errors="replace")


def check_novalidate(payload: bytes, signature: bytes, *, namespace: str) -> bool:
    """True when ``signature`` is a good signature over ``payload`` in ``namespace`` by the key
    it carries (``ssh-keygen -Y check-novalidate``): whose key that is, is not checked here
    (:func:`signers` checks it against an allowed-signers file)."""
    with tempfile.NamedTemporaryFile(prefix="perfledger-sig-") as sig:
        sig.write(signature)
        sig.flush()
        checked = subprocess.run(
            [_ssh_keygen(), "-Y", "check-novalidate", "-n", namespace, "-s", sig.name],
            input=payload,
            capture_output=True,
            check=False,
            timeout=SSH_KEYGEN_TIMEOUT_S,
        )
    return checked.returncode == 0
