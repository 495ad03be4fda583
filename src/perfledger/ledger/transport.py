"""Talking to a git remote through dulwich's clients: errors mapped to
:class:`RemoteError`, and the fetch of ``refs/heads/ledger`` with explicit wants (dulwich's
porcelain fetch maps only ``refs/heads/*`` to its own names, GUIDE.md), its pack received and
read in memory (:func:`perfledger.ledger.reader.read_pack`): nothing is written to disk here."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from dulwich.client import get_transport_and_path
from dulwich.errors import GitProtocolError, HangupException, NotGitRepository
from dulwich.object_store import ObjectStoreGraphWalker
from dulwich.repo import Repo

from perfledger.errors import BadRequest, PerfledgerError
from perfledger.ledger.reader import read_pack
from perfledger.ledger.store import LEDGER_REF, GitStore


class RemoteError(PerfledgerError):
    """The remote could not be reached or read (exit 1): nothing changed locally."""

    code = "remote"


@contextlib.contextmanager
def client(url: str) -> Iterator[tuple[Any, str]]:
    """A dulwich client for ``url`` and the path on the remote; errors become
    :class:`RemoteError`. Raises: BadRequest for a URL dulwich cannot use."""
    try:
        remote, path = get_transport_and_path(url)
    except (ValueError, NotGitRepository) as exc:
        raise BadRequest(f"cannot use remote URL {url!r}: {exc}") from None
    try:
        yield remote, path
    except PerfledgerError:
        raise
    except (GitProtocolError, HangupException, NotGitRepository, OSError) as exc:
        raise RemoteError(
            f"remote {url} failed: {type(exc).__name__}: {exc}",
            hint="check the URL and that the server is running; nothing changed locally",
        ) from None
    except Exception as exc:  # urllib3 / http errors and the like
        if type(exc).__module__.startswith(("urllib3", "http", "dulwich")):
            raise RemoteError(
                f"remote {url} failed: {type(exc).__name__}: {exc}",
                hint="check the URL and that the server is running; nothing changed locally",
            ) from None
        raise
    finally:
        with contextlib.suppress(Exception):
            remote.close()


@dataclass
class Fetched:
    """What a fetch brought: the remote's ledger head (None: no ledger branch) and the objects
    received (binary sha -> (type, content)), each named from its content."""

    remote_head: bytes | None
    objects: dict[bytes, tuple[int, bytes]]


def fetch(store: GitStore | None, repo: Repo, url: str, local_heads: list[bytes]) -> Fetched:
    """Fetch the remote's ledger branch: objects unpacked in memory, nothing written to the
    object store. ``local_heads`` (hex) are offered as haves; ``store`` gives their parents
    (None for a clone). Raises: RemoteError; IntegrityError for a malformed pack."""
    holder: dict[str, bytes | None] = {"head": None}
    object_store = repo.object_store

    def determine_wants(refs: dict[bytes, bytes], depth: int | None = None) -> list[bytes]:
        head = refs.get(LEDGER_REF)
        holder["head"] = head
        if head is None or head in object_store:
            return []
        return [head]

    def parents(sha: bytes) -> list[bytes]:
        if store is None:
            return []
        return list(store.commit_node(sha).parents)

    walker = ObjectStoreGraphWalker([h for h in local_heads if h in object_store], parents)
    # received in memory, as it is read anyway: a killed pull leaves no file behind
    received = bytearray()
    with client(url) as (remote, path):
        remote.fetch_pack(path, determine_wants, walker, received.extend)
    objects = read_pack(received, object_store.get_raw) if received else {}
    return Fetched(holder["head"], objects)


__all__ = ["Fetched", "RemoteError", "client", "fetch"]
