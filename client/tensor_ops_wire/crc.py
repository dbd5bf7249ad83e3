"""CRC-32 as zip writes it (the checksum of every ``.npz`` member): ISA-L's SIMD code (``isal``)
when installed, zlib's else; the same values either way.

zlib's table-driven CRC-32 reads about 2 GB/s, so a 64 MiB member costs 30 ms to write and as
much again to check: a case file of inputs and a candidate, 128 MiB, spent more time in its two
checksums than in the op. ISA-L's folding code reads it about eight times as fast. The server
always has it; the client keeps its dependencies small and takes it with its ``fast`` extra.
"""

import zlib
from collections.abc import Callable
from typing import Any

crc32: Callable[[Any, int], int]
try:
    from isal.isal_zlib import crc32
except ImportError:  # the client without its fast extra
    crc32 = zlib.crc32
