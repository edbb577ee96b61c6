#!/usr/bin/env python3
"""The Python client's speed (issue 40, BENCHMARKS.md "The Python client"), as ratios measured
in one run against the same atriumd (release build, the reference manifests, plain TCP on
loopback, the Echo service):

- sequential round trips (one request in flight) and 64 pipelined on one connection, with
  (a) the Python client (`atrium-client`, asyncio), (b) the Swift client (`atrium bench`),
  and (c) a plain blocking socket with cbor2, as Scripts/contract_client.py speaks: the least
  a Python program can do.

Each figure is the median of --rounds runs of --duration seconds, the clients alternating.
With --pinned, the host and the clients run on core 0 (taskset -c 0).

    swift build -c release --product atriumd && swift build -c release --product atrium
    pip install ./clients/python cbor2
    python3 Benchmarks/python_client.py --pinned
"""
import argparse
import asyncio
import json
import os
import socket
import statistics
import struct
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "clients", "python", "src"))
from hosttools import RELEASE, start_host  # noqa: E402

import cbor2  # noqa: E402

from atrium import AppServiceConnection, RemoteSystem  # noqa: E402

ECHO = ("atrium.echo", "atrium.examples.echo")
MESSAGE = {"Type": "ping", "Count": 1, "Text": "hello"}


async def python_client(port, depth, seconds):
    """Round trips per second of the Python client, `depth` requests in flight."""
    system = await RemoteSystem.find(f"127.0.0.1:{port}", insecure=True)
    async with AppServiceConnection(app_service_name=ECHO[0], package_id=ECHO[1], remote_system=system) as echo:
        await echo.open_remote()
        done = 0
        deadline = time.monotonic() + seconds

        async def worker():
            nonlocal done
            while time.monotonic() < deadline:
                await echo.send_message(MESSAGE, timeout=10)
                done += 1

        start = time.monotonic()
        await asyncio.gather(*(worker() for _ in range(depth)))
        return done / (time.monotonic() - start)


def raw_socket(port, depth, seconds):
    """Round trips per second of a blocking socket and cbor2 (as Scripts/contract_client.py
    speaks), `depth` requests in flight."""
    connection = socket.create_connection(("127.0.0.1", port))
    connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    buffered = b""

    def send(frame):
        body = cbor2.dumps(frame)
        connection.sendall(struct.pack(">I", len(body)) + body)

    def receive():
        nonlocal buffered
        while True:
            if len(buffered) >= 4:
                (length,) = struct.unpack_from(">I", buffered)
                if len(buffered) >= 4 + length:
                    frame = cbor2.loads(buffered[4:4 + length])
                    buffered = buffered[4 + length:]
                    return frame
            data = connection.recv(1 << 16)
            if not data:
                raise EOFError("the host closed the connection")
            buffered += data

    send({"type": "hello", "version": 1, "clientId": "raw"})
    receive()
    send({"type": "open", "channel": 1, "service": ECHO[0], "package": ECHO[1]})
    receive()
    number = 0
    for _ in range(depth):
        number += 1
        send({"type": "request", "channel": 1, "id": number, "message": MESSAGE})
    done = 0
    start = time.monotonic()
    deadline = start + seconds
    while time.monotonic() < deadline:
        answer = receive()
        assert answer["status"] == 0
        done += 1
        number += 1
        send({"type": "request", "channel": 1, "id": number, "message": MESSAGE})
    elapsed = time.monotonic() - start
    connection.close()
    return done / elapsed


def swift_client(port, depth, seconds, pin):
    result = subprocess.run(pin + [os.path.join(RELEASE, "atrium"), "bench", f"127.0.0.1:{port}", "--insecure",
                                   "--pipeline", str(depth), "--duration", str(seconds), "--json-output"],
                            capture_output=True, text=True, check=True)
    return json.loads(result.stdout)["requestsPerSecond"]


def in_process(pin, function):
    """Runs one measurement in a child Python process, pinned like the others."""
    code = (f"import sys; sys.argv = ['x']; sys.path.insert(0, {HERE!r}); import python_client as b, asyncio, json; "
            f"print(json.dumps({function}))")
    result = subprocess.run(pin + [sys.executable, "-c", code],
                            capture_output=True, text=True, check=True)
    return float(result.stdout.strip())


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--pinned", action="store_true", help="run the host and the clients on core 0")
    parser.add_argument("--duration", type=int, default=5, help="seconds of each run (default 5)")
    parser.add_argument("--rounds", type=int, default=3, help="runs of each (default 3)")
    arguments = parser.parse_args()
    pin = ["taskset", "-c", "0"] if arguments.pinned else []
    host, port = start_host([], pin)
    rates = {}
    try:
        for _ in range(arguments.rounds):
            for depth in (1, 64):
                for name, function in (("python", f"asyncio.run(b.python_client({port}, {depth}, "
                                                  f"{arguments.duration}))"),
                                       ("raw", f"b.raw_socket({port}, {depth}, {arguments.duration})")):
                    rates.setdefault((name, depth), []).append(in_process(pin, function))
                rates.setdefault(("swift", depth), []).append(swift_client(port, depth, arguments.duration, pin))
    finally:
        host.kill()
    median = {key: statistics.median(values) for key, values in rates.items()}
    print(f"{'pinned' if pin else 'unpinned'}, Echo over plain TCP on loopback, median of {arguments.rounds} "
          f"runs of {arguments.duration} s")
    for depth, label in ((1, "sequential"), (64, "64 pipelined")):
        python, swift, raw = median[("python", depth)], median[("swift", depth)], median[("raw", depth)]
        print(f"  {label:13} python {python:9.0f}/s  swift {swift:9.0f}/s  socket+cbor2 {raw:9.0f}/s  "
              f"python÷swift {python / swift:.2f}  python÷socket+cbor2 {python / raw:.2f}")


if __name__ == "__main__":
    main()
