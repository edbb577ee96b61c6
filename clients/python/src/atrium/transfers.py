"""Transfers (CONTRACT section 8): files of any size, both ways, that resume on a later
connection (after this script restarts, too) and whose outcome waits for the client.

A service makes a transfer while answering a request; its answer's ``Transfer`` is the id::

    response = await service.send_message({"Command": "get", "Name": "photo.jpg"})
    download = DownloadOperation(response.message["Transfer"], Path("photo.jpg"), service.connection)
    async for step in download.progress():   # or just: await download.run()
        ...

A download's bytes wait in the client's state folder (``client-transfers/ID.part``, as the
``atrium`` tool keeps them) until they are whole, then move to the destination; running the
same operation again, in this process or another one with the same identity, goes on from
them. An upload goes on from the bytes the host holds.
"""
from __future__ import annotations

import asyncio
import errno
import hashlib
import os
import secrets
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any, AsyncIterator, Dict, List, Optional, Sequence, Tuple

from . import values
from .connection import STARTED_WINDOW, Connection
from .errors import AtriumError
from .identity import default_state_folder

DEFAULT_WINDOW = STARTED_WINDOW
ENDED = ("completed", "failed", "canceled", "expired")


@dataclass
class TransferProgress:
    """Where a transfer stands: bytes moved (a download's held here, an upload's held on the
    host's stable storage), its size (-1: an upload of unknown size), its state, and once it
    ended, its error or the service's result."""

    transfer: uuid.UUID
    bytes: int
    size: int
    state: str
    error: Optional[str] = None
    result: Optional[values.ValueSet] = None

    @property
    def has_ended(self) -> bool:
        return self.state in ENDED

    @classmethod
    def of(cls, frame: Dict[str, Any]) -> "TransferProgress":
        result = frame.get("result")
        offset, size, error = frame.get("offset"), frame.get("size"), frame.get("error")
        return cls(transfer=frame["transfer"], bytes=offset if isinstance(offset, int) and offset >= 0 else 0,
                   size=size if isinstance(size, int) and not isinstance(size, bool) and size >= -1 else -1,
                   state=str(frame.get("state", "")), error=error if isinstance(error, str) else None,
                   result=values.from_wire(result, "result") if isinstance(result, dict) else None)


def _transfer_id(transfer: Any) -> uuid.UUID:
    if isinstance(transfer, uuid.UUID):
        return transfer
    try:
        return uuid.UUID(str(transfer))
    except ValueError:
        raise AtriumError("invalid_value", f"{transfer!r} is not a transfer id (a uuid)") from None


