"""The raw page of an Nsight Compute CSV export (``ncu --csv --page raw``), read with pyarrow.

The page is the 11 launch columns (8 in the older layout) and one column per metric, a units row,
then one row per profiled launch. Its launch rows are read in chunks of about
:data:`CHUNK_BYTES` whole lines (memory bounded by the chunk, not by the file), each chunk
tokenised by pyarrow's CSV reader (C++, in a second thread, one chunk ahead) and checked and
converted column-wise with ``pyarrow.compute`` and numpy; the per-kernel statistics are running
numpy arrays.

Strictness (R6), exactly as the standard library's ``csv`` module with ``strict=True`` reads the
file, on every path:

- *Tokenising.* pyarrow's reader is lenient where ``csv`` is strict (``"12"5`` is read as
  ``125``; a field may follow its closing quote). A chunk is therefore handed to pyarrow only when
  every line in it is *simple*: ``"f1","f2",...,"fW"`` with ``W`` fields and no quote inside a
  field (what ncu writes), checked by :func:`arrow_fields` with byte counts that pyarrow's own
  result completes (see there for the proof). Any other chunk, and everything after it, is read
  by ``csv.reader(strict=True)`` record by record (an escaped quote, an embedded newline, a short
  or long row, a ``==PROF==`` line inside the table); both give the same fields, and the rest of
  this module does not know which one did.
- *Values.* Each metric cell is a number (:data:`PLAIN`, or :data:`GROUPED` with
  ``grouping="en_US"``; finite), a missing value (``no data``, ``n/a``), a text value (only in the
  unitless :data:`~perfledger.kernels.profilers.ncu_csv.TEXT_METRICS`) or an error. Columns that have
  held only numbers so far are converted together by one ``pc.cast`` to float64 (pyarrow's parser
  accepts a superset of :data:`PLAIN`: a leading ``+`` and non-finite spellings, both refused
  here); a column whose cells are not all plain numbers is classified cell by cell with RE2
  patterns from then on.
- *Launch columns.* ID (decimal digits, never twice), non-empty kernel name, stream, block and
  grid shapes, CC: the patterns of :mod:`~perfledger.kernels.profilers.ncu`.
- *Errors* name the first bad launch row in file order and, for a value, its metric (the
  messages of :func:`~perfledger.kernels.profilers.ncu_csv.metric_value`).

Statistics per kernel and metric (R6: in base units): launches with a number (``count``), their
sum (``total``, added in file order, so bit-identical to adding row by row), ``minimum`` and
``maximum`` (Python's ``min``/``max``: the first of equal values, so ``-0.0`` vs ``0.0`` follows
file order) and ``missing``. A metric appears for a kernel when at least one of its cells was a
number or missing; a text value becomes the attribute ``"<kernel>/<metric>"`` (the first one).
"""

from __future__ import annotations

import csv
import itertools
import re
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import NamedTuple

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pacsv

from perfledger.errors import EvidenceError
from perfledger.kernels.profilers.common import MetricStat, ProfileReport, base_unit
from perfledger.kernels.profilers.ncu_csv import (
    RAW_PREFIX,
    RAW_PREFIX_OLD,
    TABLE_NOISE,
    TEXT_METRICS,
    LineReader,
    duplicated_header,
    metric_value,
    note_compute_capability,
    one_row,
    preamble,
    table_lines,
)

#: Bytes of whole lines read, checked and tokenised at a time (the page's memory bound).
CHUNK_BYTES = 4 << 20
#: The widest page pyarrow tokenises: its reader costs about 5 KB per column whatever the rows
#: (a 1 MiB header of 60,000 columns took 290 MiB); a wider page is read by the csv module.
ARROW_MAX_COLUMNS = 8_192
#: Records per batch on the ``csv`` module's path.
EXACT_ROWS = 512
#: A plain number, as RE2 (ASCII digits): no sign '+', grouping, spaces, underscores, nan, inf.
PLAIN = r"^-?(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][-+]?[0-9]+)?$"
#: The only digit grouping accepted (``grouping="en_US"``): ``1,234.5``.
GROUPED = r"^-?[0-9]{1,3}(?:,[0-9]{3})+(?:\.[0-9]+)?$"
_DIGITS = r"^[0-9]+$"
_PLAIN = re.compile(PLAIN[1:-1])
_SHAPE = re.compile(r"\([0-9]+, [0-9]+, [0-9]+\)")
_INT = re.compile(r"[0-9]+")
_CC = re.compile(r"[0-9]+\.[0-9]+")
_QUOTE, _NEWLINE, _CR = 34, 10, 13
_MISSING = pa.array(["no data", "n/a", "N/A"])  # ncu_csv.MISSING: no value, recorded as missing


