"""A graph that holds a collective compiles as one program over the process mesh.

Every process traces the same training step, so each builds the same graph; the graph's
collectives (``all_reduce``, ``all_gather`` nodes, lowered to ``lax.psum``/``all_gather`` over
the mesh axis ``env.AXIS``) make it a multi-process program. Its JAX function runs under
``shard_map`` over a 1-D mesh of the processes: each input is the global array whose shard on
process ``p`` is process ``p``'s own value (concatenated along dimension 0; a 0-dim value
travels as shape ``(1,)``), the body sees exactly the local values, so every op that is not a
collective computes what it computes in one process, and each output's local shard is this
process's result. The compiled program is the same on every process (one persistent key for
the job: rank 0 compiles, the others load it).

Graphs without collectives (rank 0's ``loss.item()``) stay single-device programs that run
without the other processes.

The processes must build the same graph: a rank-dependent constant (``torch.full(..., rank)``)
or an extra output on one rank would make different programs pair their collectives, and JAX
folds a collective over a value that depends on no process's input (``psum(c) = c * world``).
So before a graph with collectives compiles, the processes compare its key through the job's
coordination service (``XLACACHE_COLLECTIVE_TIMEOUT``, 300 s); a difference is an error
naming the ranks, never a wrong number.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

COLLECTIVE_OPS: set[Any] = set()  # filled by ``collectives``


def process_program(order: list[Any], key: bytes) -> ProcessProgram | None:
    """A ``ProcessProgram`` when the graph ``order`` (graph key ``key``) holds a collective,
    once every process has the same graph; else None."""
    if not COLLECTIVE_OPS:
        return None
    for n in order:
        if n.func in COLLECTIVE_OPS:
            _agree(key)
            return ProcessProgram()
    return None


_COMPILES = [0]


def _agree(key: bytes) -> None:
    """Check that every process compiles the graph ``key`` as its next collective program."""
    from .env import client, current, timeout_s

    job = current()
    if job.world == 1:
        raise RuntimeError("xlacache.lazy: a collective outside a multi-process job")
    _COMPILES[0] += 1
    base = f"xlacache/programs/{_COMPILES[0]}"
    kv = client()
    kv.key_value_set(f"{base}/{job.rank}", key.hex())
    timeout = timeout_s("XLACACHE_COLLECTIVE_TIMEOUT", 300)
    keys = []
    for r in range(job.world):
        try:
            keys.append(kv.blocking_key_value_get(f"{base}/{r}", int(timeout * 1000)))
        except Exception as e:  # noqa: BLE001 - a timeout, or the job going down
            raise RuntimeError(
                f"xlacache.lazy: rank {r} did not reach collective program "
                f"#{_COMPILES[0]} within {timeout:g} s: every process must run the same "
                f"graphs with collectives, in the same order ({type(e).__name__})"
            ) from None
    if len(set(keys)) > 1:
        differ = [r for r, k in enumerate(keys) if k != keys[job.rank]]
        raise RuntimeError(
            f"xlacache.lazy: rank {job.rank}'s graph with collectives differs from rank(s) "
            f"{differ}'s (collective program #{_COMPILES[0]}): every process must trace the "
            "same step (no rank-dependent constants or extra pending values on one rank); "
            "run rank-specific work after sync()"
        )


class ProcessProgram:
    """How a graph with collectives is jitted, lowered and called across the processes."""

    def __init__(self) -> None:
        import jax
        from jax.sharding import NamedSharding
        from jax.sharding import PartitionSpec as P

        from .env import AXIS, process_mesh

        self.mesh = process_mesh()
        self.world = self.mesh.devices.size
        self.spec = P(AXIS)
        self.sharding = NamedSharding(self.mesh, self.spec)
        self.device = jax.local_devices()[0]

    def jit(self, fn: Callable[..., list], n_args: int, donated: tuple[int, ...]) -> Any:
        import jax

        scalar_out: list[bool] = []

        def body(*args: Any) -> list[Any]:
            args = tuple(
                a.reshape(()) if s else a for a, s in zip(args, self._scalar_in, strict=True)
            )
            outs = fn(*args)
            scalar_out[:] = [o.ndim == 0 for o in outs]
            return [o.reshape(1) if o.ndim == 0 else o for o in outs]

        self._scalar_out = scalar_out
        mapped = jax.shard_map(
            body,
            mesh=self.mesh,
            in_specs=(self.spec,) * n_args,
            out_specs=self.spec,
            check_vma=False,
        )
        return jax.jit(mapped, donate_argnums=donated, keep_unused=True)

    def avals(self, arrays: list[Any], scalars: Any) -> list[Any]:
        """The global arguments' shapes (for ``lower``), from this process's values."""
        import jax

        args = [*arrays, scalars]
        self._scalar_in = tuple(len(a.shape) == 0 for a in args)
        return [
            jax.ShapeDtypeStruct(self._global_shape(a.shape), a.dtype, sharding=self.sharding)
            for a in args
        ]

    def _global_shape(self, shape: tuple[int, ...]) -> tuple[int, ...]:
        if not shape:
            return (self.world,)
        return (shape[0] * self.world, *shape[1:])

    def wrap(self, compiled: Any) -> Callable[..., list[Any]]:
        """``compiled`` called as a local program: local values in, local values out."""
        import jax

        sharding, device = self.sharding, self.device
        scalar_out = tuple(self._scalar_out)
        make = jax.make_array_from_single_device_arrays

        def call(*args: Any) -> list[Any]:
            glob = []
            for a in args:
                if not isinstance(a, jax.Array):
                    a = jax.device_put(a, device)
                if a.ndim == 0:
                    a = a.reshape(1)
                glob.append(make(self._global_shape(a.shape), sharding, [a]))
            outs = compiled(*glob)
            local = [o.addressable_shards[0].data for o in outs]
            return [o.reshape(()) if s else o for o, s in zip(local, scalar_out, strict=True)]

        return call
