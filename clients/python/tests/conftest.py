"""A real atriumd for the tests: TLS and pairing required, as on a network, with the Echo,
Roman ping and test services of Atrium's build (``swift build`` first; ATRIUMD names
another build). Each test gets a client state folder of its own."""
from __future__ import annotations

import asyncio
import json
import os
import re
import shutil
import subprocess
import tempfile
import threading
import time
from pathlib import Path
from typing import Any, Dict, Iterator, List, Optional

import pytest

import atrium
from atrium.connection import Connection

ROOT = Path(__file__).resolve().parents[3]
ATRIUMD = Path(os.environ.get("ATRIUMD", ROOT / ".build" / "debug" / "atriumd"))
TEST_PACKAGE = "atrium.tests.python"
FILES = ("atrium.files", "atrium.examples.files")

MANIFESTS: Dict[str, Dict[str, Any]] = {
    "test.json": {"manifestVersion": 1, "package": TEST_PACKAGE, "library": "libAtriumTestService.so",
                  "services": [{"name": "test", "supportsRemoteSystems": True}, {"name": "local.only"}]},
}


class Host:
    """An atriumd of a test's own, on a free loopback port."""

    def __init__(self, arguments: List[str], state: Optional[Path] = None) -> None:
        if not ATRIUMD.exists():
            pytest.fail(f"{ATRIUMD} is missing: run swift build first (or set ATRIUMD)")
        self.folder = Path(tempfile.mkdtemp(prefix="atrium-py-"))
        manifests = self.folder / "manifests"
        manifests.mkdir()
        for name in ("echo.json", "roman-ping.json"):
            shutil.copy(ROOT / "manifests" / name, manifests / name)
        for name, manifest in MANIFESTS.items():
            (manifests / name).write_text(json.dumps(manifest))
        # Files (the transfers' reference service) serving a folder of the test's.
        self.served = self.folder / "served"
        self.served.mkdir()
        (manifests / "files.json").write_text(json.dumps(
            {"manifestVersion": 1, "package": FILES[1], "library": "libFiles.so",
             "services": [{"name": FILES[0], "supportsRemoteSystems": True}],
             "config": {"folder": str(self.served)}}))
        self.state = state or self.folder / "state"
        self.socket = str(self.folder / "atriumd.sock")
        self.log: List[str] = []
        self.process = subprocess.Popen(
            [str(ATRIUMD), "--manifests", str(manifests), "--listen", "127.0.0.1:0", "--socket", self.socket,
             "--state-dir", str(self.state)] + arguments,
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        self.port = 0
        found = threading.Event()

        def read() -> None:
            assert self.process.stdout is not None
            for line in self.process.stdout:
                self.log.append(line)
                match = re.search(r"listening on tcp 127\.0\.0\.1:(\d+)", line)
                if match and not self.port:
                    self.port = int(match.group(1))
                    found.set()

        threading.Thread(target=read, daemon=True).start()
        if not found.wait(30) or not self.port:
            self.stop()
            pytest.fail("atriumd did not start:\n" + "".join(self.log))

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def logged(self, text: str, within: float = 5.0) -> bool:
        deadline = time.monotonic() + within
        while time.monotonic() < deadline:
            if any(text in line for line in self.log):
                return True
            time.sleep(0.05)
        return False

    async def operator(self) -> Connection:
        """A connection on the host's local socket, where the operator's commands are taken."""
        return await Connection.open_unix(self.socket, client_name="test operator")

    async def accept_next_pairing(self, within: float = 10.0) -> Dict[str, Any]:
        """Accepts the first pairing request that comes within `within` seconds, as
        ``atrium pairing accept`` does; the request as listed."""
        async with await self.operator() as admin:
            deadline = time.monotonic() + within
            while time.monotonic() < deadline:
                waiting = (await admin.admin("pairing.list")).get("requests", [])
                if waiting:
                    await admin.admin("pairing.accept", {"request": waiting[0]["request"]})
                    return dict(waiting[0])
                await asyncio.sleep(0.05)
        raise AssertionError("no pairing request came")

    def stop(self) -> int:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        shutil.rmtree(self.folder, ignore_errors=True)
        return self.process.returncode


@pytest.fixture
def host() -> Iterator[Host]:
    started = Host(["--tls", "required", "--pairing", "required"])
    yield started
    started.stop()


@pytest.fixture
def state(tmp_path: Path) -> Path:
    """A client state folder of the test's own (as $XDG_STATE_HOME/atrium would be)."""
    folder = tmp_path / "state" / "atrium"
    return folder


async def paired_system(host: Host, state: Path, device_name: str = "python test") -> atrium.RemoteSystem:
    """The test host, found and paired with (the operator accepting on the local socket)."""
    system = await atrium.RemoteSystem.find(host.address, state_folder=state)
    codes: List[str] = []
    pairing = asyncio.ensure_future(atrium.pair(system, device_name=device_name, show_code=codes.append))
    accepted = await host.accept_next_pairing()
    assert await pairing == atrium.PairingStatus.PAIRED
    assert codes == [accepted["code"]], "the code shown here is the one the operator sees"
    return system
