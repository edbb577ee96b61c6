#!/usr/bin/env python3
"""A host change's effect on large transfers (BENCHMARKS.md, "Freed memory kept in the host"):
this build's atriumd and another build's, each serving Files from the same folder, taking turns;
one client (this build's `atrium-transfer-bench`) downloads the same file over TLS from each,
and uploads it to each, with each host's CPU time per GiB. The client and the file are the
same for both, so the ratios are the hosts' alone.

    for p in atriumd atrium-transfer-bench Files; do swift build -c release --product $p; done
    git worktree add /tmp/before REV
    (cd /tmp/before && swift build -c release --product atriumd && swift build -c release --product Files)
    python3 Benchmarks/host_ab.py --against /tmp/before/.build/release [--pinned]
"""
import argparse
import os
import shutil
import statistics
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import transfers  # noqa: E402
from hosttools import RELEASE  # noqa: E402


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--against", required=True, help="a release folder holding another atriumd and libFiles.so")
    parser.add_argument("--pinned", action="store_true", help="hosts and client on core 0 (taskset -c 0)")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--mib", type=int, default=512)
    arguments = parser.parse_args()
    pin = ["taskset", "-c", "0"] if arguments.pinned else []
    bench = os.path.join(RELEASE, "atrium-transfer-bench")
    builds = {"against": os.path.abspath(arguments.against), "this build": RELEASE}
    for name, folder in builds.items():
        for program in ("atriumd", "libFiles.so"):
            if not os.path.exists(os.path.join(folder, program)):
                sys.exit(f"{name}: {program} is missing in {folder}")
    scratch = tempfile.mkdtemp(prefix="atrium-host-ab-", dir="/var/tmp")
    output = tempfile.mkdtemp(prefix="atrium-host-ab-out-", dir="/dev/shm" if os.path.isdir("/dev/shm") else None)
    hosts = {}
    try:
        folder = os.path.join(scratch, "served")
        os.makedirs(folder)
        source = os.path.join(folder, "big.bin")
        with open(source, "wb") as file:
            for _ in range(arguments.mib):
                file.write(os.urandom(1 << 20))
        for name, release in builds.items():
            state = os.path.join(scratch, name.replace(" ", "-"))
            os.makedirs(state)
            transfers.RELEASE = release
            hosts[name] = transfers.start_host(folder, state, pin)
        transfers.RELEASE = RELEASE
        rates = {(name, way): [] for name in hosts for way in ("down", "up")}
        cpu = {(name, way): [] for name in hosts for way in ("down", "up")}
        received = os.path.join(output, "big")
        for round in range(arguments.rounds):
            order = list(hosts.items()) if round % 2 == 0 else list(reversed(list(hosts.items())))
            for name, (host, port) in order:
                for way, command in (("down", [bench, "get", str(port), "big.bin", received, "--tls"]),
                                     ("up", [bench, "put", str(port), source, "--tls"])):
                    before = transfers.cpu_seconds(host.pid)
                    moved, seconds = transfers.run(command, pin)
                    cpu[(name, way)].append((transfers.cpu_seconds(host.pid) - before) / (moved / 2**30))
                    rates[(name, way)].append(moved / seconds)
                    if os.path.exists(received):
                        os.unlink(received)
                    for stored in os.listdir(folder):
                        if stored.startswith("up-"):
                            os.unlink(os.path.join(folder, stored))
        rate = {key: statistics.median(values) for key, values in rates.items()}
        seconds = {key: statistics.median(values) for key, values in cpu.items()}
        print(f"{'pinned to core 0' if pin else 'unpinned'}, median of {arguments.rounds}, "
              f"{arguments.mib} MiB over TLS, one client:")
        for name in hosts:
            print(f"  {name}: download {rate[(name, 'down')] / 2**20:.0f} MiB/s (host {seconds[(name, 'down')]:.2f} "
                  f"CPU s/GiB), upload {rate[(name, 'up')] / 2**20:.0f} MiB/s (host {seconds[(name, 'up')]:.2f} "
                  f"CPU s/GiB), upload / download {rate[(name, 'up')] / rate[(name, 'down')]:.2f}")
        print(f"  this build / against: download {rate[('this build', 'down')] / rate[('against', 'down')]:.2f}, "
              f"upload {rate[('this build', 'up')] / rate[('against', 'up')]:.2f}")
    finally:
        for host, _ in hosts.values():
            host.kill()
        shutil.rmtree(scratch, ignore_errors=True)
        shutil.rmtree(output, ignore_errors=True)


if __name__ == "__main__":
    main()
