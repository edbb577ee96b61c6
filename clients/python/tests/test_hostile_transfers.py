"""Transfers against a fake host that lies or misbehaves: a download is never reported
completed with bytes missing or wrong, its last byte is acknowledged only once checked,
chunks stay within what a frame holds, and pause, progress and refusals leave nothing
behind."""
from __future__ import annotations

import asyncio
import datetime
import hashlib
import uuid
from pathlib import Path
from typing import Any, Dict, List

import pytest

from atrium import AtriumError, frames
from atrium.connection import Connection
from atrium.transfers import DownloadOperation, UploadOperation

from test_hostile_host import read_frame, with_fake_host

TRANSFER = uuid.UUID("6f1e2d3c-4b5a-4978-8695-a4b3c2d1e0f9")
EXPIRES = datetime.datetime(2030, 1, 1, tzinfo=datetime.timezone.utc)


def attached(number: int, **fields: Any) -> Dict[str, Any]:
    frame = {"type": "attached", "id": number, "transfer": TRANSFER, "status": 0, "direction": "download",
             "size": 1000, "offset": 0, "chunkBytes": 262144, "window": 4194304, "expires": EXPIRES}
    frame.update(fields)
    return frame


def run_against(script: Any, test: Any) -> List[Dict[str, Any]]:
    """Runs `test(connection)` against a fake host running `script(reader, writer, seen)`;
    the frames the host read."""
    seen: List[Dict[str, Any]] = []

    async def host(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, _: Dict[str, Any]) -> None:
        await script(reader, writer, seen)

    async def client(port: int) -> None:
        async with await Connection.open("127.0.0.1", port, timeout=5) as connection:
            await test(connection)
            await asyncio.sleep(0.2)

    asyncio.run(with_fake_host(host, client))
    return seen


async def take(reader: asyncio.StreamReader, seen: List[Dict[str, Any]]) -> Dict[str, Any]:
    frame = await read_frame(reader)
    seen.append(frame)
    return frame


def test_a_download_completed_elsewhere_is_not_reported_completed_here(tmp_path: Path) -> None:
    destination = tmp_path / "out.bin"

    async def script(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, seen: List[Any]) -> None:
        attach = await take(reader, seen)
        writer.write(frames.encode(attached(attach["id"])))
        writer.write(frames.encode({"type": "chunk", "transfer": TRANSFER, "offset": 0, "data": b"x" * 10}))
        writer.write(frames.encode({"type": "transferState", "transfer": TRANSFER, "state": "completed",
                                    "offset": 1000, "size": 1000}))
        while True:
            await take(reader, seen)

    async def test(connection: Connection) -> None:
        operation = DownloadOperation(TRANSFER, destination, connection, partial_folder=tmp_path)
        with pytest.raises(AtriumError) as refused:
            await operation.run(timeout=5)
        assert refused.value.code == "transfer_failed" and "completed elsewhere" in str(refused.value)
        assert not destination.exists() and not operation.partial_file.exists()

    run_against(script, test)


def test_a_damaged_download_is_not_acknowledged(tmp_path: Path) -> None:
    destination = tmp_path / "out.bin"
    data = bytes(1000)

    async def script(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, seen: List[Any]) -> None:
        attach = await take(reader, seen)
        writer.write(frames.encode(attached(attach["id"], digest=hashlib.sha256(b"other").digest())))
        writer.write(frames.encode({"type": "chunk", "transfer": TRANSFER, "offset": 0, "data": data}))
        while True:
            await take(reader, seen)

    async def test(connection: Connection) -> None:
        operation = DownloadOperation(TRANSFER, destination, connection, partial_folder=tmp_path)
        with pytest.raises(AtriumError, match="arrived damaged"):
            await operation.run(timeout=5)
        assert not destination.exists() and not operation.partial_file.exists()

    seen = run_against(script, test)
    assert not [frame for frame in seen if frame["type"] == "ack"], "the last byte is acknowledged only once checked"


def test_a_download_checked_against_its_digest_completes(tmp_path: Path) -> None:
    destination = tmp_path / "out.bin"
    data = bytes(range(250)) * 4

    async def script(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, seen: List[Any]) -> None:
        attach = await take(reader, seen)
        writer.write(frames.encode(attached(attach["id"], digest=hashlib.sha256(data).digest())))
        for offset in range(0, 1000, 100):
            writer.write(frames.encode({"type": "chunk", "transfer": TRANSFER, "offset": offset,
                                        "data": data[offset:offset + 100]}))
        while True:
            await take(reader, seen)

    async def test(connection: Connection) -> None:
        done = await DownloadOperation(TRANSFER, destination, connection, partial_folder=tmp_path).run(timeout=5)
        assert done.state == "completed" and destination.read_bytes() == data

    seen = run_against(script, test)
    assert [frame["offset"] for frame in seen if frame["type"] == "ack"] == [1000]


