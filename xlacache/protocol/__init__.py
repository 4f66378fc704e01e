"""The `xlacache.v1` gRPC protocol as both ends speak it.

`wire` builds and parses the two bulk messages without protobuf copies; `status` is
the one table from error type to gRPC status (plus a machine-readable reason in
trailing metadata) that servers abort with and clients map back. The generated
protobuf code lives in `xlacache._proto`; the source is `proto/xlacache/v1/cache.proto`.
Imported by `xlacache.stores.remote` (the client) and `xlacache.server` (the front);
imports neither.
"""

from __future__ import annotations

from xlacache._proto.v1 import cache_pb2 as pb

DEFAULT_PORT = 7070
SERVICE_NAME = pb.DESCRIPTOR.services_by_name["Cache"].full_name  # "xlacache.v1.Cache"
CHUNK_SIZE = 1024 * 1024  # bytes of entry data per streamed message


def method_path(name: str) -> str:
    """The full path of one of the service's methods, e.g. /xlacache.v1.Cache/Get."""
    return f"/{SERVICE_NAME}/{name}"


def fields_of(message) -> dict:
    """A message's fields by name (for records whose fields mirror the message's)."""
    return {f.name: getattr(message, f.name) for f in message.DESCRIPTOR.fields}
