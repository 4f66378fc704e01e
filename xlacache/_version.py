__version__ = "0.1.0"

# The JAX versions tested (docs/compat.md): the cache from JAX_MIN, the lazy runtime
# (`xlacache.lazy`, which says so at import) from LAZY_MIN_JAX.
JAX_MIN = "0.6.2"
LAZY_MIN_JAX = "0.10.0"


def _release(version: str) -> tuple[int, ...]:
    parts = []
    for part in version.split(".")[:3]:
        digits = "".join(c for c in part if c.isdigit()) if part[:1].isdigit() else ""
        parts.append(int(digits or 0))
    return tuple(parts)


def jax_too_old(version: str, needed: str, what: str) -> str | None:
    """One line saying that `what` needs jax `needed` when `version` is older, else None."""
    if _release(version) >= _release(needed):
        return None
    return (
        f"{what} needs jax>={needed} (this is jax {version}); the JAX cache "
        f"(xlacache.initialize_cache) supports jax>={JAX_MIN}"
    )
