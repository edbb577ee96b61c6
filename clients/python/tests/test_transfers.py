"""Transfers (CONTRACT section 8) through the Files reference service of a real atriumd:
downloads and uploads with progress, paused and resumed on a new connection (as a script
that restarts would), outcomes waiting in transfers(), and what fails."""
from __future__ import annotations

import asyncio
import hashlib
import os
import uuid
from pathlib import Path
from typing import Any, Dict, List

import pytest

from atrium import AppServiceConnection, AppServiceConnectionStatus, AtriumError, RemoteSystem
from atrium.transfers import DownloadOperation, TransferProgress, UploadOperation, transfers

from conftest import FILES, Host, paired_system


def run(coroutine):  # type: ignore[no-untyped-def]
    return asyncio.run(asyncio.wait_for(coroutine, 120))


async def ask(system: RemoteSystem, message: Dict[str, Any]) -> "tuple[uuid.UUID, AppServiceConnection]":
    """Asks Files for `message` on a connection of its own; the answer's Transfer, and the
    service connection (whose `connection` the transfer then uses)."""
    service = AppServiceConnection(app_service_name=FILES[0], package_id=FILES[1], remote_system=system)
    assert await service.open_remote() == AppServiceConnectionStatus.SUCCESS
    answer = await service.send_message(message)
    assert answer.status == 0, answer
    transfer = answer.message["Transfer"]
    assert isinstance(transfer, uuid.UUID)
    return transfer, service


async def open_files(host: Host, state: Path) -> "tuple[AppServiceConnection, Any]":
    """Files opened on a connection of its own: the service connection, and that connection."""
    system = await paired_system(host, state)
    service = AppServiceConnection(app_service_name=FILES[0], package_id=FILES[1], remote_system=system)
    assert await service.open_remote() == AppServiceConnectionStatus.SUCCESS
    assert service.connection is not None
    return service, service.connection


async def pause_past(operation: Any, count: int) -> int:
    async for step in operation.progress():
        if step.bytes >= count:
            await operation.pause()
            return int(step.bytes)
    return 0


def test_a_download_paused_and_resumed_on_a_new_connection(host: Host, state: Path, tmp_path: Path) -> None:
    data = os.urandom(3_000_000)
    (host.served / "movie.mp4").write_bytes(data)
    destination = tmp_path / "movie.mp4"
    partials = tmp_path / "partials"

    async def exchange() -> None:
        system = await paired_system(host, state)
        transfer, first = await ask(system, {"Command": "get", "Name": "movie.mp4"})
        assert first.connection is not None
        operation = DownloadOperation(transfer, destination, first.connection, partial_folder=partials)
        watcher = asyncio.ensure_future(pause_past(operation, 500_000))
        await asyncio.sleep(0)
        paused = await operation.run(window=256 << 10)
        assert paused.state == "waiting" and await watcher >= 500_000
        held = operation.partial_file.stat().st_size
        assert 500_000 <= held < len(data) and not destination.exists()
        await first.close()

        # A new connection, as a script started again would make: on from the partial bytes.
        again = await RemoteSystem.find(host.address, state_folder=state)
        connection = await again.connect()
        resumed = DownloadOperation(transfer, destination, connection, partial_folder=partials)
        steps: List[TransferProgress] = []

        async def collect() -> None:
            async for step in resumed.progress():
                steps.append(step)

        collecting = asyncio.ensure_future(collect())
        await asyncio.sleep(0)
        done = await resumed.run()
        await collecting
        assert done.state == "completed" and done.bytes == len(data)
        assert destination.read_bytes() == data and not resumed.partial_file.exists()
        assert steps[0].bytes == held, "progress begins at the bytes already here"
        assert [step.bytes for step in steps] == sorted(step.bytes for step in steps)
        await connection.close()
    run(exchange())


