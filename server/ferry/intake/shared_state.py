"""A table of counters in shared memory: one row per process, written only by that process.

Admission caps and the REST connection cap must hold for the whole server, not per process.
Each process adds only to its own row (one writer per row: no lock), and everyone reads the sum
of a column, so the model process's metrics and every intake's admission see the same totals.
Two intakes admitting at the same instant may each see room for the last slot, so the request cap
(or connection) cap can be passed by at most one per other intake process for that moment.
"""

from __future__ import annotations

from ..pipelines.slices import ImageWork
from .memory import Segment

REQUESTS, BYTES, REJECTED, OPEN_CONNECTIONS, IMAGES_WAITING, IMAGES_DECODED = range(
    6
)  # REQUESTS..REJECTED: api.admission
COLUMNS = 6


class SharedTable:
    """``rows`` x ``COLUMNS`` signed 64-bit counters in a memfd segment."""

    def __init__(self, segment: Segment, rows: int) -> None:
        self.segment = segment
        self.rows = rows
        self._values = memoryview(segment.buffer).cast("q")

    @classmethod
    def create(cls, rows: int) -> SharedTable:
        return cls(Segment.create("ferry-counters", rows * COLUMNS * 8), rows)

    @classmethod
    def attach(cls, pid: int, fd: int, rows: int) -> SharedTable:
        return cls(Segment.open(pid, fd, rows * COLUMNS * 8, writable=True), rows)

    def counts(self, row: int) -> RowCounts:
        return RowCounts(self, row)

    def column_total(self, column: int) -> int:
        return sum(self._values[column::COLUMNS])

    def value(self, row: int, column: int) -> int:
        return self._values[row * COLUMNS + column]

    def add(self, row: int, column: int, delta: int) -> None:
        self._values[row * COLUMNS + column] += delta

    def clear_row(self, row: int) -> None:
        """Forget what a process that exited held (its requests died with it)."""
        for column in (REQUESTS, BYTES, OPEN_CONNECTIONS, IMAGES_WAITING):  # counters keep their counts
            self._values[row * COLUMNS + column] = 0


class RowCounts:
    """One process's view for ``api.admission.Admission``: adds to its row, reads the totals."""

    def __init__(self, table: SharedTable, row: int) -> None:
        self._table = table
        self._row = row

    def add(self, counter: int, delta: int) -> None:
        self._table.add(self._row, counter, delta)

    def total(self, counter: int) -> int:
        return self._table.column_total(counter)


class SharedConnections:
    """An intake process's REST connections in the table (``api.connection_limits.OpenConnections``)."""

    def __init__(self, table: SharedTable, row: int) -> None:
        self._table = table
        self._row = row

    def add(self, delta: int) -> None:
        self._table.add(self._row, OPEN_CONNECTIONS, delta)

    def total(self) -> int:
        return self._table.column_total(OPEN_CONNECTIONS)


class SharedImageWork(ImageWork):
    """An intake process's image pool counts, kept in its row (``pipelines.slices`` updates them)."""

    def __init__(self, table: SharedTable, row: int) -> None:  # no dataclass fields of its own
        self._table = table
        self._row = row

    @property
    def waiting(self) -> int:
        return self._table.value(self._row, IMAGES_WAITING)

    @waiting.setter
    def waiting(self, value: int) -> None:
        self._table.add(self._row, IMAGES_WAITING, value - self.waiting)

    @property
    def decoded(self) -> int:
        return self._table.value(self._row, IMAGES_DECODED)

    @decoded.setter
    def decoded(self, value: int) -> None:
        self._table.add(self._row, IMAGES_DECODED, value - self.decoded)


class ServerImageWork:
    """The whole server's image pools for ``ferry_image_waiting`` / ``ferry_image_decoded_total``:
    the model process's own and every intake's row."""

    def __init__(self, own: ImageWork, table: SharedTable) -> None:
        self._own = own
        self._table = table

    @property
    def waiting(self) -> int:
        return self._own.waiting + self._table.column_total(IMAGES_WAITING)

    @property
    def decoded(self) -> int:
        return self._own.decoded + self._table.column_total(IMAGES_DECODED)
