from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class EntryInfo(_message.Message):
    __slots__ = ("key", "size", "payload_size", "created", "last_used", "hits", "compile_seconds", "label", "format_version", "jaxlib", "platform", "rewarmed_from")
    KEY_FIELD_NUMBER: _ClassVar[int]
    SIZE_FIELD_NUMBER: _ClassVar[int]
    PAYLOAD_SIZE_FIELD_NUMBER: _ClassVar[int]
    CREATED_FIELD_NUMBER: _ClassVar[int]
    LAST_USED_FIELD_NUMBER: _ClassVar[int]
    HITS_FIELD_NUMBER: _ClassVar[int]
    COMPILE_SECONDS_FIELD_NUMBER: _ClassVar[int]
    LABEL_FIELD_NUMBER: _ClassVar[int]
    FORMAT_VERSION_FIELD_NUMBER: _ClassVar[int]
    JAXLIB_FIELD_NUMBER: _ClassVar[int]
    PLATFORM_FIELD_NUMBER: _ClassVar[int]
    REWARMED_FROM_FIELD_NUMBER: _ClassVar[int]
    key: str
    size: int
    payload_size: int
    created: float
    last_used: float
    hits: int
    compile_seconds: float
    label: str
    format_version: int
    jaxlib: str
    platform: str
    rewarmed_from: str
    def __init__(self, key: _Optional[str] = ..., size: _Optional[int] = ..., payload_size: _Optional[int] = ..., created: _Optional[float] = ..., last_used: _Optional[float] = ..., hits: _Optional[int] = ..., compile_seconds: _Optional[float] = ..., label: _Optional[str] = ..., format_version: _Optional[int] = ..., jaxlib: _Optional[str] = ..., platform: _Optional[str] = ..., rewarmed_from: _Optional[str] = ...) -> None: ...

class GetRequest(_message.Message):
    __slots__ = ("key", "peek")
    KEY_FIELD_NUMBER: _ClassVar[int]
    PEEK_FIELD_NUMBER: _ClassVar[int]
    key: str
    peek: bool
    def __init__(self, key: _Optional[str] = ..., peek: _Optional[bool] = ...) -> None: ...

class GetResponse(_message.Message):
    __slots__ = ("found", "size", "data")
    FOUND_FIELD_NUMBER: _ClassVar[int]
    SIZE_FIELD_NUMBER: _ClassVar[int]
    DATA_FIELD_NUMBER: _ClassVar[int]
    found: bool
    size: int
    data: bytes
    def __init__(self, found: _Optional[bool] = ..., size: _Optional[int] = ..., data: _Optional[bytes] = ...) -> None: ...

class PutRequest(_message.Message):
    __slots__ = ("key", "size", "payload_sha256", "data")
    KEY_FIELD_NUMBER: _ClassVar[int]
    SIZE_FIELD_NUMBER: _ClassVar[int]
    PAYLOAD_SHA256_FIELD_NUMBER: _ClassVar[int]
    DATA_FIELD_NUMBER: _ClassVar[int]
    key: str
    size: int
    payload_sha256: str
    data: bytes
    def __init__(self, key: _Optional[str] = ..., size: _Optional[int] = ..., payload_sha256: _Optional[str] = ..., data: _Optional[bytes] = ...) -> None: ...

class PutResponse(_message.Message):
    __slots__ = ("stored", "already_present")
    STORED_FIELD_NUMBER: _ClassVar[int]
    ALREADY_PRESENT_FIELD_NUMBER: _ClassVar[int]
    stored: bool
    already_present: bool
    def __init__(self, stored: _Optional[bool] = ..., already_present: _Optional[bool] = ...) -> None: ...

class ContainsRequest(_message.Message):
    __slots__ = ("keys",)
    KEYS_FIELD_NUMBER: _ClassVar[int]
    keys: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, keys: _Optional[_Iterable[str]] = ...) -> None: ...

class ContainsResponse(_message.Message):
    __slots__ = ("present",)
    PRESENT_FIELD_NUMBER: _ClassVar[int]
    present: _containers.RepeatedScalarFieldContainer[bool]
    def __init__(self, present: _Optional[_Iterable[bool]] = ...) -> None: ...

