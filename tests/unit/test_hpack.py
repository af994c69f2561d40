"""The load generator's HPACK: what gRPC's status depends on must decode."""

from __future__ import annotations

import hpack
import pytest

from pipeline.measure.wire.hpack import Decoder, HpackError, encode_literals


def test_literals_round_trip_and_add_nothing_to_a_table() -> None:
    headers = [(":path", "/inference.GRPCInferenceService/ModelInfer"),
               ("content-type", "application/grpc"), ("te", "trailers"),
               ("x-long", "v" * 300)]
    block = encode_literals(headers)
    decoder = Decoder()
    assert decoder.decode(block) == dict(headers)
    assert decoder.table_entries == 0 and encode_literals(headers) == block


def test_dynamic_table_and_static_index() -> None:
    decoder = Decoder()
    # ":status: 200" from the static table; "grpc-status: 0" added to the dynamic table.
    first = bytes([0x88, 0x40, 11]) + b"grpc-status" + bytes([1]) + b"0"
    assert decoder.decode(first) == {":status": "200", "grpc-status": "0"}
    assert decoder.decode(bytes([0xBE])) == {"grpc-status": "0"}      # index 62
    with pytest.raises(HpackError):
        decoder.decode(bytes([0xBF]))                                   # index 63: none


def test_huffman_coded_values_decode() -> None:
    # What a server that Huffman-codes its headers sends (grpc-message included).
    block = hpack.Encoder().encode([(":status", "200"), ("grpc-status", "3"),
                                    ("grpc-message", "unexpected shape")], huffman=True)
    assert Decoder().decode(bytes(block)) == {":status": "200", "grpc-status": "3",
                                              "grpc-message": "unexpected shape"}


def test_truncated_block_is_an_error() -> None:
    with pytest.raises(HpackError):
        Decoder().decode(bytes([0x08, 0x05]) + b"20")


def test_a_stateless_block_is_decoded_once() -> None:
    decoder = Decoder(0)
    block = encode_literals([(":status", "200"), ("grpc-status", "0")])
    assert decoder.decode(block) is decoder.decode(block)
    assert decoder.table_entries == 0
