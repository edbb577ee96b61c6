"""A client for Atrium hosts: app services, URI launches and pings on a Linux machine, in
Project Rome's nouns. See README.md, and docs/PROTOCOL.md in Atrium's repository."""
from .connection import Connection, TLSSettings
from .errors import AtriumError, InvalidValueError
from .identity import ClientIdentity, KnownHosts
from .remote import (AppInfo, AppServiceConnection, AppServiceRequest, AppServiceResponse, LaunchResult,
                     RemoteLauncher, RemoteSystem, pair)
from .status import (AppServiceClosedStatus, AppServiceConnectionStatus, AppServiceResponseStatus,
                     PairingStatus, RemoteLaunchUriStatus)

__all__ = [
    "AppInfo", "AppServiceClosedStatus", "AppServiceConnection", "AppServiceConnectionStatus",
    "AppServiceRequest", "AppServiceResponse", "AppServiceResponseStatus", "AtriumError", "ClientIdentity",
    "Connection", "InvalidValueError", "KnownHosts", "LaunchResult", "PairingStatus", "RemoteLaunchUriStatus",
    "RemoteLauncher", "RemoteSystem", "TLSSettings", "pair",
]
__version__ = "0.1.0"