def test_an_upload_paused_resumed_and_its_outcome_waiting(host: Host, state: Path, tmp_path: Path) -> None:
    data = os.urandom(12_000_000)
    source = tmp_path / "report.pdf"
    source.write_bytes(data)

    async def exchange() -> None:
        system = await paired_system(host, state)
        transfer, first = await ask(system, {"Command": "put", "Name": "report.pdf", "Size": len(data)})
        assert first.connection is not None
        operation = UploadOperation(transfer, source, first.connection)
        watcher = asyncio.ensure_future(pause_past(operation, 500_000))
        await asyncio.sleep(0)
        paused = await operation.run()
        assert paused.state == "waiting" and await watcher >= 500_000
        await first.close()

        connection = await system.connect()
        done = await UploadOperation(transfer, source, connection).run()
        assert done.state == "completed" and done.bytes == len(data) and done.result is not None
        assert (host.served / "report.pdf").read_bytes() == data
        # Run again once it ended: the outcome, not an error.
        again = await UploadOperation(transfer, source, connection).run()
        assert again.state == "completed" and again.result == done.result
        # The outcome waits, with the service's result, until it is forgotten.
        page = await transfers(connection)
        outcome = next(item for item in page.transfers if item.transfer == transfer)
        assert outcome.state == "completed" and outcome.result == done.result
        assert (await transfers(connection, since=page.cursor)).transfers == []
        forgotten = await transfers(connection, forget=[transfer])
        assert all(item.transfer != transfer for item in forgotten.transfers)
        await connection.close()
    run(exchange())


def test_what_fails_says_why(host: Host, state: Path, tmp_path: Path) -> None:
    (host.served / "draft.doc").write_bytes(os.urandom(1_000_000))
    source = tmp_path / "changing.bin"
    size = 12_000_000
    source.write_bytes(os.urandom(size))

    async def exchange() -> None:
        system = await paired_system(host, state)
        connection = await system.connect()
        # An unknown transfer, and one of another kind.
        with pytest.raises(AtriumError, match="notFound"):
            await DownloadOperation(uuid.uuid4(), tmp_path / "x", connection, partial_folder=tmp_path).run()
        download, service = await ask(system, {"Command": "get", "Name": "draft.doc"})
        assert service.connection is not None
        with pytest.raises(AtriumError, match="is a download, not an upload"):
            await UploadOperation(download, source, service.connection).run()
        # A canceled download: its outcome says so, and a later run is refused.
        operation = DownloadOperation(download, tmp_path / "draft.doc", service.connection, partial_folder=tmp_path)
        canceled = await operation.cancel()
        assert canceled.state == "canceled"
        with pytest.raises(AtriumError, match="ended at the host without completing"):
            await operation.run()
        # An upload whose file changed after it was accepted.
        upload, second = await ask(system, {"Command": "put", "Name": "c.bin", "Size": size})
        assert second.connection is not None
        source.write_bytes(os.urandom(size + 1))
        with pytest.raises(AtriumError, match="it changed since"):
            await UploadOperation(upload, source, second.connection).run()
        # The same size, other bytes than the digest says: the host refuses it.
        source.write_bytes(os.urandom(size))
        changing = UploadOperation(upload, source, second.connection)
        watcher = asyncio.ensure_future(pause_past(changing, 200_000))
        await asyncio.sleep(0)
        assert (await changing.run()).state == "waiting"
        await watcher
        with source.open("r+b") as changed:
            changed.write(os.urandom(1000))
        with pytest.raises(AtriumError) as failed:
            await UploadOperation(upload, source, second.connection).run()
        assert failed.value.code == "transfer_failed" and "digestMismatch" in str(failed.value)
        assert not (host.served / "c.bin").exists()
        await service.close()
        await second.close()
        await connection.close()
    run(exchange())


RESTARTING_SCRIPT = """
import asyncio, os, sys
from pathlib import Path
import atrium
from atrium import AppServiceConnection
from atrium.transfers import DownloadOperation

async def main(address, state, destination, transfer, stop_after):
    system = await atrium.RemoteSystem.find(address, state_folder=Path(state))
    async with await system.connect() as connection:
        if transfer == "new":
            files = AppServiceConnection(app_service_name="atrium.files", package_id="atrium.examples.files",
                                         connection=connection)
            await files.open_remote()
            transfer = (await files.send_message({"Command": "get", "Name": "big.bin"})).message["Transfer"]
            print("transfer", transfer, flush=True)
        download = DownloadOperation(transfer, Path(destination), connection,
                                     partial_folder=Path(state) / "client-transfers")

        async def die_past():
            async for step in download.progress():
                print("at", step.bytes, flush=True)
                if stop_after and step.bytes >= stop_after:
                    os._exit(9)  # as a script killed mid-download: nothing cleaned up

        watching = asyncio.ensure_future(die_past())
        await asyncio.sleep(0)
        done = await download.run(window=128 << 10)
        print("done", done.state, done.bytes, flush=True)

asyncio.run(main(*sys.argv[1:5], int(sys.argv[5])))
"""


