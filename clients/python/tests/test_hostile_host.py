"""A host that lies, floods, stalls or sends what the contract does not allow: a fake one on
loopback, speaking frames as this test tells it. Every call ends with an AtriumError that
says what happened, within its timeout, and nothing else on the connection is disturbed
where the contract lets it go on."""
from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any, Awaitable, Callable, Dict, List

import pytest

import atrium
from atrium import AppServiceConnection, AtriumError, RemoteSystem, frames, values
from atrium import _cbor
from atrium.connection import Connection, TLSSettings

from conftest import Host, paired_system

WELCOME: Dict[str, Any] = {"type": "welcome", "version": 1, "hostId": "fake", "hostName": "fake",
                           "platform": "linux", "limits": {"maxMessageBytes": 1 << 20, "maxFrameBytes": 4 << 20,
                                                           "maxChannels": 64, "maxInFlight": 256}}
Script = Callable[[asyncio.StreamReader, asyncio.StreamWriter, Dict[str, Any]], Awaitable[None]]


async def read_frame(reader: asyncio.StreamReader) -> Dict[str, Any]:
    length = int.from_bytes(await reader.readexactly(4), "big")
    return frames.decode(await reader.readexactly(length))


def raw(body: bytes) -> bytes:
    return len(body).to_bytes(4, "big") + body


