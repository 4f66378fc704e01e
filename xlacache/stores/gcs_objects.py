"""GCS objects through gcsfs: a deadline on every call, retries with backoff, preconditions.

`GCSObjects` is the object layer under `GCSStore`, and the one to build other
GCS-backed structures on (leases, markers): object names are relative to the root
of a ``gs://bucket/prefix`` URL.

- Every call runs under a deadline: asyncio cancels what is still running when it
  passes, so nothing hangs and nothing is left running behind the caller.
- 408, 429, 5xx, connection errors and per-request timeouts are retried with
  exponential backoff and jitter while the deadline allows (`RetryPolicy`); gcsfs
  itself makes one attempt per request here, its own loop (six tries, ~30 s of
  sleeps) replaced by this one. After repeated give-ups a circuit breaker stops
  calling for a while, so a dead endpoint costs one deadline, not one per call.
- Writes that must not clobber are single-request (multipart) uploads with a
  generation precondition: `create` (ifGenerationMatch=0) and `replace`
  (ifGenerationMatch=<generation>). Resumable uploads are never used: the emulator
  does not enforce preconditions on them, and one request keeps the check atomic.
  After an ambiguous failure (an answer lost after the write landed) the retry may
  answer "precondition failed" for our own write: callers that must know compare
  the stored content (a holder id, an entry's bytes).
- Deletes and metadata patches carry generation / metageneration preconditions when
  given (real GCS enforces them; fake-gcs-server does not).

Authentication: with ``STORAGE_EMULATOR_HOST`` set and no token, anonymous;
otherwise gcsfs's default chain (Application Default Credentials: a key file in
``GOOGLE_APPLICATION_CREDENTIALS``, gcloud's user credentials, or the metadata server
on GCE/GKE, which is where Workload Identity comes in).
"""

from __future__ import annotations

import asyncio
import json
import os
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import datetime

from xlacache import counters
from xlacache.errors import (
    CacheError,
    ConfigError,
    EntryTooLargeError,
    InvalidRequestError,
    PermissionDeniedError,
    ServerBusyError,
    ServerError,
    StoreUnavailableError,
    UnauthenticatedError,
)
from xlacache.stores import schemes_of
from xlacache.stores.resilience import CircuitBreaker, RetryPolicy

# The experimental zonal-bucket support probes a gRPC endpoint on first use (60-90 s
# against an HTTP emulator); it must be off before gcsfs is imported.
os.environ.setdefault("GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT", "false")

try:  # after the environment setting above
    import aiohttp
    from fsspec.asyn import sync
    from gcsfs.core import GCSFileSystem
    from gcsfs.core import quote as _quote
    from gcsfs.retry import is_retriable
except ImportError as exc:  # gcsfs is an optional dependency
    raise ConfigError(f"gs:// stores need gcsfs (pip install 'xlacache[gcs]'): {exc}") from exc

EMULATOR_ENV = "STORAGE_EMULATOR_HOST"
DEFAULT_TIMEOUT = 10.0


# HTTP statuses worth another try, and the error type of other failing statuses.
RETRY_STATUSES = frozenset({408, 429, *range(500, 600)})
STATUS_ERRORS: dict[int, type[CacheError]] = {
    400: InvalidRequestError,
    401: UnauthenticatedError,
    403: PermissionDeniedError,
    408: StoreUnavailableError,
    413: EntryTooLargeError,
    429: ServerBusyError,
}


class HttpStatusError(Exception):
    """A GCS answer with a status of 400 or more (classified by `status`, never by text)."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(f"HTTP {status}: {message}" if message else f"HTTP {status}")
        self.status = status


def _error_message(contents: bytes) -> str:
    """GCS's error message from a JSON error body (for people; nothing matches on it)."""
    try:
        error = json.loads(contents)["error"]
        return str(error.get("message", "") if isinstance(error, dict) else error)
    except (ValueError, KeyError, TypeError, AttributeError):
        return contents[:200].decode(errors="replace").strip()


