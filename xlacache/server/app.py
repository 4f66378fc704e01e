"""Assemble and run the daemon: gRPC service, health, reflection, metrics, shutdown."""

from __future__ import annotations

import logging
import signal
import threading
from concurrent import futures

import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection

from xlacache._version import __version__
from xlacache.protocol import SERVICE_NAME
from xlacache.server import diskio
from xlacache.server.auth import TokenFileWatcher, TokenTable
from xlacache.server.config import ServerConfig, is_loopback, split_host_port
from xlacache.server.limits import IdleMonitor, Watchdog
from xlacache.server.listen import bind_failed, check_bindable, tls_credentials
from xlacache.server.metrics import ServerMetrics
from xlacache.server.overview import Overview
from xlacache.server.service import CacheService, method_handlers
from xlacache.server.status_page import StatusServer
from xlacache.server.storage import lease_table, local_disk, open_served_store

log = logging.getLogger("xlacache.server")

# One chunk plus framing must fit what a client sends; nothing bigger is accepted.
MESSAGE_SLACK = 64 * 1024
# What the server sends may be bigger: a Prune's list of what it removed (about 140
# bytes an entry: 50,000 entries, 7 MB). The client accepts up to its REPLY_LIMIT.
REPLY_LIMIT = 128 * 1024 * 1024
FSYNC_NOTES = {
    "always": "each entry reaches the disk before it is acknowledged",
    "background": "entries reach the disk within a second",
    "off": "the kernel writes entries back; a machine crash may cost the last ~30 s of "
    "entries (each a miss: reads verify), a graceful stop syncs them",
}
# Threads beyond the `workers` that Cache calls may hold: health checks, reflection and
# the refusal of calls beyond `workers` always find one.
SPARE_THREADS = 8


