"""Free loopback ports for servers we start, and who holds one that is not free."""

from __future__ import annotations

import socket
from collections.abc import Callable, Mapping, Sequence

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


def listening_sockets(host: str = "127.0.0.1") -> list[tuple[int, int | None]]:
    """(port, pid) of every listening socket on `host` or on every address; the pid is None
    for another user's. PermissionError-free: empty when this user cannot list them."""
    try:
        return [(c.laddr.port, c.pid) for c in psutil.net_connections("inet")
                if c.status == psutil.CONN_LISTEN and c.laddr
                and c.laddr.ip in (host, "0.0.0.0", "::")]
    except psutil.Error:
        return []


def shared_port(ports: Mapping[str, int], own: set[int], host: str = "127.0.0.1",
                listeners: Callable[[str], list[tuple[int, int | None]]] = listening_sockets
                ) -> str | None:
    """Why one of our server's `ports` is not its alone (None when each is, or is not bound
    yet), from the listening sockets of the machine:
    - another process listens there and ours does not: our server could not bind it (a
      second run given the same fixed port), and what answers there is the other's;
    - both listen (a second bind with SO_REUSEPORT succeeds): requests reach either."""
    listening = listeners(host)
    for name, port in ports.items():
        on_port = [pid for at, pid in listening if at == port]
        strangers = [pid for pid in on_port if pid not in own]
        if not strangers:
            continue
        other = next((pid for pid in strangers if pid is not None), None)
        holder = "a process of another user" if other is None else _process(other)
        where = f"server.ports.{name}: port {port} on {host}"
        if len(strangers) == len(on_port):
            return (f"{where} is held by {holder}, not by this run's server (it could not "
                    "bind it: its log says so), so what answers there is not the server "
                    "this run started: stop the other, or set another port")
        return (f"{where} is also listened on by {holder}: two servers share it (a second "
                "bind with SO_REUSEPORT succeeds), so requests would reach either: stop the "
                "other, or set another port")
    return None


def _process(pid: int) -> str:
    try:
        return f"process {pid} ({psutil.Process(pid).name()})"
    except psutil.Error:
        return f"process {pid}"


def busy_port_message(loaded: LoadedSpec, name: str, port: int,
                      host: str = "127.0.0.1") -> str:
    """One line: where the spec sets the port, what holds it, what to do."""
    where = key_location(loaded, ("server", "ports", name))
    return (f"{where}: server.ports.{name}: port {port} on {host} is already in use by "
            f"{port_holder(port, host)}: stop it, or set another port there")
