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
import hashlib
import os
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any, AsyncIterator, Dict, List, Optional, Sequence, Tuple

from . import values
from .connection import Connection
from .errors import AtriumError
from .identity import default_state_folder

DEFAULT_WINDOW = 4 << 20
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
        return cls(transfer=frame["transfer"], bytes=int(frame.get("offset", 0)), size=int(frame.get("size", -1)),
                   state=str(frame.get("state", "")), error=frame.get("error"),
                   result=values.from_wire(result, "result") if isinstance(result, dict) else None)


def _transfer_id(transfer: Any) -> uuid.UUID:
    if isinstance(transfer, uuid.UUID):
        return transfer
    try:
        return uuid.UUID(str(transfer))
    except ValueError:
        raise AtriumError("invalid_value", f"{transfer!r} is not a transfer id (a uuid)") from None


class _Operation:
    def __init__(self, transfer: Any, connection: Connection) -> None:
        self.transfer = _transfer_id(transfer)
        self.connection = connection
        self._paused = False
        self._listeners: List["asyncio.Queue[Optional[TransferProgress]]"] = []
        self.last: Optional[TransferProgress] = None

    def _tell(self, step: TransferProgress) -> None:
        self.last = step
        for listener in self._listeners:
            listener.put_nowait(TransferProgress(**step.__dict__))

    def _finish(self, step: TransferProgress) -> TransferProgress:
        self._tell(step)
        for listener in self._listeners:
            listener.put_nowait(None)
        self._listeners.clear()
        return step

    async def progress(self) -> AsyncIterator[TransferProgress]:
        """Each step of the next (or current) :meth:`run`, until it returns or raises."""
        listener: "asyncio.Queue[Optional[TransferProgress]]" = asyncio.Queue()
        self._listeners.append(listener)
        while True:
            step = await listener.get()
            if step is None:
                return
            yield step

    async def pause(self) -> None:
        """Stops moving bytes; the host keeps the transfer, and :meth:`run` resumes it."""
        self._paused = True
        self.connection.stop_transfer_events(self.transfer)
        if self.connection.is_open:
            await self.connection.send({"type": "detach", "transfer": self.transfer})

    async def cancel(self, timeout: float = 10.0) -> TransferProgress:
        """Cancels the transfer at the host; its state after."""
        answer = await self.connection.call({"type": "cancelTransfer", "transfer": self.transfer},
                                            ("cancel", self.transfer), timeout)
        return self._finish(TransferProgress.of(answer))

    async def _attach(self, offset: Optional[int], window: Optional[int],
                      timeout: float) -> Tuple[Dict[str, Any], "asyncio.Queue[Optional[Dict[str, Any]]]"]:
        self._paused = False
        events = self.connection.transfer_events(self.transfer)
        number = self.connection.make_number()
        frame: Dict[str, Any] = {"type": "attach", "id": number, "transfer": self.transfer}
        if offset is not None:
            frame["offset"] = offset
        if window is not None:
            frame["window"] = window
        try:
            attached = await self.connection.call(frame, ("attached", number), timeout)
        except BaseException:
            self.connection.stop_transfer_events(self.transfer)
            raise
        if attached.get("status") != 0:
            self.connection.stop_transfer_events(self.transfer)
        return attached, events

    async def _outcome(self, timeout: float) -> Optional[TransferProgress]:
        """This transfer as the host's list of outcomes has it."""
        page = await transfers(self.connection, timeout=timeout)
        return next((item for item in page.transfers if item.transfer == self.transfer), None)

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
        self._tell(last)
        return last


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
        (:class:`AtriumError` ``transfer_failed``). `timeout` bounds each wait for the host."""
        self.partial_file.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        descriptor = os.open(self.partial_file, os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
        try:
            return await self._run(descriptor, window, timeout)
        finally:
            os.close(descriptor)

    async def _run(self, descriptor: int, window: int, timeout: float) -> TransferProgress:
        held = os.fstat(descriptor).st_size
        attached, events = await self._attach(held, window, timeout)
        if attached.get("status") != 0:
            error = attached.get("error", f"status {attached.get('status')}")
            if error == "ended" and attached.get("direction") == "download":
                size = int(attached.get("size", -1))
                if size >= 0 and held == size:
                    return self._complete(TransferProgress(self.transfer, held, size, "running"), None)
                self._unlink_partial()
                raise AtriumError("transfer_failed", f"transfer {self.transfer} has ended at the host without "
                                  "completing (its outcome is in transfers())")
            raise AtriumError("transfer_failed", f"the host refused to attach transfer {self.transfer}: {error}")
        if attached.get("direction") != "download":
            await self.pause()
            raise AtriumError("transfer_failed", f"transfer {self.transfer} is an upload, not a download")
        size = int(attached["size"])
        digest = attached.get("digest") if isinstance(attached.get("digest"), bytes) else None
        hasher = self._hash_prefix(held) if digest is not None else None
        last = TransferProgress(self.transfer, held, size, "running")
        self._tell(last)
        acknowledged = held
        if held == size:
            await self.connection.send({"type": "ack", "transfer": self.transfer, "offset": held, "window": window})
            return self._complete(last, self._check(hasher, digest))
        while True:
            try:
                frame = await asyncio.wait_for(events.get(), timeout)
            except asyncio.TimeoutError:
                await self.pause()
                raise AtriumError("timed_out", f"no bytes of transfer {self.transfer} came within {timeout:g} s; "
                                  "run it again to resume") from None
            if frame is None or self._paused:
                return self._interrupted(last)
            if frame["type"] == "chunk":
                data = frame.get("data", b"")
                if frame.get("offset") != held or not isinstance(data, bytes):
                    continue
                if len(data) > size - held:
                    await self.pause()
                    raise AtriumError("protocol_error", f"the host sent transfer {self.transfer} bytes past its size")
                os.pwrite(descriptor, data, held)
                if hasher is not None:
                    hasher.update(data)
                held += len(data)
                last.bytes = held
                self._tell(last)
                # An ack each quarter window (and at the end) keeps the host sending.
                if held - acknowledged >= window // 4 or held == size:
                    acknowledged = held
                    await self.connection.send(
                        {"type": "ack", "transfer": self.transfer, "offset": held, "window": window})
                # Every byte here and acknowledged: the download is complete (CONTRACT section 8).
                if held == size:
                    return self._complete(last, self._check(hasher, digest))
            elif frame["type"] == "transferState":
                try:
                    self._ended(frame, last)
                except AtriumError:
                    if last.has_ended:
                        self._unlink_partial()
                    raise
                if last.state == "completed":
                    return self._complete(last, None)

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

    def _check(self, hasher: "Optional[hashlib._Hash]", digest: Optional[bytes]) -> Optional[str]:
        if hasher is not None and digest is not None and hasher.digest() != digest:
            return f"the file's SHA-256 is {hasher.hexdigest()}, not the host's {digest.hex()}"
        return None

    def _complete(self, last: TransferProgress, mismatch: Optional[str]) -> TransferProgress:
        self.connection.stop_transfer_events(self.transfer)
        if mismatch is not None:
            self._unlink_partial()
            raise AtriumError("transfer_failed", f"transfer {self.transfer} arrived damaged ({mismatch}); its "
                              "bytes were removed")
        try:
            os.replace(self.partial_file, self.destination)
        except OSError:
            # Another file system: a copy beside the destination, renamed over it once whole.
            temporary = self.destination.with_name(f".{self.destination.name}.atrium-{os.getpid()}")
            with open(self.partial_file, "rb") as source, open(temporary, "wb") as target:
                while True:
                    block = source.read(1 << 20)
                    if not block:
                        break
                    target.write(block)
            os.replace(temporary, self.destination)
            self._unlink_partial()
        last.state, last.error = "completed", None
        return self._finish(last)

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
        ``transfer_failed``). `timeout` bounds each wait for the host."""
        try:
            source = open(self.source, "rb")
        except OSError as error:
            raise AtriumError("local_file", f"cannot read {self.source}: {error.strerror}") from error
        with source:
            size = os.fstat(source.fileno()).st_size
            attached, events = await self._attach(None, None, timeout)
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
                await self.pause()
                raise AtriumError("transfer_failed", f"transfer {self.transfer} is a download, not an upload")
            expected = int(attached.get("size", -1))
            held = int(attached.get("offset", 0))
            if (expected >= 0 and expected != size) or held > size:
                await self.pause()
                raise AtriumError("transfer_failed", f"the service accepted {expected} bytes and holds {held}, and "
                                  f"{self.source} has {size}: it changed since")
            # The file's SHA-256 goes with the last chunk: the bytes the host holds are read
            # for it first, the rest as they are sent.
            hasher = hashlib.sha256()
            source.seek(0)
            remaining = held
            while remaining:
                block = source.read(min(remaining, 1 << 20))
                if not block:
                    break
                hasher.update(block)
                remaining -= len(block)
            chunk_bytes = max(int(attached.get("chunkBytes", 1 << 18)), 1)
            edge = held + int(attached.get("window", 0))
            sent = held
            finished = False
            last = TransferProgress(self.transfer, held, expected, "running")
            self._tell(last)
            while True:
                # Within the window the host granted, never past it.
                while not finished and not self._paused and (sent < edge or (sent == size == held)):
                    count = min(chunk_bytes, size - sent, edge - sent)
                    source.seek(sent)
                    data = source.read(count)
                    if len(data) != count:
                        await self.pause()
                        raise AtriumError("local_file", f"cannot read {self.source} at {sent}: it changed, or shrank")
                    hasher.update(data)
                    is_last = sent + count == size
                    chunk: Dict[str, Any] = {"type": "chunk", "transfer": self.transfer, "offset": sent, "data": data}
                    if is_last:
                        chunk["last"] = True
                        chunk["digest"] = hasher.digest()
                    await self.connection.send(chunk)
                    sent += count
                    finished = is_last
                if self._paused:
                    return self._interrupted(last)
                try:
                    frame = await asyncio.wait_for(events.get(), timeout)
                except asyncio.TimeoutError:
                    await self.pause()
                    raise AtriumError("timed_out", f"the host did not answer transfer {self.transfer} within "
                                      f"{timeout:g} s; run it again to resume") from None
                if frame is None:
                    return self._interrupted(last)
                if frame["type"] == "ack":
                    held = int(frame.get("offset", held))
                    edge = max(edge, held + int(frame.get("window", 0)))
                    last.bytes = held
                    self._tell(last)
                elif frame["type"] == "transferState":
                    self._ended(frame, last)
                    if last.state == "completed":
                        self.connection.stop_transfer_events(self.transfer)
                        return self._finish(last)


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
    listed = [TransferProgress.of(state) for state in answer.get("transfers", []) if isinstance(state, dict)]
    return TransfersPage(listed, int(answer.get("cursor", 0)))
