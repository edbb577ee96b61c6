"""One connection to a host, over asyncio: TLS with this client's identity (or plain TCP to
loopback, or the host's Unix socket), ``hello`` and ``welcome``, and the frames of
CONTRACT section 2 matched to the calls that wait for them. The classes of
:mod:`atrium.remote` are built on it; it is public for what they do not cover."""
from __future__ import annotations

import asyncio
import ipaddress
import itertools
import ssl
import time
import uuid
from dataclasses import dataclass
from typing import Any, Dict, List, Optional, Set, Tuple

from . import frames as wire
from .errors import AtriumError
from .identity import ClientIdentity, fingerprint_of_certificate

#: Requests from a service that this client holds unread, per channel; more are answered
#: ResourceLimitsExceeded.
MAX_WAITING_REQUESTS = 1024
#: Bytes written and not yet read by the host past which a call waits for it to read.
WRITE_HIGH_WATER = 1 << 20
#: The ALPN protocol of frames over TLS.
ALPN = "atrium/1"
#: The window of a download a request starts (as an attach's default): what the client holds
#: of one before an operation takes it up, with a megabyte of chunks in flight.
STARTED_WINDOW = 4 << 20
DEFAULT_PORT = 7340


def is_loopback(host: str) -> bool:
    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _is_id(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


@dataclass(frozen=True)
class TLSSettings:
    """TLS for a TCP connection: this client's identity, and the host's when it is known
    (then a host that proves any other is refused)."""

    identity: ClientIdentity
    expected_host_identity: Optional[str] = None

    def context(self) -> ssl.SSLContext:
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
        # Trust comes from pairing, not from a certificate authority: the certificate is
        # accepted whatever signed it, and its key is checked against the known identity.
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
        context.minimum_version = ssl.TLSVersion.TLSv1_3
        context.load_cert_chain(str(self.identity.certificate_file), str(self.identity.key_file))
        context.set_alpn_protocols([ALPN])
        return context


class _Channel:
    def __init__(self) -> None:
        self.requests: "asyncio.Queue[Optional[wire.Frame]]" = asyncio.Queue()
        self.closed_status: Optional[int] = None


class Connection:
    """A connection that said ``hello`` and got ``welcome``. Use :meth:`open` or
    :meth:`open_unix`; close with :meth:`close` (or ``async with``)."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, address: str,
                 host_identity: Optional[str], client_identity: Optional[str]) -> None:
        self._reader = reader
        self._writer = writer
        #: Where it is connected: ``host:port`` or ``unix:/path``.
        self.address = address
        #: The host's identity as TLS proved it (None on plain TCP and the Unix socket).
        self.host_identity = host_identity
        #: This client's identity, when it speaks TLS.
        self.client_identity = client_identity
        self.welcome: wire.Frame = {}
        self._frames = wire.FrameReader()
        self._numbers = itertools.count(1)
        self._waiting: Dict[Tuple[str, Any], "asyncio.Future[wire.Frame]"] = {}
        self._queues: Dict[Tuple[str, int], "asyncio.Queue[wire.Frame]"] = {}
        self._channels: Dict[int, _Channel] = {}
        self._transfers: Dict[uuid.UUID, "asyncio.Queue[Optional[wire.Frame]]"] = {}
        #: Downloads attached by the request that started them (a response's ``attached``),
        #: until an operation takes them up: their ``attached``, and their frames so far.
        self._started: Dict[uuid.UUID, "List[Any]"] = {}  # [attached, queue, bytes held]
        #: The response keys of requests that asked the host to start a download: only their
        #: responses' ``attached`` is taken.
        self.starting: "Set[Tuple[str, Any]]" = set()
        self._outgoing: List[bytes] = []
        self._outgoing_bytes = 0
        self._flush_scheduled = False
        self._ended: Optional[AtriumError] = None
        self._task: Optional["asyncio.Task[None]"] = None

    # Opening.

    @classmethod
    async def open(cls, host: str, port: int = DEFAULT_PORT, *, tls: Optional[TLSSettings] = None,
                   client_id: Optional[str] = None, client_name: Optional[str] = None,
                   token: Optional[str] = None, timeout: float = 10.0, discovered: bool = False) -> "Connection":
        """Connects to `host`:`port`, over TLS with `tls`; plain TCP (no `tls`) only to a
        loopback address. Raises :class:`AtriumError` (``cannot_connect``, ``timed_out``,
        ``host_identity_changed``, ``protocol_error``)."""
        address = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
        # An address from a network advertisement is never trusted as loopback: anyone can
        # announce 127.0.0.1, and whatever listens there locally would get the token.
        local = is_loopback(host) and not discovered
        if tls is None and not local:
            raise AtriumError(
                "cannot_connect",
                f"plain TCP is allowed only to a loopback host, not {address}: connect over TLS (the default)")
        if token is not None and tls is not None and tls.expected_host_identity is None and not local:
            raise AtriumError(
                "cannot_connect",
                f"a token is sent only to a host whose identity this client knows, and {address} is not one: "
                "pair with it first (atrium.pair), or pass the identity atriumd prints at start")
        context: Optional[ssl.SSLContext] = None
        if tls is not None:
            try:
                context = tls.context()
            except (ssl.SSLError, OSError) as error:
                raise AtriumError("identity", f"cannot use this client's identity ({tls.identity.key_file}) for "
                                  f"TLS: {error}") from error
        started = time.monotonic()
        try:
            reader, writer = await asyncio.wait_for(
                asyncio.open_connection(host, port, ssl=context, server_hostname="" if tls else None,
                                        limit=1 << 20),
                timeout)
        except asyncio.TimeoutError:
            raise AtriumError("timed_out", f"{address} did not answer within {timeout:g} s") from None
        except ssl.SSLError as error:
            raise AtriumError("cannot_connect", f"TLS with {address} failed: {error.reason or error}") from error
        except OSError as error:
            raise AtriumError("cannot_connect", f"cannot connect to {address}: {error.strerror or error}") from error
        proven: Optional[str] = None
        if tls is not None:
            ssl_object = writer.get_extra_info("ssl_object")
            der = ssl_object.getpeercert(binary_form=True) if ssl_object is not None else None
            if not der:
                writer.close()
                raise AtriumError("cannot_connect", f"{address} presented no certificate")
            proven = fingerprint_of_certificate(der)
            expected = tls.expected_host_identity
            if expected is not None and proven != expected.lower():
                writer.close()
                raise AtriumError(
                    "host_identity_changed",
                    f"{address} is not the host you know: it presented the identity {proven}, but was known as "
                    f"{expected}. If the host made a new key on purpose, pair again and forget the old one "
                    "(atrium.pair(system, ..., forget=True), or atrium pair HOST --forget); otherwise someone may "
                    "be in between")
        connection = cls(reader, writer, address, proven, tls.identity.fingerprint if tls else None)
        await connection._hello(client_id, client_name, token, max(timeout - (time.monotonic() - started), 0.001))
        return connection

    @classmethod
    async def open_unix(cls, path: str, *, client_id: Optional[str] = None, client_name: Optional[str] = None,
                        timeout: float = 10.0) -> "Connection":
        """Connects to the host's Unix socket (a local client: no TLS, no pairing)."""
        try:
            reader, writer = await asyncio.wait_for(asyncio.open_unix_connection(path, limit=1 << 20), timeout)
        except asyncio.TimeoutError:
            raise AtriumError("timed_out", f"unix:{path} did not answer within {timeout:g} s") from None
        except OSError as error:
            raise AtriumError("cannot_connect", f"cannot connect to unix:{path}: {error.strerror or error}") from error
        connection = cls(reader, writer, f"unix:{path}", None, None)
        await connection._hello(client_id, client_name, None, timeout)
        return connection

    async def _hello(self, client_id: Optional[str], client_name: Optional[str], token: Optional[str],
                     timeout: float) -> None:
        hello: wire.Frame = {"type": "hello", "version": 1,
                             "clientId": client_id or f"atrium-python-{uuid.uuid4().hex[:8]}"}
        if client_name is not None:
            hello["clientName"] = client_name
        if token is not None:
            hello["token"] = token
        try:
            self._writer.write(wire.encode(hello))
            welcome = await asyncio.wait_for(self._next_frame(), timeout)
        except asyncio.TimeoutError:
            self._writer.close()
            raise AtriumError("timed_out", f"{self.address} did not say welcome within {timeout:g} s") from None
        except AtriumError:
            self._writer.close()
            raise
        except (OSError, ssl.SSLError) as error:
            self._writer.close()
            raise AtriumError("cannot_connect", f"{self.address} ended the connection before welcome: {error} "
                              "(a host that takes only paired devices, or TLS, may refuse this way)") from error
        if welcome["type"] == "error":
            self._writer.close()
            raise AtriumError("cannot_connect" if welcome.get("code") != "notAuthorized" else "not_authorized",
                              f"{self.address} refused the connection: {welcome.get('message', '')} "
                              f"({welcome.get('code', '')})", host_code=str(welcome.get("code", "")))
        if welcome["type"] != "welcome" or welcome.get("version") != 1:
            self._writer.close()
            raise AtriumError("protocol_error", f"{self.address} answered hello with {welcome['type']!r}, "
                              "not a version 1 welcome: it does not speak Atrium")
        if self.host_identity is not None and welcome.get("hostIdentity") != self.host_identity:
            self._writer.close()
            raise AtriumError(
                "host_identity_changed",
                f"{self.address} proved the TLS identity {self.host_identity}, but says it is "
                f"{welcome.get('hostIdentity', 'nothing')}: something between you and the host ends TLS with a "
                "certificate of its own; the connection was closed")
        limits = welcome.get("limits")
        announced = limits.get("maxFrameBytes") if isinstance(limits, dict) else None
        if isinstance(announced, int) and not isinstance(announced, bool) and announced > 0:
            self._frames.max_frame_bytes = min(announced, wire.MAX_FRAME_BYTES)
        self.welcome = welcome
        self._task = asyncio.get_running_loop().create_task(self._run())

    async def _next_frame(self) -> wire.Frame:
        while True:
            data = await self._reader.read(1 << 16)
            if not data:
                raise AtriumError("host_went_away", f"{self.address} closed the connection")
            got = self._frames.feed(data)
            if got:
                if len(got) > 1 or self._frames.pending:
                    raise AtriumError("protocol_error", f"{self.address} sent frames before welcome")
                return got[0]

    # What the host says.

    @property
    def host_id(self) -> str:
        return str(self.welcome.get("hostId", ""))

    @property
    def host_name(self) -> str:
        return str(self.welcome.get("hostName", ""))

    @property
    def response_timeout(self) -> float:
        """How long the host waits for a service before it answers itself, in seconds (as
        the host says, within 0 to 600)."""
        seconds = 30.0
        limits = self.welcome.get("limits")
        if _is_number(self.welcome.get("responseTimeoutMs")):
            seconds = float(self.welcome["responseTimeoutMs"]) / 1000
        elif isinstance(limits, dict) and _is_number(limits.get("responseTimeoutSeconds")):
            seconds = float(limits["responseTimeoutSeconds"])
        return min(max(seconds, 0.0), 600.0)

    @property
    def is_open(self) -> bool:
        return self._ended is None

    def make_number(self) -> int:
        """A new id for a request, a channel or a call."""
        return next(self._numbers)

    async def _run(self) -> None:
        ending = AtriumError("host_went_away", f"{self.address} closed the connection")
        try:
            while True:
                data = await self._reader.read(1 << 18)
                if not data:
                    break
                for frame in self._frames.feed(data):
                    error = self._dispatch(frame)
                    if error is not None:
                        ending = error
        except AtriumError as error:
            ending = error
        except (OSError, ssl.SSLError) as error:
            ending = AtriumError("host_went_away", f"the connection to {self.address} failed: {error}")
        except asyncio.CancelledError:
            ending = AtriumError("host_went_away", f"the connection to {self.address} was closed")
        except Exception as error:  # a defect here must end the connection with a reason, not vanish
            ending = AtriumError("protocol_error", f"reading from {self.address} failed: {error!r}")
        finally:
            self._end(ending)

    def _end(self, error: AtriumError) -> None:
        if self._ended is not None:
            return
        self._flush()  # what was sent before the end goes out first (a `close`, say)
        self._ended = error
        for future in self._waiting.values():
            if not future.done():
                future.set_exception(error)
        self._waiting.clear()
        for queue in self._queues.values():
            queue.put_nowait({"type": "_ended"})
        for channel in self._channels.values():
            channel.requests.put_nowait(None)
        for events in self._transfers.values():
            events.put_nowait(None)
        self._started.clear()
        self.starting.clear()
        self._writer.close()

    def _dispatch(self, frame: wire.Frame) -> Optional[AtriumError]:
        """Hands a frame to what waits for it. An `error` frame is returned: the reason the
        connection ends, when the host then closes it. A frame that breaks the contract
        raises, and ends the connection at once."""
        kind = frame["type"]
        if kind == "error":
            code = str(frame.get("code", ""))
            message = str(frame.get("message", ""))
            waiting_apps = [key for key in self._waiting if key[0] == "apps"]
            if code == "notAuthorized" and waiting_apps:
                # The answer to `apps` from a device that is not paired: the connection stays.
                self._waiting.pop(waiting_apps[0]).set_exception(AtriumError(
                    "not_paired", f"{self.address} lists its apps only to paired devices ({message}): "
                    "pair first, with atrium.pair() or `atrium pair HOST`", host_code=code))
                return None
            return AtriumError("protocol_error", f"{self.address} said: {message} ({code})", host_code=code)
        # What breaks the contract ends the connection (raised to _run), as the host does.
        for name in ("id", "channel", "status", "offset", "window", "size"):
            if name in frame and not (_is_id(frame[name]) or (name == "size" and frame[name] == -1)):
                raise AtriumError("protocol_error", f"{self.address} sent a {kind} frame whose {name} is "
                                  f"{frame[name]!r}, not an unsigned integer")
        if kind in ("chunk", "ack", "transferState") or (kind in ("attached",) and "transfer" in frame):
            if not isinstance(frame.get("transfer"), uuid.UUID):
                raise AtriumError("protocol_error", f"{self.address} sent a {kind} frame without a transfer uuid")
        if kind in ("request", "closed"):
            if not _is_id(frame.get("channel")) or (kind == "request" and not _is_id(frame.get("id"))):
                raise AtriumError("protocol_error", f"{self.address} sent a {kind} frame without its ids")
            channel = self._channels.get(frame["channel"])
            if kind == "closed":
                if channel is not None:
                    channel.closed_status = int(frame.get("status", 3))
                    channel.requests.put_nowait(None)
            elif channel is None or channel.closed_status is not None:
                # No one here will answer it: the service hears so at once.
                self._write(wire.encode({
                    "type": "response", "channel": frame["channel"], "id": frame["id"], "status": 1,
                    "message": {}, "error": "no open channel of this client has that number"}))
            elif channel.requests.qsize() >= MAX_WAITING_REQUESTS:
                self._write(wire.encode({
                    "type": "response", "channel": frame["channel"], "id": frame["id"], "status": 2,
                    "message": {}, "error": f"the client holds {MAX_WAITING_REQUESTS} requests it has not read"}))
            else:
                channel.requests.put_nowait(frame)
            return None
        if kind in ("chunk", "ack", "transferState"):
            events = self._transfers.get(frame["transfer"])
            started = self._started.get(frame["transfer"])
            if started is not None and kind == "chunk" and isinstance(frame.get("data"), bytes):
                # Not taken up yet: held here, up to the window it was started with.
                started[2] += len(frame["data"])
                if started[2] > min(started[0]["window"], STARTED_WINDOW) + (1 << 20):
                    # Past the window the request asked for: dropped, and the host told to stop.
                    self.stop_transfer_events(frame["transfer"])
                    self._write(wire.encode({"type": "detach", "transfer": frame["transfer"]}))
                    return None
            if events is not None:
                events.put_nowait(frame)
            # The state that answers cancelTransfer: an end, or a refusal (notFound).
            if kind == "transferState" and (frame.get("error") or frame.get("state") in (
                    "completed", "failed", "canceled", "expired")):
                waiting = self._waiting.pop(("cancel", frame["transfer"]), None)
                if waiting is not None and not waiting.done():
                    waiting.set_result(frame)
            return None
        if kind in ("pairNonce", "paired") and ("pair", frame.get("id", -1)) in self._queues:
            self._queues[("pair", frame["id"])].put_nowait(frame)
            return None
        if kind == "response":
            key: Tuple[str, Any] = (f"response:{frame.get('channel')}", frame.get("id", -1))
            if "attached" in frame:
                waiting = self._waiting.get(key)
                asked = key in self.starting and waiting is not None and not waiting.done()
                self.starting.discard(key)
                self._download_started(frame["attached"], asked)
        elif kind == "opened":
            key = ("opened", frame.get("channel", -1))
        else:
            key = (kind, frame.get("id", -1))
        future = self._waiting.pop(key, None)
        if future is not None and not future.done():
            future.set_result(frame)
        return None

    # Calls.

    def _check_open(self) -> None:
        if self._ended is not None:
            raise self._ended

    def _write(self, data: bytes) -> None:
        """Queues `data`; what is queued in one turn of the event loop goes out in one write
        (64 pipelined requests are one system call, not 64)."""
        self._outgoing.append(data)
        self._outgoing_bytes += len(data)
        if not self._flush_scheduled:
            self._flush_scheduled = True
            asyncio.get_running_loop().call_soon(self._flush)

    def _flush(self) -> None:
        self._flush_scheduled = False
        if self._outgoing and self._ended is None:
            self._writer.write(b"".join(self._outgoing))
        self._outgoing.clear()
        self._outgoing_bytes = 0

    async def _backpressure(self, timeout: Optional[float]) -> None:
        """Waits (at most `timeout`) while the host has not read what was written, once that
        is over a megabyte."""
        if self._outgoing_bytes + self._writer.transport.get_write_buffer_size() <= WRITE_HIGH_WATER:
            return
        self._flush()
        try:
            await asyncio.wait_for(self._writer.drain(), timeout)
        except asyncio.TimeoutError:
            raise AtriumError("timed_out", f"{self.address} read nothing for {timeout:g} s") from None
        except (OSError, ssl.SSLError) as error:
            raise AtriumError("host_went_away", f"the connection to {self.address} failed: {error}") from error

    async def send(self, frame: wire.Frame, timeout: Optional[float] = 30.0) -> None:
        """Sends a frame that has no answer, waiting (at most `timeout`) while the host is not
        reading."""
        self._check_open()
        self._write(wire.encode(frame))
        await self._backpressure(timeout)

    async def call(self, frame: wire.Frame, answer: Tuple[str, Any], timeout: Optional[float]) -> wire.Frame:
        """Sends `frame` and waits for the frame that answers it (`answer`: its type and id,
        or ``("response:CHANNEL", id)``, or ``("opened", channel)``), sending and waiting
        within `timeout` together."""
        self._check_open()
        loop = asyncio.get_running_loop()
        future: "asyncio.Future[wire.Frame]" = loop.create_future()
        self._waiting[answer] = future
        timer = None
        if timeout is not None:
            timer = loop.call_later(timeout, self._expire, answer, future, frame["type"], timeout)
        try:
            self._write(wire.encode(frame))
            await self._backpressure(timeout)
            return await future
        finally:
            if timer is not None:
                timer.cancel()
            if self._waiting.get(answer) is future:
                del self._waiting[answer]

    def _expire(self, answer: Tuple[str, Any], future: "asyncio.Future[wire.Frame]", kind: str,
                timeout: float) -> None:
        if not future.done():
            future.set_exception(AtriumError("timed_out", f"{self.address} did not answer {kind} within "
                                              f"{timeout:g} s"))
        if self._waiting.get(answer) is future:
            del self._waiting[answer]

    def channel(self, number: int) -> _Channel:
        """The frames the service of channel `number` sends (made when first asked for)."""
        channel = self._channels.get(number)
        if channel is None:
            channel = self._channels[number] = _Channel()
            if self._ended is not None:
                channel.requests.put_nowait(None)
        return channel

    def transfer_events(self, transfer: uuid.UUID) -> "asyncio.Queue[Optional[wire.Frame]]":
        """The frames of `transfer` from now on (``chunk``, ``ack``, ``transferState``); None
        once the connection ended or :meth:`stop_transfer_events` was called. An earlier
        queue of the same transfer ends."""
        earlier = self._transfers.get(transfer)
        if earlier is not None:
            earlier.put_nowait(None)
        events: "asyncio.Queue[Optional[wire.Frame]]" = asyncio.Queue()
        if self._ended is not None:
            events.put_nowait(None)
        self._transfers[transfer] = events
        return events

    def _download_started(self, attached: Any, asked: bool) -> None:
        """A response's ``attached``: a download its request started, whose chunks follow the
        response; they wait for :meth:`take_started`. One the client did not ask for (or no
        longer waits for) is detached at once, so that the host stops sending it."""
        if not isinstance(attached, dict) or not isinstance(attached.get("transfer"), uuid.UUID):
            raise AtriumError("protocol_error", f"{self.address} sent a response whose attached is not a map "
                              "with a transfer uuid")
        for name in ("id", "status", "offset", "window", "chunkBytes"):
            if not _is_id(attached.get(name)):
                raise AtriumError("protocol_error", f"{self.address} sent a response whose attached {name} is "
                                  f"{attached.get(name)!r}, not an unsigned integer")
        size = attached.get("size")
        if not (_is_id(size) or size == -1):
            raise AtriumError("protocol_error", f"{self.address} sent a response whose attached size is {size!r}")
        if attached["status"] != 0:
            return
        if not asked or attached.get("direction") != "download":
            self._write(wire.encode({"type": "detach", "transfer": attached["transfer"]}))
            return
        self._started[attached["transfer"]] = [attached, self.transfer_events(attached["transfer"]), 0]

    def take_started(self, transfer: uuid.UUID) -> "Optional[Tuple[wire.Frame, asyncio.Queue[Optional[wire.Frame]]]]":
        """The download `transfer`'s request started on this connection, if no operation took
        it up yet: its ``attached``, and the queue of its frames."""
        started = self._started.pop(transfer, None)
        return None if started is None else (started[0], started[1])

    def stop_transfer_events(self, transfer: uuid.UUID,
                             events: "Optional[asyncio.Queue[Optional[wire.Frame]]]" = None) -> None:
        """Ends the frames of `transfer` (only when they still go to `events`, when given: a
        newer attachment's are left alone)."""
        current = self._transfers.get(transfer)
        if current is None or (events is not None and current is not events):
            return
        self._started.pop(transfer, None)
        del self._transfers[transfer]
        current.put_nowait(None)

    def forget_channel(self, number: int) -> None:
        self._channels.pop(number, None)

    async def pairing(self, frame: wire.Frame, timeout: float) -> "PairingExchange":
        """Sends a ``pair`` frame; its ``pairNonce`` and ``paired`` come through the result."""
        self._check_open()
        number = int(frame["id"])
        queue: "asyncio.Queue[wire.Frame]" = asyncio.Queue()
        self._queues[("pair", number)] = queue
        await self.send(frame)
        return PairingExchange(self, number, queue, timeout)

    async def ping(self, timeout: float = 10.0) -> None:
        number = self.make_number()
        await self.call({"type": "ping", "id": number}, ("pong", number), timeout)

    async def admin(self, command: str, arguments: Optional[Dict[str, Any]] = None,
                    timeout: float = 10.0) -> Dict[str, Any]:
        """An operator's command (the local socket only): its result."""
        number = self.make_number()
        frame: wire.Frame = {"type": "admin", "id": number, "command": command}
        if arguments:
            frame["arguments"] = arguments
        answer = await self.call(frame, ("adminResult", number), timeout)
        if answer.get("status") != 0:
            raise AtriumError("refused", str(answer.get("error", f"the host refused {command}")))
        result = answer.get("result", {})
        return result if isinstance(result, dict) else {}

    async def close(self) -> None:
        """Closes the connection; calls still waiting fail with ``host_went_away``."""
        if self._task is not None and not self._task.done():
            self._task.cancel()
            try:
                await self._task
            except asyncio.CancelledError:
                pass
        self._end(AtriumError("host_went_away", f"the connection to {self.address} was closed"))
        try:
            await asyncio.wait_for(self._writer.wait_closed(), 2)
        except (asyncio.TimeoutError, OSError, ssl.SSLError):
            pass

    async def __aenter__(self) -> "Connection":
        return self

    async def __aexit__(self, *exception: object) -> None:
        await self.close()


class PairingExchange:
    """The host's frames for one ``pair``, in order."""

    def __init__(self, connection: Connection, number: int, queue: "asyncio.Queue[wire.Frame]",
                 timeout: float) -> None:
        self.connection = connection
        self.number = number
        self._queue = queue
        self._timeout = timeout

    async def next(self) -> wire.Frame:
        try:
            frame = await asyncio.wait_for(self._queue.get(), self._timeout)
        except asyncio.TimeoutError:
            raise AtriumError("timed_out", f"{self.connection.address} did not answer the pairing within "
                              f"{self._timeout:g} s") from None
        if frame["type"] == "_ended":
            self.connection._check_open()
        return frame

    def done(self) -> None:
        self.connection._queues.pop(("pair", self.number), None)