def test_a_download_resumed_by_the_script_run_again_after_it_was_killed(host: Host, state: Path,
                                                                         tmp_path: Path) -> None:
    import subprocess
    import sys
    data = os.urandom(4_000_000)
    (host.served / "big.bin").write_bytes(data)
    destination = tmp_path / "big.bin"
    asyncio.run(paired_system(host, state))
    environment = dict(os.environ, PYTHONPATH=os.pathsep.join(
        filter(None, [str(Path(__file__).resolve().parents[1] / "src"), os.environ.get("PYTHONPATH")])))

    def script(transfer: str, stop_after: int) -> "subprocess.CompletedProcess[str]":
        return subprocess.run([sys.executable, "-c", RESTARTING_SCRIPT, host.address, str(state), str(destination),
                               transfer, str(stop_after)], env=environment, capture_output=True, text=True,
                              timeout=60)

    first = script("new", 1_000_000)
    assert first.returncode == 9, first.stdout + first.stderr
    transfer = first.stdout.split()[1]
    partial = state / "client-transfers" / f"{transfer}.part"
    held = partial.stat().st_size
    assert 1_000_000 <= held < len(data) and not destination.exists()
    second = script(transfer, 0)
    assert second.returncode == 0, second.stdout + second.stderr
    steps = [int(line.split()[1]) for line in second.stdout.splitlines() if line.startswith("at ")]
    assert steps[0] == held, "the second run goes on from the bytes the first one left"
    assert f"done completed {len(data)}" in second.stdout.splitlines(), second.stdout
    assert destination.read_bytes() == data and not partial.exists()


@pytest.mark.parametrize("window", [None, 64 << 10])
def test_downloads_started_with_their_requests_arrive_exact_one_after_another(host: Host, state: Path, tmp_path: Path,
                                                                              window: Any) -> None:
    files = [os.urandom(1_000 + index * 23_000) for index in range(12)]
    for index, data in enumerate(files):
        (host.served / f"photo{index}").write_bytes(data)

    async def exchange() -> None:
        service, connection = await open_files(host, state)
        for index, data in enumerate(files):
            answer = await service.send_message({"Command": "get", "Name": f"photo{index}"}, starting_download=True)
            transfer = answer.message["Transfer"]
            assert transfer in connection._started, "the host attached the download with its answer"
            destination = tmp_path / f"photo{index}"
            operation = DownloadOperation(transfer, destination, connection, partial_folder=tmp_path / "partials")
            done = await (operation.run(window=window) if window else operation.run())
            assert done.state == "completed" and done.bytes == len(data)
            assert destination.read_bytes() == data
        assert not connection._started and not connection._transfers
        # Without asking, nothing is attached: the operation attaches as before.
        plain = await service.send_message({"Command": "get", "Name": "photo0"})
        assert plain.message["Transfer"] not in connection._started
        done = await DownloadOperation(plain.message["Transfer"], tmp_path / "again", connection).run()
        assert done.state == "completed" and (tmp_path / "again").read_bytes() == files[0]
        await service.close()

    run(exchange())


def test_a_started_download_paused_before_it_runs_is_detached_and_runs_later(host: Host, state: Path,
                                                                           tmp_path: Path) -> None:
    data = os.urandom(300_000)
    (host.served / "late.bin").write_bytes(data)

    async def exchange() -> None:
        service, connection = await open_files(host, state)
        answer = await service.send_message({"Command": "get", "Name": "late.bin"}, starting_download=True)
        transfer = answer.message["Transfer"]
        operation = DownloadOperation(transfer, tmp_path / "late.bin", connection, partial_folder=tmp_path / "p")
        await operation.pause()
        assert transfer not in connection._started and transfer not in connection._transfers
        assert (await operation.run()).state == "waiting", "a pause before run ends the run at once"
        done = await operation.run()
        assert done.state == "completed" and (tmp_path / "late.bin").read_bytes() == data
        await service.close()

    run(exchange())

