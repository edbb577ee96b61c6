"""Project Rome's nouns, in Python's spelling: :class:`RemoteSystem`,
:class:`AppServiceConnection`, :class:`RemoteLauncher`, and :func:`pair`."""
from __future__ import annotations

import asyncio
import ipaddress
import socket
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, AsyncIterator, Callable, Dict, List, Optional, Sequence, Tuple, Union

from . import pairing as codes
from . import values
from .connection import DEFAULT_PORT, STARTED_WINDOW, Connection, TLSSettings, is_loopback
from .errors import AtriumError
from .identity import ClientIdentity, KnownHosts, address_key
from .status import (AppServiceClosedStatus, AppServiceConnectionStatus, AppServiceResponseStatus,
                     PairingStatus, RemoteLaunchUriStatus, status_of)


def parse_address(text: str) -> Tuple[str, int]:
    """``HOST``, ``HOST:PORT``, ``[V6]:PORT`` or a bare IPv6 address → (host, port)."""
    text = text.strip()
    if text.startswith("["):
        host, _, rest = text[1:].partition("]")
        port_text = rest[1:] if rest.startswith(":") else ""
    elif text.count(":") == 1:
        host, _, port_text = text.partition(":")
    else:
        host, port_text = text, ""
    if not host:
        raise AtriumError("cannot_connect", f"'{text}' is not a host: use HOST, HOST:PORT or [IPv6]:PORT")
    if not port_text:
        return host, DEFAULT_PORT
    if not (port_text.isascii() and port_text.isdigit()) or not 1 <= int(port_text) <= 65535:
        raise AtriumError("cannot_connect", f"'{text}' has no port from 1 to 65535")
    return host, int(port_text)


def _reason(frame: Dict[str, Any]) -> Optional[str]:
    """A frame's `error` text, when it has one."""
    error = frame.get("error")
    return error if isinstance(error, str) and error else None


async def _is_name(text: str) -> bool:
    """Whether `text` names a host to find on the network rather than an address to connect
    to as it is (an IP address, a port, or a name the resolver knows), as atrium decides."""
    text = text.strip()
    if ":" in text or text.lower() == "localhost" or not text:
        return False
    try:
        ipaddress.ip_address(text)
        return False
    except ValueError:
        pass
    if any(character in text for character in "/="):
        return False
    try:
        await asyncio.wait_for(asyncio.get_running_loop().getaddrinfo(text, None, type=socket.SOCK_STREAM), 5)
        return False
    except (OSError, UnicodeError, asyncio.TimeoutError):
        return True


@dataclass
class AppInfo:
    """A package the host serves (``apps``)."""

    package: str
    display_name: str
    services: List[str]
    schemes: List[str]
    state: Optional[str] = None
    reason: Optional[str] = None


