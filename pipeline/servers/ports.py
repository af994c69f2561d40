"""Free loopback ports for servers we start."""

from __future__ import annotations

import socket
from collections.abc import Mapping, Sequence


def free_ports(count: int, host: str = "127.0.0.1") -> list[int]:
    """Ports the kernel just handed out; held open together so they are distinct."""
    sockets = []
    try:
        for _ in range(count):
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            sock.bind((host, 0))
            sockets.append(sock)
        return [sock.getsockname()[1] for sock in sockets]
    finally:
        for sock in sockets:
            sock.close()


def port_is_bound(port: int, host: str = "127.0.0.1") -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError:
            return True
        return False


def loopback_ports(names: Sequence[str], wanted: Mapping[str, int] | None = None
                   ) -> dict[str, int]:
    """A port for each name: the wanted one where given, else a free one on loopback."""
    chosen = dict(wanted or {})
    spare = iter(free_ports(sum(1 for name in names if not chosen.get(name))))
    return {name: chosen.get(name) or next(spare) for name in names}