class StatRequest(_message.Message):
    __slots__ = ("keys",)
    KEYS_FIELD_NUMBER: _ClassVar[int]
    keys: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, keys: _Optional[_Iterable[str]] = ...) -> None: ...

class StatResult(_message.Message):
    __slots__ = ("found", "info")
    FOUND_FIELD_NUMBER: _ClassVar[int]
    INFO_FIELD_NUMBER: _ClassVar[int]
    found: bool
    info: EntryInfo
    def __init__(self, found: _Optional[bool] = ..., info: _Optional[_Union[EntryInfo, _Mapping]] = ...) -> None: ...

class StatResponse(_message.Message):
    __slots__ = ("results",)
    RESULTS_FIELD_NUMBER: _ClassVar[int]
    results: _containers.RepeatedCompositeFieldContainer[StatResult]
    def __init__(self, results: _Optional[_Iterable[_Union[StatResult, _Mapping]]] = ...) -> None: ...

class DeleteRequest(_message.Message):
    __slots__ = ("key",)
    KEY_FIELD_NUMBER: _ClassVar[int]
    key: str
    def __init__(self, key: _Optional[str] = ...) -> None: ...

class DeleteResponse(_message.Message):
    __slots__ = ("deleted",)
    DELETED_FIELD_NUMBER: _ClassVar[int]
    deleted: bool
    def __init__(self, deleted: _Optional[bool] = ...) -> None: ...

class ListRequest(_message.Message):
    __slots__ = ("page_size", "page_token")
    PAGE_SIZE_FIELD_NUMBER: _ClassVar[int]
    PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    page_size: int
    page_token: str
    def __init__(self, page_size: _Optional[int] = ..., page_token: _Optional[str] = ...) -> None: ...

class ListResponse(_message.Message):
    __slots__ = ("entries", "next_page_token")
    ENTRIES_FIELD_NUMBER: _ClassVar[int]
    NEXT_PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    entries: _containers.RepeatedCompositeFieldContainer[EntryInfo]
    next_page_token: str
    def __init__(self, entries: _Optional[_Iterable[_Union[EntryInfo, _Mapping]]] = ..., next_page_token: _Optional[str] = ...) -> None: ...

class StatsRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class StoreSummary(_message.Message):
    __slots__ = ("entries", "bytes", "payload_bytes", "hits", "compile_seconds")
    ENTRIES_FIELD_NUMBER: _ClassVar[int]
    BYTES_FIELD_NUMBER: _ClassVar[int]
    PAYLOAD_BYTES_FIELD_NUMBER: _ClassVar[int]
    HITS_FIELD_NUMBER: _ClassVar[int]
    COMPILE_SECONDS_FIELD_NUMBER: _ClassVar[int]
    entries: int
    bytes: int
    payload_bytes: int
    hits: int
    compile_seconds: float
    def __init__(self, entries: _Optional[int] = ..., bytes: _Optional[int] = ..., payload_bytes: _Optional[int] = ..., hits: _Optional[int] = ..., compile_seconds: _Optional[float] = ...) -> None: ...

class StatsResponse(_message.Message):
    __slots__ = ("summary", "max_size", "max_entry_size", "version", "uptime_seconds", "counters", "by_jaxlib")
    class CountersEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: float
        def __init__(self, key: _Optional[str] = ..., value: _Optional[float] = ...) -> None: ...
    SUMMARY_FIELD_NUMBER: _ClassVar[int]
    MAX_SIZE_FIELD_NUMBER: _ClassVar[int]
    MAX_ENTRY_SIZE_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    UPTIME_SECONDS_FIELD_NUMBER: _ClassVar[int]
    COUNTERS_FIELD_NUMBER: _ClassVar[int]
    BY_JAXLIB_FIELD_NUMBER: _ClassVar[int]
    summary: StoreSummary
    max_size: int
    max_entry_size: int
    version: str
    uptime_seconds: float
    counters: _containers.ScalarMap[str, float]
    by_jaxlib: _containers.RepeatedCompositeFieldContainer[VersionSummary]
    def __init__(self, summary: _Optional[_Union[StoreSummary, _Mapping]] = ..., max_size: _Optional[int] = ..., max_entry_size: _Optional[int] = ..., version: _Optional[str] = ..., uptime_seconds: _Optional[float] = ..., counters: _Optional[_Mapping[str, float]] = ..., by_jaxlib: _Optional[_Iterable[_Union[VersionSummary, _Mapping]]] = ...) -> None: ...

