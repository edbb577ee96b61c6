#!/usr/bin/env python3
"""Repeats each of the cycles a host goes through all day (a client connecting and leaving,
a channel opened and closed, a request, a launch, a manifest reload that restarts a package's
worker) many times against a release atriumd, and prints how much the host's heap in use (its
own count, `atrium status`), resident memory (RSS) and open descriptors grew per cycle after a
warm-up. A host that keeps something per cycle shows it here as bytes per cycle that do not
go away; a few bytes either way are the allocator's noise.

    Benchmarks/churn.py [--cycles 20000] [--warmup N] [--reloads 1000] [--pinned] [--only TEXT]

One client at a time, nothing else running; the client is Python (cbor2), written from
docs/PROTOCOL.md, and over TLS for the TLS cycle (Python's ssl). The figures go to
BENCHMARKS.md.
"""
import argparse
import os
import shutil
import socket
import ssl
import subprocess
import sys
import tempfile
import time

from hosttools import ROOT, descriptors, read_live_bytes, rss_bytes as rss, start_host
from reloads import host_status, measure_reloads

sys.path.insert(0, os.path.join(ROOT, "Scripts"))
from contract_client import Client as ContractClient  # noqa: E402
ECHO = ("atrium.examples.echo", "atrium.echo")
ROMAN = ("5085ShawnHenry.RomanTestApp_jsjw7knzsgcce", "com.microsoft.test.cdppingpongservice")


class Client(ContractClient):
    """The independent client of Scripts/contract_client.py, with Nagle off and a hello."""

    def __init__(self, port):
        super().__init__(port)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def hello(self):
        self.send({"type": "hello", "version": 1, "clientId": "churn"})
        assert self.receive()["type"] == "welcome"

    def close(self):
        self.sock.close()


class TLSClient(Client):
    """The same client over TLS 1.3, presenting a certificate of its own (the host accepts any:
    trust comes from pairing, and this host does not require it on loopback)."""

    context = None

    def __init__(self, port):
        raw = socket.create_connection(("127.0.0.1", port), timeout=10)
        raw.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.sock = TLSClient.context.wrap_socket(raw)

    def close(self):
        try:
            self.sock.unwrap()  # close_notify both ways, as a polite client does
        except (OSError, ssl.SSLError):
            pass
        self.sock.close()


def tls_hello_close(port, state):
    client = TLSClient(port)
    client.hello()
    client.close()


def connect_close(port, state):
    """Connects, says nothing and half-closes; done when the host has closed its side, so that
    the host holds one such connection at a time (the other cycles wait for the host's answers,
    which keeps them close to that too)."""
    client = Client(port)
    client.sock.shutdown(socket.SHUT_WR)
    while client.sock.recv(4096):
        pass
    client.close()


def connect_close_at_once(port, state):
    """Connects and closes without waiting for anything: the client runs ahead of the host,
    which then meets a few hundred closed connections at once (and refuses those over the
    per-address limit). What this leaves is the high-water mark of those bursts."""
    Client(port).close()


def connect_hello_close(port, state):
    client = Client(port)
    client.hello()
    client.close()


def open_close(service):
    def cycle(port, state):
        client = state.setdefault("client", None)
        if client is None:
            client = state["client"] = Client(port)
            client.hello()
        channel = state["channel"] = state.get("channel", 0) + 1
        client.send({"type": "open", "channel": channel, "package": service[0], "service": service[1]})
        assert client.receive()["status"] == 0
        client.send({"type": "close", "channel": channel})
    return cycle


def request(service, message):
    def cycle(port, state):
        client = state.get("client")
        if client is None:
            client = state["client"] = Client(port)
            client.hello()
            client.send({"type": "open", "channel": 1, "package": service[0], "service": service[1]})
            assert client.receive()["status"] == 0
        state["id"] = state.get("id", 0) + 1
        client.send({"type": "request", "channel": 1, "id": state["id"], "message": message})
        answer = client.receive()
        assert answer["type"] == "response" and answer["status"] == 0, answer
    return cycle


def launch(port, state):
    client = state.get("client")
    if client is None:
        client = state["client"] = Client(port)
        client.hello()
    state["id"] = state.get("id", 0) + 1
    client.send({"type": "launch", "id": state["id"], "uri": "roman-test://churn"})
    answer = client.receive()
    assert answer["type"] == "launched" and answer["status"] == 1, answer


CYCLES = [
    ("connect, close (no hello)", connect_close),
    ("connect, close at once, not waiting for the host (no hello)", connect_close_at_once),
    ("connect, hello, welcome, close", connect_hello_close),
    ("TLS handshake, hello, welcome, close", tls_hello_close),
    ("open + close of a channel (Echo)", open_close(ECHO)),
    ("open + close of a channel (Roman ping)", open_close(ROMAN)),
    ("request → response (Echo)", request(ECHO, {"Type": "ping", "TargetId": "churn"})),
    ("request → response (Roman ping)", request(ROMAN, {"Type": "ping", "TargetId": "churn"})),
    ("launch of a plugin scheme (roman-test:)", launch),
]


