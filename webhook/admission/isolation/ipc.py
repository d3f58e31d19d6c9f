"""Length-prefixed pickle frames between the server and its evaluation workers.

A frame is a 4-byte big-endian length followed by that many bytes of
``pickle`` (protocol 5). Both ends are Tollgate's own processes on a private
``socketpair``, so pickle is safe here; it is never used on network input.
The parent side is asyncio streams, the worker side blocking sockets.
"""

from __future__ import annotations

import asyncio
import pickle
import socket
import struct
from typing import Any

_HEADER = struct.Struct(">I")


class FrameTooLarge(ValueError):
    """A frame announced more bytes than the reader accepts."""


def encode(message: Any) -> bytes:
    """One frame (header + pickle) for ``message``."""
    payload = pickle.dumps(message, protocol=5)
    return _HEADER.pack(len(payload)) + payload


async def read_frame(reader: asyncio.StreamReader, limit: int) -> Any:
    """Read one frame from ``reader``.

    Args:
        reader: the parent's end of the socketpair.
        limit: largest accepted payload, bytes.

    Raises:
        asyncio.IncompleteReadError: the worker closed the connection (it died).
        FrameTooLarge: the payload exceeds ``limit``.
    """
    (size,) = _HEADER.unpack(await reader.readexactly(_HEADER.size))
    if size > limit:
        raise FrameTooLarge(f"worker frame of {size} bytes exceeds {limit}")
    return pickle.loads(await reader.readexactly(size))


def recv_frame(sock: socket.socket) -> Any:
    """Blocking read of one frame (worker side); raises ``EOFError`` when the parent is gone."""
    (size,) = _HEADER.unpack(_recv_exactly(sock, _HEADER.size))
    return pickle.loads(_recv_exactly(sock, size))


def send_frame(sock: socket.socket, message: Any) -> None:
    """Blocking write of one frame (worker side)."""
    sock.sendall(encode(message))


def _recv_exactly(sock: socket.socket, n: int) -> bytes:
    buf = bytearray()
    while len(buf) < n:
        chunk = sock.recv(min(n - len(buf), 1 << 20))
        if not chunk:
            raise EOFError("connection closed")
        buf += chunk
    return bytes(buf)
