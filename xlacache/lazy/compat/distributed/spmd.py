"""``torch_xla.distributed.spmd`` (``xs``): meshes and sharding annotations."""

from xlacache.lazy.spmd.mesh import (
    Mesh,
    ShardingSpec,
    clear_sharding,
    get_1d_mesh,
    get_global_mesh,
    mark_sharding,
    set_global_mesh,
)

__all__ = [
    "Mesh",
    "ShardingSpec",
    "clear_sharding",
    "get_1d_mesh",
    "get_global_mesh",
    "mark_sharding",
    "set_global_mesh",
]
