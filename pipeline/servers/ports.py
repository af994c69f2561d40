"""Free loopback ports for servers we start, and who holds one that is not free."""

from __future__ import annotations

import socket
from collections.abc import Mapping, Sequence

import psutil

from pipeline.spec.models import LoadedSpec
from pipeline.spec.where import key_location


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


def port_holder(port: int, host: str = "127.0.0.1") -> str:
    """Who holds `port`: `process 1234 (name)`, listeners first; the kernel shows other
    users' sockets without their process."""
    try:
        sockets = [c for c in psutil.net_connections("inet")
                   if c.laddr and c.laddr.port == port and c.laddr.ip in (host, "0.0.0.0", "::")]
    except psutil.Error as error:
        return f"a process this user cannot list ({error})"
    sockets.sort(key=lambda c: c.status != psutil.CONN_LISTEN)
    for found in sockets:
        if found.pid is None:
            continue
        try:
            return f"process {found.pid} ({psutil.Process(found.pid).name()})"
        except psutil.Error:
            return f"process {found.pid}"
    return "a process of another user (its id is not visible)" if sockets else \
        "a socket no process owns any more (TIME_WAIT; retry shortly)"


def busy_port_message(loaded: LoadedSpec, name: str, port: int,
                      host: str = "127.0.0.1") -> str:
    """One line: where the spec sets the port, what holds it, what to do."""
    where = key_location(loaded, ("server", "ports", name))
    return (f"{where}: server.ports.{name}: port {port} on {host} is already in use by "
            f"{port_holder(port, host)}: stop it, or set another port there")
