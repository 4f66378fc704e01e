"""Exact identity of IR nodes and graphs: a canonical typed encoding and blake2b-128 digests.

Python's ``hash()`` and ``==`` are not identity for op attributes: ``hash(-1) == hash(-2)``,
``1 == 1.0 == True``, ``0.0 == -0.0`` and ``nan != nan``. Every cache in the lazy runtime that
is keyed on op attributes (the meta-kernel cache, node digests, the executable cache) uses
``encode``: a string in which each value carries its type and its exact value (floats as their
IEEE-754 bits), so two attributes encode alike only if a lowering cannot tell them apart.
A value of a type not listed here raises ``UnencodableAttribute``: never an approximation.

Encodings and digests depend only on the values (no ``id()``, no ``hash()``, no dict order), so
they are equal across processes; ``FORMAT`` changes whenever an encoding changes.
"""

from __future__ import annotations

import functools
import hashlib
import struct
import sys
from array import array
from hashlib import blake2b
from pathlib import Path
from typing import Any

import numpy as np
import torch

FORMAT = 3  # version of the encodings below; part of every graph key (2: fp32_precision;
# 3: digests from node prefixes and wiring)
DIGEST_SIZE = 16


class UnencodableAttribute(TypeError):
    """An op attribute whose value cannot be encoded exactly (the op is not recorded)."""


class Placeholder:
    """Stands for the i-th input of a node inside its stored argument template."""

    __slots__ = ("i", "code")

    def __init__(self, i: int) -> None:
        self.i = i
        self.code = f"%{i}"

    def __repr__(self) -> str:
        return self.code

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Placeholder) and other.i == self.i

    def __hash__(self) -> int:
        return self.i


PLACEHOLDERS = [Placeholder(i) for i in range(256)]  # shared: inputs 0-255


def placeholder(i: int) -> Placeholder:
    """The (shared) placeholder for input ``i``."""
    return PLACEHOLDERS[i] if i < 256 else Placeholder(i)


def _float(x: float) -> str:
    if x != x:  # NaN: keep the payload and sign bits
        return "f!" + struct.pack("<d", x).hex()
    return "f" + float.hex(x)  # exact; keeps the sign of zero


def _complex(x: complex) -> str:
    return "c" + _float(x.real) + _float(x.imag)


def _np_scalar(x: np.generic) -> str:
    return f"n{x.dtype.str}:{x.tobytes().hex()}"


_NAMED = (torch.dtype, torch.memory_format, torch.layout, torch.device)
_NAMED_TAG = {torch.dtype: "d", torch.memory_format: "m", torch.layout: "l", torch.device: "D"}
_named_cache: dict[Any, str] = {}
_DTYPE = torch.dtype  # keyed by the object itself: these compare by identity/name


def _named(x: Any) -> str:
    s = _named_cache.get(x)
    if s is None:
        s = _named_cache[x] = _NAMED_TAG[type(x)] + str(x)
    return s


def encode(x: Any) -> str:
    """The canonical typed encoding of an attribute value (raises ``UnencodableAttribute``)."""
    t = type(x)
    if t is tuple:
        parts = []
        for e in x:  # the common element types inline: this runs for every recorded op
            te = type(e)
            if te is Placeholder:
                parts.append(e.code)
            elif te is int:
                parts.append(f"i{e}")
            elif te is tuple:
                parts.append(encode(e))
            elif e is None:
                parts.append("N")
            elif te is bool:
                parts.append("T" if e else "F")
            elif te is str:
                parts.append(f"s{len(e)}:{e}")
            elif te is _DTYPE:
                parts.append(_named_cache.get(e) or _named(e))
            else:
                parts.append(encode(e))
        return "(" + ",".join(parts) + ")"
    if t is Placeholder:
        return x.code
    if t is int:
        return f"i{x}"
    if x is None:
        return "N"
    if t is bool:
        return "T" if x else "F"
    if t is float:
        return _float(x)
    if t is str:
        return f"s{len(x)}:{x}"
    if t is list:
        return "[" + ",".join([encode(e) for e in x]) + "]"
    if t in _NAMED_TAG:
        return _named(x)
    if t is torch.Size:
        return "S(" + ",".join([encode(e) for e in x]) + ")"
    if t is complex:
        return _complex(x)
    if isinstance(x, np.generic) and x.dtype.kind in "biufc":
        return _np_scalar(x)
    raise UnencodableAttribute(
        f"xlacache.lazy: cannot encode an op attribute of type {t.__qualname__} exactly"
    )


_INDEX = [i.to_bytes(2, "little") for i in range(1 << 12)]


def node_digest(prefix: bytes, inputs: tuple) -> bytes:
    """Digest of a node from its ``prefix`` (see ``node_prefix``) and its ``(node, k)`` inputs."""
    if not inputs:
        return blake2b(prefix, digest_size=DIGEST_SIZE).digest()
    parts = [prefix]
    for n, k in inputs:
        parts.append(n.digest)
        parts.append(_INDEX[k])
    return blake2b(b"".join(parts), digest_size=DIGEST_SIZE).digest()


def node_prefix(op: str, attrs: str, avals: str) -> bytes:
    """The part of a node's digest that does not depend on its inputs (length-prefixed)."""
    body = f"{op}\x00{attrs}\x00{avals}".encode()
    return len(body).to_bytes(4, "little") + body


def encode_avals(avals: tuple) -> str:
    """Output shapes and dtypes: ``((shape, dtype) | None, ...)``."""
    return ";".join(
        "-" if a is None else ",".join(map(str, a[0])) + ":" + _named(a[1]) for a in avals
    )


def graph_key(prefixes: list[bytes], ints: list[int], placements: bytes | None = None) -> bytes:
    """A graph's identity: its nodes' prefixes (``node_prefix``: length-prefixed, so their
    concatenation is unambiguous) in post-order plus the wiring/outputs/donation ints (each
    node's inputs by position: the edges), and with SPMD in use, the digest of its inputs'
    placements (``spmd.placement``)."""
    h = blake2b(digest_size=DIGEST_SIZE)
    if placements is not None:
        h.update(b"spmd:" + placements)
    h.update(b"xlacache.lazy.graph/%d/%d" % (FORMAT, len(prefixes)))
    h.update(b"".join(prefixes))
    wiring = array("q", ints)
    if sys.byteorder != "little":
        wiring.byteswap()
    h.update(wiring.tobytes())
    return h.digest()


@functools.cache
def lowering_fingerprint() -> str:
    """A digest of the code that turns a graph into a JAX program, and of what it runs with.

    A graph key says what a graph computes, not how it is lowered: a persistent alias from a
    graph key to an executable (``xlacache.executables``) must also name this. It covers the
    source of every module of ``xlacache.lazy`` (the lowerings, the executor's JAX function
    and how it calls ``jax.jit``), ``FORMAT`` and the versions of xlacache, torch and numpy.
    """
    import xlacache

    h = hashlib.sha256()
    h.update(f"xlacache {xlacache.__version__} lazy/{FORMAT} torch {torch.__version__} ".encode())
    h.update(f"numpy {np.__version__}\n".encode())
    root = Path(__file__).resolve().parent
    for path in sorted(root.rglob("*.py")):
        source = path.read_bytes()
        name = path.relative_to(root).as_posix().encode()
        h.update(len(name).to_bytes(4, "little") + name)
        h.update(len(source).to_bytes(8, "little") + source)
    return h.hexdigest()
