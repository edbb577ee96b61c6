"""The status enumerations, with the numbering of Windows' (CONTRACT section 4).

A number this client does not know is kept as it came: :func:`status_of` gives the member
when there is one, else the plain ``int``.
"""
from __future__ import annotations

from enum import IntEnum
from typing import Type, TypeVar, Union


class AppServiceConnectionStatus(IntEnum):
    SUCCESS = 0
    APP_NOT_INSTALLED = 1
    APP_UNAVAILABLE = 2
    APP_SERVICE_UNAVAILABLE = 3
    UNKNOWN = 4
    REMOTE_SYSTEM_UNAVAILABLE = 5
    REMOTE_SYSTEM_NOT_SUPPORTED_BY_APP = 6
    NOT_AUTHORIZED = 7
    AUTHENTICATION_ERROR = 8
    NETWORK_NOT_AVAILABLE = 9
    DISABLED_BY_POLICY = 10
    WEB_SERVICE_UNAVAILABLE = 11


class AppServiceResponseStatus(IntEnum):
    SUCCESS = 0
    FAILURE = 1
    RESOURCE_LIMITS_EXCEEDED = 2
    UNKNOWN = 3
    REMOTE_SYSTEM_UNAVAILABLE = 4
    MESSAGE_SIZE_TOO_LARGE = 5
    APP_UNAVAILABLE = 6
    AUTHENTICATION_ERROR = 7
    NETWORK_NOT_AVAILABLE = 8
    DISABLED_BY_POLICY = 9
    WEB_SERVICE_UNAVAILABLE = 10


class AppServiceClosedStatus(IntEnum):
    COMPLETED = 0
    CANCELED = 1
    RESOURCE_LIMITS_EXCEEDED = 2
    UNKNOWN = 3


class RemoteLaunchUriStatus(IntEnum):
    UNKNOWN = 0
    SUCCESS = 1
    APP_UNAVAILABLE = 2
    PROTOCOL_UNAVAILABLE = 3
    REMOTE_SYSTEM_UNAVAILABLE = 4
    VALUE_SET_TOO_LARGE = 5
    DENIED_BY_LOCAL_SYSTEM = 6
    DENIED_BY_REMOTE_SYSTEM = 7


class PairingStatus(IntEnum):
    """The ``status`` of a ``paired`` frame."""

    PAIRED = 0
    REFUSED = 1
    TIMED_OUT = 2
    NOT_POSSIBLE = 3


E = TypeVar("E", bound=IntEnum)


def status_of(kind: Type[E], number: int) -> Union[E, int]:
    """The member of `kind` numbered `number`, or `number` itself when `kind` has none."""
    try:
        return kind(number)
    except ValueError:
        return number
