"""A FUSE filesystem that loses what was not fsynced when it "crashes" (Jepsen's LazyFS as the model).

Run as a process: ``python lazyfs.py BACKING MOUNTPOINT``. At mount it loads the tree under
``BACKING`` (the durable state of the last crash or clean unmount) into memory; every change then
lives in an *unsynced* layer until it is made durable:

- a file's content (data, size) becomes durable by ``fsync``/``fdatasync`` of that file;
- a directory's entries (creates, renames, unlinks, hard links, mkdirs, rmdirs into or out of it)
  become durable by ``fsync`` of that directory. A file renamed into place without a file fsync
  keeps its old (often empty) durable content: the classic zero-length-file-after-crash.

Control: writing a command to the virtual file ``/.lazyfs`` in the mount (hidden from listings):

- ``crash`` or ``crash SEED FRACTION``: power loss. The durable state is written to ``BACKING``
  (with ``FRACTION`` > 0, each file or directory with unsynced changes had them written back
  anyway with that probability, a file's data possibly only a prefix: the kernel's writeback that
  happened to run before the power went), and every later operation fails with ``EIO``. The
  caller then kills the processes using the mount and unmounts it (``fusermount3 -u -z``).
- ``fault ENOSPC|EROFS|EACCES [PREFIX]``: every later operation that would change the tree
  fails so (opening for write included), or with ``PREFIX`` only creating or opening for write
  a file whose name starts with it; ``fault none`` ends it. Reads keep working.
- ``sync``: everything becomes durable (``sync(1)``).

A clean unmount makes everything durable (as ``umount`` does) unless it follows a crash. Hard
links stay one inode across a crash and a remount, and ``stat`` shows each inode's own number
(``use_ino``), so code that compares two names' inodes works here as on a real filesystem.
Everything is in memory: the ledgers of the tests are a few MB. One thread serves every request
(``-s``), so each operation is atomic with respect to the others.
"""

from __future__ import annotations

import errno
import os
import random
import shutil
import stat
import sys
import time
from typing import Any

CONTROL = "/.lazyfs"
_CONTROL_FH = 1 << 40


class Node:
    """One inode: a file (``data``), a directory (``entries``) or a symlink (``target``), each
    with its live value and the durable one the next crash keeps."""

    def __init__(self, mode: int) -> None:
        self.mode = mode
        self.ino = Node.next_ino = getattr(Node, "next_ino", 1) + 1
        self.data = bytearray()
        self.durable_data = b""
        self.entries: dict[str, Node] = {}
        self.durable_entries: dict[str, Node] = {}
        self.target = ""
        self.nlink = 0
        self.mtime_ns = self.ctime_ns = time.time_ns()

    @property
    def is_dir(self) -> bool:
        return stat.S_ISDIR(self.mode)

    def dirty(self) -> bool:
        """Whether this node has changes that a crash would lose."""
        if self.is_dir:
            return self.entries != self.durable_entries
        return bytes(self.data) != self.durable_data

    def make_durable(self, prefix_of: int | None = None) -> None:
        """Make the live state durable (only its first ``prefix_of`` bytes for a file)."""
        if self.is_dir:
            self.durable_entries = dict(self.entries)
        elif prefix_of is None:
            self.durable_data = bytes(self.data)
        else:
            self.durable_data = bytes(self.data[:prefix_of])