def _is_count(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def _write_all(descriptor: int, data: bytes, offset: int) -> None:
    """Writes all of `data` at `offset` (a short write goes on from where it stopped)."""
    view = memoryview(data)
    while view:
        written = os.pwrite(descriptor, view, offset)
        if written <= 0:
            raise OSError(28, "no byte could be written")
        view = view[written:]
        offset += written


#: The largest chunk this client sends, whatever a host allows (a frame must hold it).
MAX_CHUNK_BYTES = 1 << 20
#: Progress steps kept for a listener that does not keep up (the oldest are dropped).
PROGRESS_BACKLOG = 64


class _Operation:
    def __init__(self, transfer: Any, connection: Connection) -> None:
        self.transfer = _transfer_id(transfer)
        self.connection = connection
        self._paused = False
        self._running = False
        self._attached = False
        self._events: "Optional[asyncio.Queue[Optional[Dict[str, Any]]]]" = None
        self._listeners: List["asyncio.Queue[Optional[TransferProgress]]"] = []
        self.last: Optional[TransferProgress] = None

    def _tell(self, step: TransferProgress) -> None:
        self.last = step
        for listener in self._listeners:
            if listener.full():
                listener.get_nowait()
            listener.put_nowait(TransferProgress(**step.__dict__))

    def _end_listeners(self) -> None:
        for listener in self._listeners:
            if listener.full():
                listener.get_nowait()
            listener.put_nowait(None)
        self._listeners.clear()

    def _finish(self, step: TransferProgress) -> TransferProgress:
        self._tell(step)
        self._end_listeners()
        return step

    async def progress(self) -> AsyncIterator[TransferProgress]:
        """Each step of the next (or current) :meth:`run`, until it returns or raises (a
        listener that falls behind gets the latest steps)."""
        listener: "asyncio.Queue[Optional[TransferProgress]]" = asyncio.Queue(PROGRESS_BACKLOG)
        self._listeners.append(listener)
        try:
            while True:
                step = await listener.get()
                if step is None:
                    return
                yield step
        finally:
            if listener in self._listeners:
                self._listeners.remove(listener)

    async def pause(self) -> None:
        """Stops moving bytes; the host keeps the transfer, and :meth:`run` resumes it. A
        pause before :meth:`run` begins makes it return at once."""
        self._paused = True
        events = self._events
        started = self.connection.take_started(self.transfer) if events is None else None
        if started is not None:
            # Started by its request and never taken up: the host stops sending it.
            self.connection.stop_transfer_events(self.transfer, started[1])
            if self.connection.is_open:
                await self.connection.send({"type": "detach", "transfer": self.transfer})
        if events is not None:
            self.connection.stop_transfer_events(self.transfer, events)
            events.put_nowait(None)
        if self.connection.is_open and self._running:
            await self.connection.send({"type": "detach", "transfer": self.transfer})

    async def cancel(self, timeout: float = 10.0) -> TransferProgress:
        """Cancels the transfer at the host; its state after."""
        if ("cancel", self.transfer) in self.connection._waiting:
            raise AtriumError("protocol_error", f"a cancel of transfer {self.transfer} is already waiting")
        answer = await self.connection.call({"type": "cancelTransfer", "transfer": self.transfer},
                                            ("cancel", self.transfer), timeout)
        return self._finish(TransferProgress.of(answer))

    def _begin(self) -> Optional[TransferProgress]:
        """A run begins: refused while another runs; a pause that came first ends it at once
        (its `waiting` result)."""
        if self._running:
            raise AtriumError("protocol_error", f"transfer {self.transfer} is running already")
        if not self._paused:
            return None
        waiting = self._interrupted(self.last or TransferProgress(self.transfer, 0, -1, "waiting"))
        self._paused = False
        return waiting

    async def _attach(self, offset: Optional[int], window: Optional[int], timeout: float) -> Dict[str, Any]:
        started = self.connection.take_started(self.transfer)
        if started is not None and not offset:
            # Attached already by the request that started it: its bytes are arriving.
            attached, self._events = started
            self._attached = True
            if window is not None and window != attached.get("window"):
                await self.connection.send({"type": "ack", "transfer": self.transfer, "offset": 0, "window": window})
            return attached
        events = self.connection.transfer_events(self.transfer)
        self._events = events
        number = self.connection.make_number()
        frame: Dict[str, Any] = {"type": "attach", "id": number, "transfer": self.transfer}
        if offset is not None:
            frame["offset"] = offset
        if window is not None:
            frame["window"] = window
        attached = await self.connection.call(frame, ("attached", number), timeout)
        self._attached = attached.get("status") == 0
        for key in ("offset", "chunkBytes", "window"):
            if attached.get("status") == 0 and not _is_count(attached.get(key)):
                raise AtriumError("protocol_error", f"the host's attached for transfer {self.transfer} has no "
                                  f"{key}")
        size = attached.get("size")
        if attached.get("status") == 0 and not (_is_count(size) or size == -1):
            raise AtriumError("protocol_error", f"the host's attached for transfer {self.transfer} has no size")
        return attached

    async def _next(self, deadline: float, timeout: float) -> Optional[Dict[str, Any]]:
        """The transfer's next frame; AtriumError ``timed_out`` once `timeout` passed since
        the last progress (`deadline`)."""
        assert self._events is not None
        remaining = deadline - asyncio.get_running_loop().time()
        try:
            return await asyncio.wait_for(self._events.get(), max(remaining, 0))
        except asyncio.TimeoutError:
            raise AtriumError("timed_out", f"transfer {self.transfer} made no progress for {timeout:g} s; run it "
                              "again to resume") from None

    async def _stop(self) -> None:
        """After a run: the frames of this run end, and the host stops sending to them."""
        events, self._events = self._events, None
        attached, self._attached = self._attached, False
        if events is not None:
            self.connection.stop_transfer_events(self.transfer, events)
            ended = self.last is not None and self.last.has_ended
            if self.connection.is_open and attached and not self._paused and not ended:
                try:
                    await self.connection.send({"type": "detach", "transfer": self.transfer}, timeout=5)
                except AtriumError:
                    pass

    async def _outcome(self, timeout: float) -> Optional[TransferProgress]:
        """This transfer as the host's outcomes have it (every page)."""
        since: Optional[int] = None
        for _ in range(1000):
            page = await transfers(self.connection, since=since, timeout=timeout)
            found = next((item for item in page.transfers if item.transfer == self.transfer), None)
            if found is not None or not page.transfers or page.cursor == since:
                return found
            since = page.cursor
        return None

    def _ended(self, state: Dict[str, Any], last: TransferProgress) -> TransferProgress:
        """A ``transferState``: taken into `last`; raises when it ended without completing, or
        stopped over an error."""
        step = TransferProgress.of(state)
        last.state, last.error, last.result = step.state, step.error, step.result
        if step.state in ("failed", "canceled", "expired"):
            self._finish(last)
            raise AtriumError("transfer_failed", f"transfer {self.transfer} {step.state}"
                              + (f": {step.error}" if step.error else ""))
        if step.error and step.state == "waiting":
            raise AtriumError("transfer_failed", f"transfer {self.transfer} stopped: {step.error}; run it again "
                              "to resume")
        self._tell(last)
        return last

    def _interrupted(self, last: TransferProgress) -> TransferProgress:
        if not self._paused:
            raise AtriumError("host_went_away", f"the connection ended during transfer {self.transfer}; run it "
                              "again (on a new connection) to resume")
        last.state = "waiting"
        return self._finish(last)


class DownloadOperation(_Operation):
    """A download a service offered (its answer's ``Transfer``), into `destination`."""

    def __init__(self, transfer: Any, destination: Path, connection: Connection,
                 partial_folder: Optional[Path] = None) -> None:
        super().__init__(transfer, connection)
        self.destination = Path(destination)
        folder = Path(partial_folder) if partial_folder is not None else default_state_folder() / "client-transfers"
        #: Where the bytes wait until they are whole.
        self.partial_file = folder / f"{self.transfer}.part"

    async def run(self, window: int = DEFAULT_WINDOW, timeout: float = 30.0) -> TransferProgress:
        """Downloads from the bytes the partial file holds until the download completes (the
        file is then at the destination), is paused (a ``waiting`` result), or fails
        (:class:`AtriumError` ``transfer_failed``). `timeout` bounds the time without
        progress."""
        paused = self._begin()
        if paused is not None:
            return paused
        self._running = True
        try:
            try:
                self.partial_file.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
                descriptor = os.open(self.partial_file, os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC,
                                     0o600)
            except OSError as error:
                raise AtriumError("local_file", f"cannot write {self.partial_file}: {error.strerror}") from error
            try:
                return await self._run(descriptor, window, timeout)
            finally:
                os.close(descriptor)
                if self.partial_file.exists() and self.partial_file.stat().st_size == 0:
                    self._unlink_partial()  # nothing held: nothing to keep
        finally:
            await self._stop()
            self._running = False
            self._paused = False
            self._end_listeners()

    async def _run(self, descriptor: int, window: int, timeout: float) -> TransferProgress:
        loop = asyncio.get_running_loop()
        held = os.fstat(descriptor).st_size
        attached = await self._attach(held, window, timeout)
        if attached.get("status") != 0:
            error = attached.get("error", f"status {attached.get('status')}")
            if error == "ended" and attached.get("direction") == "download":
                outcome = await self._outcome(timeout)
                size = attached.get("size")
                if outcome is not None and outcome.state == "completed" and held == size and held > 0:
                    # Every byte came, and was acknowledged, before the last run stopped.
                    return self._complete(TransferProgress(self.transfer, held, held, "completed"))
                if outcome is not None and outcome.state == "completed" and self.destination.exists():
                    return self._finish(outcome)  # delivered by an earlier run
                self._unlink_partial()
                raise AtriumError("transfer_failed", f"transfer {self.transfer} has ended at the host without "
                                  "completing here" + (f" ({outcome.state}" + (f": {outcome.error})" if outcome.error
                                                                               else ")") if outcome else ""))
            raise AtriumError("transfer_failed", f"the host refused to attach transfer {self.transfer}: {error}")
        if attached.get("direction") != "download":
            raise AtriumError("transfer_failed", f"transfer {self.transfer} is an upload, not a download")
        size = int(attached["size"])
        if held > size:
            raise AtriumError("local_file", f"{self.partial_file} holds {held} bytes, more than the transfer's "
                              f"{size}: remove it to download again")
        digest = attached.get("digest") if isinstance(attached.get("digest"), bytes) else None
        hasher = await loop.run_in_executor(None, self._hash_prefix, held) if digest is not None else None
        last = TransferProgress(self.transfer, held, size, "running")
        self._tell(last)
        acknowledged = held
        deadline = loop.time() + timeout
        while held < size:
            frame = await self._next(deadline, timeout)
            if frame is None or self._paused:
                return self._interrupted(last)
            if frame["type"] == "chunk":
                data = frame.get("data", b"")
                if frame.get("offset") != held or not isinstance(data, bytes) or not data:
                    continue
                if len(data) > size - held:
                    raise AtriumError("protocol_error", f"the host sent transfer {self.transfer} bytes past its size")
                try:
                    _write_all(descriptor, data, held)
                except OSError as error:
                    raise AtriumError("local_file", f"cannot write {self.partial_file}: {error.strerror}; run it "
                                      "again once there is room to resume") from error
                if hasher is not None:
                    hasher.update(data)
                held += len(data)
                last.bytes = held
                deadline = loop.time() + timeout
                self._tell(last)
                # An ack each quarter window keeps the host sending; the last one waits for the
                # digest check below, since it completes the download at the host.
                if held - acknowledged >= window // 4 and held < size:
                    acknowledged = held
                    await self.connection.send(
                        {"type": "ack", "transfer": self.transfer, "offset": held, "window": window})
            elif frame["type"] == "transferState":
                self._ended(frame, last)
                if last.state == "completed":
                    # Completed elsewhere (over HTTPS, say) before these bytes came.
                    self._unlink_partial()
                    raise AtriumError("transfer_failed", f"transfer {self.transfer} was completed elsewhere (over "
                                      f"HTTPS?) with {held} of {size} bytes here; those were removed")
        if hasher is not None and digest is not None and hasher.digest() != digest:
            # Not acknowledged: the host still offers it, and a run again starts over.
            self._unlink_partial()
            raise AtriumError("transfer_failed", f"transfer {self.transfer} arrived damaged (its SHA-256 is "
                              f"{hasher.hexdigest()}, not the host's {digest.hex()}); run it again to download it anew")
        # Every byte is here: acknowledging them completes the download (CONTRACT section 8).
        await self.connection.send({"type": "ack", "transfer": self.transfer, "offset": held, "window": window})
        return self._complete(last)

    def _hash_prefix(self, held: int) -> "hashlib._Hash":
        hasher = hashlib.sha256()
        with open(self.partial_file, "rb") as partial:
            remaining = held
            while remaining:
                block = partial.read(min(remaining, 1 << 20))
                if not block:
                    break
                hasher.update(block)
                remaining -= len(block)
        return hasher

    def _complete(self, last: TransferProgress) -> TransferProgress:
        try:
            os.replace(self.partial_file, self.destination)
        except OSError as error:
            if error.errno != errno.EXDEV:
                raise AtriumError("local_file", f"cannot put the download at {self.destination}: {error.strerror} "
                                  f"(its bytes wait in {self.partial_file}; run it again to retry)") from error
            self._copy_across()
        last.state, last.error = "completed", None
        return self._finish(last)

    def _copy_across(self) -> None:
        """Another file system: a copy of a new name beside the destination, renamed over it
        once whole, then the partial file removed."""
        temporary = self.destination.with_name(f".{self.destination.name}.{secrets.token_hex(8)}.part")
        try:
            target = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
            try:
                with open(self.partial_file, "rb") as source:
                    offset = 0
                    while True:
                        block = source.read(1 << 20)
                        if not block:
                            break
                        _write_all(target, block, offset)
                        offset += len(block)
            finally:
                os.close(target)
            os.replace(temporary, self.destination)
        except OSError as error:
            try:
                temporary.unlink()
            except OSError:
                pass
            raise AtriumError("local_file", f"cannot put the download at {self.destination}: {error.strerror} "
                              f"(its bytes wait in {self.partial_file}; run it again to retry)") from error
        self._unlink_partial()

    def _unlink_partial(self) -> None:
        try:
            self.partial_file.unlink()
        except FileNotFoundError:
            pass

    async def cancel(self, timeout: float = 10.0) -> TransferProgress:
        """Cancels the download at the host, and removes its partial bytes."""
        state = await super().cancel(timeout)
        self._unlink_partial()
        return state


class UploadOperation(_Operation):
    """An upload a service accepted (its answer's ``Transfer``), from the file `source`."""

    def __init__(self, transfer: Any, source: Path, connection: Connection) -> None:
        super().__init__(transfer, connection)
        self.source = Path(source)

    async def run(self, timeout: float = 30.0) -> TransferProgress:
        """Sends the file until the service has taken it (its result is returned), the upload
        is paused (a ``waiting`` result), or it fails (:class:`AtriumError`
        ``transfer_failed``). `timeout` bounds the time without progress."""
        paused = self._begin()
        if paused is not None:
            return paused
        try:
            source = open(self.source, "rb")
        except OSError as error:
            raise AtriumError("local_file", f"cannot read {self.source}: {error.strerror}") from error
        self._running = True
        try:
            with source:
                return await self._run(source, timeout)
        except OSError as error:
            raise AtriumError("local_file", f"cannot read {self.source}: {error.strerror}") from error
        finally:
            await self._stop()
            self._running = False
            self._paused = False
            self._end_listeners()

    async def _run(self, source: Any, timeout: float) -> TransferProgress:
        loop = asyncio.get_running_loop()
        size = os.fstat(source.fileno()).st_size
        attached = await self._attach(None, None, timeout)
        if attached.get("status") != 0 and attached.get("error") == "ended":
            # Ended while this client was away: its outcome is the answer.
            outcome = await self._outcome(timeout)
            if outcome is not None and outcome.state == "completed":
                return self._finish(outcome)
            raise AtriumError("transfer_failed", f"transfer {self.transfer} has ended at the host without "
                              "completing" + (f": {outcome.state}, {outcome.error}" if outcome else ""))
        if attached.get("status") != 0:
            raise AtriumError("transfer_failed", f"the host refused to attach transfer {self.transfer}: "
                              f"{attached.get('error', attached.get('status'))}")
        if attached.get("direction") != "upload":
            raise AtriumError("transfer_failed", f"transfer {self.transfer} is a download, not an upload")
        expected = int(attached["size"])
        held = int(attached["offset"])
        if (expected >= 0 and expected != size) or held > size:
            raise AtriumError("transfer_failed", f"the service accepted {expected} bytes and holds {held}, and "
                              f"{self.source} has {size}: it changed since")
        # The file's SHA-256 goes with the last chunk: the bytes the host holds are read for
        # it first (off the event loop), the rest as they are sent.
        hasher = await loop.run_in_executor(None, self._hash_prefix, source.fileno(), held)
        chunk_bytes = min(max(int(attached["chunkBytes"]), 1), MAX_CHUNK_BYTES)
        edge = held + int(attached["window"])
        sent = held
        finished = False
        last = TransferProgress(self.transfer, held, expected, "running")
        self._tell(last)
        deadline = loop.time() + timeout
        while True:
            # Within the window the host granted, never past it.
            while not finished and not self._paused and (sent < edge or (sent == size == held)):
                count = min(chunk_bytes, size - sent, edge - sent)
                data = os.pread(source.fileno(), count, sent)
                if len(data) != count:
                    raise AtriumError("local_file", f"cannot read {self.source} at {sent}: it changed, or shrank")
                hasher.update(data)
                is_last = sent + count == size
                chunk: Dict[str, Any] = {"type": "chunk", "transfer": self.transfer, "offset": sent, "data": data}
                if is_last:
                    chunk["last"] = True
                    chunk["digest"] = hasher.digest()
                await self.connection.send(chunk, timeout=timeout)
                sent += count
                finished = is_last
            if self._paused:
                return self._interrupted(last)
            frame = await self._next(deadline, timeout)
            if frame is None or self._paused:
                return self._interrupted(last)
            if frame["type"] == "ack" and _is_count(frame.get("offset")) and _is_count(frame.get("window")):
                if frame["offset"] > held:
                    held = min(int(frame["offset"]), size)
                    deadline = loop.time() + timeout
                edge = max(edge, held + int(frame["window"]))
                last.bytes = held
                self._tell(last)
            elif frame["type"] == "transferState":
                self._ended(frame, last)
                if last.state in ("verifying", "delivering"):
                    deadline = loop.time() + timeout
                if last.state == "completed":
                    return self._finish(last)

    @staticmethod
    def _hash_prefix(descriptor: int, held: int) -> "hashlib._Hash":
        hasher = hashlib.sha256()
        offset = 0
        while offset < held:
            block = os.pread(descriptor, min(held - offset, 1 << 20), offset)
            if not block:
                raise OSError(5, f"the file ends at {offset}, before the {held} bytes the host holds")
            hasher.update(block)
            offset += len(block)
        return hasher


@dataclass
class TransfersPage:
    """This client's transfers that changed since the asked cursor, and the cursor to ask
    from next."""

    transfers: List[TransferProgress]
    cursor: int


async def transfers(connection: Connection, since: Optional[int] = None, forget: Sequence[Any] = (),
                    timeout: float = 10.0) -> TransfersPage:
    """The outcomes of this client's transfers (those that changed since `since`, all
    without it), forgetting `forget` first: what ended while the script was away."""
    number = connection.make_number()
    frame: Dict[str, Any] = {"type": "transfers", "id": number}
    if since is not None:
        frame["since"] = since
    if forget:
        frame["forget"] = [_transfer_id(transfer) for transfer in forget]
    answer = await connection.call(frame, ("transfers", number), timeout)
    if not _is_count(answer.get("cursor")) or not isinstance(answer.get("transfers"), list):
        raise AtriumError("protocol_error", "the host's transfers answer has no list or no cursor")
    listed = [TransferProgress.of(state) for state in answer["transfers"]
              if isinstance(state, dict) and isinstance(state.get("transfer"), uuid.UUID)]
    return TransfersPage(listed, int(answer["cursor"]))