class _OneAttemptGCSFileSystem(GCSFileSystem):
    """gcsfs making one HTTP attempt per request (GCSObjects retries, within its deadline)
    and failing with the answer's status (`HttpStatusError`): gcsfs's own check keeps
    the status of some answers only in the message text (a 403 is a bare OSError)."""

    async def _request(self, method, path, *args, headers=None, json=None, data=None, **kwargs):
        cache = {k: kwargs.pop(k, None) for k in ("cache_type", "cache_source")}
        await self._set_session()
        async with self.session.request(
            method=method,
            url=self._format_path(path, args),
            params=self._get_params(kwargs),
            json=json,
            headers=self._get_headers(headers, **cache),
            data=data,
            timeout=self.requests_timeout,
        ) as response:
            contents = await response.read()
            if response.status >= 400:
                raise HttpStatusError(response.status, _error_message(contents))
            return response.status, response.headers, response.request_info, contents


@dataclass(frozen=True)
class ObjectInfo:
    """An object's metadata; `name` is relative to the GCSObjects root."""

    name: str
    size: int
    generation: int
    metageneration: int | None = None
    metadata: dict[str, str] = field(default_factory=dict)
    created: float | None = None  # unix time (timeCreated)
    updated: float | None = None  # unix time (updated)


def parse_url(url: str) -> tuple[str, str]:
    """(bucket, prefix) from gs://bucket[/prefix] (a bucket's scheme in the store
    registry: gcs:// too); the prefix has no slashes at either end."""
    for scheme in schemes_of("bucket"):
        if url.startswith(f"{scheme}://"):
            bucket, _, prefix = url[len(scheme) + 3 :].partition("/")
            if bucket and "/" not in bucket:
                return bucket, prefix.strip("/")
    raise ConfigError(f"not a GCS URL: {url!r} (expected gs://BUCKET[/PREFIX])")


def _timestamp(text: str | None) -> float | None:
    if not text:
        return None
    try:
        return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None


def _int(value) -> int | None:
    try:
        return int(value)
    except (TypeError, ValueError):
        return None