@dataclass
class RemoteSystem:
    """A host, found by address (:meth:`find`). Holds where it is and who it proved to be;
    every call opens a connection of its own."""

    id: str
    display_name: str
    host: str
    port: int
    #: The identity TLS proved when it was found (None over plain TCP).
    identity: Optional[str]
    #: Whether this client paired with it (``known-hosts.json``).
    is_paired: bool
    kind: str = "unknown"
    insecure: bool = False
    state_folder: Optional[Path] = None
    token: Optional[str] = field(default=None, repr=False)
    #: Found by its advertisement (DNS-SD): its address and identity are only claims.
    discovered: bool = False

    @classmethod
    async def find(cls, address: str, *, insecure: bool = False, state_folder: Optional[Path] = None,
                   token: Optional[str] = None, timeout: float = 5.0) -> "RemoteSystem":
        """The host at ``HOST[:PORT]`` (port 7340 by default): connects, reads its ``welcome``,
        and closes. Over TLS with this client's identity; plain TCP only with
        ``insecure=True``, and only to loopback. A host this client paired with must prove
        the identity it proved then (:class:`AtriumError` ``host_identity_changed``)."""
        if await _is_name(address):
            # A name advertised on the network (DNS-SD): found there, then held to what it proves.
            from .discovery import find_by_name
            if insecure:
                raise AtriumError("cannot_connect", "insecure=True speaks plain TCP, allowed only to a loopback "
                                  f"address, not to a host found by its name (\"{address}\")")
            found = await find_by_name(address, state_folder=state_folder, token=token, within=min(timeout, 5.0))
            advertised = found.id
            connection = await found.connect(timeout=timeout)
            await connection.close()
            if connection.host_id.lower() != advertised.lower():
                raise AtriumError("host_identity_changed", f"\"{address}\" was advertised as host {advertised}, but "
                                  f"{found.address} says it is {connection.host_id}: not the host announced")
            found.identity = connection.host_identity
            found.is_paired = found.identity is not None and found.known_hosts().is_paired(found.identity)
            return found
        host, port = parse_address(address)
        if insecure and not is_loopback(host):
            raise AtriumError("cannot_connect",
                              f"insecure=True speaks plain TCP, allowed only to a loopback host, not {address}")
        system = cls(id="", display_name=host, host=host, port=port, identity=None, is_paired=False,
                     insecure=insecure, state_folder=state_folder, token=token)
        connection = await system.connect(timeout=timeout)
        await connection.close()
        system.id = connection.host_id
        system.display_name = connection.host_name or host
        system.kind = str(connection.welcome.get("kind", "unknown"))
        system.identity = connection.host_identity
        if system.identity is not None:
            system.is_paired = system.known_hosts().is_paired(system.identity)
        return system

    @property
    def address(self) -> str:
        return address_key(self.host, self.port)

    def known_hosts(self) -> KnownHosts:
        return KnownHosts(self.state_folder)

    def tls_settings(self, expecting: bool = True) -> Optional[TLSSettings]:
        """This client's identity, expecting (unless not `expecting`) the identity this host
        proved at pairing (by its address, else by its id)."""
        if self.insecure:
            return None
        if not expecting:
            return TLSSettings(ClientIdentity.load_or_create(self.state_folder))
        known = self.known_hosts()
        by_address = known.identity_of(self.host, self.port)
        by_id = known.identity_of_host_id(self.id) if self.id else None
        if self.discovered:
            # A host whose id this client paired with is held to the identity it proved then;
            # else one that advertises an identity this client paired with must prove it.
            advertised = self.identity if self.identity and known.is_paired(self.identity) else None
            expected = by_id or advertised or by_address
        else:
            expected = by_address or by_id
        return TLSSettings(ClientIdentity.load_or_create(self.state_folder), expected)

    async def connect(self, *, client_name: Optional[str] = "atrium Python client",
                      timeout: float = 10.0, expecting: bool = True) -> Connection:
        """A connection of its own to this host (close it when done)."""
        return await Connection.open(self.host, self.port, tls=self.tls_settings(expecting),
                                     client_name=client_name, token=self.token if expecting else None,
                                     timeout=timeout, discovered=self.discovered)

    async def ping(self, timeout: float = 10.0) -> float:
        """Pings the host (``ping``/``pong``); the round trip in seconds, connecting not counted."""
        async with await self.connect(timeout=timeout) as connection:
            start = time.monotonic()
            await connection.ping(timeout)
            return time.monotonic() - start

    async def apps(self, timeout: float = 10.0) -> List[AppInfo]:
        """The packages the host serves to this client. Raises ``not_paired`` when the host
        takes only paired devices and this one is not."""
        async with await self.connect(timeout=timeout) as connection:
            number = connection.make_number()
            answer = await connection.call({"type": "apps", "id": number}, ("apps", number), timeout)
        listed = answer.get("apps")
        if not isinstance(listed, list):
            raise AtriumError("protocol_error", f"{self.address} answered apps without a list of apps")

        def texts(value: Any) -> List[str]:
            return [str(text) for text in value] if isinstance(value, list) else []

        def text(value: Any) -> Optional[str]:
            return value if isinstance(value, str) else None

        return [AppInfo(package=str(app.get("package", "")), display_name=str(app.get("displayName", "")),
                        services=texts(app.get("services")), schemes=texts(app.get("schemes")),
                        state=text(app.get("state")), reason=text(app.get("reason")) or text(app.get("error")))
                for app in listed if isinstance(app, dict)]