class VersionSummary(_message.Message):
    __slots__ = ("jaxlib", "entries", "bytes", "rewarmed")
    JAXLIB_FIELD_NUMBER: _ClassVar[int]
    ENTRIES_FIELD_NUMBER: _ClassVar[int]
    BYTES_FIELD_NUMBER: _ClassVar[int]
    REWARMED_FIELD_NUMBER: _ClassVar[int]
    jaxlib: str
    entries: int
    bytes: int
    rewarmed: int
    def __init__(self, jaxlib: _Optional[str] = ..., entries: _Optional[int] = ..., bytes: _Optional[int] = ..., rewarmed: _Optional[int] = ...) -> None: ...

class PruneRequest(_message.Message):
    __slots__ = ("max_size", "older_than_seconds", "unused_for_seconds", "dry_run", "stale_for_jaxlib")
    MAX_SIZE_FIELD_NUMBER: _ClassVar[int]
    OLDER_THAN_SECONDS_FIELD_NUMBER: _ClassVar[int]
    UNUSED_FOR_SECONDS_FIELD_NUMBER: _ClassVar[int]
    DRY_RUN_FIELD_NUMBER: _ClassVar[int]
    STALE_FOR_JAXLIB_FIELD_NUMBER: _ClassVar[int]
    max_size: int
    older_than_seconds: float
    unused_for_seconds: float
    dry_run: bool
    stale_for_jaxlib: str
    def __init__(self, max_size: _Optional[int] = ..., older_than_seconds: _Optional[float] = ..., unused_for_seconds: _Optional[float] = ..., dry_run: _Optional[bool] = ..., stale_for_jaxlib: _Optional[str] = ...) -> None: ...

class PruneResponse(_message.Message):
    __slots__ = ("removed",)
    REMOVED_FIELD_NUMBER: _ClassVar[int]
    removed: _containers.RepeatedCompositeFieldContainer[EntryInfo]
    def __init__(self, removed: _Optional[_Iterable[_Union[EntryInfo, _Mapping]]] = ...) -> None: ...

class VerifyRequest(_message.Message):
    __slots__ = ("repair",)
    REPAIR_FIELD_NUMBER: _ClassVar[int]
    repair: bool
    def __init__(self, repair: _Optional[bool] = ...) -> None: ...

class VerifyResponse(_message.Message):
    __slots__ = ("checked", "corrupt", "repaired", "stale_temp_files")
    CHECKED_FIELD_NUMBER: _ClassVar[int]
    CORRUPT_FIELD_NUMBER: _ClassVar[int]
    REPAIRED_FIELD_NUMBER: _ClassVar[int]
    STALE_TEMP_FILES_FIELD_NUMBER: _ClassVar[int]
    checked: int
    corrupt: _containers.RepeatedScalarFieldContainer[str]
    repaired: bool
    stale_temp_files: int
    def __init__(self, checked: _Optional[int] = ..., corrupt: _Optional[_Iterable[str]] = ..., repaired: _Optional[bool] = ..., stale_temp_files: _Optional[int] = ...) -> None: ...

class ReportCorruptRequest(_message.Message):
    __slots__ = ("key",)
    KEY_FIELD_NUMBER: _ClassVar[int]
    key: str
    def __init__(self, key: _Optional[str] = ...) -> None: ...

class ReportCorruptResponse(_message.Message):
    __slots__ = ("removed",)
    REMOVED_FIELD_NUMBER: _ClassVar[int]
    removed: bool
    def __init__(self, removed: _Optional[bool] = ...) -> None: ...

class MissDifference(_message.Message):
    __slots__ = ("component", "details")
    COMPONENT_FIELD_NUMBER: _ClassVar[int]
    DETAILS_FIELD_NUMBER: _ClassVar[int]
    component: str
    details: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, component: _Optional[str] = ..., details: _Optional[_Iterable[str]] = ...) -> None: ...