def test_refusals_pauses_and_progress_leave_nothing_behind(tmp_path: Path) -> None:
    async def script(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, seen: List[Any]) -> None:
        attach = await take(reader, seen)
        writer.write(frames.encode(attached(attach["id"], status=1, error="notFound")))
        attach = await take(reader, seen)
        writer.write(frames.encode(attached(attach["id"])))
        writer.write(frames.encode({"type": "chunk", "transfer": TRANSFER, "offset": 0, "data": b"y" * 100}))
        while True:
            await take(reader, seen)

    async def test(connection: Connection) -> None:
        refused = DownloadOperation(TRANSFER, tmp_path / "a", connection, partial_folder=tmp_path)
        with pytest.raises(AtriumError, match="notFound"):
            await refused.run(timeout=5)
        assert not refused.partial_file.exists(), "an empty partial file is not left behind"
        # Paused before it ran: it returns at once, sending nothing.
        early = DownloadOperation(TRANSFER, tmp_path / "b", connection, partial_folder=tmp_path)
        await early.pause()
        assert (await early.run(timeout=5)).state == "waiting"
        # Paused while running: its progress ends too.
        operation = DownloadOperation(TRANSFER, tmp_path / "c", connection, partial_folder=tmp_path)
        steps: List[int] = []

        async def watch() -> None:
            async for step in operation.progress():
                steps.append(step.bytes)
                if step.bytes >= 100:
                    await operation.pause()

        watching = asyncio.ensure_future(watch())
        await asyncio.sleep(0)
        assert (await operation.run(timeout=5)).state == "waiting"
        await asyncio.wait_for(watching, 5)
        assert steps[-1] == 100 and operation.partial_file.stat().st_size == 100

    seen = run_against(script, test)
    assert [frame["type"] for frame in seen] == ["attach", "attach", "detach"]


def test_an_upload_s_chunks_stay_within_a_frame_whatever_the_host_allows(tmp_path: Path) -> None:
    source = tmp_path / "big.bin"
    source.write_bytes(bytes(3 << 20))

    async def script(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, seen: List[Any]) -> None:
        attach = await take(reader, seen)
        writer.write(frames.encode(attached(attach["id"], direction="upload", size=3 << 20, chunkBytes=1 << 40,
                                            window=1 << 62)))
        while True:
            chunk = await take(reader, seen)
            if chunk.get("last"):
                writer.write(frames.encode({"type": "transferState", "transfer": TRANSFER, "state": "completed",
                                            "offset": 3 << 20, "size": 3 << 20, "result": {"ok": True}}))

    async def test(connection: Connection) -> None:
        done = await UploadOperation(TRANSFER, source, connection).run(timeout=5)
        assert done.state == "completed" and done.result == {"ok": True}

    seen = run_against(script, test)
    chunks = [frame for frame in seen if frame["type"] == "chunk"]
    assert len(chunks) == 3 and all(len(chunk["data"]) == 1 << 20 for chunk in chunks)
    assert chunks[-1]["digest"] == hashlib.sha256(bytes(3 << 20)).digest()


@pytest.mark.parametrize("asked", [False, True])
def test_a_started_download_not_asked_for_or_that_floods_is_not_held(asked: bool) -> None:
    """A host that sends ``attached`` in an answer whose request did not ask for it, or sends
    a started download far past its window before an operation takes it up: the client
    holds nothing for the first, and drops the second (its operation would attach)."""
    from test_hostile_host import answer_open, open_echo

    window = 64 << 10
    seen: List[Dict[str, Any]] = []

    async def script(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, _: Dict[str, Any]) -> None:
        await answer_open(reader, writer)
        request = await read_frame(reader)
        assert ("attach" in request) == asked
        response = {"type": "response", "channel": request["channel"], "id": request["id"], "status": 0,
                    "message": {"Transfer": TRANSFER},
                    "attached": {key: value for key, value in attached(request["id"], window=window,
                                                                         size=1 << 30).items() if key != "type"}}
        writer.write(frames.encode(response))
        for index in range(40):
            writer.write(frames.encode({"type": "chunk", "transfer": TRANSFER, "offset": index * window,
                                        "data": b"\x01" * window}))
        while True:
            frame = await read_frame(reader)
            seen.append(frame)
            if frame["type"] == "ping":
                writer.write(frames.encode({"type": "pong", "id": frame["id"]}))

    async def test(port: int) -> None:
        service = await open_echo(port)
        connection = service.connection
        assert connection is not None
        answer = await service.send_message({"Command": "get"}, starting_download=asked)
        assert answer.message["Transfer"] == TRANSFER
        await connection.ping()  # in order: every chunk before the pong was handled
        assert TRANSFER not in connection._started and TRANSFER not in connection._transfers
        assert not connection.starting
        for _ in range(100):  # the host is told to stop sending it
            if any(frame["type"] == "detach" and frame["transfer"] == TRANSFER for frame in seen):
                break
            await asyncio.sleep(0.02)
        else:
            raise AssertionError(f"no detach: {[frame['type'] for frame in seen]}")
        await service.close()

    asyncio.run(with_fake_host(script, test))