class LazyFS:
    """The mfusepy operations (path based; open files are tracked by handle, so that a file
    renamed or unlinked while open keeps working)."""

    use_ns = True

    def __init__(self, backing: str) -> None:
        self.backing = backing
        self._loaded: dict[tuple[int, int], Node] = {}  # a hard-linked file loads as one node
        self.root = self._load(backing)
        self.handles: dict[int, Node] = {}
        self.next_fh = 10
        self.dead = False
        self.fault: int | None = None
        self.fault_prefix = ""

    # -- loading and saving the durable state ----------------------------------------------------

    def _load(self, path: str) -> Node:
        st = os.lstat(path)
        if not stat.S_ISDIR(st.st_mode) and (st.st_dev, st.st_ino) in self._loaded:
            return self._loaded[st.st_dev, st.st_ino]
        node = Node(st.st_mode)
        if not stat.S_ISDIR(st.st_mode):
            self._loaded[st.st_dev, st.st_ino] = node
        if stat.S_ISDIR(st.st_mode):
            node.nlink = 2
            for name in os.listdir(path):
                child = self._load(os.path.join(path, name))
                child.nlink += 1
                node.entries[name] = child
        elif stat.S_ISLNK(st.st_mode):
            node.target = os.readlink(path)
        else:
            with open(path, "rb") as f:
                node.data = bytearray(f.read())
        node.make_durable()
        return node

    def _save(self) -> None:
        """Replace ``BACKING`` with the durable state (written beside it, then swapped)."""
        staging = self.backing.rstrip("/") + ".staging"
        shutil.rmtree(staging, ignore_errors=True)
        self._save_node(self.root, staging, {})
        old = self.backing.rstrip("/") + ".old"
        shutil.rmtree(old, ignore_errors=True)
        os.rename(self.backing, old)
        os.rename(staging, self.backing)
        shutil.rmtree(old, ignore_errors=True)

    def _save_node(self, node: Node, path: str, saved: dict[int, str]) -> None:
        # ``saved``: the path each file node was first saved at; its other names are hard links
        if node.is_dir:
            os.mkdir(path)
            for name, child in node.durable_entries.items():
                self._save_node(child, os.path.join(path, name), saved)
            os.chmod(path, stat.S_IMODE(node.mode))
            return
        if node.ino in saved:
            os.link(saved[node.ino], path)
            return
        saved[node.ino] = path
        if stat.S_ISLNK(node.mode):
            os.symlink(node.target, path)
        else:
            with open(path, "wb") as f:
                f.write(node.durable_data)
        if not stat.S_ISLNK(node.mode):
            os.chmod(path, stat.S_IMODE(node.mode))

    def _all_nodes(self) -> list[Node]:
        seen: dict[int, Node] = {}
        stack = [self.root, *self.handles.values()]
        while stack:
            node = stack.pop()
            if node.ino in seen:
                continue
            seen[node.ino] = node
            stack.extend(node.entries.values())
            stack.extend(node.durable_entries.values())
        return sorted(seen.values(), key=lambda n: n.ino)

    def _control(self, command: str) -> None:
        words = command.split()
        if not words:
            return
        if words[0] == "crash":
            if len(words) == 3:
                rng = random.Random(int(words[1]))
                fraction = float(words[2])
                for node in self._all_nodes():
                    if node.dirty() and rng.random() < fraction:
                        torn = not node.is_dir and rng.random() < 0.5
                        node.make_durable(rng.randint(0, len(node.data)) if torn else None)
            self._save()
            self.dead = True
        elif words[0] == "fault":
            self.fault = None if words[1] == "none" else getattr(errno, words[1])
            self.fault_prefix = words[2] if len(words) > 2 else ""
        elif words[0] == "sync":
            for node in self._all_nodes():
                node.make_durable()
        else:
            raise OSError(errno.EINVAL, "unknown lazyfs command")

    # -- helpers ---------------------------------------------------------------------------------

    def _check(self, mutating: bool = False, path: str | None = None) -> None:
        if self.dead:
            raise OSError(errno.EIO, "the power is off")
        name = os.path.basename(path or "")
        if mutating and self.fault is not None and name.startswith(self.fault_prefix):
            raise OSError(self.fault, os.strerror(self.fault))

    def _lookup(self, path: str) -> Node:
        node = self.root
        for part in path.strip("/").split("/"):
            if not part:
                continue
            if not node.is_dir:
                raise OSError(errno.ENOTDIR, "")
            child = node.entries.get(part)
            if child is None:
                raise OSError(errno.ENOENT, "")
            node = child
        return node

    def _parent(self, path: str) -> tuple[Node, str]:
        head, name = os.path.split(path.rstrip("/"))
        parent = self._lookup(head)
        if not parent.is_dir:
            raise OSError(errno.ENOTDIR, "")
        return parent, name

    def _handle(self, node: Node) -> int:
        self.next_fh += 1
        self.handles[self.next_fh] = node
        return self.next_fh

    def _node(self, path: str | None, fh: int | None) -> Node:
        if fh is not None and fh in self.handles:
            return self.handles[fh]
        assert path is not None
        return self._lookup(path)

    @staticmethod
    def _touch(*nodes: Node) -> None:
        now = time.time_ns()
        for node in nodes:
            node.mtime_ns = node.ctime_ns = now

    # -- operations ------------------------------------------------------------------------------

    def getattr(self, path: str, fh: int | None = None) -> dict[str, Any]:
        if path == CONTROL:
            return {"st_mode": stat.S_IFREG | 0o666, "st_nlink": 1, "st_size": 0}
        self._check()
        node = self._node(path, fh)
        size = len(node.data) if not node.is_dir else 4096
        if stat.S_ISLNK(node.mode):
            size = len(node.target)
        return {
            "st_mode": node.mode,
            "st_ino": node.ino,
            "st_nlink": max(node.nlink, 1),
            "st_size": size,
            "st_blocks": (size + 511) // 512,
            "st_uid": os.getuid(),
            "st_gid": os.getgid(),
            "st_atime": node.mtime_ns,
            "st_mtime": node.mtime_ns,
            "st_ctime": node.ctime_ns,
        }

    def access(self, path: str, amode: int) -> int:
        self._check()
        self._lookup(path)
        return 0

    def statfs(self, path: str) -> dict[str, int]:
        return {"f_bsize": 4096, "f_frsize": 4096, "f_blocks": 1 << 20, "f_bfree": 1 << 19,
                "f_bavail": 1 << 19, "f_files": 1 << 20, "f_ffree": 1 << 19, "f_namemax": 255}  # fmt: skip

    def readdir(self, path: str, fh: int) -> list[tuple[str, dict[str, int], int]]:
        self._check()
        node = self._node(path, fh)
        # with use_ino an entry needs its inode number: glibc skips entries of inode 0
        return [
            (name, {"st_mode": child.mode, "st_ino": child.ino}, 0)
            for name, child in [(".", node), ("..", node), *node.entries.items()]
        ]

    def opendir(self, path: str) -> int:
        self._check()
        return self._handle(self._lookup(path))

    def releasedir(self, path: str | None, fh: int) -> int:
        self.handles.pop(fh, None)
        return 0

    def fsyncdir(self, path: str | None, datasync: int, fh: int) -> int:
        self._check()
        self._node(path, fh).make_durable()
        return 0

    def readlink(self, path: str) -> str:
        self._check()
        return self._lookup(path).target

    def open(self, path: str, flags: int) -> int:
        if path == CONTROL:
            return _CONTROL_FH
        writing = flags & (os.O_WRONLY | os.O_RDWR | os.O_TRUNC) != 0
        self._check(mutating=writing, path=path)
        node = self._lookup(path)
        if flags & os.O_TRUNC:
            node.data = bytearray()
            self._touch(node)
        return self._handle(node)

    def create(self, path: str, mode: int, flags: int = 0) -> int:
        if path == CONTROL:
            return _CONTROL_FH
        self._check(mutating=True, path=path)
        parent, name = self._parent(path)
        node = parent.entries.get(name)
        if node is not None:
            if flags & os.O_EXCL:
                raise OSError(errno.EEXIST, "")
            if flags & os.O_TRUNC:
                node.data = bytearray()
        else:
            node = Node(stat.S_IFREG | stat.S_IMODE(mode))
            node.nlink = 1
            parent.entries[name] = node
            self._touch(parent)
        return self._handle(node)

    def read(self, path: str | None, size: int, offset: int, fh: int) -> bytes:
        if fh == _CONTROL_FH:
            return b""
        self._check()
        return bytes(self._node(path, fh).data[offset : offset + size])

    def write(self, path: str | None, data: bytes, offset: int, fh: int) -> int:
        if fh == _CONTROL_FH:
            self._control(data.decode())
            return len(data)
        self._check(mutating=True)
        node = self._node(path, fh)
        if offset > len(node.data):
            node.data.extend(b"\0" * (offset - len(node.data)))
        node.data[offset : offset + len(data)] = data
        self._touch(node)
        return len(data)

    def truncate(self, path: str | None, length: int, fh: int | None = None) -> int:
        if path == CONTROL or fh == _CONTROL_FH:
            return 0
        self._check(mutating=True)
        node = self._node(path, fh)
        del node.data[length:]
        node.data.extend(b"\0" * (length - len(node.data)))
        self._touch(node)
        return 0

    def fallocate(self, path: str | None, mode: int, offset: int, size: int, fh: int) -> int:
        self._check(mutating=True)
        node = self._node(path, fh)
        if offset + size > len(node.data) and not mode:
            node.data.extend(b"\0" * (offset + size - len(node.data)))
        return 0

    def flush(self, path: str | None, fh: int) -> int:
        return 0

    def release(self, path: str | None, fh: int) -> int:
        self.handles.pop(fh, None)
        return 0

    def fsync(self, path: str | None, datasync: int, fh: int) -> int:
        if fh == _CONTROL_FH:
            return 0
        self._check()
        self._node(path, fh).make_durable()
        return 0

    def mkdir(self, path: str, mode: int) -> int:
        self._check(mutating=True)
        parent, name = self._parent(path)
        if name in parent.entries:
            raise OSError(errno.EEXIST, "")
        node = Node(stat.S_IFDIR | stat.S_IMODE(mode))
        node.nlink = 2
        parent.entries[name] = node
        self._touch(parent)
        return 0

    def rmdir(self, path: str) -> int:
        self._check(mutating=True)
        parent, name = self._parent(path)
        node = self._lookup(path)
        if not node.is_dir:
            raise OSError(errno.ENOTDIR, "")
        if node.entries:
            raise OSError(errno.ENOTEMPTY, "")
        del parent.entries[name]
        self._touch(parent)
        return 0

    def unlink(self, path: str) -> int:
        self._check(mutating=True)
        parent, name = self._parent(path)
        node = self._lookup(path)
        if node.is_dir:
            raise OSError(errno.EISDIR, "")
        del parent.entries[name]
        node.nlink -= 1
        self._touch(parent, node)
        return 0

    def symlink(self, target: str, source: str) -> int:
        self._check(mutating=True)
        parent, name = self._parent(target)
        if name in parent.entries:
            raise OSError(errno.EEXIST, "")
        node = Node(stat.S_IFLNK | 0o777)
        node.target = source
        node.nlink = 1
        parent.entries[name] = node
        self._touch(parent)
        return 0

    def link(self, target: str, source: str) -> int:
        self._check(mutating=True)
        node = self._lookup(source)
        parent, name = self._parent(target)
        if name in parent.entries:
            raise OSError(errno.EEXIST, "")
        parent.entries[name] = node
        node.nlink += 1
        self._touch(parent, node)
        return 0

    def rename(self, old: str, new: str) -> int:
        self._check(mutating=True)
        old_parent, old_name = self._parent(old)
        node = self._lookup(old)
        new_parent, new_name = self._parent(new)
        replaced = new_parent.entries.get(new_name)
        if replaced is node:
            return 0
        if replaced is not None:
            if replaced.is_dir and replaced.entries:
                raise OSError(errno.ENOTEMPTY, "")
            replaced.nlink -= 1
        del old_parent.entries[old_name]
        new_parent.entries[new_name] = node
        self._touch(old_parent, new_parent)
        return 0

    def chmod(self, path: str, mode: int) -> int:
        self._check(mutating=True)
        node = self._lookup(path)
        node.mode = stat.S_IFMT(node.mode) | stat.S_IMODE(mode)
        return 0

    def chown(self, path: str, uid: int, gid: int) -> int:
        self._check(mutating=True)
        return 0

    def utimens(self, path: str, times: tuple[int, int] | None = None) -> int:
        self._check(mutating=True)
        node = self._lookup(path)
        node.mtime_ns = times[1] if times else time.time_ns()
        return 0

    def destroy(self, path: str) -> None:
        """A clean unmount writes everything back (unless the power already went)."""
        if not self.dead:
            for node in self._all_nodes():
                node.make_durable()
            self._save()


def main() -> None:
    """Mount ``argv[2]`` over the durable state in ``argv[1]`` until unmounted."""
    import mfusepy

    backing, mountpoint = sys.argv[1], sys.argv[2]
    mfusepy.FUSE(
        LazyFS(os.path.abspath(backing)),
        mountpoint,
        foreground=True,
        nothreads=True,
        hard_remove=True,  # an unlinked open file stays a handle, not a .fuse_hidden entry
        use_ino=True,  # stat shows a node's own inode number: hard links compare equal
        attr_timeout=0,
        entry_timeout=0,
        negative_timeout=0,
        fsname="lazyfs",
    )


if __name__ == "__main__":
    main()
