"""A small blocking facade for scripts: the same calls as the asyncio API, without
``async``/``await``. They run on one event loop in a background thread of this module's::

    from atrium import sync

    system = sync.RemoteSystem.find("192.168.1.20")
    with sync.AppServiceConnection(app_service_name="atrium.echo",
                                   package_id="atrium.examples.echo",
                                   remote_system=system) as connection:
        if connection.open_remote() == sync.AppServiceConnectionStatus.SUCCESS:
            print(connection.send_message({"hello": "world"}).message)
"""
from __future__ import annotations

import asyncio
import threading
from pathlib import Path
from typing import Any, Awaitable, Callable, Dict, List, Optional, Sequence, TypeVar, Union

from . import remote
from .errors import AtriumError
from .remote import AppInfo, AppServiceResponse, LaunchResult
from .status import (AppServiceClosedStatus, AppServiceConnectionStatus, AppServiceResponseStatus,
                     PairingStatus, RemoteLaunchUriStatus)

__all__ = [
    "AppInfo", "AppServiceClosedStatus", "AppServiceConnection", "AppServiceConnectionStatus",
    "AppServiceResponse", "AppServiceResponseStatus", "LaunchResult", "PairingStatus", "RemoteLaunchUriStatus",
    "RemoteSystem", "launch_uri", "pair",
]

T = TypeVar("T")
_loop: Optional[asyncio.AbstractEventLoop] = None
_lock = threading.Lock()


def _run(coroutine: Awaitable[T]) -> T:
    global _loop
    with _lock:
        if _loop is None:
            _loop = asyncio.new_event_loop()
            threading.Thread(target=_loop.run_forever, name="atrium client", daemon=True).start()
        loop = _loop
    if threading.current_thread().name == "atrium client":
        raise RuntimeError("atrium.sync is called from its own event loop (from show_code?): that would wait "
                           "forever; call it from another thread")

    async def wrapped() -> T:
        return await coroutine

    return asyncio.run_coroutine_threadsafe(wrapped(), loop).result()


class RemoteSystem:
    """:class:`atrium.RemoteSystem`, blocking."""

    def __init__(self, system: remote.RemoteSystem) -> None:
        #: The asyncio object underneath.
        self.system = system

    @classmethod
    def find(cls, address: str, *, insecure: bool = False, state_folder: Optional[Path] = None,
             token: Optional[str] = None, timeout: float = 5.0) -> "RemoteSystem":
        return cls(_run(remote.RemoteSystem.find(address, insecure=insecure, state_folder=state_folder,
                                                 token=token, timeout=timeout)))

    @property
    def id(self) -> str:
        return self.system.id

    @property
    def display_name(self) -> str:
        return self.system.display_name

    @property
    def identity(self) -> Optional[str]:
        return self.system.identity

    @property
    def is_paired(self) -> bool:
        return self.system.is_paired

    def ping(self, timeout: float = 10.0) -> float:
        return _run(self.system.ping(timeout))

    def apps(self, timeout: float = 10.0) -> List[AppInfo]:
        return _run(self.system.apps(timeout))


class AppServiceConnection:
    """:class:`atrium.AppServiceConnection`, blocking (requests from the service are taken
    with :meth:`next_request`)."""

    def __init__(self, app_service_name: str, package_id: str, remote_system: RemoteSystem) -> None:
        self.connection = remote.AppServiceConnection(
            app_service_name=app_service_name, package_id=package_id, remote_system=remote_system.system)
        self._requests: Optional[Any] = None
        self._pending: "Optional[asyncio.Future[remote.AppServiceRequest]]" = None

    @property
    def open_error(self) -> Optional[str]:
        return self.connection.open_error

    def open_remote(self, timeout: float = 10.0) -> Union[AppServiceConnectionStatus, int]:
        return _run(self.connection.open_remote(timeout))

    def send_message(self, message: Dict[str, Any], timeout: Optional[float] = None,
                     starting_download: bool = False) -> AppServiceResponse:
        return _run(self.connection.send_message(message, timeout, starting_download))

    def next_request(self, timeout: Optional[float] = None) -> Optional[remote.AppServiceRequest]:
        """The next message the service sends, or None once the channel closed; waits at
        most `timeout` seconds (AtriumError ``timed_out``), forever without it."""
        async def take() -> Optional[remote.AppServiceRequest]:
            if self._requests is None:
                self._requests = self.connection.requests().__aiter__()
            if self._pending is None:
                self._pending = asyncio.ensure_future(self._requests.__anext__())
            # The wait is shielded: a timeout leaves it pending for the next call, so no
            # request is lost and the stream goes on.
            try:
                request: remote.AppServiceRequest = await asyncio.wait_for(asyncio.shield(self._pending), timeout)
            except asyncio.TimeoutError:
                raise AtriumError("timed_out", f"the service sent nothing within {timeout:g} s") from None
            except StopAsyncIteration:
                return None
            finally:
                if self._pending.done():
                    self._pending = None
            return request
        return _run(take())

    def respond(self, request: remote.AppServiceRequest, message: Optional[Dict[str, Any]] = None,
                status: AppServiceResponseStatus = AppServiceResponseStatus.SUCCESS) -> None:
        _run(request.send_response(message, status))

    def close(self) -> None:
        _run(self.connection.close())

    def __enter__(self) -> "AppServiceConnection":
        return self

    def __exit__(self, *exception: object) -> None:
        self.close()


def launch_uri(uri: str, remote_system: RemoteSystem, *, package: Optional[str] = None,
               fallback_uri: Optional[str] = None, preferred_packages: Sequence[str] = (),
               data: Optional[Dict[str, Any]] = None, timeout: float = 10.0) -> LaunchResult:
    """Launches `uri` on the host: its status and the host's reason."""
    return _run(remote.RemoteLauncher.launch_uri_with_reason(
        uri, remote_system.system, package=package, fallback_uri=fallback_uri,
        preferred_packages=preferred_packages, data=data, timeout=timeout))


def pair(remote_system: RemoteSystem, *, device_name: str, show_code: Callable[[str], None] = lambda code: None,
         forget: bool = False, timeout: float = 130.0) -> Union[PairingStatus, int]:
    """Pairs with the host (see :func:`atrium.pair`); `show_code` runs on a thread of its
    own, so it may block (``input()`` to confirm, say)."""
    def shown(code: str) -> None:
        threading.Thread(target=show_code, args=(code,), name="atrium pairing code", daemon=True).start()
    return _run(remote.pair(remote_system.system, device_name=device_name, show_code=shown, forget=forget,
                            timeout=timeout))
