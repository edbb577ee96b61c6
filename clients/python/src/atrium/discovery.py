"""Hosts on the local network (DNS-SD, docs/DISCOVERY.md): ``_atrium._tcp`` with its TXT keys,
browsed with python-zeroconf (``pip install 'atrium-client[discovery]'``). Nothing a record says
is trusted: a host found this way proves its identity in the TLS handshake, and one this
client paired with must prove the identity it proved then (by its id)."""
from __future__ import annotations

import asyncio
import ipaddress
import uuid
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
        infos = [zeroconf_asyncio.AsyncServiceInfo(SERVICE_TYPE, name) for name in list(names)]
        # Resolved together, within a second in all.
        resolved = await asyncio.gather(*(info.async_request(instance.zeroconf, 1000) for info in infos),
                                        return_exceptions=True)
        for name, info, answered in zip(list(names), infos, resolved):
            if answered is not True:
                continue
            keys: Dict[str, Optional[str]] = {}
            for key, value in (info.properties or {}).items():
                text = _text(key)
                if text is not None:
                    keys[text.lower()] = _text(value)
            try:
                host_id = str(uuid.UUID(keys.get("id") or ""))
            except ValueError:
                continue  # an Atrium host's id is a UUID
            if keys.get("txtvers") != "1" or not info.port:
                continue
            addresses = sorted(info.parsed_addresses(), key=lambda text: ipaddress.ip_address(text).version)
            if not addresses:
                continue
            identity = keys.get("identity")
            paired = known.identity_of_host_id(host_id) is not None or (
                identity is not None and known.is_paired(identity))
            shown = name[:-len(SERVICE_TYPE) - 1] if name.endswith("." + SERVICE_TYPE) else name
            found.append(RemoteSystem(
                id=host_id, display_name="".join(character for character in shown if character.isprintable()),
                host=addresses[0], port=int(info.port), identity=identity, is_paired=paired,
                kind=keys.get("kind") or "unknown", state_folder=state_folder, discovered=True))
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
        # Several hosts under one name: the one this client paired with, if it is one of them.
        paired = [system for system in matching if system.is_paired]
        if len({system.id for system in paired}) == 1:
            matching, ids = paired, {paired[0].id}
    if len(ids) > 1:
        raise AtriumError("cannot_connect", f"{len(ids)} hosts call themselves \"{name}\" on the network: use an "
                          "address, or a host's id")
    system = matching[0]
    system.token = token
    return system
