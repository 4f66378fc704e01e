"""Multi-process jobs for ``xlacache.lazy`` (torch_xla's ``launch``, ``xm.all_reduce``,
``xm.optimizer_step`` across processes; the job under an SPMD mesh that spans processes).

- ``env``: this process's place in the job (rank, world size), ``jax.distributed`` start-up
  (or adoption), CPU devices per process (``CPU_NUM_DEVICES``).
- ``launch``: one process per device, watched by the parent (a dead worker stops the job).
- ``program``: a graph holding a collective compiles as one program over the process mesh.
- ``collectives``: the collective ops (``all_reduce``, ``all_gather``), their lowerings, and
  ``optimizer_step``'s gradient all-reduce.
- ``rendezvous``: ``rendezvous``/``mesh_reduce`` through the job's coordination service.
- ``agreement``: before a program that spans processes runs, the processes compare what they
  run (paired by sequence number): a difference is an error naming the ranks.

This package imports nothing at import: the executor imports ``program`` and ``agreement``.
"""
