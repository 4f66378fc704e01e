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

The processes must run the same graph: a rank-dependent constant (``torch.full(..., rank)``)
or an extra output on one rank would make different programs pair their collectives, and JAX
folds a collective over a value that depends on no process's input (``psum(c) = c * world``).
So every execution of a graph with collectives is checked first (``agreement.py``): a
difference is an error naming the ranks, never a wrong number.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

COLLECTIVE_OPS: set[Any] = set()  # filled by ``collectives``


def has_collectives(order: list[Any]) -> bool:
    """Whether the graph ``order`` holds a collective (then it runs over the process mesh)."""
    return bool(COLLECTIVE_OPS) and any(n.func in COLLECTIVE_OPS for n in order)


def process_program(order: list[Any]) -> ProcessProgram | None:
    """A ``ProcessProgram`` when the graph ``order`` holds a collective, else None."""
    if has_collectives(order):
        from .env import current

        if current().world == 1:
            raise RuntimeError("xlacache.lazy: a collective outside a multi-process job")
        return ProcessProgram()
    return None


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
        self.devices = tuple(self.mesh.devices.flat)

    def jit(self, fn: Callable[..., list], n_args: int, donated: tuple[int, ...]) -> Any:
        import jax

        def body(*args: Any) -> list[Any]:
            args = tuple(
                a.reshape(()) if s else a for a, s in zip(args, self._scalar_in, strict=True)
            )
            return [o.reshape(1) if o.ndim == 0 else o for o in fn(*args)]

        mapped = jax.shard_map(
            body,
            mesh=self.mesh,
            in_specs=(self.spec,) * n_args,
            out_specs=self.spec,
            check_vma=False,
        )
        return jax.jit(mapped, donate_argnums=donated, keep_unused=True)

    def avals(self, arrays: list[Any], scalars: Any, out_shapes: list[tuple]) -> list[Any]:
        """The global arguments' shapes (for ``lower``), from this process's values and the
        graph's output shapes."""
        import jax

        args = [*arrays, scalars]
        self._scalar_in = tuple(len(a.shape) == 0 for a in args)
        self._scalar_out = tuple(len(s) == 0 for s in out_shapes)
        return [
            jax.ShapeDtypeStruct(self._global_shape(a.shape), a.dtype, sharding=self.sharding)
            for a in args
        ]

    def signature(self, local: dict[str, list]) -> dict[str, list]:
        """The program's signature (global shapes) from the graph's (this process's)."""
        return {
            **local,
            "inputs": [[list(self._global_shape(tuple(s))), d] for s, d in local["inputs"]],
            "outputs": [[list(self._global_shape(tuple(s))), d] for s, d in local["outputs"]],
        }

    def _global_shape(self, shape: tuple[int, ...]) -> tuple[int, ...]:
        if not shape:
            return (self.world,)
        return (shape[0] * self.world, *shape[1:])

    def wrap(self, compiled: Any) -> Callable[..., list[Any]]:
        """``compiled`` (a jit-compiled or alias-loaded program over the process mesh) called
        as a local program: local values in, local values out."""
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
