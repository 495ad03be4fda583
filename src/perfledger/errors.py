"""The error hierarchy of perfledger and its mapping to CLI exit codes (SPEC.md section 6).

Every error a user can cause is a :class:`PerfledgerError`; the CLI maps it to an exit code in one
place (:func:`exit_code_for`) and prints its message and hint, never a traceback.

Exit codes: 0 done, 2 bad request, 3 refused by a rule, 4 concurrent-append conflict that retries
could not settle, 5 integrity failure, 6 a pull or sync that left a conflict to resolve, 7 a
ledger written by a newer perfledger (read-only for this one), 1 anything else.
"""

from __future__ import annotations

import errno


class PerfledgerError(Exception):
    """Base of every error perfledger raises on purpose.

    Attributes:
        code: a short machine-readable code (``bad_request``, ``refused``, ...).
        rule: the workflow rule id (``R7``) for a refusal, else ``None``.
        message: what is wrong, for a person.
        hint: what to do next, for a person (may be empty).
        exit_code: the CLI exit code of SPEC.md section 6.
    """

    code = "error"
    exit_code = 1

    def __init__(self, message: str, *, hint: str = "", rule: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint
        self.rule = rule

    def to_json(self) -> dict[str, object]:
        """Return the ``{"error": {...}}`` object of SPEC.md section 6."""
        return {
            "error": {
                "code": self.code,
                "rule": self.rule,
                "message": self.message,
                "hint": self.hint,
            }
        }


class BadRequest(PerfledgerError):
    """A malformed request, argument or path (exit 2)."""

    code = "bad_request"
    exit_code = 2


class AmbiguousId(BadRequest):
    """An id prefix names several events (exit 2, code ``bad_request``): the caller must give
    more characters, and no other reading of the prefix (a commit sha) is tried."""


class NotALedger(BadRequest):
    """The path given (or discovered) is not a perfledger ledger (exit 2)."""

    code = "not_a_ledger"


class CanonicalEncodingError(BadRequest):
    """A value cannot be canonically encoded (NaN, Inf, unsupported type) (exit 2)."""

    code = "not_canonical"


class EvidenceError(BadRequest):
    """A profiler or compiler report that cannot be read exactly: unknown tool version, layout,
    header, key field or unit, a value that does not parse, a truncated or binary file (R6:
    evidence is refused at ingestion, never guessed) (exit 2)."""

    code = "bad_evidence"


class RuleRefused(PerfledgerError):
    """A workflow rule refused the request; ``rule`` names it (exit 3). ``hint`` is required:
    a refusal always says what the rules accept instead (tests/layout walks every site)."""

    code = "refused"
    exit_code = 3

    def __init__(self, message: str, *, hint: str, rule: str | None = None) -> None:
        super().__init__(message, hint=hint, rule=rule)


class ConcurrentAppend(PerfledgerError):
    """Compare-and-swap of the ledger ref kept losing races after all retries (exit 4)."""

    code = "concurrent_append"
    exit_code = 4


class IntegrityError(PerfledgerError):
    """The ledger failed verification: a hash, trailer, parent or schema does not match (exit 5).

    Attributes:
        event_id: the id of the first bad event, when known.
        commit: the hex sha of the offending commit, when known.
    """

    code = "integrity"
    exit_code = 5

    def __init__(
        self,
        message: str,
        *,
        hint: str = "",
        event_id: str | None = None,
        commit: str | None = None,
    ) -> None:
        super().__init__(message, hint=hint)
        self.event_id = event_id
        self.commit = commit

    def to_json(self) -> dict[str, object]:
        """Return the error object, with ``event_id`` and ``commit`` added."""
        data = super().to_json()
        err = data["error"]
        assert isinstance(err, dict)
        err["event_id"] = self.event_id
        err["commit"] = self.commit
        return data


class NewerLedger(IntegrityError):
    """The ledger holds an event this perfledger cannot read: a kind it does not know or a
    schema version newer than it knows, written by a newer perfledger (exit 7, code
    ``newer_ledger``). Such a ledger is read-only for this version: every writer refuses it
    (SPEC.md section 6), and so do the readers that fold or verify the events. An
    :class:`IntegrityError` subclass, so that a reader's ``except IntegrityError`` still stops.

    Attributes:
        kind: the event kind, unknown or of a newer schema.
        schema: its schema version as recorded.
    """

    code = "newer_ledger"
    exit_code = 7

    def __init__(
        self,
        message: str,
        *,
        hint: str = "",
        kind: str = "",
        schema: int = 0,
        event_id: str | None = None,
        commit: str | None = None,
    ) -> None:
        super().__init__(message, hint=hint, event_id=event_id, commit=commit)
        self.kind = kind
        self.schema = schema

    def naming(self, event_id: str, commit: str | None = None) -> NewerLedger:
        """The same error naming ``event_id`` (and its ``commit``) in its message and fields."""
        message = self.message
        if event_id not in message:
            message = f"event {event_id}: {message}"
        return NewerLedger(
            message,
            hint=self.hint,
            kind=self.kind,
            schema=self.schema,
            event_id=self.event_id or event_id,
            commit=self.commit or commit,
        )


class MeasurementError(PerfledgerError):
    """A measurement could not be taken or is not plausible: no GPU or CuPy, a driver command
    that cannot run at all, an achieved bandwidth or FLOP rate above the device's measured ceiling
    (SPEC.md section 5, "Plausibility") (exit 1)."""

    code = "measurement_error"
    exit_code = 1


class ResourceError(PerfledgerError, OSError):
    """The machine refused a file operation: a full disk (``ENOSPC``, ``EDQUOT``), a read-only
    filesystem (``EROFS``) or a permission (``EACCES``, ``EPERM``) (exit 1, code
    ``resource``). Nothing was appended: the ref moves only after every object is written.
    Also an ``OSError`` (with ``errno`` and ``filename``), so ``except OSError`` still catches it.

    Attributes:
        errno: the system's error number.
        path: the file or directory refused, when the system named it.
    """

    code = "resource"
    exit_code = 1

    def __init__(self, message: str, *, hint: str = "", errno_: int, path: str | None) -> None:
        super().__init__(message, hint=hint)
        self.errno = errno_
        self.filename = self.path = path

    def __str__(self) -> str:
        return self.message  # not OSError's "[Errno N] ...": the message says it for a person


#: errno -> (what happened, what to do), for :func:`resource_error`.
_RESOURCE_ERRORS = {
    errno.ENOSPC: (
        "no space left on the device holding {where}",
        "free space on that filesystem (or move the ledger), then retry: the ledger is unchanged",
    ),
    errno.EDQUOT: (
        "disk quota exceeded on {where}",
        "free space within your quota (or move the ledger), then retry: the ledger is unchanged",
    ),
    errno.EROFS: (
        "{where} is on a read-only filesystem",
        "remount it read-write, or clone the ledger somewhere writable (perfledger clone); "
        "reading commands still work",
    ),
    errno.EACCES: (
        "permission denied on {where}",
        "check the owner and mode of the ledger's files (ls -l), or run as their owner; the "
        "ledger is unchanged",
    ),
    errno.EPERM: (
        "operation not permitted on {where}",
        "check the owner and mode of the ledger's files (ls -l), or run as their owner; the "
        "ledger is unchanged",
    ),
}


def resource_error(exc: BaseException) -> ResourceError | None:
    """Return the :class:`ResourceError` an ``OSError`` of a full disk, a read-only filesystem
    or a refused permission stands for (with what happened and what to do), or None for any
    other exception."""
    if not isinstance(exc, OSError) or exc.errno not in _RESOURCE_ERRORS:
        return None
    path = exc.filename if isinstance(exc.filename, str) else None
    what, hint = _RESOURCE_ERRORS[exc.errno]
    return ResourceError(
        what.format(where=path or "the ledger"), hint=hint, errno_=exc.errno, path=path
    )


def exit_code_for(exc: BaseException) -> int:
    """Map an exception to the CLI exit code of SPEC.md section 6 (1 for anything unexpected)."""
    if isinstance(exc, PerfledgerError):
        return exc.exit_code
    return 1  # resource errors (resource_error) included
