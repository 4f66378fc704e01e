"""The HTTP listener under the status page: idle connections hold no thread.

`http.server.ThreadingHTTPServer` gives every connection a thread for as long as the
client keeps it open, so idle sockets pile up threads without end (and a slow client
holds one forever). Here an accepted connection waits in a selector, costing no
thread, until its request starts to arrive; it is then served by one of a few pool
threads, under a socket timeout. A connection that sends nothing for `timeout`
seconds is closed, and at most `max_waiting` wait at once (the oldest are closed to
make room). Every response closes its connection (HTTP/1.0), so probes and scrapes
always find a thread.
"""

from __future__ import annotations

import contextlib
import logging
import selectors
import socket
import threading
import time
from collections import deque
from concurrent.futures import ThreadPoolExecutor
from http.server import BaseHTTPRequestHandler, HTTPServer

log = logging.getLogger("xlacache.server")

REQUEST_TIMEOUT = 10.0  # seconds a connection may stay silent, before or during its request
THREADS = 4  # requests served at once (scrapes and probes are small and few)
MAX_WAITING = 256  # connections waiting for their request at once


class BoundedHTTPServer(HTTPServer):
    request_queue_size = 128  # listen backlog (socketserver's 5 makes bursts wait for SYN retries)

    def __init__(
        self,
        address: tuple[str, int],
        handler: type[BaseHTTPRequestHandler],
        timeout: float = REQUEST_TIMEOUT,
        threads: int = THREADS,
        max_waiting: int = MAX_WAITING,
    ) -> None:
        # A handler class of our own, so the timeout is not set on the caller's class.
        handler = type(handler.__name__, (handler,), {"timeout": timeout})
        super().__init__(address, handler)
        self.idle_timeout = timeout
        self.max_waiting = max_waiting
        self._pool = ThreadPoolExecutor(threads, thread_name_prefix="xlacache-http")
        self._incoming: deque[tuple[socket.socket, object]] = deque()
        self._waiting: dict[socket.socket, tuple[object, float]] = {}  # -> (address, deadline)
        self._wake_read, self._wake_write = socket.socketpair()
        self._selector = selectors.DefaultSelector()
        self._selector.register(self._wake_read, selectors.EVENT_READ)
        self._closed = False
        self._waiter = threading.Thread(
            target=self._wait_loop, name="xlacache-http-idle", daemon=True
        )
        self._waiter.start()

    # Called by serve_forever's thread for each accepted connection.
    def process_request(self, request, client_address) -> None:
        self._incoming.append((request, client_address))
        self._wake()

    def server_close(self) -> None:
        super().server_close()
        self._closed = True
        self._wake()
        self._waiter.join(5.0)
        self._pool.shutdown(wait=False, cancel_futures=True)

    def handle_error(self, request, client_address) -> None:
        log.debug("status page: request from %s failed", client_address, exc_info=True)

    def _wake(self) -> None:
        with contextlib.suppress(OSError):  # a full buffer: the loop is awake anyway
            self._wake_write.send(b"\0")

    def _serve(self, request, client_address) -> None:
        try:
            self.finish_request(request, client_address)
        except Exception:  # noqa: BLE001 - a broken connection harms nobody else
            self.handle_error(request, client_address)
        finally:
            self.shutdown_request(request)

    def _wait_loop(self) -> None:
        """Watch waiting connections: hand the ones with data to the pool, close the
        ones silent past their deadline."""
        while not self._closed:
            for key, _ in self._selector.select(timeout=min(1.0, self.idle_timeout)):
                if key.fileobj is self._wake_read:
                    self._wake_read.recv(4096)
                    continue
                request = key.fileobj
                self._selector.unregister(request)
                address, _ = self._waiting.pop(request)
                self._pool.submit(self._serve, request, address)
            self._admit_incoming()
            self._close_expired()
        for request in list(self._waiting):
            self._drop(request)
        self._selector.close()
        self._wake_read.close()
        self._wake_write.close()

    def _admit_incoming(self) -> None:
        while self._incoming:
            request, address = self._incoming.popleft()
            if len(self._waiting) >= self.max_waiting:  # make room: close the oldest
                self._drop(next(iter(self._waiting)))
            self._waiting[request] = (address, time.monotonic() + self.idle_timeout)
            self._selector.register(request, selectors.EVENT_READ)

    def _close_expired(self) -> None:
        now = time.monotonic()
        for request, (_, deadline) in list(self._waiting.items()):
            if deadline <= now:
                self._drop(request)

    def _drop(self, request) -> None:
        self._waiting.pop(request, None)
        with contextlib.suppress(KeyError, ValueError):
            self._selector.unregister(request)
        self.shutdown_request(request)
