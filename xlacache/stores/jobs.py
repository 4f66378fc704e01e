"""Job manifests: which entries a job loaded last time, so a new worker fetches them early.

A worker with an empty local directory (every new member of a pod) would otherwise fetch
its programs one miss at a time. A writer records the keys its process used under its
job's name (`job=` / XLACACHE_JOB); a new worker of the job reads them at start-up and
fetches them in the background while it imports and traces (`xlacache.prefetch`).

A manifest is a list of keys, the newest run's first (in the order that run first used
them), then older runs' keys, at most MAX_KEYS. Where it lives:

- a server keeps it in its store: ``STORE/jobs/<job>.json`` (`DirJobs`), or the bucket's
  (`GCSJobs`); clients reach it through the JobKeys (read) and RecordJob (write) RPCs;
- a bucket: the object ``PREFIX/jobs/<job>.json`` (`GCSJobs`), rewritten under a
  generation precondition, so writers of one job (or server replicas) do not lose keys.

Readers record nothing. A manifest names keys only: what is fetched is verified like any
entry, and a key pruned since is a miss.
"""

from __future__ import annotations

import abc
import json
import os
import re
import threading
import uuid
from pathlib import Path
from typing import TYPE_CHECKING

from xlacache import counters
from xlacache.errors import CacheError, InvalidRequestError
from xlacache.key import check_key, is_valid_key

if TYPE_CHECKING:
    from xlacache.stores.gcs_objects import GCSObjects

MAX_KEYS = 1024  # keys a manifest keeps (a job's programs, several runs of them)
JOBS = "jobs/"
_JOB_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")
_RETRIES = 4  # rewrites that lose a race with another writer, tried again


def check_job(job: str) -> str:
    """A job name: 1 to 128 letters, digits, '.', '_' or '-' (not first); else
    InvalidRequestError."""
    if not isinstance(job, str) or not _JOB_NAME.fullmatch(job):
        raise InvalidRequestError(
            f"malformed job name {job!r}: 1-128 letters, digits, '.', '_', '-'"
        )
    return job


def check_keys(keys: list[str]) -> list[str]:
    """A job record's keys: at most MAX_KEYS, each a cache key (`key.check_key`)."""
    if len(keys) > MAX_KEYS:
        raise InvalidRequestError(f"at most {MAX_KEYS} keys per job record")
    for key in keys:
        check_key(key)
    return keys


def new_run() -> str:
    """An id for this process's run of a job (its keys stay together, in order)."""
    return uuid.uuid4().hex[:16]


def merge(manifest: dict, run: str, keys: list[str]) -> dict:
    """`manifest` with `keys` of run `run` added: that run's keys first (old ones of the
    run, then the new, in order), then other runs' keys, at most MAX_KEYS."""
    old = [item for item in manifest.get("keys", []) if _valid_item(item)]
    ours = [k for k, r in old if r == run]
    ours += [k for k in dict.fromkeys(keys) if k not in set(ours)]
    taken = set(ours)
    rest = [[k, r] for k, r in old if r != run and k not in taken]
    return {"keys": ([[k, run] for k in ours] + rest)[:MAX_KEYS]}


def newest(manifest: dict, limit: int) -> list[str]:
    """The first `limit` keys of a manifest (the newest run's first)."""
    keys = [k for k, _ in (i for i in manifest.get("keys", []) if _valid_item(i))]
    return list(dict.fromkeys(keys))[: max(0, limit)]


def _valid_item(item) -> bool:
    return (
        isinstance(item, list) and len(item) == 2 and is_valid_key(item[0])
        and isinstance(item[1], str)
    )  # fmt: skip


def _decode(data: bytes | None) -> dict:
    try:
        manifest = json.loads(data) if data else {}
    except ValueError:
        return {}
    return manifest if isinstance(manifest, dict) else {}


class JobLog(abc.ABC):
    """Manifests by job name."""

    @abc.abstractmethod
    def keys(self, job: str, limit: int) -> list[str]:
        """The job's keys, newest run first, at most `limit`; [] for an unknown job."""

    @abc.abstractmethod
    def record(self, job: str, run: str, keys: list[str]) -> None:
        """Add keys run `run` of the job used (a writer's call)."""


class DirJobs(JobLog):
    """Manifests as files under ``ROOT/jobs/`` (a server's directory store)."""

    def __init__(self, root: str | os.PathLike) -> None:
        self.dir = Path(root) / "jobs"
        self._lock = threading.Lock()

    def _path(self, job: str) -> Path:
        return self.dir / f"{check_job(job)}.json"

    def keys(self, job: str, limit: int) -> list[str]:
        try:
            return newest(_decode(self._path(job).read_bytes()), limit)
        except FileNotFoundError:
            return []

    def record(self, job: str, run: str, keys: list[str]) -> None:
        path = self._path(job)
        check_keys(keys)
        with self._lock:
            try:
                manifest = _decode(path.read_bytes())
            except FileNotFoundError:
                manifest = {}
            self.dir.mkdir(exist_ok=True)
            tmp = path.with_name(f".{path.name}.{uuid.uuid4().hex[:8]}")
            tmp.write_text(json.dumps(merge(manifest, run, keys)))
            os.replace(tmp, path)


class GCSJobs(JobLog):
    """Manifests as objects under ``jobs/`` of a bucket prefix."""

    def __init__(self, objects: GCSObjects, timeout: float = 10.0) -> None:
        self.objects = objects
        self.timeout = timeout

    def keys(self, job: str, limit: int) -> list[str]:
        found = self.objects.read(JOBS + check_job(job) + ".json", deadline=self.timeout)
        return [] if found is None else newest(_decode(found[0]), limit)

    def record(self, job: str, run: str, keys: list[str]) -> None:
        name = JOBS + check_job(job) + ".json"
        check_keys(keys)
        for _ in range(_RETRIES):
            found = self.objects.read(name, deadline=self.timeout)
            manifest, generation = (_decode(found[0]), found[1].generation) if found else ({}, 0)
            data = json.dumps(merge(manifest, run, keys)).encode()
            if self.objects.replace(name, data, generation, deadline=self.timeout) is not None:
                return
        counters.add("job_records_dropped")  # other writers kept winning: these keys wait
        counters.hidden(
            "job.record",
            CacheError(f"{name}: lost {_RETRIES} races with other writers; record dropped"),
        )