#: The hint of this module's bad requests: what input it expects and how to produce it.
_HINT = "pass the raw page of an Nsight Compute CSV export unchanged (`ncu --csv --print-units base --page raw`), or let `perfledger evidence ncu -- CMD` capture a report (docs/profilers.md)"


class _Cells(NamedTuple):
    """A careful metric column of a batch, classified cell by cell (numpy masks over rows)."""

    texts: pa.Array  # the cells as strings
    values: np.ndarray  # in the base unit; NaN where not a number
    number: np.ndarray
    missing: np.ndarray
    text: np.ndarray  # a text value (only for TEXT_METRICS)
    bad: np.ndarray  # refused


class _NotSimple(Exception):
    """A chunk that pyarrow tokenised is not made of simple lines after all (a field holds a
    quote or starts with a comma): it is read again by the csv module."""


def arrow_fields(chunk: bytes, width: int) -> pa.Array | None:
    """Tokenise ``chunk`` (whole lines; the last may lack its newline at the end of the file)
    with pyarrow when every line is simple; return its fields as one binary array, column after
    column (``width`` columns of one value per line), or None.

    A line is simple when it is ``"f1","f2",...,"fW"`` then ``\\n`` or ``\\r\\n``, no field
    holding a quote; then every CSV reader gives the fields between the quotes. Checked here:
    pyarrow reads one row of ``width`` fields per line (it raises otherwise); the chunk's length
    is the fields' bytes plus ``3 * width - 1`` per line plus the line ends; it holds
    ``width - 1`` quote-comma pairs per line and a quote before every line end. Checked by the
    caller (:meth:`RawPage._batch`) on the fields it does not convert as numbers: none holds a
    quote or starts with a comma. Proof: pyarrow reads a field whose value holds no quote from
    its raw text plus 0 (unquoted) or 2 quotes (a quoted field, also one followed by stray text,
    which pyarrow appends to the value where the csv module refuses it), so the length makes
    every field quoted; every quote then opens or closes a field, and a quote-comma pair is a
    closing quote directly followed by its delimiter (an opening one would start a value with a
    comma), so ``width - 1`` pairs per line and a quote before each line end leave no stray text
    after any field."""
    fields = arrow_read(chunk, width)
    return fields if fields is not None and simple_lines(chunk, fields, width) else None


def arrow_read(chunk: bytes, width: int) -> pa.Array | None:
    """pyarrow's reading of ``chunk`` as ``width`` binary columns, joined column after column
    (None when pyarrow refuses it, e.g. a row with another number of fields). Lenient: only
    :func:`simple_lines` makes its fields the csv module's.

    None, without pyarrow, when the bytes alone show the chunk is not simple lines: a line that
    does not end in a quote (a blank line) or one with another count of quote-comma pairs.
    pyarrow gives a blank line ``width`` empty fields, so a page of newlines cost kilobytes of
    memory per input byte (a header and 17,000 blank lines: 287 MiB); the csv module's path
    then reads such a chunk record by record, in memory proportional to its bytes."""
    size = len(chunk)
    if width > ARROW_MAX_COLUMNS or size < 2 or chunk[0] != _QUOTE:
        return None
    if not _may_be_simple(chunk, width):
        return None
    names = [str(i) for i in range(width)]
    try:
        table = pacsv.read_csv(
            pa.py_buffer(chunk),
            read_options=pacsv.ReadOptions(
                column_names=names, use_threads=False, block_size=size + 1
            ),
            parse_options=pacsv.ParseOptions(newlines_in_values=False, ignore_empty_lines=False),
            convert_options=pacsv.ConvertOptions(
                column_types=dict.fromkeys(names, pa.binary()),
                check_utf8=False,
                strings_can_be_null=False,
                quoted_strings_can_be_null=False,
                null_values=[],
            ),
        )
    except pa.ArrowInvalid:
        return None
    return pa.concat_arrays([c.chunk(0) if c.num_chunks == 1 else c.combine_chunks()
                             for c in table.columns])  # fmt: skip


