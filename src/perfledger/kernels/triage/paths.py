"""The user's known optimization paths: a small TOML file of kernel-name patterns and routes.

```toml
[[path]]
pattern = "sgemm|xmma_gemm"       # a regular expression (re.search) unless syntax = "glob"
route = "cuBLASLt algorithm search / TF32 via torch.backends.cuda.matmul.allow_tf32"
notes = "try before writing a new GEMM"
syntax = "regex"                   # optional: "regex" (default) or "glob" (whole name, fnmatch)
```

Paths are tried in file order; the first that matches a kernel is its route. A file that does
not read, has an unknown key, a missing or empty field or a pattern that does not compile is
refused naming the file and the field (``BadRequest``, exit 2).
"""

from __future__ import annotations

import fnmatch
import re
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Literal

import msgspec

from perfledger.errors import BadRequest

#: Largest known-path file read (bytes).
MAX_FILE_BYTES = 1024 * 1024

_NonEmpty = Annotated[str, msgspec.Meta(min_length=1, max_length=2000)]


#: The hint of this module's bad requests: what input it expects and how to produce it.
_HINT = "the known-path file is UTF-8 TOML of kernel-name patterns and routes (docs/triage.md shows one)"


class _PathEntry(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    pattern: _NonEmpty
    route: _NonEmpty
    notes: Annotated[str, msgspec.Meta(max_length=20_000)] = ""
    syntax: Literal["regex", "glob"] = "regex"


class _PathFile(msgspec.Struct, forbid_unknown_fields=True):
    path: Annotated[list[_PathEntry], msgspec.Meta(min_length=1, max_length=10_000)]


@dataclass(frozen=True)
class KnownPath:
    """One known optimization route for the kernels a pattern names.

    Attributes:
        index: its position in the file (0-based), the order paths are tried in.
        pattern: the pattern as written.
        syntax: ``regex`` (``re.search`` on the kernel name) or ``glob`` (whole name).
        route: the route to try.
        notes: free text.
    """

    index: int
    pattern: str
    syntax: str
    route: str
    notes: str
    _regex: re.Pattern[str]

    def matches(self, kernel: str) -> bool:
        """True when the kernel name ``kernel`` is one this path names."""
        return self._regex.search(kernel) is not None


def parse_known_paths(text: str, *, source: str) -> list[KnownPath]:
    """Parse a known-path file's TOML text.

    Args:
        text: the file's content.
        source: its name, for messages.
    Returns: the paths in file order.
    Raises: BadRequest naming ``source`` and the field, for invalid TOML, an unknown key, a
        missing or empty ``pattern``/``route``, an unknown ``syntax`` or a regex that does not
        compile.
    """
    try:
        raw = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise BadRequest(f"{source}: not valid TOML ({exc})", hint=_HINT) from None
    try:
        entries = msgspec.convert(raw, _PathFile).path
    except msgspec.ValidationError as exc:
        # msgspec names the field as `$.path[1].route`
        raise BadRequest(
            f"{source}: {exc}",
            hint='each [[path]] needs pattern = "..." and route = "..."; optional notes, '
            'syntax = "regex" | "glob"',
        ) from None
    out = []
    for index, entry in enumerate(entries):
        expression = fnmatch.translate(entry.pattern) if entry.syntax == "glob" else entry.pattern
        try:
            compiled = re.compile(expression)
        except re.error as exc:
            raise BadRequest(
                f"{source}: path[{index}].pattern {entry.pattern!r} is not a valid regular "
                f"expression ({exc})",
                hint='a glob needs syntax = "glob"',
            ) from None
        out.append(
            KnownPath(index, entry.pattern, entry.syntax, entry.route, entry.notes, compiled)
        )
    return out


def load_known_paths(path: str | Path) -> tuple[list[KnownPath], bytes]:
    """Read and parse a known-path file.

    Returns: the paths and the file's bytes (recorded with the triage).
    Raises: BadRequest for a file that cannot be read, is too large or is not UTF-8, and
        those of :func:`parse_known_paths`.
    """
    try:
        with open(path, "rb") as handle:
            data = handle.read(MAX_FILE_BYTES + 1)
    except OSError as exc:
        raise BadRequest(
            f"cannot read the known-path file {str(path)!r}: {exc.strerror}", hint=_HINT
        ) from None
    if len(data) > MAX_FILE_BYTES:
        raise BadRequest(f"{path}: larger than {MAX_FILE_BYTES} bytes", hint=_HINT)
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        raise BadRequest(f"{path}: not UTF-8 text", hint=_HINT) from None
    return parse_known_paths(text, source=str(path)), data