async def with_fake_host(script: Script, test: Callable[[int], Awaitable[None]],
                         welcome: Dict[str, Any] = WELCOME, welcome_bytes: bytes = b"") -> None:
    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            await read_frame(reader)  # hello
            writer.write(welcome_bytes or frames.encode(welcome))
            await script(reader, writer, welcome)
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()

    server = await asyncio.start_server(serve, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    try:
        await asyncio.wait_for(test(port), 30)
    finally:
        server.close()


async def open_echo(port: int) -> AppServiceConnection:
    system = await RemoteSystem.find(f"127.0.0.1:{port}", insecure=True)
    service = AppServiceConnection(app_service_name="s", package_id="p", remote_system=system)
    assert await service.open_remote() == atrium.AppServiceConnectionStatus.SUCCESS
    return service


async def answer_open(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> Dict[str, Any]:
    opened = await read_frame(reader)
    writer.write(frames.encode({"type": "opened", "channel": opened["channel"], "status": 0}))
    return opened


def test_announced_limits_are_bounded() -> None:
    greedy = dict(WELCOME, responseTimeoutMs=2 ** 64 - 1,
                  limits=dict(WELCOME["limits"], maxFrameBytes=2 ** 64 - 1))

    async def script(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, _: Dict[str, Any]) -> None:
        await reader.read()

    async def test(port: int) -> None:
        async with await Connection.open("127.0.0.1", port, timeout=5) as connection:
            assert connection.response_timeout == 600
            assert connection._frames.max_frame_bytes == frames.MAX_FRAME_BYTES
    asyncio.run(with_fake_host(script, test, greedy))


def test_a_frame_over_the_limit_ends_the_connection_with_a_reason() -> None:
    async def script(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, _: Dict[str, Any]) -> None:
        await answer_open(reader, writer)
        await read_frame(reader)
        writer.write(b"\xff\xff\xff\xff")  # 4 GiB announced
        await reader.read()

    async def test(port: int) -> None:
        service = await open_echo(port)
        with pytest.raises(AtriumError) as refused:
            await service.send_message({"a": 1}, timeout=5)
        assert refused.value.code == "protocol_error" and "over the limit" in str(refused.value)
    asyncio.run(with_fake_host(script, test))


def test_ids_and_statuses_of_the_wrong_type_are_protocol_errors() -> None:
    for bad in ({"type": "opened", "channel": [1], "status": 0}, {"type": "opened", "channel": 1, "status": "zero"},
                {"type": "opened", "channel": 1, "status": 1.9}, {"type": "pong", "id": True}):
        async def script(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, _: Dict[str, Any],
                         bad: Dict[str, Any] = bad) -> None:
            await read_frame(reader)
            writer.write(raw(_cbor.dumps(bad)))
            await reader.read()

        async def test(port: int) -> None:
            system = await RemoteSystem.find(f"127.0.0.1:{port}", insecure=True)
            service = AppServiceConnection(app_service_name="s", package_id="p", remote_system=system)
            with pytest.raises(AtriumError) as refused:
                await service.open_remote(timeout=5)
            assert refused.value.code == "protocol_error", refused.value
            await service.close()
        asyncio.run(with_fake_host(script, test))


def test_a_host_that_stops_reading_cannot_hold_a_call_past_its_timeout() -> None:
    async def script(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, _: Dict[str, Any]) -> None:
        await answer_open(reader, writer)
        await asyncio.sleep(30)  # reads nothing more

    async def test(port: int) -> None:
        service = await open_echo(port)
        loop = asyncio.get_running_loop()
        started = loop.time()
        with pytest.raises(AtriumError) as stuck:
            await service.send_message({"blob": bytes(16 << 20)}, timeout=1)
        assert stuck.value.code == "timed_out" and loop.time() - started < 5
    asyncio.run(with_fake_host(script, test))


def test_what_no_valueset_holds_fails_that_call_only() -> None:
    async def script(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, _: Dict[str, Any]) -> None:
        opened = await answer_open(reader, writer)
        for index in range(4):
            request = await read_frame(reader)
            head = {"type": "response", "channel": opened["channel"], "id": request["id"], "status": 0}
            body = _cbor.dumps(dict(head, message={"a": 1}))
            if index == 0:  # a date past the year 9999: c1 1b 000000e8d4a51000
                body = body[:-1] + bytes.fromhex("c11b000000e8d4a51000")
            elif index == 1:  # arrays 505 deep
                body = body[:-1] + b"\x81" * 505 + b"\x01"
            elif index == 2:  # maps 505 deep
                body = body[:-1] + b"\xa1\x61v" * 505 + b"\x01"
            writer.write(raw(bytes([body[0]]) + body[1:]))
        await reader.read()

    async def test(port: int) -> None:
        service = await open_echo(port)
        for reason in ("outside the years Python can hold", "an array may not hold arrays",
                       "nest deeper than 32 levels"):
            with pytest.raises(AtriumError) as refused:
                await service.send_message({"a": 1}, timeout=5)
            assert refused.value.code == "protocol_error" and reason in str(refused.value)
        assert (await service.send_message({"a": 1}, timeout=5)).message == {"a": 1}
    asyncio.run(with_fake_host(script, test))


def test_a_newer_host_s_unknown_keys_are_ignored() -> None:
    # Keys this client does not know, holding what no ValueSet holds (null, a tag).
    newer = frames.encode(dict(WELCOME, future="NULLVALUE", another="TAGVALUE"))
    newer = newer.replace(b"\x69NULLVALUE", b"\xf6").replace(b"\x68TAGVALUE", b"\xd8\x63\x01")
    newer = len(newer[4:]).to_bytes(4, "big") + newer[4:]

    async def script(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, _: Dict[str, Any]) -> None:
        await reader.read()

    async def test(port: int) -> None:
        async with await Connection.open("127.0.0.1", port, timeout=5) as connection:
            assert connection.host_name == "fake"
            assert isinstance(connection.welcome["future"], _cbor.Unsupported)
    asyncio.run(with_fake_host(script, test, welcome_bytes=newer))


def test_requests_no_one_here_answers_are_refused_at_once() -> None:
    answers: List[Dict[str, Any]] = []

    async def script(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, _: Dict[str, Any]) -> None:
        opened = await answer_open(reader, writer)
        writer.write(frames.encode({"type": "request", "channel": 99, "id": 1, "message": {}}))
        bad = _cbor.dumps({"type": "request", "channel": opened["channel"], "id": 2, "message": {"x": 1}})
        writer.write(raw(bad[:-1] + b"\xf6"))  # a null in the service's message
        writer.write(frames.encode({"type": "request", "channel": opened["channel"], "id": 3,
                                    "message": {"fine": True}}))
        for _ in range(3):
            answers.append(await read_frame(reader))

    async def test(port: int) -> None:
        service = await open_echo(port)
        async for request in service.requests():
            assert request.message == {"fine": True}
            await request.send_response({"ok": 1})
            break
        await asyncio.sleep(0.2)
    asyncio.run(with_fake_host(script, test))
    by_id = {answer["id"]: answer for answer in answers}
    assert by_id[1]["status"] == 1 and "no open channel" in by_id[1]["error"]
    assert by_id[2]["status"] == 1 and "message.x: null is not a ValueSet kind" in by_id[2]["error"]
    assert by_id[3]["status"] == 0 and by_id[3]["message"] == {"ok": 1}


def test_a_host_that_resets_during_hello_is_an_atrium_error() -> None:
    async def test() -> None:
        async def reset(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            await reader.read(10)
            writer.transport.abort()

        server = await asyncio.start_server(reset, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        with pytest.raises(AtriumError) as refused:
            await RemoteSystem.find(f"127.0.0.1:{port}", insecure=True)
        assert refused.value.code in ("cannot_connect", "host_went_away")
        server.close()
    asyncio.run(test())


def test_bad_addresses_and_tokens_are_refused_before_connecting(tmp_path: Path) -> None:
    async def test() -> None:
        with pytest.raises(AtriumError, match="no port"):
            await RemoteSystem.find("host:²")
        tls = TLSSettings(atrium.ClientIdentity.load_or_create(tmp_path / "atrium"))
        with pytest.raises(AtriumError, match="only to a host whose identity this client knows"):
            await Connection.open("192.0.2.1", 7340, tls=tls, token="secret")
    asyncio.run(test())


def test_pairing_with_a_host_that_claims_a_known_id_with_another_key(host: Host, state: Path) -> None:
    async def exchange() -> None:
        system = await paired_system(host, state)
        known_file = state / "known-hosts.json"
        known = json.loads(known_file.read_text())
        # As if this host id had proved another key at pairing (an impostor now has its id).
        known["id:" + system.id] = "ab" * 32
        del known[host.address]
        known_file.write_text(json.dumps(known))
        stranger = await RemoteSystem.find(host.address, state_folder=state)
        with pytest.raises(AtriumError) as refused:
            await atrium.pair(stranger, device_name="again")
        assert refused.value.code == "host_identity_changed" and "forget=True" in str(refused.value)
        # On purpose: forget=True pairs, and replaces what was remembered (the host forgot
        # this device too, as one that made a new key would have).
        async with await host.operator() as admin:
            await admin.admin("devices.revoke", {"device": atrium.ClientIdentity.load_or_create(state).fingerprint[:8]})
        pairing = asyncio.ensure_future(atrium.pair(stranger, device_name="again", forget=True))
        await host.accept_next_pairing()
        assert await pairing == atrium.PairingStatus.PAIRED
        known = json.loads(known_file.read_text())
        assert known["id:" + system.id] == system.identity == known[host.address]
    asyncio.run(asyncio.wait_for(exchange(), 60))


def test_the_blocking_facade_s_wait_for_a_request_times_out_and_goes_on(host: Host, state: Path) -> None:
    from atrium import sync
    asyncio.run(paired_system(host, state))
    system = sync.RemoteSystem.find(host.address, state_folder=state)
    with sync.AppServiceConnection(app_service_name="test", package_id="atrium.tests.python",
                                   remote_system=system) as service:
        assert service.open_remote() == sync.AppServiceConnectionStatus.SUCCESS
        with pytest.raises(AtriumError) as waited:
            service.next_request(timeout=0.2)
        assert waited.value.code == "timed_out"
        answer = asyncio.run_coroutine_threadsafe(
            service.connection.send_message({"Action": "send"}), sync._loop)  # type: ignore[arg-type]
        request = service.next_request(timeout=10)
        assert request is not None and request.message == {"Hello": "client"}
        service.respond(request, {"Fine": True})
        assert answer.result(10).message["ClientSaid"] == {"Fine": True}
