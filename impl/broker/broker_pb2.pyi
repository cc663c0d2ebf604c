from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class Code(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    OK: _ClassVar[Code]
    INVALID_TOPIC_NAME: _ClassVar[Code]
    TOPIC_NOT_FOUND: _ClassVar[Code]
    NOT_OWNER: _ClassVar[Code]
    SERVICE_NOT_READY: _ClassVar[Code]
    MESSAGE_TOO_LARGE: _ClassVar[Code]
    PRODUCER_BUSY: _ClassVar[Code]
    CONSUMER_BUSY: _ClassVar[Code]
    UNKNOWN_MESSAGE_ID: _ClassVar[Code]
    TOPIC_FENCED: _ClassVar[Code]
    PERSISTENCE_ERROR: _ClassVar[Code]
    INVALID_ARGUMENT: _ClassVar[Code]
    ALREADY_EXISTS: _ClassVar[Code]
    NOT_EMPTY: _ClassVar[Code]

class SubType(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    EXCLUSIVE: _ClassVar[SubType]
    SHARED: _ClassVar[SubType]
    FAILOVER: _ClassVar[SubType]
    KEY_SHARED: _ClassVar[SubType]

class InitialPosition(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    LATEST: _ClassVar[InitialPosition]
    EARLIEST: _ClassVar[InitialPosition]
OK: Code
INVALID_TOPIC_NAME: Code
TOPIC_NOT_FOUND: Code
NOT_OWNER: Code
SERVICE_NOT_READY: Code
MESSAGE_TOO_LARGE: Code
PRODUCER_BUSY: Code
CONSUMER_BUSY: Code
UNKNOWN_MESSAGE_ID: Code
TOPIC_FENCED: Code
PERSISTENCE_ERROR: Code
INVALID_ARGUMENT: Code
ALREADY_EXISTS: Code
NOT_EMPTY: Code
EXCLUSIVE: SubType
SHARED: SubType
FAILOVER: SubType
KEY_SHARED: SubType
LATEST: InitialPosition
EARLIEST: InitialPosition

class MessageId(_message.Message):
    __slots__ = ("ledger_id", "entry_id", "batch_index")
    LEDGER_ID_FIELD_NUMBER: _ClassVar[int]
    ENTRY_ID_FIELD_NUMBER: _ClassVar[int]
    BATCH_INDEX_FIELD_NUMBER: _ClassVar[int]
    ledger_id: int
    entry_id: int
    batch_index: int
    def __init__(self, ledger_id: _Optional[int] = ..., entry_id: _Optional[int] = ..., batch_index: _Optional[int] = ...) -> None: ...

class Message(_message.Message):
    __slots__ = ("payload", "key", "properties", "event_time")
    class PropertiesEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    PAYLOAD_FIELD_NUMBER: _ClassVar[int]
    KEY_FIELD_NUMBER: _ClassVar[int]
    PROPERTIES_FIELD_NUMBER: _ClassVar[int]
    EVENT_TIME_FIELD_NUMBER: _ClassVar[int]
    payload: bytes
    key: str
    properties: _containers.ScalarMap[str, str]
    event_time: int
    def __init__(self, payload: _Optional[bytes] = ..., key: _Optional[str] = ..., properties: _Optional[_Mapping[str, str]] = ..., event_time: _Optional[int] = ...) -> None: ...

class LookupReq(_message.Message):
    __slots__ = ("topic", "authoritative")
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    AUTHORITATIVE_FIELD_NUMBER: _ClassVar[int]
    topic: str
    authoritative: bool
    def __init__(self, topic: _Optional[str] = ..., authoritative: _Optional[bool] = ...) -> None: ...

class LookupResp(_message.Message):
    __slots__ = ("code", "message", "redirect", "broker", "authoritative")
    CODE_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    REDIRECT_FIELD_NUMBER: _ClassVar[int]
    BROKER_FIELD_NUMBER: _ClassVar[int]
    AUTHORITATIVE_FIELD_NUMBER: _ClassVar[int]
    code: Code
    message: str
    redirect: bool
    broker: str
    authoritative: bool
    def __init__(self, code: _Optional[_Union[Code, str]] = ..., message: _Optional[str] = ..., redirect: _Optional[bool] = ..., broker: _Optional[str] = ..., authoritative: _Optional[bool] = ...) -> None: ...

class ProducerReq(_message.Message):
    __slots__ = ("topic", "producer_name")
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    PRODUCER_NAME_FIELD_NUMBER: _ClassVar[int]
    topic: str
    producer_name: str
    def __init__(self, topic: _Optional[str] = ..., producer_name: _Optional[str] = ...) -> None: ...

class ProducerResp(_message.Message):
    __slots__ = ("code", "message", "producer_name", "last_sequence_id")
    CODE_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    PRODUCER_NAME_FIELD_NUMBER: _ClassVar[int]
    LAST_SEQUENCE_ID_FIELD_NUMBER: _ClassVar[int]
    code: Code
    message: str
    producer_name: str
    last_sequence_id: int
    def __init__(self, code: _Optional[_Union[Code, str]] = ..., message: _Optional[str] = ..., producer_name: _Optional[str] = ..., last_sequence_id: _Optional[int] = ...) -> None: ...

class SendReq(_message.Message):
    __slots__ = ("topic", "producer_name", "sequence_id", "messages", "entry_sizes")
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    PRODUCER_NAME_FIELD_NUMBER: _ClassVar[int]
    SEQUENCE_ID_FIELD_NUMBER: _ClassVar[int]
    MESSAGES_FIELD_NUMBER: _ClassVar[int]
    ENTRY_SIZES_FIELD_NUMBER: _ClassVar[int]
    topic: str
    producer_name: str
    sequence_id: int
    messages: _containers.RepeatedCompositeFieldContainer[Message]
    entry_sizes: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, topic: _Optional[str] = ..., producer_name: _Optional[str] = ..., sequence_id: _Optional[int] = ..., messages: _Optional[_Iterable[_Union[Message, _Mapping]]] = ..., entry_sizes: _Optional[_Iterable[int]] = ...) -> None: ...

class EntryResult(_message.Message):
    __slots__ = ("code", "message", "ledger_id", "entry_id", "duplicate")
    CODE_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    LEDGER_ID_FIELD_NUMBER: _ClassVar[int]
    ENTRY_ID_FIELD_NUMBER: _ClassVar[int]
    DUPLICATE_FIELD_NUMBER: _ClassVar[int]
    code: Code
    message: str
    ledger_id: int
    entry_id: int
    duplicate: bool
    def __init__(self, code: _Optional[_Union[Code, str]] = ..., message: _Optional[str] = ..., ledger_id: _Optional[int] = ..., entry_id: _Optional[int] = ..., duplicate: _Optional[bool] = ...) -> None: ...

class SendResp(_message.Message):
    __slots__ = ("code", "message", "ledger_id", "entry_id", "duplicate", "results")
    CODE_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    LEDGER_ID_FIELD_NUMBER: _ClassVar[int]
    ENTRY_ID_FIELD_NUMBER: _ClassVar[int]
    DUPLICATE_FIELD_NUMBER: _ClassVar[int]
    RESULTS_FIELD_NUMBER: _ClassVar[int]
    code: Code
    message: str
    ledger_id: int
    entry_id: int
    duplicate: bool
    results: _containers.RepeatedCompositeFieldContainer[EntryResult]
    def __init__(self, code: _Optional[_Union[Code, str]] = ..., message: _Optional[str] = ..., ledger_id: _Optional[int] = ..., entry_id: _Optional[int] = ..., duplicate: _Optional[bool] = ..., results: _Optional[_Iterable[_Union[EntryResult, _Mapping]]] = ...) -> None: ...

class ReadReq(_message.Message):
    __slots__ = ("topic", "has_start", "start", "limit")
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    HAS_START_FIELD_NUMBER: _ClassVar[int]
    START_FIELD_NUMBER: _ClassVar[int]
    LIMIT_FIELD_NUMBER: _ClassVar[int]
    topic: str
    has_start: bool
    start: MessageId
    limit: int
    def __init__(self, topic: _Optional[str] = ..., has_start: _Optional[bool] = ..., start: _Optional[_Union[MessageId, _Mapping]] = ..., limit: _Optional[int] = ...) -> None: ...

class ReadEntry(_message.Message):
    __slots__ = ("id", "message")
    ID_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    id: MessageId
    message: Message
    def __init__(self, id: _Optional[_Union[MessageId, _Mapping]] = ..., message: _Optional[_Union[Message, _Mapping]] = ...) -> None: ...

class ReadResp(_message.Message):
    __slots__ = ("code", "message", "entries")
    CODE_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    ENTRIES_FIELD_NUMBER: _ClassVar[int]
    code: Code
    message: str
    entries: _containers.RepeatedCompositeFieldContainer[ReadEntry]
    def __init__(self, code: _Optional[_Union[Code, str]] = ..., message: _Optional[str] = ..., entries: _Optional[_Iterable[_Union[ReadEntry, _Mapping]]] = ...) -> None: ...

class LastIdReq(_message.Message):
    __slots__ = ("topic",)
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    topic: str
    def __init__(self, topic: _Optional[str] = ...) -> None: ...

class LastIdResp(_message.Message):
    __slots__ = ("code", "message", "has_id", "id")
    CODE_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    HAS_ID_FIELD_NUMBER: _ClassVar[int]
    ID_FIELD_NUMBER: _ClassVar[int]
    code: Code
    message: str
    has_id: bool
    id: MessageId
    def __init__(self, code: _Optional[_Union[Code, str]] = ..., message: _Optional[str] = ..., has_id: _Optional[bool] = ..., id: _Optional[_Union[MessageId, _Mapping]] = ...) -> None: ...

class Subscribe(_message.Message):
    __slots__ = ("topic", "subscription", "type", "initial_position", "consumer_name")
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    SUBSCRIPTION_FIELD_NUMBER: _ClassVar[int]
    TYPE_FIELD_NUMBER: _ClassVar[int]
    INITIAL_POSITION_FIELD_NUMBER: _ClassVar[int]
    CONSUMER_NAME_FIELD_NUMBER: _ClassVar[int]
    topic: str
    subscription: str
    type: SubType
    initial_position: InitialPosition
    consumer_name: str
    def __init__(self, topic: _Optional[str] = ..., subscription: _Optional[str] = ..., type: _Optional[_Union[SubType, str]] = ..., initial_position: _Optional[_Union[InitialPosition, str]] = ..., consumer_name: _Optional[str] = ...) -> None: ...

class Flow(_message.Message):
    __slots__ = ("permits",)
    PERMITS_FIELD_NUMBER: _ClassVar[int]
    permits: int
    def __init__(self, permits: _Optional[int] = ...) -> None: ...

class Ack(_message.Message):
    __slots__ = ("ids", "cumulative")
    IDS_FIELD_NUMBER: _ClassVar[int]
    CUMULATIVE_FIELD_NUMBER: _ClassVar[int]
    ids: _containers.RepeatedCompositeFieldContainer[MessageId]
    cumulative: bool
    def __init__(self, ids: _Optional[_Iterable[_Union[MessageId, _Mapping]]] = ..., cumulative: _Optional[bool] = ...) -> None: ...

class Nack(_message.Message):
    __slots__ = ("ids",)
    IDS_FIELD_NUMBER: _ClassVar[int]
    ids: _containers.RepeatedCompositeFieldContainer[MessageId]
    def __init__(self, ids: _Optional[_Iterable[_Union[MessageId, _Mapping]]] = ...) -> None: ...

class ConsumeReq(_message.Message):
    __slots__ = ("subscribe", "flow", "ack", "nack")
    SUBSCRIBE_FIELD_NUMBER: _ClassVar[int]
    FLOW_FIELD_NUMBER: _ClassVar[int]
    ACK_FIELD_NUMBER: _ClassVar[int]
    NACK_FIELD_NUMBER: _ClassVar[int]
    subscribe: Subscribe
    flow: Flow
    ack: Ack
    nack: Nack
    def __init__(self, subscribe: _Optional[_Union[Subscribe, _Mapping]] = ..., flow: _Optional[_Union[Flow, _Mapping]] = ..., ack: _Optional[_Union[Ack, _Mapping]] = ..., nack: _Optional[_Union[Nack, _Mapping]] = ...) -> None: ...

class Delivery(_message.Message):
    __slots__ = ("id", "message", "redelivery_count")
    ID_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    REDELIVERY_COUNT_FIELD_NUMBER: _ClassVar[int]
    id: MessageId
    message: Message
    redelivery_count: int
    def __init__(self, id: _Optional[_Union[MessageId, _Mapping]] = ..., message: _Optional[_Union[Message, _Mapping]] = ..., redelivery_count: _Optional[int] = ...) -> None: ...

class ConsumeResp(_message.Message):
    __slots__ = ("code", "message", "deliveries", "subscribed", "active", "active_changed")
    CODE_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    DELIVERIES_FIELD_NUMBER: _ClassVar[int]
    SUBSCRIBED_FIELD_NUMBER: _ClassVar[int]
    ACTIVE_FIELD_NUMBER: _ClassVar[int]
    ACTIVE_CHANGED_FIELD_NUMBER: _ClassVar[int]
    code: Code
    message: str
    deliveries: _containers.RepeatedCompositeFieldContainer[Delivery]
    subscribed: bool
    active: bool
    active_changed: bool
    def __init__(self, code: _Optional[_Union[Code, str]] = ..., message: _Optional[str] = ..., deliveries: _Optional[_Iterable[_Union[Delivery, _Mapping]]] = ..., subscribed: _Optional[bool] = ..., active: _Optional[bool] = ..., active_changed: _Optional[bool] = ...) -> None: ...

class AdminReq(_message.Message):
    __slots__ = ("verb", "args")
    VERB_FIELD_NUMBER: _ClassVar[int]
    ARGS_FIELD_NUMBER: _ClassVar[int]
    verb: str
    args: str
    def __init__(self, verb: _Optional[str] = ..., args: _Optional[str] = ...) -> None: ...

class AdminResp(_message.Message):
    __slots__ = ("code", "message", "result")
    CODE_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    RESULT_FIELD_NUMBER: _ClassVar[int]
    code: Code
    message: str
    result: str
    def __init__(self, code: _Optional[_Union[Code, str]] = ..., message: _Optional[str] = ..., result: _Optional[str] = ...) -> None: ...
