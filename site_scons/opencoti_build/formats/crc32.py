"""CRC-32 (zip's, zlib's) of two runs of bytes joined, from the CRC-32 of each: so a file's CRC-32 can be taken on
several threads, a part each, and combined (zlib's ``crc32_combine``, which Python's zlib does not expose).

The CRC-32 of A followed by B is the CRC-32 of A carried over len(B) bytes of zeros, xored with B's: carrying a CRC
over 8n zero bits is multiplying it by x^(8n) modulo the CRC polynomial, in GF(2) (the bits reflected, as zip
stores them). x^(8n) is built from the powers x^(2^k), squared in turn, so it costs O(log n) multiplications.
"""
from __future__ import annotations

_POLY = 0xEDB88320  # the CRC-32 polynomial, reflected: bit 31 is x^0
_ONE = 1 << 31  # the polynomial 1, reflected


def _multiply(a: int, b: int) -> int:
    """a times b modulo the polynomial."""
    product = 0
    bit = _ONE
    while a:
        if a & bit:
            product ^= b
            a ^= bit
        bit >>= 1
        b = (b >> 1) ^ _POLY if b & 1 else b >> 1  # b times x
    return product


def _powers_of_two() -> tuple[int, ...]:
    """x^(2^k) modulo the polynomial, for k = 0..31 (x^(2^32) wraps round to an earlier one's cycle, see zlib)."""
    powers = [_ONE >> 1]  # x^1
    for _ in range(31):
        powers.append(_multiply(powers[-1], powers[-1]))
    return tuple(powers)


_X_TO_2_TO = _powers_of_two()


def _x_to_8n(n: int) -> int:
    """x^(8n) modulo the polynomial: the shift n bytes of zeros make."""
    power, k = _ONE, 3  # 8n = n * 2^3
    while n:
        if n & 1:
            power = _multiply(_X_TO_2_TO[k % 32], power)
        n >>= 1
        k += 1
    return power


def combine(crc_a: int, crc_b: int, length_b: int) -> int:
    """The CRC-32 of A followed by B, given A's and B's and B's length in bytes."""
    return _multiply(_x_to_8n(length_b), crc_a) ^ crc_b