@dataclass
class AppServiceResponse:
    """A service's answer: its status, its message, and the host's reason when the status is
    not success."""

    status: Union[AppServiceResponseStatus, int]
    message: values.ValueSet
    error: Optional[str] = None


class AppServiceRequest:
    """A message the service sent to this client; answer it with :meth:`send_response`."""

    def __init__(self, connection: Connection, channel: int, number: int, message: values.ValueSet) -> None:
        self._connection = connection
        self._channel = channel
        self._number = number
        self.message = message
        self.answered = False

    async def send_response(self, message: Optional[Dict[str, Any]] = None,
                            status: AppServiceResponseStatus = AppServiceResponseStatus.SUCCESS) -> None:
        """Answers the request (once)."""
        if self.answered:
            raise AtriumError("protocol_error", "this request was answered already")
        checked = values.check(message or {})
        self.answered = True
        await self._connection.send({"type": "response", "channel": self._channel, "id": self._number,
                                     "status": int(status), "message": checked})


class AppServiceConnection:
    """A connection to one app service on a host (Windows' ``AppServiceConnection``)::

        async with AppServiceConnection(app_service_name="atrium.echo",
                                        package_id="atrium.examples.echo",
                                        remote_system=system) as service:
            if await service.open_remote() == AppServiceConnectionStatus.SUCCESS:
                response = await service.send_message({"hello": "world"})
    """

    def __init__(self, app_service_name: str, package_id: str, remote_system: Optional[RemoteSystem] = None,
                 *, connection: Optional[Connection] = None) -> None:
        if remote_system is None and connection is None:
            raise ValueError("an AppServiceConnection needs a remote_system (or a connection)")
        self.app_service_name = app_service_name
        self.package_id = package_id
        self.remote_system = remote_system
        self._connection = connection
        self._owns_connection = connection is None
        self._channel: Optional[int] = None
        #: Why the service could not be opened, from the host, when it could not.
        self.open_error: Optional[str] = None

    @property
    def connection(self) -> Optional[Connection]:
        return self._connection

    async def open_remote(self, timeout: float = 10.0) -> Union[AppServiceConnectionStatus, int]:
        """Opens the service: its status (the reason, when not success, in :attr:`open_error`)."""
        if self._channel is not None:
            raise AtriumError("protocol_error", "this AppServiceConnection is open already")
        if self._connection is None:
            assert self.remote_system is not None
            self._connection = await self.remote_system.connect(timeout=timeout)
        number = self._connection.make_number()
        self._connection.channel(number)
        answer = await self._connection.call(
            {"type": "open", "channel": number, "service": self.app_service_name, "package": self.package_id},
            ("opened", number), timeout)
        status = status_of(AppServiceConnectionStatus, int(answer.get("status", 4)))
        if status == AppServiceConnectionStatus.SUCCESS:
            self._channel = number
        else:
            self._connection.forget_channel(number)
            self.open_error = _reason(answer)
        return status

    async def send_message(self, message: Dict[str, Any], timeout: Optional[float] = None,
                           starting_download: bool = False) -> AppServiceResponse:
        """Sends `message` to the service and waits for its answer (by default as long as
        the host waits for the service, and a little more). A value that is not a ValueSet
        kind raises :class:`~atrium.errors.InvalidValueError` before anything is sent.

        With `starting_download`, a download the service offers in its answer (its
        ``Transfer``) starts at once, without a round trip of its own: the
        :class:`~atrium.transfers.DownloadOperation` made for it on this connection takes up
        the bytes already arriving (run it, or pause it: until then the connection holds what
        arrives, at most a window; pausing it before it runs detaches it). An older host
        answers as before, and the operation attaches."""
        connection, channel = self._open()
        checked = values.check(message)
        number = connection.make_number()
        wait = timeout if timeout is not None else connection.response_timeout + 5
        frame: Dict[str, Any] = {"type": "request", "channel": channel, "id": number, "message": checked}
        key = (f"response:{channel}", number)
        if starting_download:
            frame["attach"] = {"window": STARTED_WINDOW}
            connection.starting.add(key)
        try:
            answer = await connection.call(frame, key, wait)
        finally:
            connection.starting.discard(key)
        status = status_of(AppServiceResponseStatus, int(answer.get("status", 3)))
        try:
            received = values.from_wire(answer.get("message", {}))
        except AtriumError as error:
            raise AtriumError("protocol_error", f"the host's answer is not a ValueSet: {error}") from error
        return AppServiceResponse(status, received, _reason(answer))

    async def requests(self) -> AsyncIterator[AppServiceRequest]:
        """The messages the service sends to this client, until the channel or connection
        closes (then :attr:`closed_status` says how)."""
        connection, channel = self._open()
        queue = connection.channel(channel).requests
        while True:
            frame = await queue.get()
            if frame is None:
                queue.put_nowait(None)
                return
            try:
                message = values.from_wire(frame.get("message", {}))
            except AtriumError as error:
                # Answered with the reason, as the host answers a client's: the next one may be fine.
                await connection.send({"type": "response", "channel": channel, "id": frame["id"],
                                       "status": int(AppServiceResponseStatus.FAILURE), "message": {},
                                       "error": f"the client cannot read this message: {error}"})
                continue
            yield AppServiceRequest(connection, channel, frame["id"], message)

    @property
    def closed_status(self) -> Union[AppServiceClosedStatus, int, None]:
        """How the service closed the channel, once it did."""
        if self._connection is None or self._channel is None:
            return None
        status = self._connection.channel(self._channel).closed_status
        return None if status is None else status_of(AppServiceClosedStatus, status)

    def _open(self) -> Tuple[Connection, int]:
        if self._connection is None or self._channel is None:
            raise AtriumError("protocol_error", "open the service first: await connection.open_remote()")
        return self._connection, self._channel

    async def close(self) -> None:
        """Closes the channel (the service is told), and the connection when it is this
        object's own."""
        connection, channel = self._connection, self._channel
        self._channel = None
        if connection is None:
            return
        if channel is not None and connection.is_open:
            try:
                await connection.send({"type": "close", "channel": channel})
            except AtriumError:
                pass
            connection.forget_channel(channel)
        if self._owns_connection:
            await connection.close()
            self._connection = None

    async def __aenter__(self) -> "AppServiceConnection":
        return self

    async def __aexit__(self, *exception: object) -> None:
        await self.close()