class MissRecord(_message.Message):
    __slots__ = ("time", "key", "label", "reason", "note", "differences", "nearest", "nearest_label", "compared", "host", "pid", "client")
    TIME_FIELD_NUMBER: _ClassVar[int]
    KEY_FIELD_NUMBER: _ClassVar[int]
    LABEL_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    NOTE_FIELD_NUMBER: _ClassVar[int]
    DIFFERENCES_FIELD_NUMBER: _ClassVar[int]
    NEAREST_FIELD_NUMBER: _ClassVar[int]
    NEAREST_LABEL_FIELD_NUMBER: _ClassVar[int]
    COMPARED_FIELD_NUMBER: _ClassVar[int]
    HOST_FIELD_NUMBER: _ClassVar[int]
    PID_FIELD_NUMBER: _ClassVar[int]
    CLIENT_FIELD_NUMBER: _ClassVar[int]
    time: float
    key: str
    label: str
    reason: str
    note: str
    differences: _containers.RepeatedCompositeFieldContainer[MissDifference]
    nearest: str
    nearest_label: str
    compared: int
    host: str
    pid: int
    client: str
    def __init__(self, time: _Optional[float] = ..., key: _Optional[str] = ..., label: _Optional[str] = ..., reason: _Optional[str] = ..., note: _Optional[str] = ..., differences: _Optional[_Iterable[_Union[MissDifference, _Mapping]]] = ..., nearest: _Optional[str] = ..., nearest_label: _Optional[str] = ..., compared: _Optional[int] = ..., host: _Optional[str] = ..., pid: _Optional[int] = ..., client: _Optional[str] = ...) -> None: ...

class ReportMissRequest(_message.Message):
    __slots__ = ("miss",)
    MISS_FIELD_NUMBER: _ClassVar[int]
    miss: MissRecord
    def __init__(self, miss: _Optional[_Union[MissRecord, _Mapping]] = ...) -> None: ...

