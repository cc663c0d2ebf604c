"""Raw bytes to a server's port, for tests of what a server does with input no client would send."""

from __future__ import annotations

import socket


def exchange(port: int, data: bytes, timeout_s: float = 5.0) -> bytes:
    """Send `data` to 127.0.0.1:port; everything received until the server closes (or `timeout_s` of quiet)."""
    with socket.create_connection(("127.0.0.1", port), timeout=timeout_s) as s:
        s.sendall(data)
        received = b""
        try:
            while chunk := s.recv(65536):
                received += chunk
        except TimeoutError:
            pass
        return received