class CacheServer:
    """One running `xlacache serve`. start(), then stop(grace) or serve_forever()."""

    def __init__(self, config: ServerConfig) -> None:
        self.config = config
        self.tokens = TokenTable.load(config.tokens)
        self.token_watcher = (
            TokenFileWatcher(config.tokens, self.tokens, config.token_check_interval)
            if config.tokens
            else None
        )
        # Everything that can refuse to start is checked before anything starts.
        credentials = tls_credentials(config)
        check_bindable(config.listen, "gRPC")
        if config.metrics_listen:
            check_bindable(config.metrics_listen, "metrics")
        self.store = open_served_store(config)
        # Store gauges describe this server's disk (a bucket is listed by Stats alone).
        self.metrics = ServerMetrics(local_disk(self.store).summary, config.max_size)
        self.watchdog = Watchdog()
        self.idle = IdleMonitor(
            config.idle_timeout, on_idle=lambda: self.metrics.add("rejected", 1, "idle")
        )
        self.service = CacheService(
            self.store, config, self.tokens, self.metrics, self.watchdog,
            lease_table(self.store), self.idle,
        )  # fmt: skip
        signers = self.service.transfers.required_signers
        self.overview = Overview(
            local_disk(self.store), config, self.metrics, self.service.misses,
            signers.key_ids if signers else [], url=self.store.url,
        )  # fmt: skip
        self.health = health.HealthServicer(experimental_non_blocking=True)
        self.state = "starting"
        max_message = config.chunk_size + MESSAGE_SLACK
        self.grpc_server = grpc.server(
            futures.ThreadPoolExecutor(
                max_workers=config.workers + SPARE_THREADS, thread_name_prefix="rpc"
            ),
            maximum_concurrent_rpcs=config.max_streams,
            options=[
                ("grpc.max_receive_message_length", max_message),
                ("grpc.max_send_message_length", max(max_message, REPLY_LIMIT)),
                ("grpc.so_reuseport", 0),
                ("grpc.keepalive_permit_without_calls", 1),
                ("grpc.http2.min_ping_interval_without_data_ms", 10_000),
            ],
        )
        self.grpc_server.add_generic_rpc_handlers((method_handlers(self.service),))
        health_pb2_grpc.add_HealthServicer_to_server(self.health, self.grpc_server)
        reflection.enable_server_reflection(
            (SERVICE_NAME, health.SERVICE_NAME, reflection.SERVICE_NAME), self.grpc_server
        )
        self.http: StatusServer | None = None
        try:
            self.port = self._bind(credentials)
            if config.metrics_listen:
                host, port = split_host_port(config.metrics_listen)
                try:
                    self.http = StatusServer(
                        host, port, self.metrics.registry, self.status, self.tokens
                    )
                except OSError as exc:
                    raise bind_failed(config.metrics_listen, "metrics", exc) from None
        except BaseException:
            self.watchdog.stop()
            self.idle.stop()
            self.store.close()
            raise
        self._stopped = threading.Event()
        self._reconciler = threading.Thread(
            target=self._reconcile_loop, name="xlacache-reconcile", daemon=True
        )

    @property
    def address(self) -> str:
        host, _ = split_host_port(self.config.listen)
        return f"{host if ':' not in host else f'[{host}]'}:{self.port}"

    def _bind(self, credentials: grpc.ServerCredentials | None) -> int:
        address = self.config.listen
        try:
            if credentials is not None:
                port = self.grpc_server.add_secure_port(address, credentials)
            else:
                port = self.grpc_server.add_insecure_port(address)
        except RuntimeError:  # grpcio raises on a failed bind (a race with check_bindable)
            port = 0
        if port == 0:
            raise bind_failed(address, "gRPC")
        return port

    def auth_mode(self) -> str:
        if self.tokens.open:
            return "OPEN (no tokens: every caller may read, write and delete)"
        return f"bearer tokens ({len(self.tokens)} configured)"

    def tls_mode(self) -> str:
        if not self.config.tls_cert:
            return "off"
        return "mutual TLS" if self.config.tls_client_ca else "on"

    def status(self) -> dict:
        """Everything the status page and /status.json show (see server/overview.py)."""
        return self.overview.status(
            {
                "version": __version__,
                "state": self.state,
                "listen": self.address,
                "auth": self.auth_mode(),
                "tls": self.tls_mode(),
            }
        )

    def _reconcile_loop(self) -> None:
        """Every reconcile_interval: make the index match the entry files (index drift)."""
        while not self._stopped.wait(self.config.reconcile_interval):
            try:
                drift = self.store.reconcile()
            except Exception:  # noqa: BLE001 - the loop must go on; the next pass retries
                log.exception("reconciling the index failed")
                continue
            if drift:
                log.warning("index drift: %d rows added or dropped to match the entries", drift)

    def start(self) -> None:
        diskio.reuse_freed_memory()
        self.grpc_server.start()
        self.overview.history.start()
        if self.http:
            self.http.start()
        if self.config.reconcile_interval > 0:
            self._reconciler.start()
        if self.token_watcher:
            self.token_watcher.start()
        self.health.set("", health_pb2.HealthCheckResponse.SERVING)
        self.health.set(SERVICE_NAME, health_pb2.HealthCheckResponse.SERVING)
        self.state = "serving"
        log.info(
            "xlacache serve %s: listening on %s (TLS %s), store %s, auth %s",
            __version__, self.address, self.tls_mode(), self.store.url, self.auth_mode(),
        )  # fmt: skip
        if self.service.transfers.required_signers:
            ids = ", ".join(self.service.transfers.required_signers.key_ids)
            log.info("uploads must be signed by one of: %s", ids)
        log.info("fsync %s: %s", self.config.fsync, FSYNC_NOTES[self.config.fsync])
        if self.tokens.open:
            log.warning(
                "serving WITHOUT authentication%s",
                "" if is_loopback(self.config.listen) else " on a non-loopback address",
            )
        if self.http:
            host, _ = split_host_port(self.config.metrics_listen)
            log.info(
                "status page and metrics on http://%s:%d/ (%s)", host, self.http.port,
                "open" if self.tokens.open else "a token of the token file needed",
            )  # fmt: skip

    def stop(self, grace: float | None = None) -> None:
        """Refuse new RPCs, let running ones finish for `grace` seconds, then close."""
        if self.state in ("draining", "stopped"):
            return
        grace = self.config.shutdown_grace if grace is None else grace
        self.state = "draining"
        self.health.enter_graceful_shutdown()
        log.info("shutting down: finishing in-flight requests (up to %.0f s)", grace)
        self.grpc_server.stop(grace).wait()
        self._stopped.set()
        self.watchdog.stop()
        if self.token_watcher:
            self.token_watcher.stop()
        self.overview.history.stop()
        self.idle.stop()
        if self.http:
            self.http.stop()
        if self._reconciler.is_alive():
            self._reconciler.join()
        synced = local_disk(
            self.store
        ).sync()  # a planned stop loses nothing (see stores.durability)
        if synced:
            log.info("synced %d recently stored entries to disk", synced)
        self.store.close()
        self.state = "stopped"
        log.info("stopped")

    def serve_forever(self) -> None:
        """Run until SIGTERM or SIGINT, then shut down gracefully; SIGHUP reloads the
        token file."""
        stop = threading.Event()

        def on_signal(signum, _frame):
            log.info("received %s", signal.Signals(signum).name)
            stop.set()

        def on_hangup(_signum, _frame):
            if self.token_watcher:
                self.token_watcher.reload_now()

        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, on_signal)
        signal.signal(signal.SIGHUP, on_hangup)
        self.start()
        while not stop.wait(1.0):
            pass
        self.stop()


def configure_logging(level: str) -> None:
    logging.basicConfig(
        level=getattr(logging, level.upper(), logging.INFO),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
