from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class AddReq(_message.Message):
    __slots__ = ("ledger_id", "entry_id", "master_key", "body", "recovery")
    LEDGER_ID_FIELD_NUMBER: _ClassVar[int]
    ENTRY_ID_FIELD_NUMBER: _ClassVar[int]
    MASTER_KEY_FIELD_NUMBER: _ClassVar[int]
    BODY_FIELD_NUMBER: _ClassVar[int]
    RECOVERY_FIELD_NUMBER: _ClassVar[int]
    ledger_id: int
    entry_id: int
    master_key: bytes
    body: bytes
    recovery: bool
    def __init__(self, ledger_id: _Optional[int] = ..., entry_id: _Optional[int] = ..., master_key: _Optional[bytes] = ..., body: _Optional[bytes] = ..., recovery: _Optional[bool] = ...) -> None: ...

class ReadReq(_message.Message):
    __slots__ = ("ledger_id", "entry_id", "fence", "master_key", "has_master_key")
    LEDGER_ID_FIELD_NUMBER: _ClassVar[int]
    ENTRY_ID_FIELD_NUMBER: _ClassVar[int]
    FENCE_FIELD_NUMBER: _ClassVar[int]
    MASTER_KEY_FIELD_NUMBER: _ClassVar[int]
    HAS_MASTER_KEY_FIELD_NUMBER: _ClassVar[int]
    ledger_id: int
    entry_id: int
    fence: bool
    master_key: bytes
    has_master_key: bool
    def __init__(self, ledger_id: _Optional[int] = ..., entry_id: _Optional[int] = ..., fence: _Optional[bool] = ..., master_key: _Optional[bytes] = ..., has_master_key: _Optional[bool] = ...) -> None: ...

class ReadLacReq(_message.Message):
    __slots__ = ("ledger_id",)
    LEDGER_ID_FIELD_NUMBER: _ClassVar[int]
    ledger_id: int
    def __init__(self, ledger_id: _Optional[int] = ...) -> None: ...

class WriteLacReq(_message.Message):
    __slots__ = ("ledger_id", "master_key", "lac")
    LEDGER_ID_FIELD_NUMBER: _ClassVar[int]
    MASTER_KEY_FIELD_NUMBER: _ClassVar[int]
    LAC_FIELD_NUMBER: _ClassVar[int]
    ledger_id: int
    master_key: bytes
    lac: int
    def __init__(self, ledger_id: _Optional[int] = ..., master_key: _Optional[bytes] = ..., lac: _Optional[int] = ...) -> None: ...

class AddResp(_message.Message):
    __slots__ = ("ledger_id", "entry_id", "code")
    LEDGER_ID_FIELD_NUMBER: _ClassVar[int]
    ENTRY_ID_FIELD_NUMBER: _ClassVar[int]
    CODE_FIELD_NUMBER: _ClassVar[int]
    ledger_id: int
    entry_id: int
    code: int
    def __init__(self, ledger_id: _Optional[int] = ..., entry_id: _Optional[int] = ..., code: _Optional[int] = ...) -> None: ...

class ReadResp(_message.Message):
    __slots__ = ("ledger_id", "entry_id", "code", "body")
    LEDGER_ID_FIELD_NUMBER: _ClassVar[int]
    ENTRY_ID_FIELD_NUMBER: _ClassVar[int]
    CODE_FIELD_NUMBER: _ClassVar[int]
    BODY_FIELD_NUMBER: _ClassVar[int]
    ledger_id: int
    entry_id: int
    code: int
    body: bytes
    def __init__(self, ledger_id: _Optional[int] = ..., entry_id: _Optional[int] = ..., code: _Optional[int] = ..., body: _Optional[bytes] = ...) -> None: ...

class ReadLacResp(_message.Message):
    __slots__ = ("ledger_id", "code", "lac")
    LEDGER_ID_FIELD_NUMBER: _ClassVar[int]
    CODE_FIELD_NUMBER: _ClassVar[int]
    LAC_FIELD_NUMBER: _ClassVar[int]
    ledger_id: int
    code: int
    lac: int
    def __init__(self, ledger_id: _Optional[int] = ..., code: _Optional[int] = ..., lac: _Optional[int] = ...) -> None: ...

class WriteLacResp(_message.Message):
    __slots__ = ("ledger_id", "code")
    LEDGER_ID_FIELD_NUMBER: _ClassVar[int]
    CODE_FIELD_NUMBER: _ClassVar[int]
    ledger_id: int
    code: int
    def __init__(self, ledger_id: _Optional[int] = ..., code: _Optional[int] = ...) -> None: ...

class StreamReq(_message.Message):
    __slots__ = ("tag", "add", "read", "read_lac", "write_lac")
    TAG_FIELD_NUMBER: _ClassVar[int]
    ADD_FIELD_NUMBER: _ClassVar[int]
    READ_FIELD_NUMBER: _ClassVar[int]
    READ_LAC_FIELD_NUMBER: _ClassVar[int]
    WRITE_LAC_FIELD_NUMBER: _ClassVar[int]
    tag: int
    add: AddReq
    read: ReadReq
    read_lac: ReadLacReq
    write_lac: WriteLacReq
    def __init__(self, tag: _Optional[int] = ..., add: _Optional[_Union[AddReq, _Mapping]] = ..., read: _Optional[_Union[ReadReq, _Mapping]] = ..., read_lac: _Optional[_Union[ReadLacReq, _Mapping]] = ..., write_lac: _Optional[_Union[WriteLacReq, _Mapping]] = ...) -> None: ...

class StreamResp(_message.Message):
    __slots__ = ("tag", "add", "read", "read_lac", "write_lac", "code")
    TAG_FIELD_NUMBER: _ClassVar[int]
    ADD_FIELD_NUMBER: _ClassVar[int]
    READ_FIELD_NUMBER: _ClassVar[int]
    READ_LAC_FIELD_NUMBER: _ClassVar[int]
    WRITE_LAC_FIELD_NUMBER: _ClassVar[int]
    CODE_FIELD_NUMBER: _ClassVar[int]
    tag: int
    add: AddResp
    read: ReadResp
    read_lac: ReadLacResp
    write_lac: WriteLacResp
    code: int
    def __init__(self, tag: _Optional[int] = ..., add: _Optional[_Union[AddResp, _Mapping]] = ..., read: _Optional[_Union[ReadResp, _Mapping]] = ..., read_lac: _Optional[_Union[ReadLacResp, _Mapping]] = ..., write_lac: _Optional[_Union[WriteLacResp, _Mapping]] = ..., code: _Optional[int] = ...) -> None: ...

class StreamReqBatch(_message.Message):
    __slots__ = ("requests",)
    REQUESTS_FIELD_NUMBER: _ClassVar[int]
    requests: _containers.RepeatedCompositeFieldContainer[StreamReq]
    def __init__(self, requests: _Optional[_Iterable[_Union[StreamReq, _Mapping]]] = ...) -> None: ...

class StreamRespBatch(_message.Message):
    __slots__ = ("responses",)
    RESPONSES_FIELD_NUMBER: _ClassVar[int]
    responses: _containers.RepeatedCompositeFieldContainer[StreamResp]
    def __init__(self, responses: _Optional[_Iterable[_Union[StreamResp, _Mapping]]] = ...) -> None: ...