def measure_cycles(cycles, arguments, warmup, pin):
    """Runs each of `cycles` (name, function) on one host, each after `warmup` of its own, and
    prints a row for each."""
    state_folder = tempfile.mkdtemp(prefix="atrium-churn-state-")
    # The local socket (given again after start_host's "off": the last one counts) is for
    # `atrium status`, whose heap figure is what the host has allocated, not what the
    # allocator keeps resident.
    status_socket = os.path.join(state_folder, "atriumd.sock")
    # What the host has allocated and not freed, counted exactly (Benchmarks/livebytes.c): a
    # leak shows there, whatever the allocator keeps.
    live_file = os.path.join(state_folder, "live-bytes")
    host, port = start_host(["--state-dir", state_folder, "--socket", status_socket], pin, live_bytes=live_file)
    # The TLS cycle's client identity: any certificate will do, so the host's own is used.
    TLSClient.context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    TLSClient.context.minimum_version = ssl.TLSVersion.TLSv1_3
    TLSClient.context.check_hostname = False
    TLSClient.context.verify_mode = ssl.CERT_NONE
    TLSClient.context.load_cert_chain(os.path.join(state_folder, "host-cert.pem"),
                                      os.path.join(state_folder, "host-key.pem"))
    try:
        for name, cycle in cycles:
            state = {}
            # Warm up for the cycles and for longer than the host's hello timeout (10 s): a
            # connection's timer is part of what it holds until then.
            warm_until = time.time() + 12
            count = 0
            while count < warmup or time.time() < warm_until:
                cycle(port, state)
                count += 1
            # Read before as after: past the hello timeout, so that neither side counts the
            # timers of connections still waiting for their hello.
            time.sleep(11)
            before_rss, before_fds = rss(host.pid), descriptors(host.pid)
            before_heap = host_status(status_socket).get("heapInUseBytes", 0)
            before_live = read_live_bytes(live_file)[0]
            began = time.time()
            give_up = began + 300
            done = 0
            while done < arguments.cycles and time.time() < give_up:
                cycle(port, state)
                done += 1
            if state.get("client"):
                state["client"].close()
            # Past the hello timeout (10 s): until then, each connection that never said hello
            # still has its timer, which is not something it left behind.
            time.sleep(11)
            after_rss, after_fds = rss(host.pid), descriptors(host.pid)
            after_heap = host_status(status_socket).get("heapInUseBytes", 0)
            after_live = read_live_bytes(live_file)[0]
            print(f"| {name} | {(after_live - before_live) / done:.1f} B | {(after_heap - before_heap) / done:.1f} B "
                  f"| {(after_rss - before_rss) / done:.1f} B "
                  f"| {after_fds - before_fds} | {time.time() - began:.1f} |")
            sys.stdout.flush()
    finally:
        host.terminate()
        host.wait()
        shutil.rmtree(state_folder, ignore_errors=True)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--cycles", type=int, default=20000, help="cycles measured per kind (default 20000)")
    parser.add_argument("--reloads", type=int, default=1000,
                        help="manifest reloads measured per kind, after as many of warm-up, each asked for "
                             "with SIGHUP (default 1000; 0 leaves them out)")
    parser.add_argument("--warmup", type=int, default=None,
                        help="cycles of each kind before the measured ones (default as many as --cycles, and at "
                             "least 12 s): the allocator's pages settle at the busiest the cycles make them")
    parser.add_argument("--pinned", action="store_true", help="run the host and the client on core 0")
    parser.add_argument("--only", metavar="TEXT", default=None,
                        help="run only the cycles whose name contains TEXT (for example 'no hello', 'TLS', "
                             "'request', 'reload')")
    arguments = parser.parse_args()
    cycles = [(name, cycle) for name, cycle in CYCLES if arguments.only is None or arguments.only in name]
    with_reloads = arguments.reloads > 0 and (arguments.only is None or arguments.only in "manifest reload")
    if not cycles and not with_reloads:
        parser.error(f"no cycle's name contains {arguments.only!r}: "
                     + "; ".join(name for name, _ in CYCLES + [("manifest reload", None)]))
    if arguments.pinned:
        os.sched_setaffinity(0, {0})
    pin = ["taskset", "-c", "0"] if arguments.pinned else []
    subprocess.run(["swift", "build", "-c", "release"], cwd=ROOT, check=True, stdout=sys.stderr)
    warmup = arguments.warmup if arguments.warmup is not None else arguments.cycles
    print(f"## Churn: {arguments.cycles} cycles of each kind after at least {warmup} (and 12 s) of warm-up "
          f"({'pinned to core 0' if arguments.pinned else 'unpinned'})\n")
    print("| cycle | allocated, growth per cycle | heap in use (glibc), growth per cycle | RSS growth per cycle "
          "| descriptor growth | seconds |")
    print("|---|---|---|---|---|---|")
    if cycles:
        measure_cycles(cycles, arguments, warmup, pin)
    # Reloads on a host of their own, which logs each one done.
    if with_reloads:
        for kind, count, per_reload, live, heap, fds, fds_after, workers, worker_objects, plugin_objects, _ in \
                measure_reloads(arguments.reloads, pin, warmup=arguments.reloads, by_signal=True):
            restarts = "; its worker restarts" if "worker" in kind else ""
            print(f"| manifest reload, the package {kind}{restarts} ({count} reloads; worker processes left "
                  f"{workers}, backends in memory {worker_objects} + {plugin_objects}) | {live:.1f} B | {heap:.1f} B "
                  f"| {per_reload:.1f} B | {fds_after - fds} | |")
            sys.stdout.flush()


if __name__ == "__main__":
    main()
