"""Segment files of the sample cache: their format, written in one piece, read through a memory map.

A segment holds records of one cached node's values (see :mod:`flowdata.run.caching.store`
for who writes them and when)::

    b"FDSAMPLE2\\n"                         magic (format 2)
    record, record, ...                    each: u32 header length, JSON header, raw buffers
    index                                  u32 records R, u32 keys K;
                                           R x (u64 offset, u64 length, u32 crc32, u32 kind);
                                           K x 32-byte key; K x (u32 record, u32 row)
    u64 index length, u32 crc32 of the index, b"FDSEGEND\\n"

A record is one value (kind 0, :mod:`flowdata.run.caching.codec`), or the small values of a
chunk of samples as one stacked or ragged array (kind 1, a column record:
:mod:`flowdata.run.caching.records`); a key names its record and its row there. Nothing is
ever unpickled.

:func:`parse` reads a segment's index at once (no JSON per sample); :class:`Segment` checks
a record's CRC-32 the first time the process reads it -- segments never change once in
place -- and keeps a column record as arrays over the memory map, so that reading a hit is
a lookup and a slice. Format 1 (one JSON header per value, a JSON index) is not read: its
segments live in folders of their own, since the format is part of every key's base.
"""

from __future__ import annotations

import mmap
import struct
import zlib
from collections.abc import Sequence
from typing import Any

from flowdata.run.caching.codec import NotImported, decode_value
from flowdata.run.caching.records import ColumnRecord

__all__ = ["COLUMN", "MISS", "VALUE", "Segment", "parse", "segment_parts"]

MAGIC, END = b"FDSAMPLE2\n", b"FDSEGEND\n"
_FOOTER = struct.Struct("<QI")
_COUNTS = struct.Struct("<II")  # records, keys
_RECORD = struct.Struct("<QQII")  # offset, length, crc32, kind
VALUE, COLUMN = 0, 1
"""The kinds of record: one value, or a column of values."""
MISS: Any = object()
"""A key the cache does not hold (or holds damaged, or of a class this process has not imported)."""


class Segment:
    """One segment mapped for reading: its records, and those this process has checked.

    Attributes:
        path: Its file.
        map: Its memory map.
        records: ``(offset, length, crc32, kind)`` of each record.
        dead: Found damaged (left out from then on).
    """

    __slots__ = ("dead", "map", "path", "read", "records")

    def __init__(self, path: str, m: mmap.mmap, records: list[tuple[int, int, int, int]]):
        self.path, self.map, self.records = path, m, records
        self.read: dict[int, Any] = {}  # record -> its ColumnRecord (or True: a value record that checked out)
        self.dead = False

    def record(self, r: int) -> Any:
        """Record ``r``, checked against its CRC-32 once per process: True for a value
        record, the :class:`~flowdata.run.caching.records.ColumnRecord` of a column record.

        Raises:
            ValueError: its bytes do not match its checksum, or do not hold what they say.
        """
        got = self.read.get(r)
        if got is not None:
            return got
        offset, length, crc, kind = self.records[r]
        body = memoryview(self.map)[offset : offset + length]
        try:
            if zlib.crc32(body) != crc:
                raise ValueError(f"record {r} does not match its checksum")
            if kind == COLUMN:
                got = ColumnRecord(body)  # arrays over the map: body stays exported
            elif kind == VALUE:
                got = True
                body.release()
            else:
                raise ValueError(f"record {r} is of an unknown kind {kind}")
        except (KeyError, TypeError, struct.error) as exc:
            _release(body)
            raise ValueError(f"record {r} does not hold what its header says ({exc})") from None
        except ValueError:
            _release(body)
            raise
        self.read[r] = got
        return got

    def value(self, r: int) -> Any:
        """The value of value record ``r`` (checked first), or :data:`MISS` when its
        namedtuple or enum class is not imported here.

        Raises:
            ValueError: the record is damaged.
        """
        self.record(r)
        offset, length, _, _ = self.records[r]
        body = memoryview(self.map)[offset : offset + length]
        try:
            return decode_value(body)
        except NotImported:
            return MISS  # sound, but its class is not loaded here: computed instead
        except (KeyError, TypeError, struct.error) as exc:
            raise ValueError(f"record {r} does not decode ({exc})") from None
        finally:
            body.release()

    def close(self) -> None:
        """Lets go of the map (the arrays over it first)."""
        self.read.clear()
        try:
            self.map.close()
        except BufferError:  # a value still viewing it; the mapping goes with it
            pass


def _release(body: memoryview) -> None:
    try:
        body.release()
    except BufferError:  # arrays made before the damage was found still view it: they go with it
        pass


def parse(path: str, m: mmap.mmap, size: int) -> tuple[Segment, list[bytes], Sequence[int]]:
    """A mapped segment file: the segment, its keys, and each key's record and row (flat:
    ``record, row, record, row, ...``).

    Raises:
        ValueError: it is not a segment of this format, or its index does not check out.
    """
    if size < len(MAGIC) + _COUNTS.size + _FOOTER.size + len(END):
        raise ValueError("too short")
    if m[: len(MAGIC)] != MAGIC or m[size - len(END) :] != END:
        raise ValueError("not a flowdata sample segment of this format")
    length, crc = _FOOTER.unpack_from(m, size - len(END) - _FOOTER.size)
    start = size - len(END) - _FOOTER.size - length
    if start < len(MAGIC) or zlib.crc32(m[start : start + length]) != crc:
        raise ValueError("its index does not match its checksum")
    n_records, n_keys = _COUNTS.unpack_from(m, start)
    if length != _COUNTS.size + n_records * _RECORD.size + n_keys * 40:
        raise ValueError("its index is not the size it says")
    at = start + _COUNTS.size
    records = [_RECORD.unpack_from(m, at + i * _RECORD.size) for i in range(n_records)]
    if any(offset < len(MAGIC) or offset + took > start for offset, took, _, _ in records):
        raise ValueError("a record lies outside the segment")
    at += n_records * _RECORD.size
    blob = m[at : at + 32 * n_keys]
    where = struct.unpack_from(f"<{2 * n_keys}I", m, at + 32 * n_keys)
    if any(r >= n_records for r in where[::2]):
        raise ValueError("a key names a record the segment does not hold")
    return Segment(path, m, records), [blob[i : i + 32] for i in range(0, 32 * n_keys, 32)], where


def segment_parts(records: Sequence[tuple[list[bytes], list[Any], int, int]]) -> list[Any]:
    """A segment's bytes, in pieces to write one after the other, from its records:
    ``(keys, pieces, kind, length)`` each (the keys of a column record in row order)."""
    table: list[bytes] = []
    keys: list[bytes] = []
    where: list[int] = []
    at = len(MAGIC)
    parts: list[Any] = [MAGIC]
    for r, (record_keys, pieces, kind, length) in enumerate(records):
        crc = 0
        for p in pieces:
            crc = zlib.crc32(p, crc)
        table.append(_RECORD.pack(at, length, crc, kind))
        parts += pieces
        at += length
        keys += record_keys
        for row in range(len(record_keys)):
            where += (r, row)
    index = b"".join([_COUNTS.pack(len(table), len(keys)), *table, *keys, struct.pack(f"<{len(where)}I", *where)])
    return [*parts, index, _FOOTER.pack(len(index), zlib.crc32(index)), END]
