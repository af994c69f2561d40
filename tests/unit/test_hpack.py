"""The load generator's HPACK subset: what gRPC's status depends on must decode."""

from __future__ import annotations

import pytest

from pipeline.measure.hpack import Decoder, HpackError, encode_literals


def test_literals_round_trip() -> None:
    headers = [(":path", "/inference.GRPCInferenceService/ModelInfer"),
               ("content-type", "application/grpc"), ("te", "trailers"),
               ("x-long", "v" * 300)]
    assert Decoder().decode(encode_literals(headers)) == dict(headers)


def test_dynamic_table_and_static_index() -> None:
    decoder = Decoder()
    # ":status: 200" from the static table; "grpc-status: 0" added to the dynamic table.
    first = bytes([0x88, 0x40, 11]) + b"grpc-status" + bytes([1]) + b"0"
    assert decoder.decode(first) == {":status": "200", "grpc-status": "0"}
    assert decoder.decode(bytes([0xBE])) == {"grpc-status": "0"}      # index 62
    with pytest.raises(HpackError):
        decoder.decode(bytes([0xBF]))                                   # index 63: none


def test_huffman_digits_only() -> None:
    # ":status" (static name 8), Huffman "200": 00010 00000 00000 + padding ones.
    assert Decoder().decode(bytes([0x08, 0x82, 0x10, 0x01])) == {":status": "200"}
    # Huffman 'a' (00011): not a digit, so unreadable rather than guessed.
    assert Decoder().decode(bytes([0x08, 0x81, 0x1F])) == {":status": None}


def test_truncated_block_is_an_error() -> None:
    with pytest.raises(HpackError):
        Decoder().decode(bytes([0x08, 0x05]) + b"20")


def test_table_size_zero_keeps_nothing() -> None:
    decoder = Decoder(0)
    decoder.decode(bytes([0x40, 1]) + b"k" + bytes([1]) + b"v")
    assert decoder.table == []
