"""The protobuf wire format, the little of it the REAPI tier speaks: varints, length-delimited fields, and nothing
generated. The REAPI's messages are few and small (opencoti_build.cache.reapi.messages writes them from the spec's
field numbers), so a codec of our own keeps protobuf's runtime and generated stubs out of the build.

Encoding writes fields in the order given, omitting proto3 defaults where the caller passes None; decoding reads any
well-formed message into ``{field number: [values]}`` (varints as ints, length-delimited fields as bytes, fixed 32- and
64-bit fields as bytes), keeping unknown fields, and refuses a malformed one with :class:`WireError`.
"""
from __future__ import annotations

from collections.abc import Iterable

VARINT, FIXED64, LENGTH, FIXED32 = 0, 1, 2, 5
_MASK64 = (1 << 64) - 1
_MAX_FIELD = (1 << 29) - 1

Fields = dict[int, list[int | bytes]]
Value = int | bool | bytes | str | None


class WireError(ValueError):
    """Bytes that are not a well-formed protobuf message (a truncated varint or field, a wire type we do not read)."""


def varint(n: int) -> bytes:
    """``n`` as a base-128 varint; a negative int64 as its 10-byte two's complement (protobuf's int32/int64)."""
    n &= _MASK64
    out = bytearray()
    while n > 0x7F:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def field(number: int, value: Value) -> bytes:
    """One field: an int or bool as a varint, bytes or str (UTF-8) length-delimited (a nested message is its bytes);
    None: nothing (proto3 leaves defaults out)."""
    if value is None:
        return b""
    if not 0 < number <= _MAX_FIELD:
        raise ValueError(f"field number {number} is out of range")
    if isinstance(value, (bool, int)):
        return varint(number << 3 | VARINT) + varint(int(value))
    data = value.encode() if isinstance(value, str) else bytes(value)
    return varint(number << 3 | LENGTH) + varint(len(data)) + data


def message(fields: Iterable[tuple[int, Value]]) -> bytes:
    """A message of ``(number, value)`` pairs, in order (a repeated field: one pair per element)."""
    return b"".join(field(number, value) for number, value in fields)


def _read_varint(data: bytes, pos: int) -> tuple[int, int]:
    result = shift = 0
    while True:
        if pos >= len(data):
            raise WireError("a varint runs past the end")
        byte = data[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return result & _MASK64, pos
        shift += 7
        if shift >= 70:
            raise WireError("a varint longer than 10 bytes")


def decode(data: bytes) -> Fields:
    """Every field of the message ``data``, by number, values in order; WireError when it is malformed."""
    fields: Fields = {}
    pos = 0
    while pos < len(data):
        tag, pos = _read_varint(data, pos)
        number, wire = tag >> 3, tag & 7
        if number == 0:
            raise WireError("field number 0")
        value: int | bytes
        if wire == VARINT:
            value, pos = _read_varint(data, pos)
        elif wire in (LENGTH, FIXED64, FIXED32):
            if wire == LENGTH:
                size, pos = _read_varint(data, pos)
            else:
                size = 8 if wire == FIXED64 else 4
            if pos + size > len(data):
                raise WireError(f"field {number} runs past the end")
            value, pos = bytes(data[pos:pos + size]), pos + size
        else:
            raise WireError(f"field {number} has wire type {wire} (groups are not read)")
        fields.setdefault(number, []).append(value)
    return fields


def one(fields: Fields, number: int, default: int | bytes) -> int | bytes:
    """The last value of a field (proto3: the last one wins), or ``default``; WireError when it has the other type."""
    values = fields.get(number)
    if not values:
        return default
    if isinstance(values[-1], int) != isinstance(default, int):
        raise WireError(f"field {number} has an unexpected wire type")
    return values[-1]


def integer(fields: Fields, number: int, signed: bool = False) -> int:
    """A varint field as an int (``signed``: int32/int64, two's complement), 0 when absent."""
    n = one(fields, number, 0)
    assert isinstance(n, int)
    return n - (1 << 64) if signed and n >> 63 else n


def data(fields: Fields, number: int) -> bytes:
    """A length-delimited field's bytes, b"" when absent."""
    value = one(fields, number, b"")
    assert isinstance(value, bytes)
    return value


def text(fields: Fields, number: int) -> str:
    """A string field, "" when absent; WireError when it is not UTF-8."""
    try:
        return data(fields, number).decode()
    except UnicodeDecodeError:
        raise WireError(f"field {number} is not UTF-8") from None


def repeated(fields: Fields, number: int) -> list[bytes]:
    """Every element of a repeated message, bytes, or string field (as bytes)."""
    values = fields.get(number, [])
    if any(isinstance(v, int) for v in values):
        raise WireError(f"field {number} has an unexpected wire type")
    return [v for v in values if isinstance(v, bytes)]


def repeated_ints(fields: Fields, number: int) -> list[int]:
    """A repeated varint field (an enum list), packed or not."""
    found: list[int] = []
    for value in fields.get(number, []):
        if isinstance(value, int):
            found.append(value)
            continue
        pos = 0
        while pos < len(value):
            n, pos = _read_varint(value, pos)
            found.append(n)
    return found
