"""Multi-process data parallel for ``xlacache.lazy`` (torch_xla's ``launch``, ``xm.all_reduce``,
``xm.optimizer_step`` across processes).

- ``env``: this process's place in the job (rank, world size) and ``jax.distributed`` start-up.
- ``launch``: one process per device, watched by the parent (a dead worker stops the job).
- ``program``: a graph holding a collective compiles as one program over the process mesh.
- ``collectives``: the collective ops (``all_reduce``, ``all_gather``), their lowerings, and
  ``optimizer_step``'s gradient all-reduce.
- ``rendezvous``: ``rendezvous``/``mesh_reduce`` through the job's coordination service.

This package imports nothing at import: the executor imports ``program`` alone.
"""
