"""A server's port that another process holds (ours could not bind it) or shares (a second
bind with SO_REUSEPORT) is told apart from one our server holds alone."""

from __future__ import annotations

import os
import socket
from collections.abc import Callable

from pipeline.servers.ports import shared_port


def sockets(*found: tuple[int, int | None]) -> Callable[[str], list[tuple[int, int | None]]]:
    return lambda host: list(found)


def test_a_port_only_another_process_listens_on_is_not_ours() -> None:
    with socket.socket() as other:                  # a real listener of this process
        other.bind(("127.0.0.1", 0))
        other.listen()
        port = other.getsockname()[1]
        clash = shared_port({"http": port}, own={1})
    assert clash is not None
    assert clash.startswith(f"server.ports.http: port {port} on 127.0.0.1 is held by process "
                            f"{os.getpid()} (")
    assert "not by this run's server" in clash


def test_a_port_ours_and_another_listen_on_is_shared() -> None:
    clash = shared_port({"grpc": 8001}, own={10}, listeners=sockets((8001, 10), (8001, None)))
    assert clash is not None and "8001 on 127.0.0.1 is also listened on by a process of " \
        "another user: two servers share it" in clash


def test_ours_alone_or_not_yet_bound_is_no_clash() -> None:
    assert shared_port({"http": 8000, "grpc": 8001}, own={10},
                       listeners=sockets((8000, 10), (9999, 11))) is None
