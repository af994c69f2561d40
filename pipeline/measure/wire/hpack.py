"""HPACK (RFC 7541) for the gRPC load generator, on python-hyper's `hpack`: request headers
encoded once as never-indexed literals (the same bytes for every call, nothing added to
the server's table), and a connection's response header blocks decoded, dynamic table and
Huffman coding included, so that `:status` and `grpc-status` can be read.
"""

from __future__ import annotations

from collections.abc import Iterable

import hpack

# A server answering the same call sends the same few header blocks.
STATELESS_BLOCKS = 64


class HpackError(Exception):
    """A header block that does not decode."""


def encode_literals(headers: Iterable[tuple[str, str]]) -> bytes:
    """Never-indexed literals (static-table names where they exist): no dynamic table
    state on either side, so the block can be sent again as it is."""
    return bytes(hpack.Encoder().encode([(name, value, True) for name, value in headers],
                                        huffman=False))


class Decoder:
    """One connection's decoding context (its dynamic table, at most `max_size` bytes)."""

    def __init__(self, max_size: int = 4096) -> None:
        self._decoder = hpack.Decoder()
        self._decoder.max_allowed_table_size = max_size
        self._decoder.header_table.maxsize = max_size
        # While the dynamic table is empty, a block that leaves it empty decodes the same
        # every time: each such block is decoded once.
        self.stateless: dict[bytes, dict[str, str]] = {}

    @property
    def table_entries(self) -> int:
        return len(self._decoder.header_table.dynamic_entries)

    def decode(self, block: bytes) -> dict[str, str]:
        empty_before = self.table_entries == 0
        known = self.stateless.get(block) if empty_before else None
        if known is not None:
            return known
        try:
            pairs = self._decoder.decode(block, raw=True)
        except (hpack.HPACKError, IndexError, ValueError) as error:
            raise HpackError(f"header block does not decode: {error}") from None
        headers = {bytes(name).decode("latin-1"): bytes(value).decode("latin-1")
                   for name, value in pairs}
        if empty_before and self.table_entries == 0 and len(self.stateless) < STATELESS_BLOCKS:
            self.stateless[block] = headers
        return headers
