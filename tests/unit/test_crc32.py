"""opencoti_build.formats.crc32: the CRC-32 of two runs joined, from each run's, equals zlib's of the whole."""
from __future__ import annotations

import random
import zlib

import pytest

from opencoti_build.formats import crc32


@pytest.mark.parametrize("seed", range(5))
def test_combined_crcs_equal_the_crc_of_the_bytes_joined(seed: int) -> None:
    rng = random.Random(seed)
    for _ in range(40):
        a = rng.randbytes(rng.choice([0, 1, rng.randrange(2, 5000)]))
        b = rng.randbytes(rng.choice([0, 1, rng.randrange(2, 5000)]))
        assert crc32.combine(zlib.crc32(a), zlib.crc32(b), len(b)) == zlib.crc32(a + b)


def test_a_part_longer_than_half_a_gib_combines_right() -> None:
    """Past 2^29 bytes the shift's exponent 8n needs x^(2^32) and up, which the table of 32 powers wraps round to."""
    zeros = bytes(64 << 20)
    length = 9 * len(zeros)  # 576 MiB: 8n > 2^32
    head = b"opencoti"
    whole = zlib.crc32(head)
    part = 0
    for _ in range(length // len(zeros)):
        whole = zlib.crc32(zeros, whole)
        part = zlib.crc32(zeros, part)
    assert crc32.combine(zlib.crc32(head), part, length) == whole
