"""Serves the agent's metrics on a port (`metrics.listen`): GET /metrics, nothing else.

A small threaded HTTP server in the agent's process. It reads only the latest sample the
agent handed it, so a scrape never waits for or touches the agent's event loop; it adds the
age of the last accepted heartbeat, computed at the scrape.
"""

from __future__ import annotations

import logging
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from xce_agent.metrics.file import Sample, render

log = logging.getLogger(__name__)
CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
REQUEST_TIMEOUT = 10.0  # seconds a scraper has to send its request


class MetricsPort:
    def __init__(self, host: str, port: int) -> None:
        self._sample: Sample | None = None
        self._lock = threading.Lock()
        owner = self

        class Handler(BaseHTTPRequestHandler):
            # A connection that sends nothing holds a thread: without a bound on each read, a
            # few thousand of them would exhaust the agent's threads and memory.
            timeout = REQUEST_TIMEOUT

            def do_GET(self) -> None:
                if self.path.split("?")[0] != "/metrics":
                    self.send_error(404, "only /metrics here")
                    return
                body = owner.text().encode()
                self.send_response(200)
                self.send_header("Content-Type", CONTENT_TYPE)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: Any) -> None:
                return  # a scrape every 15 s is not worth a journal line

        family = ThreadingHTTPServer
        if ":" in host:
            import socket

            class V6(ThreadingHTTPServer):
                address_family = socket.AF_INET6

            family = V6
        self.server = family((host, port), Handler)
        self.server.daemon_threads = True
        self.port = self.server.server_address[1]
        self._thread = threading.Thread(
            target=self.server.serve_forever, name="metrics-port", daemon=True
        )

    def text(self) -> str:
        with self._lock:
            current = self._sample
        return render(current, time.time()) if current is not None else ""

    def publish(self, sample: Sample) -> None:
        with self._lock:
            self._sample = sample

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        # shutdown() waits for serve_forever to notice; when the agent failed before start()
        # it never ran, and the wait would last for ever (a start failure that never exits).
        if self._thread.is_alive():
            self.server.shutdown()
        self.server.server_close()
