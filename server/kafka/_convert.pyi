# The compiled record conversions (server/kafka/_convert.c): None for what server/kafka/records.py does in Python.
from typing import overload

from talos._codec import Buffer

@overload
def kafka_records_plain(buf: Buffer, pos: int, end: int, count: int, /) -> tuple[bytes, int, int] | None: ...
@overload
def kafka_records_plain(
    buf: Buffer, pos: int, end: int, count: int, reserve: int, /
) -> tuple[bytearray, int, int] | None: ...
def talos_records_plain(buf: Buffer, pos: int, end: int, count: int, /) -> tuple[bytes, int, int] | None: ...
