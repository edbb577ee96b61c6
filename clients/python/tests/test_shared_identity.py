"""The Python client and the atrium tool are one device: the same identity and known hosts,
paired by either; and the blocking facade, and the README's examples, against a real host."""
from __future__ import annotations

import asyncio
import os
import re
import subprocess
import sys
from pathlib import Path

import atrium
from atrium import sync

from conftest import ROOT, Host, paired_system

ATRIUM = Path(os.environ.get("ATRIUM", ROOT / ".build" / "debug" / "atrium"))
README = Path(__file__).resolve().parents[1] / "README.md"


def tool(state: Path, *arguments: str) -> "subprocess.Popen[str]":
    environment = dict(os.environ, XDG_STATE_HOME=str(state.parent))
    return subprocess.Popen([str(ATRIUM), *arguments], env=environment, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)


def test_a_device_paired_with_atrium_pair_is_paired_for_python(host: Host, state: Path) -> None:
    pairing = tool(state, "pair", host.address, "--name", "paired by the tool")
    asyncio.run(host.accept_next_pairing())
    output, _ = pairing.communicate(timeout=30)
    assert pairing.returncode == 0, output
    code = re.search(r"\b(\d{3} ?\d{3})\b", output)
    assert code, output

    async def use() -> None:
        system = await atrium.RemoteSystem.find(host.address, state_folder=state)
        assert system.is_paired
        identity = atrium.ClientIdentity.load_or_create(state)
        async with await system.connect() as connection:
            assert connection.client_identity == identity.fingerprint
        assert any(app.package == "atrium.examples.echo" for app in await system.apps())
    asyncio.run(use())


def test_a_device_paired_from_python_is_paired_for_atrium(host: Host, state: Path) -> None:
    asyncio.run(paired_system(host, state))
    apps = tool(state, "apps", host.address)
    output, _ = apps.communicate(timeout=30)
    assert apps.returncode == 0, output
    assert "atrium.examples.echo" in output and "not a host this client paired with" not in output


def test_the_blocking_facade(host: Host, state: Path) -> None:
    asyncio.run(paired_system(host, state))
    system = sync.RemoteSystem.find(host.address, state_folder=state)
    assert system.is_paired and system.ping() > 0
    with sync.AppServiceConnection(app_service_name="atrium.echo", package_id="atrium.examples.echo",
                                   remote_system=system) as connection:
        assert connection.open_remote() == sync.AppServiceConnectionStatus.SUCCESS
        assert connection.send_message({"n": [1, 2]}).message == {"n": [1, 2]}
    # Requests from the service through the facade: test_hostile_host's
    # test_the_blocking_facade_s_wait_for_a_request_times_out_and_goes_on.
    launched = sync.launch_uri("roman-test:sync", system)
    assert launched.status == sync.RemoteLaunchUriStatus.SUCCESS


def examples() -> list:
    return re.findall(r"```python\n(.*?)```", README.read_text(), re.S)


def test_the_readme_examples_run(host: Host, state: Path) -> None:
    pair, message, launch, transfer = examples()
    (host.served / "report.pdf").write_bytes(bytes(range(256)) * 4000)
    state.parent.mkdir(parents=True, exist_ok=True)
    environment = dict(os.environ, XDG_STATE_HOME=str(state.parent),
                       PYTHONPATH=os.pathsep.join(filter(None, [str(Path(atrium.__file__).parents[1]),
                                                                os.environ.get("PYTHONPATH")])))

    def run(source: str) -> "subprocess.Popen[str]":
        return subprocess.Popen([sys.executable, "-c", source.replace("192.168.1.20", host.address)],
                                env=environment, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                cwd=state.parent)

    pairing = run(pair)
    accepted = asyncio.run(host.accept_next_pairing())
    output, _ = pairing.communicate(timeout=30)
    assert pairing.returncode == 0 and output.endswith("PAIRED\n"), output
    assert f"the host should show {accepted['code']}" in output, (accepted, output)
    for source, expected in ((message, r"^SUCCESS \{'Type': 'pong', 'CreationDate': "),
                             (launch, r"^SUCCESS\n[0-9.]+ ms\n(.|\n)*atrium.examples.echo \['atrium.echo'\] \[\]"),
                             (transfer, r"^0 of 1024000 bytes\n(.|\n)*1024000 of 1024000 bytes\ncompleted\n"
                                        r"\[\(UUID\('[0-9a-f-]+'\), 'completed'\)\]\n$")):
        example = run(source)
        output, _ = example.communicate(timeout=30)
        assert example.returncode == 0 and re.search(expected, output), output
    assert (state.parent / "report.pdf").read_bytes() == (host.served / "report.pdf").read_bytes()
