"""This process's place in a multi-process job, and ``jax.distributed`` start-up.

A job is described by the environment, as torchrun and ``launch`` set it: ``RANK``,
``WORLD_SIZE``, ``LOCAL_RANK``, ``LOCAL_WORLD_SIZE``, and the coordinator's address in
``XLACACHE_COORDINATOR`` (``launch``); under torchrun, rank 0 picks a free port at
``MASTER_ADDR`` and publishes it through torchrun's own store (``MASTER_PORT``); else
``MASTER_ADDR`` and ``MASTER_PORT + 1``. ``start()`` initializes ``jax.distributed`` with bounded
timeouts; it must run before anything starts JAX's backend. ``join()`` does it from the
environment when nothing has (SPMD under torchrun), or adopts a ``jax.distributed`` runtime
the script started itself.

Devices per process: torch_xla's ``CPU_NUM_DEVICES`` sets how many CPU devices each process
has (``jax_num_cpu_devices``; ``XLA_FLAGS=--xla_force_host_platform_device_count`` works too,
as JAX reads it), applied at import of ``xlacache.lazy`` and in every worker.
"""

from __future__ import annotations

import contextlib
import os
import socket
from dataclasses import dataclass, replace
from datetime import timedelta
from typing import Any

from xlacache.lazy_settings import lazy_setting

from ..state import STATE
from . import quiet

AXIS = "xlacache_processes"  # the process mesh's axis name, in every collective's lowering


def _env_int(name: str, default: int) -> int:
    raw = os.environ.get(name, "").strip()
    if not raw:
        return default
    try:
        return int(raw)
    except ValueError:
        raise ValueError(f"xlacache.lazy: {name}={raw!r} is not an integer") from None


@dataclass(frozen=True)
class Job:
    rank: int
    world: int
    local_rank: int
    local_world: int
    coordinator: str | None


def job_from_env() -> Job:
    """The job this process belongs to, from the environment (a single process if unset)."""
    world = _env_int("WORLD_SIZE", 1)
    rank = _env_int("RANK", 0)
    if world < 1 or not 0 <= rank < world:
        raise ValueError(f"xlacache.lazy: RANK={rank} is not a rank of WORLD_SIZE={world}")
    local_rank = _env_int("LOCAL_RANK", rank)
    local_world = _env_int("LOCAL_WORLD_SIZE", world)
    coordinator = lazy_setting("coordinator")
    master = _master()
    if coordinator is None and master is not None and not _torchrun_store():
        coordinator = f"{master[0]}:{master[1] + 1}"
    return Job(rank, world, local_rank, local_world, coordinator)


def reserve_port(host: str = "127.0.0.1") -> socket.socket:
    """A socket holding a free port at ``host`` (``getsockname()[1]``) until closed. Bound,
    not listening, with ``SO_REUSEPORT``: the kernel gives the port to no other process
    that asks for a free one (another job's coordinator, a server on port 0), while JAX's
    coordinator (gRPC sets ``SO_REUSEPORT``) binds it beside. A port only picked and let go
    could go to a concurrent job, whose workers would then register with ours."""
    s = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET)
    try:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        s.bind((host, 0))
    except BaseException:
        s.close()
        raise
    return s


def _master() -> tuple[str, int] | None:
    if os.environ.get("MASTER_ADDR") and os.environ.get("MASTER_PORT"):
        return os.environ["MASTER_ADDR"], _env_int("MASTER_PORT", 0)
    return None


def _torchrun_store() -> bool:
    """Whether torchrun's agent hosts a store at ``MASTER_ADDR:MASTER_PORT`` for its workers."""
    return _master() is not None and os.environ.get("TORCHELASTIC_USE_AGENT_STORE") == "True"


def _coordinator_via_store(job: Job, held: contextlib.ExitStack) -> str:
    """Rank 0 reserves a free port at ``MASTER_ADDR`` (in ``held``, until its coordinator is
    up) and publishes it in torchrun's store; the others read it (bounded by
    ``XLACACHE_INIT_TIMEOUT``). A fixed ``MASTER_PORT + 1`` can be taken: torchrun's own
    connections get ports next to ``MASTER_PORT``, and JAX's coordinator aborts the process
    when it cannot bind."""
    from torch.distributed import TCPStore

    host, port = _master()  # type: ignore[misc]
    timeout = timedelta(seconds=float(lazy_setting("init_timeout")))
    store = TCPStore(host, port, is_master=False, timeout=timeout, wait_for_workers=False)
    restart = os.environ.get("TORCHELASTIC_RESTART_COUNT", "0")
    key = f"xlacache/coordinator/{restart}"
    if job.rank == 0:
        loopback = host in ("127.0.0.1", "localhost")
        reserved = held.enter_context(reserve_port("127.0.0.1" if loopback else ""))
        store.set(key, str(reserved.getsockname()[1]))
    return f"{host}:{int(store.get(key))}"


