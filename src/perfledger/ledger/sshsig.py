"""SSH signatures as git makes and checks them (``gpg.format=ssh``), through OpenSSH's own
``ssh-keygen -Y sign`` / ``-Y find-principals`` / ``-Y verify``: the program git itself calls,
so a signature perfledger writes is one ``git verify-tag`` accepts, and no cryptography is
written here. The namespace is git's (``git``) for checkpoints, ``perfledger-review`` for
reviews (:data:`REVIEW_NAMESPACE`); the signers file is git's ``gpg.ssh.allowedSignersFile``
format (``principal keytype key``, one a line). :func:`signature_key` reads the signer's public
key out of an armored signature (the SSHSIG format carries it); it checks nothing.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile

from perfledger.errors import BadRequest, IntegrityError
from perfledger.events.sshsig_blob import (
    REVIEW_NAMESPACE,
    SIGNATURE_BEGIN,
    SIGNATURE_END,
    signature_key,
)

__all__ = [
    "NAMESPACE",
    "REVIEW_NAMESPACE",
    "SIGNATURE_BEGIN",
    "SIGNATURE_END",
    "check_novalidate",
    "sign",
    "signature_key",
    "signers",
]

#: The signature namespace git uses for commits and tags (``ssh-keygen -n``).
NAMESPACE = "git"
#: Wall-clock limit of one ssh-keygen call, seconds (it signs or checks a few hundred bytes).
SSH_KEYGEN_TIMEOUT_S = 30


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
