"""How a gRPC status counts in a load window."""

from __future__ import annotations

import grpc

_STATUS_NAMES = {code.value[0]: code for code in grpc.StatusCode}


def error_kind(code: int) -> str | None:
    """How a gRPC status counts: None for OK, else the kind of error."""
    status = _STATUS_NAMES.get(code, grpc.StatusCode.UNKNOWN)
    if status == grpc.StatusCode.OK:
        return None
    if status == grpc.StatusCode.DEADLINE_EXCEEDED:
        return "timeout"
    if status == grpc.StatusCode.UNAVAILABLE:
        return "connection"
    return f"grpc_{status.name.lower()}"