def configure_devices() -> None:
    """``CPU_NUM_DEVICES`` -> ``jax_num_cpu_devices``, unless the script set it or JAX's
    backend already started (then the count it started with stays)."""
    if (n := lazy_setting("cpu_num_devices")) is None:
        return
    import jax
    from jax._src import xla_bridge

    if xla_bridge.backends_are_initialized() or jax.config.jax_num_cpu_devices >= 0:
        return
    jax.config.update("jax_num_cpu_devices", n)


def start(job: Job) -> Job:
    """Join ``job``'s ``jax.distributed`` runtime (once per process; nothing for one process);
    returns the job joined, its coordinator agreed on.

    Bounded: ``XLACACHE_INIT_TIMEOUT`` (60 s) for every process to arrive, and a peer that
    stops answering aborts the others after ``XLACACHE_HEARTBEAT_TIMEOUT`` (10 s).
    """
    if STATE.job is not None:
        if STATE.job != replace(job, coordinator=job.coordinator or STATE.job.coordinator):
            raise RuntimeError("xlacache.lazy: this process already joined another job")
        return STATE.job
    configure_devices()
    if job.world > 1:
        with contextlib.ExitStack() as held:  # a reserved coordinator port, until it is bound
            job = _initialize(job, held)
    STATE.job = job
    return job


def _initialize(job: Job, held: contextlib.ExitStack) -> Job:
    """``jax.distributed.initialize`` for ``job`` (more than one process)."""
    if job.coordinator is None and _torchrun_store():
        job = replace(job, coordinator=_coordinator_via_store(job, held))
    if job.coordinator is None:
        raise RuntimeError(
            "xlacache.lazy: WORLD_SIZE > 1 but no coordinator address (set "
            "XLACACHE_COORDINATOR=host:port, or MASTER_ADDR and MASTER_PORT)"
        )
    from jax._src import xla_bridge

    if xla_bridge.backends_are_initialized():
        raise RuntimeError(
            "xlacache.lazy: JAX's backend started before the multi-process runtime; "
            "call xl.launch (or start the job) before using the device"
        )
    import jax

    host = job.coordinator.rsplit(":", 1)[0]
    jax.distributed.initialize(
        job.coordinator,
        job.world,
        job.rank,
        coordinator_bind_address=job.coordinator if host in ("127.0.0.1", "localhost") else None,
        initialization_timeout=int(lazy_setting("init_timeout")),
        heartbeat_timeout_seconds=int(lazy_setting("heartbeat_timeout")),
        shutdown_timeout_seconds=int(lazy_setting("shutdown_timeout")),
    )
    quiet.install()  # Gloo's "[Gloo] Rank N is connected" lines, unless asked for
    return job


def join() -> Job:
    """This process's job, joined if need be: a ``jax.distributed`` runtime the script started
    itself is adopted; else a multi-process job named by the environment (torchrun's
    ``RANK``/``WORLD_SIZE``) is started. Called by ``use_spmd`` and the process names."""
    if STATE.job is not None:
        return STATE.job
    from jax._src.distributed import global_state

    if global_state.client is not None:  # jax.distributed.initialize by the script
        world, rank = int(global_state.num_processes), int(global_state.process_id)
        STATE.job = Job(rank, world, rank, world, global_state.coordinator_address)
        return STATE.job
    job = job_from_env()
    return start(job) if job.world > 1 else job


def current() -> Job:
    """The job this process joined (``start``), else a single process."""
    return STATE.job if STATE.job is not None else Job(0, 1, 0, 1, None)


def client() -> Any:
    """The coordination service's client (key-value store, barriers) of a running job."""
    from jax._src.distributed import global_state

    if global_state.client is None:
        raise RuntimeError("xlacache.lazy: no multi-process job is running")
    return global_state.client


def process_mesh() -> Any:
    """A 1-D mesh over the job's processes (each process's first device), axis ``AXIS``."""
    if STATE.process_mesh is None:
        import jax
        import numpy as np
        from jax.sharding import Mesh

        first: dict[int, Any] = {}
        for d in sorted(jax.devices(), key=lambda d: d.id):
            first.setdefault(d.process_index, d)
        devices = np.array([first[p] for p in sorted(first)], dtype=object)
        STATE.process_mesh = Mesh(devices, (AXIS,))
    return STATE.process_mesh