def simple_lines(chunk: bytes, fields: pa.Array, width: int) -> bool:
    """Whether :func:`arrow_read`'s ``fields`` of ``chunk`` come from simple lines (the byte
    checks of :func:`arrow_fields`)."""
    size, rows = len(chunk), len(fields) // width
    whole = chunk.endswith(b"\n")
    newlines = rows if whole else rows - 1
    if not whole and chunk[-1] != _QUOTE:
        return False
    returns = 0
    if b"\r" in chunk:  # only as "\r\n, after a quote
        data = np.frombuffer(chunk, dtype=np.uint8)
        at = np.flatnonzero(data == _CR)
        if at[-1] + 1 >= size or not ((data[at - 1] == _QUOTE) & (data[at + 1] == _NEWLINE)).all():
            return False
        returns = len(at)
    if _pairs(chunk, 0x0A22) + returns != newlines:  # '"\n' (and '"\r\n')
        return False
    if _pairs(chunk, 0x2C22) != (width - 1) * rows:  # '",'
        return False
    offsets = np.frombuffer(fields.buffers()[1], dtype=np.int32)
    value_bytes = int(offsets[fields.offset + len(fields)] - offsets[fields.offset])
    return size == value_bytes + rows * (3 * width - 1) + newlines + returns


def _may_be_simple(chunk: bytes, width: int) -> bool:
    """Necessary for :func:`simple_lines`, from the bytes alone: every line ends in a quote and
    holds ``width - 1`` quote-comma pairs (cheap: two counts over the chunk)."""
    lines = chunk.count(b"\n") + (0 if chunk.endswith(b"\n") else 1)
    ends = _pairs(chunk, 0x0A22) + chunk.count(b'"\r\n') + (0 if chunk.endswith(b"\n") else 1)
    return ends == lines and _pairs(chunk, 0x2C22) == (width - 1) * lines


