"""SPMD sharding (torch_xla's ``xs.Mesh`` / ``xs.mark_sharding``) on JAX shardings.

``mesh``: the public API (``Mesh``, ``mark_sharding``, ``use_spmd``, ...), exported by
``xlacache.lazy``. ``placement``: what the executor needs at a barrier (input placements in
the graph key, replication of unsharded inputs, the sharding-constraint op and its lowering).
This file imports neither, so the executor can import ``placement`` below the public API.
"""
