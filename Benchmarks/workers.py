#!/usr/bin/env python3
"""What a worker process costs: Echo in process against Echo in a worker process
(`"isolation": "process"`), served by the same release atriumd, in alternating rounds; a
worker's memory when idle; and the time from a worker's crash to its package answering again.
Beside them, the floor under what a worker adds: two bare processes passing a message back and
forth over a pipe each way, as a worker's links do (Benchmarks/ipcfloor.c, built with cc), and
for comparison over a Unix socket pair (the links before) and through shared memory with a
futex and an eventfd to wake each side (a ring's least cost); and the same hop with a third
process, as a request to a worker has one: a bare client asking a bare forwarder over TCP, which
answers itself (direct) or through a bare answerer over pipes (relay).

    Benchmarks/workers.py [--pinned] [--duration SECONDS] [--previous ATRIUMD]

With --pinned, the host (and so its workers) and the load generator run on core 0
(taskset -c 0). With --previous, another build of atriumd (an earlier commit's) serves the
same worker package too, and the run measures only that: this build's worker against the
other's, in alternating rounds, the cost or gain of a change. The figures go to BENCHMARKS.md.
"""
import argparse
import json
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time

from compare import CONFIGURATIONS, ROUNDS, alternating, bench, median_result
from hosttools import RELEASE, ROOT, copy_of_reference_manifests, rss_bytes, start_host

sys.path.insert(0, os.path.join(ROOT, "Scripts"))
from contract_client import Client  # noqa: E402

WORKER_ECHO = "atrium.examples.echo.worker"


def manifests_with_worker_echo():
    """The reference manifests, plus Echo again as a package of its own in a worker."""
    folder = copy_of_reference_manifests()
    with open(os.path.join(folder, "echo-worker.json"), "w") as manifest:
        json.dump({"manifestVersion": 1, "package": WORKER_ECHO, "library": os.path.join(RELEASE, "libEcho.so"),
                   "isolation": "process", "services": [{"name": "atrium.echo", "supportsRemoteSystems": True}]},
                  manifest)
    return folder


def worker_pids(host_pid):
    children = subprocess.run(["pgrep", "-P", str(host_pid)], capture_output=True, text=True).stdout.split()
    return [int(pid) for pid in children]


def answers(port, channel):
    """Whether the worker's Echo opens and answers, on a fresh connection."""
    client = Client(port)
    client.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    try:
        client.send({"type": "hello", "version": 1, "clientId": "workers-bench"})
        client.receive()
        client.send({"type": "open", "channel": channel, "service": "atrium.echo", "package": WORKER_ECHO})
        if client.receive().get("status") != 0:
            return False
        client.send({"type": "request", "channel": channel, "id": 1, "message": {"n": 1}})
        return client.receive().get("status") == 0
    finally:
        client.sock.close()


def crash_to_answer(port, host_pid):
    """Kills the worker with SIGSEGV and times how long until its package answers again."""
    (pid,) = worker_pids(host_pid)
    began = time.perf_counter()
    os.kill(pid, signal.SIGSEGV)
    channel = 1
    while time.perf_counter() - began < 30:
        channel += 1
        if answers(port, channel):
            return (time.perf_counter() - began) * 1000
        time.sleep(0.005)
    sys.exit("the worker did not come back within 30 s")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--pinned", action="store_true", help="run everything on core 0 (taskset -c 0)")
    parser.add_argument("--duration", type=float, default=4, help="seconds per measurement (default 4)")
    parser.add_argument("--previous", metavar="ATRIUMD",
                        help="another build of atriumd to measure Echo in a worker against, in the same rounds")
    arguments = parser.parse_args()
    pin = ["taskset", "-c", "0"] if arguments.pinned else []
    subprocess.run(["swift", "build", "-c", "release"], cwd=ROOT, check=True, stdout=sys.stderr)
    folder = manifests_with_worker_echo()
    host, port = start_host(
        ["--max-in-flight", "1024", "--max-connections", "4000", "--max-connections-per-peer", "4000"], pin,
        manifests=folder)
    previous, previous_port = None, None
    if arguments.previous:
        previous, previous_port = start_host(
            ["--max-in-flight", "1024", "--max-connections", "4000", "--max-connections-per-peer", "4000"], pin,
            manifests=folder, atriumd=arguments.previous)
    try:
        mode = "pinned to core 0" if arguments.pinned else "unpinned"
        if previous:
            compare_with_previous(arguments, port, previous_port, pin, mode)
            return
        pair_table(
            f"## Echo in a worker process against Echo in process, {mode}, {arguments.duration:g} s each",
            "in process", "worker", "worker ÷ in process",
            lambda package, connections, pipeline: bench(
                port, connections, pipeline, arguments.duration / ROUNDS, pin, ["--package", package]),
            "atrium.examples.echo", WORKER_ECHO)
        floors = ipc_floors(pin)
        if floors is not None:
            print(f"\n- The floor under the sequential difference: two bare processes passing 100 bytes back and "
                  f"forth over a pipe each way (Benchmarks/ipcfloor.c), {mode}: {floors['pipes']:.1f} µs a round "
                  f"trip; over a Unix socket pair {floors['socketpair']:.1f} µs, through shared memory (futex and "
                  f"eventfd) {floors['ring']:.1f} µs")
            print(f"- The same with a client: a bare client asking a bare forwarder over TCP, {mode}: "
                  f"{floors['direct']:.1f} µs a round trip when the forwarder answers itself, "
                  f"{floors['relay']:.1f} µs when it passes the question to a bare answerer over pipes: the hop "
                  f"to a third process adds {floors['relay'] - floors['direct']:+.1f} µs, the floor under the "
                  f"sequential difference above")
        (worker_pid,) = worker_pids(host.pid)
        time.sleep(1)
        print(f"\n## A worker's memory and restarts ({mode})\n")
        print(f"- Echo's worker process, RSS after the runs above: {rss_bytes(worker_pid) / 1048576:.1f} MiB "
              f"(atriumd itself: {rss_bytes(host.pid) / 1048576:.1f} MiB)")
        times = [crash_to_answer(port, host.pid) for _ in range(3)]
        delays = [250, 500, 1000]
        print("- from SIGSEGV to the package answering again, three crashes in a row: "
              + ", ".join(f"{t:.0f} ms (of which {d} ms is the restart delay)" for t, d in zip(times, delays)))
        print(f"- so a restart itself (start the process, load the plugin, first answer) takes about "
              f"{statistics.median(t - d for t, d in zip(times, delays)):.0f} ms")
    finally:
        for process in [host, previous]:
            if process:
                process.terminate()
                process.wait()
        shutil.rmtree(folder)