def _pairs(chunk: bytes, pair: int) -> int:
    """How often the two bytes ``pair`` (little-endian: first byte in the low bits) occur in
    ``chunk`` (the pairs searched cannot overlap: their two bytes differ)."""
    even = np.frombuffer(chunk, dtype="<u2", count=len(chunk) // 2)
    odd = np.frombuffer(chunk, dtype="<u2", count=(len(chunk) - 1) // 2, offset=1)
    return int(np.count_nonzero(even == pair)) + int(np.count_nonzero(odd == pair))


class _Kernel:
    """Running statistics of one kernel's metric columns (numpy arrays, one entry per metric)."""

    def __init__(self, width: int) -> None:
        self.count = np.zeros(width, dtype=np.int64)
        self.missing = np.zeros(width, dtype=np.int64)
        self.total = np.zeros(width)
        self.minimum = np.full(width, np.inf)
        self.maximum = np.full(width, -np.inf)

    def add_numbers(self, columns: np.ndarray, values: np.ndarray) -> None:
        """Add launch rows, in file order, of the metric ``columns`` where every cell is a
        number. ``values``: rows x columns in base units, C-ordered, used as scratch.

        The total is ``np.add.reduce`` over axis 0 of a C-ordered array, which numpy computes
        row after row (pairwise summation is only used along the contiguous axis), with the
        running total added to the first row: the additions of adding the values one by one
        (tests/profilers/test_ncu_raw.py checks it)."""
        self.count[columns] += len(values)
        self.minimum[columns] = _first_extreme(
            self.minimum[columns], values, values.min(axis=0), np.less
        )
        self.maximum[columns] = _first_extreme(
            self.maximum[columns], values, values.max(axis=0), np.greater
        )
        values[0] += self.total[columns]
        self.total[columns] = np.add.reduce(values, axis=0)

    def add_cells(self, i: int, values: np.ndarray, number: np.ndarray, missing: int) -> None:
        """Add launch rows, in file order, of metric column ``i`` classified cell by cell:
        ``values`` where ``number`` is True; ``missing`` cells without a value."""
        self.missing[i] += missing
        numbers = values[number]
        if not len(numbers):
            return
        self.count[i] += len(numbers)
        picked = numbers[:, None]
        self.minimum[i] = _first_extreme(
            self.minimum[i : i + 1], picked, numbers.min(keepdims=True), np.less
        )[0]
        self.maximum[i] = _first_extreme(
            self.maximum[i : i + 1], picked, numbers.max(keepdims=True), np.greater
        )[0]
        running = np.concatenate((self.total[i : i + 1], numbers))
        self.total[i] = np.add.accumulate(running)[-1]  # one by one, in file order


def _first_extreme(
    running: np.ndarray, values: np.ndarray, extreme: np.ndarray, better: np.ufunc
) -> np.ndarray:
    """Python's ``min``/``max`` over ``running`` then the rows of ``values``: the first of equal
    values is kept, so the sign of a zero extreme follows file order (numpy's ``min`` may return
    either zero)."""
    take = better(extreme, running)
    if not take.any():
        return running
    zero = np.flatnonzero(take & (extreme == 0.0))
    if len(zero):
        first = (values[:, zero] == 0.0).argmax(axis=0)
        extreme[zero] = values[first, zero]
    return np.where(take, extreme, running)


class RawPage:
    """Reads the raw page's units row and launch rows into a :class:`ProfileReport`.

    Args:
        metrics: the metric column names of the header (after the launch columns).
        old: the older layout (8 launch columns, no block, grid, device, CC).
        label: the source's name in messages.
        report: the report to fill (kernels, attributes).
        grouping: ``"none"`` or ``"en_US"`` (see :func:`~perfledger.kernels.profilers.ncu.parse_ncu_csv`).
        limitations: where ``==ERROR==`` lines met inside the table go (R16).
    """

    def __init__(
        self,
        metrics: tuple[str, ...],
        *,
        old: bool,
        label: str,
        report: ProfileReport,
        grouping: str,
        limitations: list[str],
    ) -> None:

        self.metrics = metrics
        self.old = old
        self.label = label
        #: the header line as read (a second one inside the table is named as such)
        self.header_line: str | None = None
        self.report = report
        self.grouping = grouping
        self.limitations = limitations
        self.prefix = 8 if old else 11
        self.width = self.prefix + len(metrics)
        self.text_ok = np.array([m in TEXT_METRICS for m in metrics])
        self.careful: set[int] = set()  # metric columns read cell by cell
        self.kernels: dict[str, _Kernel] = {}
        self.seen: set[int] = set()  # launch IDs so far
        self.n = 0  # launch rows accounted
        self.first = True  # the first launch row is yet to come

    def run(self, lines: LineReader) -> None:
        """Read the units row from ``lines``, then every launch row (the bytes ``lines`` has not
        consumed and the rest of its stream).

        Raises: EvidenceError for a missing or malformed units row, an unknown unit, a page
        without launch rows, or any launch row that is malformed (see the module docstring)."""

        units: list[str] | None = None
        for line in lines:
            if line.startswith(TABLE_NOISE):
                preamble(line.rstrip("\r\n"), self.limitations)
                continue
            units = one_row(line.rstrip("\r\n"), self.label, lines.lineno)
            break
        prefix, label = self.prefix, self.label
        if units is None or len(units) != self.width or any(units[:prefix]):
            raise EvidenceError(
                f"{label}: the raw page's units row is missing or malformed", hint=_HINT
            )
        bases = [
            base_unit(u, where=f"{label}: unit of {m}")
            for m, u in zip(self.metrics, units[prefix:], strict=True)
        ]
        self.units = units
        self.bases = [b for b, _ in bases]
        self.factors = np.array([f for _, f in bases])
        self.text_ok &= np.array([u == "" for u in units[prefix:]], dtype=bool)
        chunks = lines.chunks(CHUNK_BYTES)
        # pyarrow tokenises the next chunk in a second thread (it releases the GIL) while this
        # one checks and accounts the current one; the order of everything stays the file's
        with ThreadPoolExecutor(max_workers=1, thread_name_prefix="ncu-raw") as pool:
            chunk = next(chunks, None)
            future = pool.submit(arrow_read, chunk, self.width) if chunk is not None else None
            while chunk is not None and future is not None:
                fields = future.result()
                if fields is not None and not simple_lines(chunk, fields, self.width):
                    fields = None
                following = next(chunks, None) if fields is not None else None
                future = (
                    pool.submit(arrow_read, following, self.width)
                    if following is not None
                    else None
                )
                if fields is not None:
                    try:
                        self._batch(fields, simple=True, plus=b"+" in chunk)
                        chunk = following
                        continue
                    except _NotSimple:
                        pass
                rest = itertools.chain([chunk] if following is None else [chunk, following], chunks)
                for exact in self._exact(rest, lines):
                    self._batch(exact, simple=False, plus=True)
                break
        if self.n == 0:
            raise EvidenceError(
                f"{label}: the raw page has no launch rows (truncated?)", hint=_HINT
            )
        self._finish()

    # ------------------------------------------------------------------ tokenising

    def _exact(self, chunks: Iterator[bytes], lines: LineReader) -> Iterator[pa.Array]:
        """The csv module's records of the remaining chunks, in batches of
        :data:`EXACT_ROWS` (``==PROF==``-style lines skipped, ``==ERROR==`` kept)."""

        text = table_lines(lines.decoded(chunks), self.limitations, self.header_line, self.label)
        batch: list[list[str]] = []
        records = csv.reader(text, strict=True)
        while True:
            try:
                record = next(records, None)
            except csv.Error as exc:
                if batch:
                    yield _columns(batch, self.width)
                raise EvidenceError(
                    f"{self.label}: launch row {self.n + 1}: malformed CSV ({exc})", hint=_HINT
                ) from None
            if record is not None and len(record) == self.width:
                batch.append(record)
                if len(batch) >= EXACT_ROWS:
                    yield _columns(batch, self.width)
                    batch = []
                continue
            if batch:
                yield _columns(batch, self.width)
                batch = []
            if record is None:
                return
            raise EvidenceError(
                f"{self.label}: launch row {self.n + 1}: {len(record)} fields where "
                f"{self.width} were expected (a truncated or malformed file?)",
                hint=_HINT,
            )

    # ------------------------------------------------------------------ one batch

    def _batch(self, fields: pa.Array, *, simple: bool, plus: bool) -> None:
        """Check a batch of launch rows completely, then account it (nothing is accounted for a
        batch with an error). ``fields``: the batch's fields column after column (binary or
        string); ``simple``: pyarrow tokenised it (see :func:`arrow_fields`); ``plus``: a '+'
        may occur in it.

        Raises: EvidenceError naming the first bad row; _NotSimple (before anything is
        accounted) when a simple batch turns out not to be."""
        rows, prefix, width = len(fields) // self.width, self.prefix, len(self.metrics)
        fast, values = self._numbers(fields, rows, plus)
        careful = sorted(self.careful)
        joined, strings = self._strings(
            fields, rows, list(range(prefix)) + [prefix + i for i in careful]
        )
        if simple and (
            pc.any(pc.match_substring(joined, '"')).as_py()
            or pc.any(pc.starts_with(joined, ",")).as_py()
        ):
            raise _NotSimple  # see arrow_fields
        launch = strings[:prefix]
        cells = self._cells(careful, strings[prefix:])
        ids = self._check_launch(launch, cells)
        # checked: account the batch
        self.n += rows
        self.seen.update(ids.tolist())
        encoded = launch[4].dictionary_encode()
        codes = encoded.indices.to_numpy(zero_copy_only=False).astype(np.int64)
        names = encoded.dictionary.to_pylist()
        report = self.report
        for k, name in enumerate(names):
            picked = None if len(names) == 1 else np.flatnonzero(codes == k)
            report.kernel(name).launches += rows if picked is None else len(picked)
            agg = self.kernels.get(name)
            if agg is None:
                agg = self.kernels[name] = _Kernel(width)
            agg.add_numbers(fast, values if picked is None else values[picked])
            for i, c in cells.items():
                if picked is None:
                    agg.add_cells(i, c.values, c.number, int(np.count_nonzero(c.missing)))
                else:
                    agg.add_cells(
                        i, c.values[picked], c.number[picked],
                        int(np.count_nonzero(c.missing[picked])),
                    )  # fmt: skip
        shapes = ((7, "streams"),) if self.old else ((6, "streams"), (7, "blocks"), (8, "grids"))
        for column, attr in shapes:
            encoded = launch[column].dictionary_encode()
            distinct = encoded.dictionary.to_pylist()
            pairs = codes * len(distinct) + encoded.indices.to_numpy(zero_copy_only=False)
            for pair in np.unique(pairs).tolist():
                kernel, value = divmod(pair, len(distinct))
                getattr(report.kernels[names[kernel]], attr).add(distinct[value])
        if not self.old:
            report.attributes.setdefault("compute_capability", launch[10][0].as_py())
            pairs = zip(launch[9].to_pylist(), launch[10].to_pylist(), strict=True)
            for device, cc in dict.fromkeys(pairs):
                note_compute_capability(report, device, cc)
        self._texts(cells, codes, names)

    def _strings(
        self, fields: pa.Array, rows: int, indexes: list[int]
    ) -> tuple[pa.Array, list[pa.Array]]:
        """Columns ``indexes`` of ``fields`` as UTF-8 strings, joined and one by one (slices of
        the joined).

        Raises: EvidenceError naming the first row and column that is not UTF-8."""
        parts = [fields.slice(i * rows, rows) for i in indexes]
        if fields.type == pa.string():
            joined = pa.concat_arrays(parts)
        else:
            try:
                joined = pa.concat_arrays(parts).cast(pa.string())
            except pa.ArrowInvalid:
                for k in range(rows):
                    for i, part in zip(indexes, parts, strict=True):
                        try:
                            part[k].as_py().decode("utf-8")
                        except UnicodeDecodeError:
                            raise EvidenceError(
                                f"{self._where(k)} {self._column(i)}: not UTF-8 text; "
                                "is it a binary file?",
                                hint=_HINT,
                            ) from None
                raise
        return joined, [joined.slice(j * rows, rows) for j in range(len(indexes))]

    def _numbers(self, fields: pa.Array, rows: int, plus: bool) -> tuple[np.ndarray, np.ndarray]:
        """Convert the metric columns that held only plain numbers so far: each run of adjacent
        such columns in one cast; a column that no longer does (found by halving a failing run)
        joins :attr:`careful` for the rest of the page. Returns (the metric indexes converted,
        ascending; their values: rows x those metrics, C-ordered, in base units)."""
        prefix, count = self.prefix, len(self.metrics)
        if self.first:  # the first launch row sorts out the columns that are plainly not numbers
            self.first = False
            for i in range(count):
                cell = fields[(prefix + i) * rows].as_py()
                text = cell.decode("utf-8", "replace") if isinstance(cell, bytes) else cell
                if _PLAIN.fullmatch(text) is None:
                    self.careful.add(i)
        runs: list[tuple[int, int]] = []
        for i in range(count):
            if i in self.careful:
                continue
            if runs and runs[-1][1] == i:
                runs[-1] = (runs[-1][0], i + 1)
            else:
                runs.append((i, i + 1))
        done: list[tuple[int, int, np.ndarray]] = []
        while runs:
            a, b = runs.pop()
            values = _plain_numbers(fields.slice((prefix + a) * rows, (b - a) * rows), plus)
            if values is not None:
                done.append((a, b, values))
            elif b - a == 1:
                self.careful.add(a)
            else:
                runs += [((a + b) // 2, b), (a, (a + b) // 2)]
        done.sort(key=lambda run: run[0])
        indexes = np.concatenate([np.arange(a, b) for a, b, _ in done] or [np.empty(0, np.int64)])
        scaled = np.empty((rows, len(indexes)))
        at = 0
        for a, b, values in done:
            with np.errstate(over="ignore"):  # an overflow is refused after the page is read
                np.multiply(
                    values.reshape(b - a, rows).T, self.factors[a:b],
                    out=scaled[:, at : at + b - a],
                )  # fmt: skip
            at += b - a
        return indexes.astype(np.int64), scaled

    def _cells(self, careful: list[int], texts: list[pa.Array]) -> dict[int, _Cells]:
        """Classify the cells of the careful metric columns (``texts``: their cells as
        strings), all columns in one set of pyarrow calls."""
        if not careful:
            return {}
        rows = len(texts[0])
        joined = pa.concat_arrays(texts)
        text_ok = np.repeat(self.text_ok[careful], rows)
        missing = pc.is_in(joined, value_set=_MISSING).to_numpy(zero_copy_only=False)
        number = pc.match_substring_regex(joined, PLAIN)
        digits = joined
        if self.grouping == "en_US":  # a text metric keeps "1,234" as text (ncu_csv.metric_value)
            grouped = pc.and_(
                pc.match_substring_regex(joined, GROUPED), pa.array(~text_ok, pa.bool_())
            )
            number = pc.or_(number, grouped)
            digits = pc.replace_substring(joined, ",", "")
        values = pc.cast(pc.if_else(number, digits, "nan"), pa.float64()).to_numpy()
        numbers = number.to_numpy(zero_copy_only=False)
        finite = np.isfinite(values)
        bad = numbers & ~finite  # e.g. 1e999
        numbers &= finite
        text = ~(missing | numbers | bad)
        bad |= text & ~text_ok
        text &= text_ok
        with np.errstate(over="ignore"):  # an overflow is refused after the page is read
            values = values.reshape(len(careful), rows) * self.factors[careful][:, None]
        masks = [m.reshape(len(careful), rows) for m in (numbers, missing, text, bad)]
        return {
            i: _Cells(texts[j], values[j], *(m[j] for m in masks)) for j, i in enumerate(careful)
        }

    def _check_launch(self, launch: list[pa.Array], cells: dict[int, _Cells]) -> np.ndarray:
        """Check the launch columns and the careful cells of a batch; return its launch IDs.

        Raises: EvidenceError for the first bad launch row, naming it: an ID that is not
        decimal digits (or beyond int64) or that appears twice, an empty kernel name, a stream,
        block, grid or CC out of ncu's format, a metric value that is not accepted."""
        rows = len(launch[0])
        if pc.any(pc.equal(launch[0], "ID")).as_py():
            raise duplicated_header(self.label, 0)  # a second export appended to the first
        id_ok = pc.match_substring_regex(launch[0], _DIGITS).to_numpy(zero_copy_only=False)
        ids = np.zeros(rows, dtype=np.int64)
        if id_ok.all():
            try:
                ids = pc.cast(launch[0], pa.int64()).to_numpy()
            except pa.ArrowInvalid:  # more digits than int64 holds
                id_ok = np.array([len(t) < 19 for t in launch[0].to_pylist()])
        good = np.flatnonzero(id_ok)
        _unique, first = np.unique(ids[good], return_index=True)
        again = np.ones(len(good), dtype=bool)
        again[first] = False
        if not self.seen.isdisjoint(ids[good].tolist()):
            again |= np.array([i in self.seen for i in ids[good].tolist()], dtype=bool)
        twice = np.zeros(rows, dtype=bool)
        twice[good[again]] = True
        empty = pc.equal(launch[4], "").to_numpy(zero_copy_only=False)
        formats = ((7, "Stream", _INT),) if self.old else (
            (7, "Block Size", _SHAPE), (8, "Grid Size", _SHAPE), (6, "Stream", _INT),
            (10, "CC", _CC))  # fmt: skip
        shape_bad = []
        for column, what, pattern in formats:
            distinct = pc.unique(launch[column]).to_pylist()
            wrong = [t for t in distinct if pattern.fullmatch(t) is None]
            mask = (
                pc.is_in(launch[column], value_set=pa.array(wrong, pa.string())).to_numpy(
                    zero_copy_only=False
                )
                if wrong
                else None
            )
            shape_bad.append((column, what, mask))
        checks = [~id_ok, twice, empty] + [m for _c, _w, m in shape_bad if m is not None]
        checks += [c.bad for c in cells.values()]
        bad_rows = [int(np.argmax(m)) for m in checks if m.any()]
        if not bad_rows:
            return ids
        k = min(bad_rows)
        where = self._where(k)
        if not id_ok[k]:
            raise EvidenceError(
                f"{where}: ID {launch[0][k].as_py()[:80]!r} is not in ncu's format", hint=_HINT
            )
        if twice[k]:
            raise EvidenceError(f"{where}: launch ID {ids[k]} appears twice", hint=_HINT)
        if empty[k]:
            raise EvidenceError(f"{where}: empty Kernel Name", hint=_HINT)
        for column, what, mask in shape_bad:
            if mask is not None and mask[k]:
                text = launch[column][k].as_py()
                raise EvidenceError(
                    f"{where}: {what} {text[:80]!r} is not in ncu's format", hint=_HINT
                )

        for i in sorted(cells):
            if cells[i].bad[k]:
                metric, text = self.metrics[i], cells[i].texts[k].as_py()
                metric_value(
                    metric, self.units[self.prefix + i], text, self.grouping, f"{where} {metric}"
                )
                raise EvidenceError(
                    f"{where} {metric}: value {text[:60]!r} is not accepted", hint=_HINT
                )
        raise AssertionError("a bad row without a reason")  # pragma: no cover

    def _texts(self, cells: dict[int, _Cells], codes: np.ndarray, names: list[str]) -> None:
        """The text values of a batch as attributes ``"<kernel>/<metric>"`` (the first one of
        each), set in file order: by row, then by column."""
        found: list[tuple[int, int, str]] = []
        for i, c in cells.items():
            rows = np.flatnonzero(c.text)
            if not len(rows):
                continue
            kernels, first = np.unique(codes[rows], return_index=True)
            for kernel, row in zip(kernels.tolist(), rows[first].tolist(), strict=True):
                found.append((row, i, names[kernel]))
        attributes = self.report.attributes
        for row, i, name in sorted(found):
            text = cells[i].texts[row].as_py()
            attributes.setdefault(f"{name}/{self.metrics[i]}", text)
            self.report.kernels[name].texts.setdefault(self.metrics[i], text)

    def _finish(self) -> None:
        """Move the running statistics into the report's kernels, in metric order."""
        for name, kernel in self.report.kernels.items():
            agg = self.kernels[name]
            seen = agg.count + agg.missing
            count, missing = agg.count.tolist(), agg.missing.tolist()
            total, low, high = agg.total.tolist(), agg.minimum.tolist(), agg.maximum.tolist()
            for i in np.flatnonzero(seen).tolist():
                stat = MetricStat(self.bases[i], missing=missing[i])
                if count[i]:
                    stat.count, stat.total = count[i], total[i]
                    stat.minimum, stat.maximum = low[i], high[i]
                kernel.metrics[self.metrics[i]] = stat

    def _where(self, k: int) -> str:
        return f"{self.label}: launch row {self.n + k + 1}"

    def _column(self, index: int) -> str:

        return (
            (RAW_PREFIX_OLD if self.old else RAW_PREFIX)[index]
            if index < self.prefix
            else self.metrics[index - self.prefix]
        )


def _plain_numbers(cells: pa.Array, plus: bool) -> np.ndarray | None:
    """The values of ``cells`` (binary or string) as float64 when every one is a plain finite
    number (:data:`PLAIN`), else None. pyarrow's cast accepts exactly the plain numbers plus a
    leading '+' and the non-finite spellings (tests/profilers/test_ncu_raw.py checks it), both
    refused here; ``plus``: whether a '+' may occur at all."""
    text = cells.view(pa.string()) if cells.type == pa.binary() else cells
    try:
        values = pc.cast(text, pa.float64()).to_numpy()
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
        return None
    if not np.isfinite(values).all():
        return None
    if plus and pc.any(pc.starts_with(text, "+")).as_py():
        return None
    return values


def _columns(records: list[list[str]], width: int) -> pa.Array:
    """Records (lists of ``width`` fields) as one string array, column after column."""
    return pa.array([r[i] for i in range(width) for r in records], type=pa.string())
