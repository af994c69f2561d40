"""Whether a Ray cluster's address answers at all, before Ray retries it for a minute."""

from __future__ import annotations

import socket

CONNECT_TIMEOUT_S = 3.0


def unreachable(address: str) -> str | None:
    """Why nothing answers at `address` (host:port, optionally ray://), or None."""
    host, _, port = address.removeprefix("ray://").rpartition(":")
    if not host or not port.isdigit():
        return f"{address!r} is not host:port"
    try:
        with socket.create_connection((host, int(port)), timeout=CONNECT_TIMEOUT_S):
            return None
    except OSError as exc:
        return f"nothing answers at {address} ({exc.strerror or exc})"