def ipc_floors(pin):
    """Microseconds a round trip between two bare processes (ipcfloor.c, built with cc), by the
    way the bytes travel (pipes, socketpair, ring), and through a forwarder (direct, relay), or
    None without a C compiler."""
    compiler = shutil.which("cc")
    if compiler is None:
        print("\n- (no C compiler: the floor is not measured)")
        return None
    with tempfile.TemporaryDirectory(prefix="atrium-ipcfloor-") as folder:
        program = os.path.join(folder, "ipcfloor")
        subprocess.run([compiler, "-O2", "-o", program, os.path.join(ROOT, "Benchmarks", "ipcfloor.c")], check=True)
        def measure(mode):
            return float(subprocess.run(pin + [program, "100000", mode], capture_output=True, text=True,
                                        check=True).stdout)
        floors = {mode: measure(mode) for mode in ["pipes", "socketpair", "ring"]}
        # Their difference is the figure: measured in three alternating pairs, the median of each.
        hops = {"direct": [], "relay": []}
        for n in range(3):
            for mode in ["direct", "relay"] if n % 2 == 0 else ["relay", "direct"]:
                hops[mode].append(measure(mode))
        floors.update({mode: statistics.median(figures) for mode, figures in hops.items()})
        return floors


def pair_table(heading, a, b, ratio, measure, first, second):
    """Prints `heading` and a table of CONFIGURATIONS, each measured in alternating rounds with
    `first` (the `a` columns) and `second` (the `b` columns): throughput b ÷ a, p50 b - a."""
    print(heading + "\n")
    print(f"| configuration | {a} req/s | {b} req/s | {ratio} | {a} p50 µs | {b} p50 µs | p50 difference µs "
          f"| {a} p99 µs | {b} p99 µs |")
    print("|---|---|---|---|---|---|---|---|---|")
    for name, connections, pipeline in CONFIGURATIONS:
        rounds = alternating(lambda target: measure(target, connections, pipeline), first, second)
        x, y = median_result([r[0] for r in rounds]), median_result([r[1] for r in rounds])
        print(f"| {name} | {x['requestsPerSecond']:.0f} | {y['requestsPerSecond']:.0f} "
              f"| {y['requestsPerSecond'] / x['requestsPerSecond']:.2f} "
              f"| {x['p50Microseconds']:.1f} | {y['p50Microseconds']:.1f} "
              f"| {y['p50Microseconds'] - x['p50Microseconds']:+.1f} "
              f"| {x['p99Microseconds']:.1f} | {y['p99Microseconds']:.1f} |")
        sys.stdout.flush()


def compare_with_previous(arguments, port, previous_port, pin, mode):
    """Echo in a worker process, this build's host against the previous build's."""
    pair_table(
        f"## Echo in a worker process, this atriumd against {arguments.previous}, {mode}, "
        f"{arguments.duration:g} s each",
        "previous", "this", "this ÷ previous",
        lambda target, connections, pipeline: bench(
            target, connections, pipeline, arguments.duration / ROUNDS, pin, ["--package", WORKER_ECHO]),
        previous_port, port)


if __name__ == "__main__":
    main()
