from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class LedgerStateFormat(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    LEDGER_STATE_UNSPECIFIED: _ClassVar[LedgerStateFormat]
    OPEN: _ClassVar[LedgerStateFormat]
    IN_RECOVERY: _ClassVar[LedgerStateFormat]
    CLOSED: _ClassVar[LedgerStateFormat]

class DigestTypeFormat(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    DIGEST_TYPE_UNSPECIFIED: _ClassVar[DigestTypeFormat]
    CRC32C: _ClassVar[DigestTypeFormat]
    CRC32: _ClassVar[DigestTypeFormat]
    HMAC: _ClassVar[DigestTypeFormat]
    DUMMY: _ClassVar[DigestTypeFormat]
LEDGER_STATE_UNSPECIFIED: LedgerStateFormat
OPEN: LedgerStateFormat
IN_RECOVERY: LedgerStateFormat
CLOSED: LedgerStateFormat
DIGEST_TYPE_UNSPECIFIED: DigestTypeFormat
CRC32C: DigestTypeFormat
CRC32: DigestTypeFormat
HMAC: DigestTypeFormat
DUMMY: DigestTypeFormat

class FragmentFormat(_message.Message):
    __slots__ = ("first_entry_id", "ensemble")
    FIRST_ENTRY_ID_FIELD_NUMBER: _ClassVar[int]
    ENSEMBLE_FIELD_NUMBER: _ClassVar[int]
    first_entry_id: int
    ensemble: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, first_entry_id: _Optional[int] = ..., ensemble: _Optional[_Iterable[str]] = ...) -> None: ...

class LedgerMetadataFormat(_message.Message):
    __slots__ = ("format_version", "ensemble_size", "write_quorum", "ack_quorum", "state", "last_entry_id", "length", "fragments", "digest_type", "password", "ctime", "custom_metadata")
    class CustomMetadataEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: bytes
        def __init__(self, key: _Optional[str] = ..., value: _Optional[bytes] = ...) -> None: ...
    FORMAT_VERSION_FIELD_NUMBER: _ClassVar[int]
    ENSEMBLE_SIZE_FIELD_NUMBER: _ClassVar[int]
    WRITE_QUORUM_FIELD_NUMBER: _ClassVar[int]
    ACK_QUORUM_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    LAST_ENTRY_ID_FIELD_NUMBER: _ClassVar[int]
    LENGTH_FIELD_NUMBER: _ClassVar[int]
    FRAGMENTS_FIELD_NUMBER: _ClassVar[int]
    DIGEST_TYPE_FIELD_NUMBER: _ClassVar[int]
    PASSWORD_FIELD_NUMBER: _ClassVar[int]
    CTIME_FIELD_NUMBER: _ClassVar[int]
    CUSTOM_METADATA_FIELD_NUMBER: _ClassVar[int]
    format_version: int
    ensemble_size: int
    write_quorum: int
    ack_quorum: int
    state: LedgerStateFormat
    last_entry_id: int
    length: int
    fragments: _containers.RepeatedCompositeFieldContainer[FragmentFormat]
    digest_type: DigestTypeFormat
    password: bytes
    ctime: int
    custom_metadata: _containers.ScalarMap[str, bytes]
    def __init__(self, format_version: _Optional[int] = ..., ensemble_size: _Optional[int] = ..., write_quorum: _Optional[int] = ..., ack_quorum: _Optional[int] = ..., state: _Optional[_Union[LedgerStateFormat, str]] = ..., last_entry_id: _Optional[int] = ..., length: _Optional[int] = ..., fragments: _Optional[_Iterable[_Union[FragmentFormat, _Mapping]]] = ..., digest_type: _Optional[_Union[DigestTypeFormat, str]] = ..., password: _Optional[bytes] = ..., ctime: _Optional[int] = ..., custom_metadata: _Optional[_Mapping[str, bytes]] = ...) -> None: ...
