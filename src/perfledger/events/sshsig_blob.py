"""The SSHSIG signature format (OpenSSH PROTOCOL.sshsig) as recorded in events: its armor, the
namespace of a review's signature, and :func:`signature_key`, which reads the signer's public
key out of an armored signature. Pure: it checks nothing cryptographic
(:mod:`perfledger.ledger.sshsig` checks signatures with ``ssh-keygen``).
"""

from __future__ import annotations

import base64
import hashlib

from perfledger.errors import BadRequest

#: The namespace of a review's signature (R12, R17): a signature made for git (or any other
#: use) does not verify as a review's.
REVIEW_NAMESPACE = "perfledger-review"
SIGNATURE_BEGIN = b"-----BEGIN SSH SIGNATURE-----"
SIGNATURE_END = b"-----END SSH SIGNATURE-----"


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
