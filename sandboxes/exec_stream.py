"""An attached Docker-API exec (``POST /exec/ID/start``) read without losing its first bytes.

docker-py's ``exec_start(stream=True)`` / ``exec_start(socket=True)`` read the hijacked
connection from the raw socket, past http.client's buffered reader. When the client reads the
reply's headers late (a busy machine), the engine has already sent the program's first frames,
or all of them and the end of the stream: the header read pulls them into that buffer, and the
raw socket then starts after them. A short exec comes back with no output and the right exit
code. Here the frames are read from the buffered reader; the raw socket is only written to
(stdin) and shut down.
"""

from __future__ import annotations

import socket
import struct
from dataclasses import dataclass
from typing import Any, BinaryIO, Iterator

STDOUT, STDERR = 1, 2


@dataclass
class AttachedExec:
    exec_id: str
    response: Any           # the HTTP response: keeps the connection alive; close() ends it
    reader: BinaryIO        # the connection's buffered reader: every byte after the headers
    sock: socket.socket     # the raw socket, for stdin and shutdown

    def frames(self) -> Iterator[tuple[int, bytes]]:
        """(stream id, payload) until the engine ends the stream (multiplexed, tty off)."""
        while True:
            head = self.reader.read(8)
            if len(head) < 8:
                return
            size = struct.unpack(">I", head[4:])[0]
            payload = self.reader.read(size) if size else b""
            if len(payload) < size:
                return
            yield head[0], payload

    def close(self) -> None:
        for close in (self.sock.close, self.response.close):
            try:
                close()
            except OSError:
                pass


def start_attached(api: Any, exec_id: str | dict[str, Any]) -> AttachedExec:
    """Start ``exec_id`` (created with its streams attached; exec_create's reply or its Id) and
    hold its hijacked connection."""
    if isinstance(exec_id, dict):
        exec_id = exec_id["Id"]
    response = api._post_json(api._url("/exec/{0}/start", exec_id), headers={"Connection": "Upgrade", "Upgrade": "tcp"},
                              data={"Tty": False, "Detach": False}, stream=True)
    api._raise_for_status(response)
    reader = response.raw._fp.fp  # the BufferedReader http.client parsed the headers with
    raw = reader.raw
    sock = getattr(raw, "_sock", raw)
    sock.settimeout(None)  # an exec may print nothing for longer than the API client's timeout
    return AttachedExec(exec_id, response, reader, sock)