class GCSObjects:
    """Objects under ``gs://bucket/prefix``, through gcsfs, each call under a deadline."""

    def __init__(
        self,
        url: str,
        *,
        token=None,
        endpoint_url: str | None = None,
        timeout: float = DEFAULT_TIMEOUT,
        retry: RetryPolicy | None = None,
        breaker: CircuitBreaker | None = None,
    ) -> None:
        self.bucket, self.prefix = parse_url(url)
        self.url = f"gs://{self.bucket}" + (f"/{self.prefix}" if self.prefix else "")
        self.timeout = timeout
        self.retry = retry or RetryPolicy()
        self.breaker = breaker or CircuitBreaker()
        if token is None and os.environ.get(EMULATOR_ENV, "default") != "default":
            token = "anon"
        self._fs_options = {
            "token": token,
            "endpoint_url": endpoint_url,
            # A stalled connection is given up after `timeout` (then retried).
            "requests_timeout": aiohttp.ClientTimeout(
                total=None, sock_connect=timeout, sock_read=timeout
            ),
        }
        self._fs_lock = threading.Lock()
        self._fs_pid = -1
        self._fs_instance: GCSFileSystem | None = None

    # -- object operations --------------------------------------------------------------

    def read(self, name: str, deadline: float | None = None) -> tuple[bytes, ObjectInfo] | None:
        """The object's bytes and what its response headers say of it; None if absent."""

        async def call():
            fs = self._fs()
            return await fs._call("GET", fs.url(f"{self.bucket}/{self._full(name)}"))

        found = self._run(call, deadline, f"read {name}", absent=None)
        if found is None:
            return None
        headers, data = found
        metadata = {
            k[len("x-goog-meta-") :].lower(): v
            for k, v in headers.items()
            if k.lower().startswith("x-goog-meta-")
        }
        info = ObjectInfo(
            name=name,
            size=len(data),
            generation=_int(headers.get("x-goog-generation")) or 0,
            metageneration=_int(headers.get("x-goog-metageneration")),
            metadata=metadata,
        )
        return data, info

    def stat(self, name: str, deadline: float | None = None) -> ObjectInfo | None:
        """The object's metadata, or None if absent."""

        async def call():
            return await self._fs()._call(
                "GET", "b/{}/o/{}", self.bucket, self._full(name), json_out=True
            )

        resource = self._run(call, deadline, f"stat {name}", absent=None)
        return None if resource is None else self._info(resource)

    def bucket_exists(self) -> bool:
        """False when the bucket is missing; True when it exists, or when these
        credentials may not ask (a reader's objectViewer has no storage.buckets.get)."""

        async def call():
            return await self._fs()._call("GET", "b/{}", self.bucket, json_out=True)

        try:
            return self._run(call, None, "get the bucket", absent=None) is not None
        except PermissionDeniedError:
            return True

    def create(
        self,
        name: str,
        data: bytes,
        metadata: dict[str, str] | None = None,
        deadline: float | None = None,
    ) -> ObjectInfo | None:
        """Create the object unless it exists (ifGenerationMatch=0); None if it existed."""
        return self.replace(name, data, 0, metadata, deadline)

    def replace(
        self,
        name: str,
        data: bytes,
        generation: int,
        metadata: dict[str, str] | None = None,
        deadline: float | None = None,
    ) -> ObjectInfo | None:
        """Write the object if its generation is still `generation` (0: absent), in one
        request; the new object's info, or None when the precondition failed."""
        resource = self._run(
            lambda: self._upload(name, data, metadata, generation),
            deadline,
            f"write {name}",
            absent=FileNotFoundError,
            precondition=None,
        )
        return None if resource is None else self._info(resource)

    def delete(self, name: str, generation: int | None = None, deadline=None) -> bool:
        """Delete the object (only that generation, when given); True if it was deleted."""

        async def call():
            await self._fs()._call(
                "DELETE",
                "b/{}/o/{}",
                self.bucket,
                self._full(name),
                ifGenerationMatch=generation,
            )
            return True

        return self._run(call, deadline, f"delete {name}", absent=False, precondition=False)

    def patch_metadata(
        self,
        name: str,
        metadata: dict[str, str],
        metageneration: int | None = None,
        deadline: float | None = None,
        attempts: int | None = None,
    ) -> ObjectInfo | None:
        """Merge custom metadata into the object's; None if absent or the metageneration
        moved on."""

        async def call():
            return await self._fs()._call(
                "PATCH",
                "b/{}/o/{}",
                self.bucket,
                self._full(name),
                json={"metadata": metadata},
                ifMetagenerationMatch=metageneration,
                json_out=True,
            )

        resource = self._run(
            call, deadline, f"patch {name}", absent=None, precondition=None, attempts=attempts
        )
        return None if resource is None else self._info(resource)

    def list(self, prefix: str = "", page_size: int = 1000) -> Iterator[ObjectInfo]:
        """Objects whose names start with `prefix`, a page (one call, one deadline) at a time.

        Listings may lag behind writes: a fresh object may be missing for a while.
        """
        token = None
        while True:

            async def call(token=token):
                return await self._fs()._call(
                    "GET",
                    "b/{}/o",
                    self.bucket,
                    prefix=self._full(prefix),
                    maxResults=page_size,
                    pageToken=token,
                    json_out=True,
                )

            page = self._run(call, None, f"list {prefix}", absent=None)
            if page is None:  # no such bucket
                return
            yield from (self._info(item) for item in page.get("items", ()))
            token = page.get("nextPageToken")
            if not token:
                return

    # -- plumbing -----------------------------------------------------------------------

    def _full(self, name: str) -> str:
        return f"{self.prefix}/{name}" if self.prefix else name

    def _info(self, resource: dict) -> ObjectInfo:
        full = resource["name"]
        name = full[len(self.prefix) + 1 :] if self.prefix else full
        return ObjectInfo(
            name=name,
            size=_int(resource.get("size")) or 0,
            generation=_int(resource.get("generation")) or 0,
            metageneration=_int(resource.get("metageneration")),
            metadata=dict(resource.get("metadata") or {}),
            created=_timestamp(resource.get("timeCreated")),
            updated=_timestamp(resource.get("updated")),
        )

    def _fs(self) -> GCSFileSystem:
        """This process's gcsfs instance (a forked child makes its own)."""
        with self._fs_lock:
            if self._fs_instance is None or self._fs_pid != os.getpid():
                self._fs_instance = _OneAttemptGCSFileSystem(**self._fs_options)
                self._fs_pid = os.getpid()
            return self._fs_instance

    async def _upload(self, name: str, data: bytes, metadata, generation: int) -> dict:
        """One multipart upload request: metadata and bytes together."""
        fs = self._fs()
        boundary = uuid.uuid4().hex
        resource = json.dumps({"name": self._full(name), "metadata": metadata or {}})
        body = b"".join(
            (
                f"--{boundary}\r\nContent-Type: application/json; charset=UTF-8\r\n\r\n"
                f"{resource}\r\n--{boundary}\r\n"
                "Content-Type: application/octet-stream\r\n\r\n".encode(),
                data,
                f"\r\n--{boundary}--\r\n".encode(),
            )
        )
        return await fs._call(
            "POST",
            f"{fs._location}/upload/storage/v1/b/{_quote(self.bucket)}/o",
            uploadType="multipart",
            ifGenerationMatch=generation,
            headers={"Content-Type": f'multipart/related; boundary="{boundary}"'},
            data=body,
            json_out=True,
        )

    def _run(
        self,
        make_call,
        deadline: float | None,
        what: str,
        *,
        absent=FileNotFoundError,
        precondition=FileExistsError,
        attempts: int | None = None,
    ):
        """Run make_call() on gcsfs's loop under the deadline, retrying what is transient.

        `absent` / `precondition`: what to return for 404 / 412 (an exception class:
        raise it, with the object named).
        """
        budget = self.timeout if deadline is None else deadline
        end = time.monotonic() + budget
        if not self.breaker.allow():
            raise StoreUnavailableError(f"{self.url}: GCS marked unavailable, backing off")
        attempts = attempts or self.retry.attempts
        attempt = 0
        while True:
            remaining = end - time.monotonic()
            try:
                if remaining <= 0:
                    raise asyncio.TimeoutError
                result = sync(self._fs().loop, make_call, timeout=remaining)
            except Exception as exc:  # noqa: BLE001 - classified below
                status = exc.status if isinstance(exc, HttpStatusError) else None
                if status == 404:
                    return self._answered(absent, exc, what)
                if status == 412:  # a precondition failed
                    return self._answered(precondition, exc, what)
                timed_out = time.monotonic() >= end
                if timed_out or not _transient(exc):
                    raise self._failure(exc, what, budget, timed_out) from None
                delay = self.retry.delay(attempt)
                attempt += 1
                if attempt >= attempts or time.monotonic() + delay >= end:
                    raise self._failure(exc, what, budget, False) from None
                counters.add("gcs_retries")
                time.sleep(delay)
                continue
            self.breaker.success()
            return result

    def _answered(self, outcome, exc: Exception, what: str):
        self.breaker.success()  # GCS answered; the answer is ours to handle
        if isinstance(outcome, type) and issubclass(outcome, BaseException):
            raise outcome(f"{self.url}: {what}: {exc}")
        return outcome

    def _failure(self, exc: Exception, what: str, budget: float, timed_out: bool) -> CacheError:
        """The cache error a failed call raises (by HTTP status or exception type); feeds
        the breaker when GCS, or our access to it, is unwell."""
        message = f"{self.url}: {what}: {type(exc).__name__}: {exc}".rstrip(": ")
        if timed_out or isinstance(exc, asyncio.TimeoutError):
            self.breaker.failure(trip_now=True)
            return StoreUnavailableError(f"{self.url}: {what}: no answer within {budget:.0f} s")
        if isinstance(exc, HttpStatusError):
            message = f"{self.url}: {what}: {exc}"
            if exc.status == 401:  # our credentials: asking again soon will not help
                self.breaker.failure(trip_now=True)
            elif exc.status in RETRY_STATUSES:
                self.breaker.failure()
            else:
                self.breaker.success()  # GCS answered; the refusal is about this call
            default = ServerError if exc.status >= 500 else CacheError
            return STATUS_ERRORS.get(exc.status, default)(message)
        if _transient(exc):  # a dropped connection, a stalled request, a token refresh
            self.breaker.failure()
            return StoreUnavailableError(message)
        self.breaker.success()
        return CacheError(message)


def _transient(exc: BaseException) -> bool:
    """Worth another try: 408, 429, 5xx, a dropped connection, a stalled request."""
    if isinstance(exc, HttpStatusError):
        return exc.status in RETRY_STATUSES
    return isinstance(exc, asyncio.TimeoutError) or is_retriable(exc)
