"""Hosts on the local network (DNS-SD, docs/DISCOVERY.md): ``_atrium._tcp`` with its TXT keys,
browsed with python-zeroconf (``pip install 'atrium-client[discovery]'``). Nothing a record says
is trusted: a host found this way proves its identity in the TLS handshake, and one this
client paired with must prove the identity it proved then (by its id)."""
from __future__ import annotations

import asyncio
import ipaddress
from pathlib import Path
from typing import Any, Dict, List, Optional

from .errors import AtriumError
from .identity import KnownHosts
from .remote import RemoteSystem

SERVICE_TYPE = "_atrium._tcp.local."
#: The most instances resolved in one look (a network may announce any number).
MAX_INSTANCES = 256


def _zeroconf() -> Any:
    try:
        import zeroconf.asyncio as zeroconf_asyncio
    except ImportError:
        raise AtriumError("discovery", "finding hosts by name needs python-zeroconf: pip install "
                          "'atrium-client[discovery]' (or give the host's address)") from None
    return zeroconf_asyncio


def _text(value: Optional[bytes]) -> Optional[str]:
    if value is None:
        return None
    try:
        return value.decode("ascii")
    except UnicodeDecodeError:
        return None


async def discover(within: float = 3.0, *, state_folder: Optional[Path] = None,
                   interfaces: Optional[List[str]] = None) -> List[RemoteSystem]:
    """The Atrium hosts that answer on the local network within `within` seconds, as
    :class:`~atrium.RemoteSystem` (IPv4 addresses first). A record without ``id``, or with a
    ``txtvers`` other than 1, is not an Atrium host's and is left out."""
    zeroconf_asyncio = _zeroconf()
    from zeroconf import InterfaceChoice, ServiceStateChange

    names: List[str] = []

    def seen(zeroconf: Any, service_type: str, name: str, state_change: Any) -> None:
        if state_change in (ServiceStateChange.Added, ServiceStateChange.Updated) and name not in names:
            if len(names) < MAX_INSTANCES:
                names.append(name)

    instance = zeroconf_asyncio.AsyncZeroconf(interfaces=interfaces or InterfaceChoice.All)
    browser = zeroconf_asyncio.AsyncServiceBrowser(instance.zeroconf, SERVICE_TYPE, handlers=[seen])
    try:
        await asyncio.sleep(within)
        known = KnownHosts(state_folder)
        found: List[RemoteSystem] = []
        for name in list(names):
            info = zeroconf_asyncio.AsyncServiceInfo(SERVICE_TYPE, name)
            if not await info.async_request(instance.zeroconf, 1000):
                continue
            keys: Dict[str, Optional[str]] = {}
            for key, value in (info.properties or {}).items():
                text = _text(key)
                if text is not None:
                    keys[text.lower()] = _text(value)
            host_id = keys.get("id")
            if keys.get("txtvers") != "1" or not host_id or not info.port:
                continue
            addresses = sorted(info.parsed_addresses(), key=lambda text: ipaddress.ip_address(text).version)
            if not addresses:
                continue
            identity = keys.get("identity")
            paired = known.identity_of_host_id(host_id) is not None or (
                identity is not None and known.is_paired(identity))
            found.append(RemoteSystem(
                id=host_id, display_name=name[:-len(SERVICE_TYPE) - 1] if name.endswith("." + SERVICE_TYPE) else name,
                host=addresses[0], port=int(info.port), identity=identity, is_paired=paired,
                kind=keys.get("kind") or "unknown", state_folder=state_folder))
        return found
    finally:
        await browser.async_cancel()
        await instance.async_close()


async def find_by_name(name: str, *, state_folder: Optional[Path] = None, token: Optional[str] = None,
                       within: float = 3.0) -> RemoteSystem:
    """The host advertised as `name` (or with that id), found within `within` seconds."""
    wanted = name.strip().lower()
    matching = [system for system in await discover(within, state_folder=state_folder)
                if system.display_name.lower() == wanted or system.id.lower() == wanted]
    if not matching:
        raise AtriumError("cannot_connect", f"no host named \"{name}\" was found on the network within {within:g} s "
                          "(atrium discover lists the hosts it finds)")
    ids = {system.id for system in matching}
    if len(ids) > 1:
        raise AtriumError("cannot_connect", f"{len(ids)} hosts call themselves \"{name}\" on the network: use an "
                          "address, or a host's id")
    system = matching[0]
    system.token = token
    return system
