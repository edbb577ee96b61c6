#!/usr/bin/env python3
"""A client change's effect (BENCHMARKS.md, "Freed memory kept for the next chunks"): this
build's `atrium-transfer-bench get` and another build's, taking turns, each downloading the same
file over TLS through Files from one host (this build's atriumd), with each client's CPU time
per GiB. The host and its file are the same for both, so the ratio is the clients' alone.

    for p in atriumd atrium-transfer-bench Files; do swift build -c release --product $p; done
    git worktree add /tmp/before REV
    (cd /tmp/before && swift build -c release --product atrium-transfer-bench)
    python3 Benchmarks/client_ab.py --against /tmp/before/.build/release [--pinned]
"""
import argparse
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import transfers  # noqa: E402
from hosttools import RELEASE  # noqa: E402


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--against", required=True, help="a release folder holding another atrium-transfer-bench")
    parser.add_argument("--pinned", action="store_true", help="host and clients on core 0 (taskset -c 0)")
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--mib", type=int, default=512)
    arguments = parser.parse_args()
    pin = ["taskset", "-c", "0"] if arguments.pinned else []
    clients = {"against": os.path.join(os.path.abspath(arguments.against), "atrium-transfer-bench"),
               "this build": os.path.join(RELEASE, "atrium-transfer-bench")}
    scratch = tempfile.mkdtemp(prefix="atrium-client-ab-", dir="/var/tmp")
    output = tempfile.mkdtemp(prefix="atrium-client-ab-out-", dir="/dev/shm" if os.path.isdir("/dev/shm") else None)
    host = None
    try:
        folder = os.path.join(scratch, "served")
        os.makedirs(folder)
        with open(os.path.join(folder, "big.bin"), "wb") as file:
            for _ in range(arguments.mib):
                file.write(os.urandom(1 << 20))
        host, port = transfers.start_host(folder, scratch, pin)
        rates = {name: [] for name in clients}
        cpu = {name: [] for name in clients}
        for round in range(arguments.rounds):
            order = list(clients.items()) if round % 2 == 0 else list(reversed(list(clients.items())))
            for name, client in order:
                before = resource.getrusage(resource.RUSAGE_CHILDREN)
                moved, seconds = transfers.run([client, "get", str(port), "big.bin", os.path.join(output, "big"),
                                                "--tls"], pin)
                after = resource.getrusage(resource.RUSAGE_CHILDREN)
                os.unlink(os.path.join(output, "big"))
                rates[name].append(moved / seconds)
                used = after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime
                cpu[name].append(used / (moved / 2**30))
        print(f"{'pinned to core 0' if pin else 'unpinned'}, median of {arguments.rounds}, "
              f"{arguments.mib} MiB over TLS from one host:")
        for name in clients:
            print(f"  {name}: {statistics.median(rates[name]) / 2**20:.1f} MiB/s, "
                  f"client CPU {statistics.median(cpu[name]):.2f} s/GiB (process start included)")
        ratio = statistics.median(rates["this build"]) / statistics.median(rates["against"])
        print(f"  this build / against: {ratio:.2f}")
    finally:
        if host:
            host.kill()
        shutil.rmtree(scratch, ignore_errors=True)
        shutil.rmtree(output, ignore_errors=True)


if __name__ == "__main__":
    main()