@dataclass
class LaunchResult:
    status: Union[RemoteLaunchUriStatus, int]
    error: Optional[str] = None


class RemoteLauncher:
    """Launches URIs on a host (Windows' ``RemoteLauncher``)."""

    @staticmethod
    async def launch_uri(uri: str, remote_system: RemoteSystem, *, package: Optional[str] = None,
                         fallback_uri: Optional[str] = None, preferred_packages: Sequence[str] = (),
                         data: Optional[Dict[str, Any]] = None,
                         timeout: float = 10.0) -> Union[RemoteLaunchUriStatus, int]:
        """Hands `uri` to the app the host registered for its scheme: the status."""
        return (await RemoteLauncher.launch_uri_with_reason(
            uri, remote_system, package=package, fallback_uri=fallback_uri,
            preferred_packages=preferred_packages, data=data, timeout=timeout)).status

    @staticmethod
    async def launch_uri_with_reason(uri: str, remote_system: RemoteSystem, *, package: Optional[str] = None,
                                     fallback_uri: Optional[str] = None, preferred_packages: Sequence[str] = (),
                                     data: Optional[Dict[str, Any]] = None, timeout: float = 10.0) -> LaunchResult:
        """As :meth:`launch_uri`, with the host's reason when the status is not success."""
        frame: Dict[str, Any] = {"type": "launch", "uri": uri}
        if package is not None:
            frame["package"] = package
        if fallback_uri is not None:
            frame["fallbackUri"] = fallback_uri
        if preferred_packages:
            frame["preferredPackages"] = list(preferred_packages)
        if data is not None:
            frame["data"] = values.check(data, "data")
        async with await remote_system.connect(timeout=timeout) as connection:
            number = connection.make_number()
            frame["id"] = number
            answer = await connection.call(frame, ("launched", number), timeout)
        return LaunchResult(status_of(RemoteLaunchUriStatus, int(answer.get("status", 0))), _reason(answer))


