"""Length-prefixed pickle frames between the server and its evaluation workers.

A frame is a 4-byte big-endian length followed by that many bytes of
``pickle`` (protocol 5) of one message of :mod:`webhook.admission.isolation.messages`.
Both ends are Tollgate's own processes on a private ``socketpair``, so pickle is
safe here; it is never used on network input. The parent side is asyncio
streams, the worker side blocking sockets. Each reader checks that what arrived
is a message the other side may send.
"""

from __future__ import annotations

import asyncio
import pickle
import socket
import struct

from webhook.admission.isolation.messages import FromWorker, ToWorker

_HEADER = struct.Struct(">I")


class FrameTooLarge(ValueError):
    """A frame announced more bytes than the reader accepts."""


class ProtocolError(ValueError):
    """A frame held something the other side may not send."""


def encode(message: ToWorker | FromWorker) -> bytes:
    """One frame (header + pickle) for ``message``."""
    payload = pickle.dumps(message, protocol=5)
    return _HEADER.pack(len(payload)) + payload


async def read_frame(reader: asyncio.StreamReader, limit: int) -> FromWorker:
    """Read one worker message from ``reader`` (the parent's end of the socketpair).

    Args:
        reader: the parent's end of the socketpair.
        limit: largest accepted payload, bytes.

    Raises:
        asyncio.IncompleteReadError: the worker closed the connection (it died).
        FrameTooLarge: the payload exceeds ``limit``.
        ProtocolError: the frame is not a message a worker sends.
    """
    (size,) = _HEADER.unpack(await reader.readexactly(_HEADER.size))
    if size > limit:
        raise FrameTooLarge(f"worker frame of {size} bytes exceeds {limit}")
    message = pickle.loads(await reader.readexactly(size))
    if not isinstance(message, FromWorker):
        raise ProtocolError(f"unexpected worker message {type(message).__name__}")
    return message


def recv_frame(sock: socket.socket) -> ToWorker:
    """Blocking read of one server message (worker side).

    Raises:
        EOFError: the parent is gone.
        ProtocolError: the frame is not a message the server sends.
    """
    (size,) = _HEADER.unpack(_recv_exactly(sock, _HEADER.size))
    message = pickle.loads(_recv_exactly(sock, size))
    if not isinstance(message, ToWorker):
        raise ProtocolError(f"unexpected server message {type(message).__name__}")
    return message


def send_frame(sock: socket.socket, message: FromWorker) -> None:
    """Blocking write of one message (worker side)."""
    sock.sendall(encode(message))


def _recv_exactly(sock: socket.socket, n: int) -> bytes:
    buf = bytearray()
    while len(buf) < n:
        chunk = sock.recv(min(n - len(buf), 1 << 20))
        if not chunk:
            raise EOFError("connection closed")
        buf += chunk
    return bytes(buf)
