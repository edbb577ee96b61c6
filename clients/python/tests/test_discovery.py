"""Hosts found by the name they advertise (DNS-SD, `pip install 'atrium-client[discovery]'`):
the record is only a hint; what the host proves decides. The hosts are advertised here by
python-zeroconf as atriumd would through avahi-daemon (which the tests do not run)."""
from __future__ import annotations

import asyncio
import socket
import uuid
from pathlib import Path
from typing import Any, AsyncIterator, Dict

import pytest

import atrium
from atrium import AtriumError, RemoteSystem, discovery

from conftest import Host, paired_system

zeroconf = pytest.importorskip("zeroconf", reason="python-zeroconf is not installed (atrium-client[discovery])")
from zeroconf import InterfaceChoice  # noqa: E402
from zeroconf.asyncio import AsyncServiceBrowser, AsyncServiceInfo, AsyncZeroconf  # noqa: E402

TYPE = "_atrium._tcp.local."


class Advertiser:
    def __init__(self) -> None:
        self.zeroconf = AsyncZeroconf(interfaces=InterfaceChoice.All)
        self.records: list = []

    async def advertise(self, name: str, port: int, keys: Dict[str, str]) -> None:
        info = AsyncServiceInfo(TYPE, f"{name}.{TYPE}", addresses=[socket.inet_aton("127.0.0.1")], port=port,
                                properties=keys, server=f"atrium-test-{port}.local.")
        await self.zeroconf.async_register_service(info)
        self.records.append(info)
        # What is advertised here must reach a browser here, or nothing can be tested.
        seen = asyncio.Event()
        browser = AsyncServiceBrowser(self.zeroconf.zeroconf, TYPE, handlers=[
            lambda zeroconf, service_type, name, state_change: seen.set() if name == info.name else None])
        try:
            await asyncio.wait_for(seen.wait(), 5)
        except asyncio.TimeoutError:
            pytest.skip("multicast DNS sent on this machine's interfaces does not come back to it")
        finally:
            await browser.async_cancel()

    async def close(self) -> None:
        for info in self.records:
            await self.zeroconf.async_unregister_service(info)
        await self.zeroconf.async_close()


def keys_of(system: RemoteSystem, **more: str) -> Dict[str, str]:
    keys = {"txtvers": "1", "protovers": "1", "id": system.id, "kind": "desktop", "tls": "required",
            "pairing": "required", "identity": system.identity or ""}
    keys.update(more)
    return keys


def test_a_host_found_by_its_advertised_name(host: Host, state: Path) -> None:
    async def exchange() -> None:
        advertiser = Advertiser()
        try:
            system = await paired_system(host, state)
            await advertiser.advertise("Python Test Host", host.port, keys_of(system))
            found = await RemoteSystem.find("Python Test Host", state_folder=state)
            assert (found.id, found.identity, found.port, found.kind) == (system.id, system.identity, host.port,
                                                                           "desktop")
            assert found.is_paired and found.display_name == "Python Test Host"
            assert any(app.package == "atrium.examples.echo" for app in await found.apps())
            listed = await discovery.discover(1.5, state_folder=state)
            assert any(item.display_name == "Python Test Host" for item in listed)
        finally:
            await advertiser.close()
    asyncio.run(asyncio.wait_for(exchange(), 60))


def test_a_record_is_only_a_hint(host: Host, state: Path) -> None:
    other = Host(["--tls", "required", "--pairing", "required"])

    async def exchange() -> None:
        advertiser = Advertiser()
        try:
            system = await paired_system(host, state)
            # Another machine announcing itself under the paired host's id: it cannot prove
            # the identity this client paired with.
            await advertiser.advertise("Kitchen PC", other.port, keys_of(system))
            with pytest.raises(AtriumError) as refused:
                await RemoteSystem.find("Kitchen PC", state_folder=state)
            assert refused.value.code == "host_identity_changed"
            # The same id in capitals is the same id.
            await advertiser.advertise("Shouting", other.port, keys_of(system, id=system.id.upper()))
            with pytest.raises(AtriumError) as shouted:
                await RemoteSystem.find("Shouting", state_folder=state)
            assert shouted.value.code == "host_identity_changed"
            # An address from the network is not this machine's to trust: no plain TCP, and no
            # token to a host whose identity this client does not know.
            with pytest.raises(AtriumError, match="not to a host found by its name"):
                await RemoteSystem.find("Kitchen PC", insecure=True, state_folder=state)
            await advertiser.advertise("Stranger", other.port, {"txtvers": "1", "id": str(uuid.uuid4())})
            with pytest.raises(AtriumError, match="a token is sent only to a host whose identity this client knows"):
                await RemoteSystem.find("Stranger", state_folder=state, token="secret")
            # Records that are not an Atrium host's are left out.
            await advertiser.advertise("No Id", host.port, {"txtvers": "1"})
            await advertiser.advertise("Newer Layout", host.port, keys_of(system, txtvers="2"))
            for name in ("No Id", "Newer Layout", "Nobody At All"):
                with pytest.raises(AtriumError, match="no host named"):
                    await RemoteSystem.find(name, state_folder=state, timeout=1.5)
        finally:
            await advertiser.close()
    try:
        asyncio.run(asyncio.wait_for(exchange(), 60))
    finally:
        other.stop()
