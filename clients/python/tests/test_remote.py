"""The client against a real atriumd (TLS and pairing required): messages of every kind
through Echo, requests from the service, launch, apps, ping, and the refusals."""
from __future__ import annotations

import asyncio
import datetime
import json
import uuid
from pathlib import Path

import pytest

import atrium
from atrium import (AppServiceClosedStatus, AppServiceConnection, AppServiceConnectionStatus,
                    AppServiceResponseStatus, AtriumError, RemoteLauncher, RemoteLaunchUriStatus)

from conftest import TEST_PACKAGE, Host, paired_system

ECHO = ("atrium.echo", "atrium.examples.echo")
ROMAN = ("com.microsoft.test.cdppingpongservice", "5085ShawnHenry.RomanTestApp_jsjw7knzsgcce")


def run(coroutine):  # type: ignore[no-untyped-def]
    return asyncio.run(asyncio.wait_for(coroutine, 60))


def test_every_kind_comes_back_as_it_went(host: Host, state: Path) -> None:
    async def exchange() -> None:
        system = await paired_system(host, state)
        assert system.is_paired and system.identity is not None
        message = {
            "text": "ünï 水", "int": -(2 ** 63), "max": 2 ** 63 - 1, "double": 1.5, "whole double": 2.0,
            "bool": True, "bytes": b"\x00\xff", "empty bytes": b"",
            "date": datetime.datetime(2026, 12, 2, 10, 30, 15, 250000, tzinfo=datetime.timezone.utc),
            "whole date": datetime.datetime(2026, 12, 2, tzinfo=datetime.timezone.utc),
            "uuid": uuid.UUID("12345678-1234-5678-1234-567812345678"),
            "ints": [1, 2, 3], "texts": ["a", "b"], "empty": [], "maps": [{"a": 1}, {"b": "x"}],
            "nested": {"deeper": {"ok": False, "nan": float("inf")}},
        }
        async with AppServiceConnection(app_service_name=ECHO[0], package_id=ECHO[1],
                                        remote_system=system) as service:
            assert await service.open_remote() == AppServiceConnectionStatus.SUCCESS
            response = await service.send_message(message)
            assert response.status == AppServiceResponseStatus.SUCCESS and response.error is None
            assert response.message == message
            for key, value in message.items():
                assert type(response.message[key]) is type(value), key
            # A date in another zone is the same moment, read back in UTC.
            plus_two = datetime.timezone(datetime.timedelta(hours=2))
            moment = datetime.datetime(2026, 12, 2, 12, 0, tzinfo=plus_two)
            back = (await service.send_message({"when": moment})).message["when"]
            assert back == moment and back.tzinfo == datetime.timezone.utc
    run(exchange())


def test_values_that_are_not_valueset_kinds_are_refused_before_sending(host: Host, state: Path) -> None:
    async def exchange() -> None:
        system = await paired_system(host, state)
        async with AppServiceConnection(app_service_name=ECHO[0], package_id=ECHO[1],
                                        remote_system=system) as service:
            assert await service.open_remote() == AppServiceConnectionStatus.SUCCESS
            refusals = [
                ({"a": None}, "message.a: None is not a ValueSet kind"),
                ({"list": [1, "x"]}, "message.list[1]: array mixes int and string"),
                ({"big": 2 ** 63}, "message.big: integer 9223372036854775808 is outside the Int64 range"),
                ({"small": -(2 ** 63) - 1}, "outside the Int64 range"),
                ({"x": {"inner key": {1: 2}}}, 'message.x["inner key"]: key 1 is a int, not text'),
                ({"naive": datetime.datetime(2026, 1, 1)}, "message.naive: a datetime without a time zone"),
                ({"lists": [[1], [2]]}, "message.lists[0]: an array may not hold arrays"),
                ({"set": {1, 2}}, "message.set: set is not a ValueSet kind"),
            ]
            deep: dict = {}
            inner = deep
            for _ in range(32):
                inner["v"] = {}
                inner = inner["v"]
            refusals.append((deep, "nest deeper than 32 levels"))
            for message, reason in refusals:
                with pytest.raises(atrium.InvalidValueError) as refused:
                    await service.send_message(message)
                assert reason in str(refused.value), str(refused.value)
            # The connection was never disturbed: nothing was sent.
            assert (await service.send_message({"still": "here"})).message == {"still": "here"}
    run(exchange())


def test_the_service_asks_the_client_and_closes_the_channel(host: Host, state: Path) -> None:
    async def exchange() -> None:
        system = await paired_system(host, state)
        async with AppServiceConnection(app_service_name="test", package_id=TEST_PACKAGE,
                                        remote_system=system) as service:
            assert await service.open_remote() == AppServiceConnectionStatus.SUCCESS

            async def answer() -> dict:
                async for request in service.requests():
                    await request.send_response({"Reply": "from python", "Got": request.message})
                    return request.message
                return {}

            answering = asyncio.ensure_future(answer())
            response = await service.send_message({"Action": "send"})
            assert await answering == {"Hello": "client"}
            assert response.status == AppServiceResponseStatus.SUCCESS
            assert response.message["ClientSaid"] == {"Reply": "from python", "Got": {"Hello": "client"}}
            assert response.message["ClientStatus"] == 0

            closing = await service.send_message({"Action": "close", "Status": 1})
            assert closing.status == AppServiceResponseStatus.SUCCESS
            remaining = [request async for request in service.requests()]
            assert remaining == [] and service.closed_status == AppServiceClosedStatus.CANCELED
    run(exchange())


