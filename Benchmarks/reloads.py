#!/usr/bin/env python3
"""What a manifest reload leaves behind: a release atriumd with the reference manifests and one
more package, whose manifest is rewritten (its config changed) for each reload, so that every
reload restarts that package. Prints the host's resident memory (RSS) and open descriptors
before and after, per reload, with the package in a worker process and then in process, and how
many worker processes are left running.

    Benchmarks/reloads.py [--reloads 200]

The figures go to BENCHMARKS.md.
"""
import argparse
import json
import os
import shutil
import subprocess
import sys
import threading
import time

from hosttools import RELEASE, ROOT, copy_of_reference_manifests, descriptors, rss_bytes


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--reloads", type=int, default=200, help="reloads measured for each kind (default 200)")
    arguments = parser.parse_args()
    subprocess.run(["swift", "build", "-c", "release"], cwd=ROOT, check=True, stdout=sys.stderr)
    folder = copy_of_reference_manifests()

    def write(version, isolated):
        manifest = {"manifestVersion": 1, "package": "bench.reloaded", "library": os.path.join(RELEASE, "libEcho.so"),
                    "services": [{"name": "atrium.echo", "supportsRemoteSystems": True}], "config": {"v": version}}
        if isolated:
            manifest["isolation"] = "process"
        # Written whole, then renamed into place: one change for the watcher.
        scratch = os.path.join(folder, ".next")
        with open(scratch, "w") as file:
            json.dump(manifest, file)
        os.rename(scratch, os.path.join(folder, "zz-reloaded.json"))

    write(0, True)
    # The log (standard error) says when each reload is done.
    host = subprocess.Popen(
        [os.path.join(RELEASE, "atriumd"), "--manifests", folder, "--listen", "127.0.0.1:0", "--socket", "off",
         "--log-level", "notice"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    reloads = [0]

    def read():
        for line in host.stdout:
            if "manifests reloaded" in line:
                reloads[0] += 1
    threading.Thread(target=read, daemon=True).start()

    def cycle(count, isolated, base):
        for index in range(count):
            wanted = reloads[0] + 1
            write(base + index, isolated)
            deadline = time.time() + 5
            while reloads[0] < wanted and time.time() < deadline:
                time.sleep(0.01)
    try:
        for isolated in (True, False):
            base = 1_000_000 if isolated else 2_000_000
            cycle(20, isolated, base)  # warm-up
            time.sleep(1)
            rss, fds = rss_bytes(host.pid), descriptors(host.pid)
            cycle(arguments.reloads, isolated, base + 100)
            # Start timers of retired workers (10 s) let go of them.
            time.sleep(11)
            rss_after, fds_after = rss_bytes(host.pid), descriptors(host.pid)
            workers = subprocess.run(["pgrep", "-P", str(host.pid)], capture_output=True, text=True).stdout.split()
            kind = "in a worker process" if isolated else "in process"
            print(f"- {kind}: {arguments.reloads} reloads: RSS {rss / 1048576:.1f} -> {rss_after / 1048576:.1f} MiB "
                  f"({(rss_after - rss) / arguments.reloads:.0f} B a reload), descriptors {fds} -> {fds_after}, "
                  f"worker processes left: {len(workers)}")
            sys.stdout.flush()
    finally:
        host.terminate()
        host.wait()
        shutil.rmtree(folder)


if __name__ == "__main__":
    main()
