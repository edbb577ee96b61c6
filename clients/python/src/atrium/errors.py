"""What goes wrong, as exceptions whose message says what to do."""
from __future__ import annotations

from typing import Optional


class AtriumError(Exception):
    """Anything this client reports. ``code`` names the kind of failure:

    - ``cannot_connect``: the host could not be reached (or refused the connection);
    - ``timed_out``: the host did not answer within the call's timeout;
    - ``host_went_away``: the connection ended while the call waited;
    - ``host_identity_changed``: the host proved another identity than the one this client
      paired with;
    - ``not_paired``: the host takes only paired devices, and this one is not;
    - ``protocol_error``: the host sent something the contract does not allow, or refused
      a frame of this client's (``error`` frame);
    - ``invalid_value``: a message holds a value that is not a ValueSet kind (nothing sent);
    - ``identity``: this client's identity or known hosts cannot be read or written.
    """

    def __init__(self, code: str, message: str, *, host_code: Optional[str] = None) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        #: The ``code`` of the host's ``error`` frame, when the host sent one.
        self.host_code = host_code

    def __str__(self) -> str:
        return self.message


class InvalidValueError(AtriumError, ValueError):
    """A value that is not a ValueSet kind, named by its path from the message root."""

    def __init__(self, path: str, reason: str) -> None:
        super().__init__("invalid_value", f"{path}: {reason}")
        self.path = path
        self.reason = reason