def test_roman_ping_launch_apps_and_ping(host: Host, state: Path) -> None:
    async def exchange() -> None:
        system = await paired_system(host, state)
        round_trip = await system.ping()
        assert 0 < round_trip < 10
        apps = {app.package: app for app in await system.apps()}
        assert ECHO[1] in apps and ROMAN[1] in apps
        assert "roman-test" in apps[ROMAN[1]].schemes and ECHO[0] in apps[ECHO[1]].services

        async with AppServiceConnection(app_service_name=ROMAN[0], package_id=ROMAN[1],
                                        remote_system=system) as ping:
            assert await ping.open_remote() == AppServiceConnectionStatus.SUCCESS
            when = datetime.datetime(2026, 11, 21, 5, 0, 0, 250000, tzinfo=datetime.timezone.utc)
            pong = await ping.send_message({"Type": "ping", "CreationDate": when, "TargetId": "python"})
            assert pong.message == {"Type": "pong", "CreationDate": when, "TargetId": "python"}

        assert await RemoteLauncher.launch_uri("roman-test:hello", system) == RemoteLaunchUriStatus.SUCCESS
        unknown = await RemoteLauncher.launch_uri_with_reason("nobody-handles:this", system)
        assert unknown.status == RemoteLaunchUriStatus.PROTOCOL_UNAVAILABLE and unknown.error
    run(exchange())


def test_refusals_say_why(host: Host, state: Path) -> None:
    async def exchange() -> None:
        # Not paired: the host lists nothing and opens nothing, and says how to pair.
        stranger = await atrium.RemoteSystem.find(host.address, state_folder=state)
        assert not stranger.is_paired and stranger.identity and stranger.id
        with pytest.raises(AtriumError) as refused:
            await stranger.apps()
        assert refused.value.code == "not_paired" and "pair first" in str(refused.value)
        async with AppServiceConnection(app_service_name=ECHO[0], package_id=ECHO[1],
                                        remote_system=stranger) as service:
            assert await service.open_remote() == AppServiceConnectionStatus.NOT_AUTHORIZED
            assert service.open_error
            with pytest.raises(AtriumError, match="open the service first"):
                await service.send_message({"a": 1})
        assert await RemoteLauncher.launch_uri("roman-test:x", stranger) == \
            RemoteLaunchUriStatus.DENIED_BY_REMOTE_SYSTEM

        system = await paired_system(host, state)
        async with AppServiceConnection(app_service_name="x", package_id="no.such.package",
                                        remote_system=system) as missing:
            assert await missing.open_remote() == AppServiceConnectionStatus.APP_NOT_INSTALLED
            assert missing.open_error == 'no package "no.such.package" is installed'
        async with AppServiceConnection(app_service_name="local.only", package_id=TEST_PACKAGE,
                                        remote_system=system) as local:
            assert await local.open_remote() == AppServiceConnectionStatus.REMOTE_SYSTEM_NOT_SUPPORTED_BY_APP
        async with AppServiceConnection(app_service_name="test", package_id=TEST_PACKAGE,
                                        remote_system=system) as service:
            assert await service.open_remote() == AppServiceConnectionStatus.SUCCESS
            failed = await service.send_message({"Action": "fail", "Reason": "as asked"})
            assert failed.status == AppServiceResponseStatus.FAILURE and failed.error == "as asked"
            with pytest.raises(AtriumError) as timed_out:
                await service.send_message({"Action": "hang"}, timeout=0.3)
            assert timed_out.value.code == "timed_out"
            # Plain TCP is refused off loopback before anything is sent.
        with pytest.raises(AtriumError, match="only to a loopback host"):
            await atrium.RemoteSystem.find("192.0.2.1:7340", insecure=True, state_folder=state)
    run(exchange())


def test_a_host_whose_identity_changed_is_refused(host: Host, state: Path) -> None:
    async def exchange() -> None:
        system = await paired_system(host, state)
        known = json.loads((state / "known-hosts.json").read_text())
        assert known[host.address] == system.identity and known["id:" + system.id] == system.identity
        # Another key at the same address, as a host that made a new key (or an impostor).
        port = host.port
        host.stop()
        impostor = Host(["--tls", "required", "--pairing", "required", "--listen", f"127.0.0.1:{port}"])
        try:
            with pytest.raises(AtriumError) as refused:
                await system.ping()
            assert refused.value.code == "host_identity_changed"
            message = str(refused.value)
            assert system.identity in message and "presented the identity" in message and "atrium pair" in message
        finally:
            impostor.stop()
    run(exchange())


def test_a_host_that_goes_away_mid_request_is_reported(host: Host, state: Path) -> None:
    async def exchange() -> None:
        system = await paired_system(host, state)
        async with AppServiceConnection(app_service_name="test", package_id=TEST_PACKAGE,
                                        remote_system=system) as service:
            assert await service.open_remote() == AppServiceConnectionStatus.SUCCESS
            waiting = asyncio.ensure_future(service.send_message({"Action": "hang"}))
            await asyncio.sleep(0.2)
            host.process.kill()
            with pytest.raises(AtriumError) as gone:
                await waiting
            assert gone.value.code == "host_went_away"
    run(exchange())