class ReportMissResponse(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class RecentMissesRequest(_message.Message):
    __slots__ = ("limit",)
    LIMIT_FIELD_NUMBER: _ClassVar[int]
    limit: int
    def __init__(self, limit: _Optional[int] = ...) -> None: ...

class RecentMissesResponse(_message.Message):
    __slots__ = ("misses", "total")
    MISSES_FIELD_NUMBER: _ClassVar[int]
    TOTAL_FIELD_NUMBER: _ClassVar[int]
    misses: _containers.RepeatedCompositeFieldContainer[MissRecord]
    total: int
    def __init__(self, misses: _Optional[_Iterable[_Union[MissRecord, _Mapping]]] = ..., total: _Optional[int] = ...) -> None: ...

class LeaseRequest(_message.Message):
    __slots__ = ("key", "holder", "action", "ttl_seconds")
    class Action(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
        __slots__ = ()
        ACTION_UNSPECIFIED: _ClassVar[LeaseRequest.Action]
        ACQUIRE: _ClassVar[LeaseRequest.Action]
        RENEW: _ClassVar[LeaseRequest.Action]
        RELEASE: _ClassVar[LeaseRequest.Action]
    ACTION_UNSPECIFIED: LeaseRequest.Action
    ACQUIRE: LeaseRequest.Action
    RENEW: LeaseRequest.Action
    RELEASE: LeaseRequest.Action
    KEY_FIELD_NUMBER: _ClassVar[int]
    HOLDER_FIELD_NUMBER: _ClassVar[int]
    ACTION_FIELD_NUMBER: _ClassVar[int]
    TTL_SECONDS_FIELD_NUMBER: _ClassVar[int]
    key: str
    holder: str
    action: LeaseRequest.Action
    ttl_seconds: float
    def __init__(self, key: _Optional[str] = ..., holder: _Optional[str] = ..., action: _Optional[_Union[LeaseRequest.Action, str]] = ..., ttl_seconds: _Optional[float] = ...) -> None: ...

class LeaseResponse(_message.Message):
    __slots__ = ("granted", "taken_over", "holder", "rebind")
    GRANTED_FIELD_NUMBER: _ClassVar[int]
    TAKEN_OVER_FIELD_NUMBER: _ClassVar[int]
    HOLDER_FIELD_NUMBER: _ClassVar[int]
    REBIND_FIELD_NUMBER: _ClassVar[int]
    granted: bool
    taken_over: bool
    holder: str
    rebind: bool
    def __init__(self, granted: _Optional[bool] = ..., taken_over: _Optional[bool] = ..., holder: _Optional[str] = ..., rebind: _Optional[bool] = ...) -> None: ...

class LeaseWaitRequest(_message.Message):
    __slots__ = ("key", "done", "loaded", "waited_seconds", "wait_seconds", "wake_seconds", "free")
    KEY_FIELD_NUMBER: _ClassVar[int]
    DONE_FIELD_NUMBER: _ClassVar[int]
    LOADED_FIELD_NUMBER: _ClassVar[int]
    WAITED_SECONDS_FIELD_NUMBER: _ClassVar[int]
    WAIT_SECONDS_FIELD_NUMBER: _ClassVar[int]
    WAKE_SECONDS_FIELD_NUMBER: _ClassVar[int]
    FREE_FIELD_NUMBER: _ClassVar[int]
    key: str
    done: bool
    loaded: bool
    waited_seconds: float
    wait_seconds: float
    wake_seconds: float
    free: bool
    def __init__(self, key: _Optional[str] = ..., done: _Optional[bool] = ..., loaded: _Optional[bool] = ..., waited_seconds: _Optional[float] = ..., wait_seconds: _Optional[float] = ..., wake_seconds: _Optional[float] = ..., free: _Optional[bool] = ...) -> None: ...

class LeaseWaitResponse(_message.Message):
    __slots__ = ("holder", "wake", "waited")
    class Wake(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
        __slots__ = ()
        HELD: _ClassVar[LeaseWaitResponse.Wake]
        STORED: _ClassVar[LeaseWaitResponse.Wake]
        RELEASED: _ClassVar[LeaseWaitResponse.Wake]
        ABANDONED: _ClassVar[LeaseWaitResponse.Wake]
    HELD: LeaseWaitResponse.Wake
    STORED: LeaseWaitResponse.Wake
    RELEASED: LeaseWaitResponse.Wake
    ABANDONED: LeaseWaitResponse.Wake
    HOLDER_FIELD_NUMBER: _ClassVar[int]
    WAKE_FIELD_NUMBER: _ClassVar[int]
    WAITED_FIELD_NUMBER: _ClassVar[int]
    holder: str
    wake: LeaseWaitResponse.Wake
    waited: bool
    def __init__(self, holder: _Optional[str] = ..., wake: _Optional[_Union[LeaseWaitResponse.Wake, str]] = ..., waited: _Optional[bool] = ...) -> None: ...

class TouchRequest(_message.Message):
    __slots__ = ("keys",)
    KEYS_FIELD_NUMBER: _ClassVar[int]
    keys: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, keys: _Optional[_Iterable[str]] = ...) -> None: ...

class TouchResponse(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class JobKeysRequest(_message.Message):
    __slots__ = ("job", "limit")
    JOB_FIELD_NUMBER: _ClassVar[int]
    LIMIT_FIELD_NUMBER: _ClassVar[int]
    job: str
    limit: int
    def __init__(self, job: _Optional[str] = ..., limit: _Optional[int] = ...) -> None: ...

class JobKeysResponse(_message.Message):
    __slots__ = ("keys",)
    KEYS_FIELD_NUMBER: _ClassVar[int]
    keys: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, keys: _Optional[_Iterable[str]] = ...) -> None: ...

class RecordJobRequest(_message.Message):
    __slots__ = ("job", "run", "keys")
    JOB_FIELD_NUMBER: _ClassVar[int]
    RUN_FIELD_NUMBER: _ClassVar[int]
    KEYS_FIELD_NUMBER: _ClassVar[int]
    job: str
    run: str
    keys: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, job: _Optional[str] = ..., run: _Optional[str] = ..., keys: _Optional[_Iterable[str]] = ...) -> None: ...

class RecordJobResponse(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...
