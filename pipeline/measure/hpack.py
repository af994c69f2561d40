"""Just enough HPACK (RFC 7541) for a gRPC load generator: encode request headers as plain
literals (no Huffman, no indexing: the same bytes every time), and decode a server's
header blocks, dynamic table included, so that `:status` and `grpc-status` can be read.

Huffman-coded strings are decoded only when they are digits (status codes); any other
Huffman-coded string decodes to None, which the caller treats as unreadable.
"""

from __future__ import annotations

from collections.abc import Iterable

STATIC_NAMES = (
    ":authority", ":method", ":method", ":path", ":path", ":scheme", ":scheme", ":status",
    ":status", ":status", ":status", ":status", ":status", ":status", "accept-charset",
    "accept-encoding", "accept-language", "accept-ranges", "accept",
    "access-control-allow-origin", "age", "allow", "authorization", "cache-control",
    "content-disposition", "content-encoding", "content-language", "content-length",
    "content-location", "content-range", "content-type", "cookie", "date", "etag", "expect",
    "expires", "from", "host", "if-match", "if-modified-since", "if-none-match", "if-range",
    "if-unmodified-since", "last-modified", "link", "location", "max-forwards",
    "proxy-authenticate", "proxy-authorization", "range", "referer", "refresh", "retry-after",
    "server", "set-cookie", "strict-transport-security", "transfer-encoding", "user-agent",
    "vary", "via", "www-authenticate")
STATIC_VALUES = {2: "GET", 3: "POST", 4: "/", 5: "/index.html", 6: "http", 7: "https",
                 8: "200", 9: "204", 10: "206", 11: "304", 12: "400", 13: "404", 14: "500",
                 16: "gzip, deflate"}
STATIC = tuple((name, STATIC_VALUES.get(index, "")) for index, name in
               enumerate(STATIC_NAMES, start=1))
# RFC 7541 appendix B for '0'..'9': (code, bit length).
HUFFMAN_DIGITS = {(0x0, 5): "0", (0x1, 5): "1", (0x2, 5): "2", (0x19, 6): "3", (0x1A, 6): "4",
                  (0x1B, 6): "5", (0x1C, 6): "6", (0x1D, 6): "7", (0x1E, 6): "8",
                  (0x1F, 6): "9"}
STATELESS_BLOCKS = 64


class HpackError(Exception):
    """A header block that does not decode."""


def _integer(value: int, prefix_bits: int, first: int) -> bytes:
    limit = (1 << prefix_bits) - 1
    if value < limit:
        return bytes([first | value])
    out = bytearray([first | limit])
    value -= limit
    while value >= 128:
        out.append(value % 128 + 128)
        value //= 128
    out.append(value)
    return bytes(out)


def _string(text: str) -> bytes:
    raw = text.encode("latin-1")
    return _integer(len(raw), 7, 0) + raw


def encode_literals(headers: Iterable[tuple[str, str]]) -> bytes:
    """A header block of literals without indexing (names by static index where one is)."""
    first_index = {name: index for index, name in reversed(list(enumerate(STATIC_NAMES, 1)))}
    block = bytearray()
    for name, value in headers:
        index = first_index.get(name)
        block += _integer(index, 4, 0) if index else b"\x00" + _string(name)
        block += _string(value)
    return bytes(block)


def _huffman_digits(data: bytes) -> str | None:
    bits = "".join(f"{byte:08b}" for byte in data)
    out, code, length = [], 0, 0
    for bit in bits:
        code, length = code * 2 + (bit == "1"), length + 1
        digit = HUFFMAN_DIGITS.get((code, length))
        if digit is not None:
            out.append(digit)
            code, length = 0, 0
        elif length > 6:
            return None
    # What is left must be padding: fewer than 8 bits, all ones.
    return "".join(out) if length < 8 and code == (1 << length) - 1 else None


class Decoder:
    """One connection's decoding context (its dynamic table)."""

    def __init__(self, max_size: int = 4096) -> None:
        self.table: list[tuple[str, str | None]] = []   # newest first
        self.size = 0
        self.max_size = max_size
        # With no dynamic table a block decodes the same every time: a server answering
        # the same call sends the same few blocks, so each is decoded once.
        self.stateless: dict[bytes, dict[str, str | None]] = {}

    def decode(self, block: bytes) -> dict[str, str | None]:
        known = self.stateless.get(block) if not self.table else None
        if known is not None:
            return known
        headers = self._decode(block)
        if not self.table and self.max_size == 0 and len(self.stateless) < STATELESS_BLOCKS:
            self.stateless[block] = headers
        return headers

    def _decode(self, block: bytes) -> dict[str, str | None]:
        headers: dict[str, str | None] = {}
        position = 0
        try:
            while position < len(block):
                byte = block[position]
                if byte & 0x80:                     # indexed field
                    index, position = self._int(block, position, 7)
                    name, value = self._entry(index)
                elif byte & 0x40:                   # literal, added to the table
                    name, value, position = self._literal(block, position, 6)
                    self._add(name, value)
                elif byte & 0x20:                   # dynamic table size update
                    self.max_size, position = self._int(block, position, 5)
                    self._evict()
                    continue
                else:                               # literal, not indexed / never indexed
                    name, value, position = self._literal(block, position, 4)
                headers[name] = value
        except IndexError:
            raise HpackError("header block ends inside a field") from None
        return headers

    def _int(self, block: bytes, position: int, prefix_bits: int) -> tuple[int, int]:
        limit = (1 << prefix_bits) - 1
        value = block[position] & limit
        position += 1
        if value < limit:
            return value, position
        shift = 0
        while True:
            byte = block[position]
            position += 1
            value += (byte & 0x7F) << shift
            shift += 7
            if not byte & 0x80:
                return value, position

    def _str(self, block: bytes, position: int) -> tuple[str | None, int]:
        huffman = bool(block[position] & 0x80)
        length, position = self._int(block, position, 7)
        raw = block[position: position + length]
        if len(raw) < length:
            raise IndexError
        text = _huffman_digits(raw) if huffman else raw.decode("latin-1")
        return text, position + length

    def _literal(self, block: bytes, position: int, prefix_bits: int
                 ) -> tuple[str, str | None, int]:
        index, position = self._int(block, position, prefix_bits)
        if index:
            name: str | None = self._entry(index)[0]
        else:
            name, position = self._str(block, position)
        value, position = self._str(block, position)
        return name if name is not None else "?", value, position

    def _entry(self, index: int) -> tuple[str, str | None]:
        if 1 <= index <= len(STATIC):
            return STATIC[index - 1]
        dynamic = index - len(STATIC) - 1
        if not 0 <= dynamic < len(self.table):
            raise HpackError(f"header index {index} is not in the table")
        return self.table[dynamic]

    def _add(self, name: str, value: str | None) -> None:
        self.table.insert(0, (name, value))
        self.size += len(name) + len(value or "") + 32
        self._evict()

    def _evict(self) -> None:
        while self.size > self.max_size and self.table:
            name, value = self.table.pop()
            self.size -= len(name) + len(value or "") + 32
