"""Child process for the SIGKILL crash tests (tests/crash/test_sigkill.py); not a test module.

It opens a ledger with :meth:`perfledger.api.Ledger.open` and appends ``NoteRecorded`` events in
a loop: single appends, batches of 8-12 through ``append_batch`` (so the pack path runs), and
events with artifacts (some with contents shared by every child, so the same blobs and artifact
trees are written again and again). After each ``append``/``append_batch`` returns it writes the
returned ids to stdout with one ``os.write`` (so a line is never half-written when the parent
kills it) — the parent then knows which ids were acknowledged.

stdout lines:
    ``ready <head>``   the ledger is open (head = the commit it saw)
    ``<64 hex>``       an acknowledged event id
    ``ERR <type> <message>``   an append raised; the child keeps going (after a short sleep)
    ``done``           ``--max-appends`` calls completed (or the stop file appeared)

``--phases FILE`` records where the child is, one marker per line, written unbuffered before and
after each phase: ``append+``/``append-``, ``write+``/``write-`` (objects), ``cas+``/``cas-``
(compare-and-swap of the ref), ``pack+``/``pack-`` (loose objects -> pack), ``merge+``/``merge-``
(geometric pack merge), ``pre <head>`` (the head an append starts on). After a kill, the markers
still open tell the parent which phase the kill landed in.

``--cas-delay S`` holds the ref's lock S seconds longer (after writing the new value into it),
so that a kill aimed at the compare-and-swap lands inside it.

``--crash-at POINT`` makes the child SIGKILL itself the ``--crash-after``-th time it reaches POINT:

- ``before_cas``: objects written, ref not moved yet;
- ``after_cas``: ref moved, the id not printed, the derived index not updated;
- ``in_ref_lock``: ``refs/heads/ledger.lock`` written, about to be fsynced and renamed;
- ``in_loose_write``: a loose object written to its temporary (or lock) file, about to be
  fsynced and renamed into place (``--crash-match``: only the object whose sha starts so);
- ``after_pack_write``: loose objects packed (pack + idx fsynced), none deleted yet;
- ``mid_loose_delete``: some loose objects deleted after packing, not all;
- ``mid_merge``: merged pack written, some of the merged-away packs deleted, not all.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import random
import signal
import sys
import time
import traceback
import zlib

import perfledger.ledger.packing as packing
import perfledger.ledger.store as store_module
from perfledger.api import Ledger
from perfledger.ledger.base import Artifact, EventDraft
from perfledger.ledger.store import GitStore

#: Artifact contents shared by every child: the same blobs are written by many events.
SHARED_ARTIFACTS = [
    b"__global__ void scale(float* x, float a, int n) { /* v%d */ }\n" % i for i in range(3)
] + [bytes(range(256)) * 12]  # 3 KiB: above gitobj.STORE_BELOW_BYTES, so it is compressed


def _loose_sha(path: str) -> str | None:
    """The sha of the loose object being written at ``path`` (None when not one)."""
    try:
        with open(path, "rb") as f:
            raw = zlib.decompress(f.read())
    except (OSError, zlib.error):
        return None
    return hashlib.sha1(raw).hexdigest()


def _die() -> None:
    os.kill(os.getpid(), signal.SIGKILL)
    time.sleep(10)  # not reached


class Child:
    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.pid = os.getpid()
        self.rng = random.Random(args.seed)
        self.hits = 0
        self.phase_fd = (
            os.open(args.phases, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
            if args.phases
            else None
        )
        self.errors = 0

    # -- markers and crash points -----------------------------------------------------------

    def mark(self, text: str) -> None:
        if self.phase_fd is not None and os.getpid() == self.pid:
            os.write(self.phase_fd, text.encode() + b"\n")

    def point(self, name: str) -> None:
        if self.args.crash_at == name:
            self.hits += 1
            if self.hits >= self.args.crash_after:
                self.mark(f"crash {name}")
                _die()

    def out(self, text: str) -> None:
        os.write(1, text.encode())

    def instrument(self) -> None:
        """Wrap the store's phases with markers and crash points (module attributes, so the
        store's own calls go through the wrappers)."""
        child = self

        real_write = GitStore._write_objects

        def write_objects(store, objects, *, batch, **rest):  # type: ignore[no-untyped-def]
            child.mark("write+")
            real_write(store, objects, batch=batch, **rest)
            child.mark("write-")

        real_cas = GitStore._compare_and_swap

        def compare_and_swap(store, expected, new, *rest):  # type: ignore[no-untyped-def]
            child.point("before_cas")
            child.mark("cas+")
            ok = real_cas(store, expected, new, *rest)
            child.mark("cas-")
            if ok:
                child.point("after_cas")
            return ok

        real_pack_loose = packing.pack_loose

        def pack_loose(store, **kwargs):  # type: ignore[no-untyped-def]
            child.mark("pack+")
            n = real_pack_loose(store, **kwargs)
            child.mark("pack-")
            return n

        real_merge = packing.merge_packs

        def merge_packs(store, *, force=False):  # type: ignore[no-untyped-def]
            child.mark("merge+")
            n = real_merge(store, force=force)
            child.mark("merge-")
            return n

        real_write_pack = packing.write_pack

        def write_pack(pack_dir, objects, **kwargs):  # type: ignore[no-untyped-def]
            base = real_write_pack(pack_dir, objects, **kwargs)
            child.point("after_pack_write")
            return base

        real_unlink = os.unlink
        deleted = [0]

        def unlink(path, *args, **kwargs):  # type: ignore[no-untyped-def]
            # packing deletes the loose copies of packed objects one file at a time, and a
            # merge the merged-away packs (index, then data)
            real_unlink(path, *args, **kwargs)
            name = os.fsdecode(path)
            parent = os.path.dirname(name)
            if os.path.basename(os.path.dirname(parent)) == "objects" and (
                len(os.path.basename(parent)) == 2
            ):
                deleted[0] += 1
                if deleted[0] % 5 == 0:
                    child.point("mid_loose_delete")
            elif name.endswith(".pack") and os.path.basename(parent) == "pack":
                child.point("mid_merge")

        real_replace = os.replace
        match = self.args.crash_match

        def replace(src, dst, **kwargs):  # type: ignore[no-untyped-def]
            # Files are written and fsynced before they are renamed into place, so a kill here
            # leaves the temporary/lock file behind, whatever names the store uses for it.
            if self.args.crash_at in ("in_ref_lock", "in_loose_write"):
                name = os.fsdecode(src)
                parent = os.path.dirname(os.fsdecode(dst))
                # the ref's lock is renamed by path, or by name inside the ref's directory
                # held open (``src_dir_fd``)
                if name.endswith(os.path.join("refs", "heads", "ledger.lock")) or (
                    name == "ledger.lock" and kwargs.get("src_dir_fd") is not None
                ):
                    child.point("in_ref_lock")
                elif os.path.basename(os.path.dirname(parent)) == "objects" and (
                    len(os.path.basename(parent)) == 2
                ):
                    sha = _loose_sha(name)
                    if sha is not None and (match is None or sha.startswith(match)):
                        child.point("in_loose_write")
            real_replace(src, dst, **kwargs)

        if self.args.cas_delay:
            # hold the ref's lock a little longer (new value written, not yet flushed or
            # renamed), so that a kill aimed at the compare-and-swap lands inside it
            real_lock_ref = store_module.lock_ref

            def lock_ref(*args, **kwargs):  # type: ignore[no-untyped-def]
                held = real_lock_ref(*args, **kwargs)
                time.sleep(self.args.cas_delay)
                return held

            store_module.lock_ref = lock_ref

        GitStore._write_objects = write_objects  # type: ignore[method-assign]
        GitStore._compare_and_swap = compare_and_swap  # type: ignore[method-assign]
        packing.pack_loose = pack_loose
        packing.merge_packs = merge_packs
        packing.write_pack = write_pack
        os.unlink = unlink
        os.replace = replace

    # -- drafts ------------------------------------------------------------------------------

    def artifacts(self) -> dict[str, Artifact]:
        rng = self.rng
        arts: dict[str, Artifact] = {}
        for i in range(rng.randint(1, 2)):
            if rng.random() < 0.6:
                data = rng.choice(SHARED_ARTIFACTS)
            else:
                data = rng.randbytes(rng.choice([40, 700, 3000]))
            arts[f"art{i}.bin"] = Artifact(data, "application/octet-stream")
        return arts

    def draft(self, n: int, *, with_artifacts: bool) -> EventDraft:
        key = f"{self.args.tag}-{n}" if self.rng.random() < 0.3 else None
        return EventDraft(
            "NoteRecorded",
            {"text": f"{self.args.tag} note {n}", "tags": ["crash", self.args.tag]},
            actor="crash-writer",
            idempotency_key=key,
            artifacts=self.artifacts() if with_artifacts else {},
        )

    # -- main loop ---------------------------------------------------------------------------

    def run(self) -> int:
        args = self.args
        if args.threshold:
            packing.LOOSE_PACK_THRESHOLD = args.threshold
        self.instrument()
        self.mark("open+")
        ledger = Ledger.open(args.ledger)
        self.mark("open-")
        self.out(f"ready {ledger.head()}\n")
        n = 0
        calls = 0
        while args.max_appends is None or calls < args.max_appends:
            if args.stop_file and os.path.exists(args.stop_file):
                break
            calls += 1
            r = self.rng.random()
            self.mark(f"pre {ledger.head()}")
            self.mark("append+")
            try:
                if r < 0.45:
                    with_arts = self.rng.random() < 0.3
                    d = self.draft(n, with_artifacts=with_arts)
                    n += 1
                    env = ledger.append(
                        d.kind,
                        d.payload,
                        actor=d.actor,
                        idempotency_key=d.idempotency_key,
                        artifacts=d.artifacts,
                    )
                    ids = [env.id]
                elif r < 0.75:
                    drafts = []
                    for _ in range(self.rng.randint(8, 12)):
                        drafts.append(self.draft(n, with_artifacts=self.rng.random() < 0.3))
                        n += 1
                    ids = [e.id for e in ledger.append_batch(drafts)]
                else:
                    d = self.draft(n, with_artifacts=True)
                    n += 1
                    env = ledger.append(
                        d.kind,
                        d.payload,
                        actor=d.actor,
                        idempotency_key=d.idempotency_key,
                        artifacts=d.artifacts,
                    )
                    ids = [env.id]
            except Exception as exc:  # reported to the parent, which fails
                self.mark("append!")
                self.errors += 1
                msg = " ".join(str(exc).split())
                self.out(f"ERR {type(exc).__module__}.{type(exc).__name__} {msg}\n")
                traceback.print_exc()
                if self.errors >= 20:
                    return 3
                time.sleep(0.05)
                continue
            self.out("".join(f"{i}\n" for i in ids))
            self.mark("append-")
            if args.pause:
                time.sleep(args.pause)
        self.out("done\n")
        ledger.close()
        return 0


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("ledger")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--tag", default="w")
    p.add_argument("--threshold", type=int, default=30, help="LOOSE_PACK_THRESHOLD (0: keep)")
    p.add_argument("--phases")
    p.add_argument("--crash-at")
    p.add_argument("--crash-after", type=int, default=1)
    p.add_argument("--crash-match")
    p.add_argument("--max-appends", type=int)
    p.add_argument("--stop-file")
    p.add_argument("--pause", type=float, default=0.0)
    p.add_argument("--cas-delay", type=float, default=0.0, help="seconds the ref lock is held")
    return Child(p.parse_args()).run()


if __name__ == "__main__":
    sys.exit(main())
