"""A local webhook receiver: what a team's endpoint (Slack, a bot) would get, recorded for a test."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, HTTPServer
from typing import Any


@dataclass
class Receiver:
    port: int
    received: list[dict[str, Any]] = field(default_factory=list)

    def url(self, path: str = "/hook") -> str:
        return f"http://127.0.0.1:{self.port}{path}"


@contextmanager
def webhook_receiver(port: int = 0) -> Iterator[Receiver]:
    """An HTTP server on loopback that answers every POST 200 and keeps its JSON body; `port` 0: any."""
    got: list[dict[str, Any]] = []

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:  # noqa: N802 - http.server's naming
            got.append(json.loads(self.rfile.read(int(self.headers["Content-Length"]))))
            self.send_response(200)
            self.end_headers()

        def log_message(self, *args: object) -> None:
            pass

    server = HTTPServer(("127.0.0.1", port), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield Receiver(server.server_port, got)
    finally:
        server.shutdown()
        server.server_close()