async def pair(remote_system: RemoteSystem, *, device_name: str,
               show_code: Callable[[str], None] = lambda code: None, forget: bool = False,
               timeout: float = 130.0) -> Union[PairingStatus, int]:
    """Asks the host's operator to pair this device, and remembers the host's identity when
    they accept (in ``known-hosts.json``, as ``atrium pair`` does). `show_code` is given the
    six digits to compare with the ones the operator sees, as soon as they are known (on the
    event loop: it must not block).

    A host this client paired with before must prove the same identity, by address and by
    id; `forget=True` pairs anyway with a host that made a new key on purpose, and replaces
    what was remembered."""
    if remote_system.insecure:
        raise AtriumError("cannot_connect", "pairing needs TLS: find the host without insecure=True")
    async with await remote_system.connect(timeout=min(timeout, 10.0), expecting=not forget) as connection:
        host, client = connection.host_identity, connection.client_identity
        assert host is not None and client is not None
        known = remote_system.known_hosts()
        pinned = known.identity_of_host_id(connection.host_id) if connection.host_id else None
        if pinned is not None and pinned != host and not forget:
            raise AtriumError(
                "host_identity_changed",
                f"{connection.address} says it is the host {connection.host_id}, which proved the identity {pinned} "
                f"when this client paired with it, but it proved {host} now. If that host made a new key on "
                "purpose, pair with forget=True; otherwise someone may be in between")
        already_known = known.is_paired(host)
        shown = False
        nonce = codes.make_nonce()
        number = connection.make_number()
        exchange = await connection.pairing(
            {"type": "pair", "id": number, "deviceName": device_name, "commitment": codes.commitment(nonce)},
            timeout)
        try:
            first = await exchange.next()
            outcome = first
            if first["type"] == "pairNonce":
                host_nonce = str(first.get("nonce", ""))
                if not codes.is_well_formed(host_nonce):
                    raise AtriumError("protocol_error", "the host's pairing nonce is not 64 hex digits")
                show_code(codes.code(host, client, nonce, host_nonce))
                shown = True
                await connection.send({"type": "pairReveal", "id": number, "nonce": nonce})
                outcome = await exchange.next()
        finally:
            exchange.done()
        if outcome["type"] != "paired":
            raise AtriumError("protocol_error", f"the host answered pair with {outcome['type']!r}")
        status = status_of(PairingStatus, int(outcome.get("status", 3)))
        if status == PairingStatus.PAIRED:
            if not shown and not already_known:
                raise AtriumError(
                    "protocol_error",
                    f"{connection.address} answered that this device is paired without a verification code to "
                    "compare, so nothing proves it is the host you mean; it was not remembered")
            known.remember(host, remote_system.host, remote_system.port, connection.host_id or None)
            remote_system.identity = host
            remote_system.is_paired = True
            remote_system.id = connection.host_id
        return status

