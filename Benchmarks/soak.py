#!/usr/bin/env python3
"""A soak of a release atriumd (not a timed test): it holds many connections with hello done,
then sends many requests over 64 connections, and prints the host's resident memory (RSS) and
open descriptors before, at the peak and after each phase.

    Benchmarks/soak.py [--connections 10000] [--requests 1000000] [--pinned]

Builds the release products, starts atriumd with the reference services on a free port (its
connection limits raised to hold the soak's connections, all from 127.0.0.1), holds
--connections idle connections for a few seconds with `atrium bench --idle`, then runs
`atrium bench` against Echo (64 connections, 16 requests in flight on each) until
--requests round trips are done. Every phase is bounded in time. The figures go to
BENCHMARKS.md.
"""
import argparse
import json
import os
import resource
import subprocess
import sys
import time

from hosttools import RELEASE, ROOT, descriptors, rss_bytes, start_host


def sample(pid):
    return rss_bytes(pid) // 1024, descriptors(pid)


def line(name, before, peak, after):
    print(f"| {name} | {before[0] / 1024:.1f} MiB, {before[1]} | {peak[0] / 1024:.1f} MiB, {peak[1]} "
          f"| {after[0] / 1024:.1f} MiB, {after[1]} | {(after[0] - before[0]) / max(before[0], 1) * 100:+.1f}% |")
    sys.stdout.flush()


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--connections", type=int, default=10000, help="idle connections to hold (default 10000)")
    parser.add_argument("--requests", type=int, default=1000000, help="round trips to send (default 1000000)")
    parser.add_argument("--pinned", action="store_true", help="run the host and the load on core 0")
    arguments = parser.parse_args()
    pin = ["taskset", "-c", "0"] if arguments.pinned else []

    subprocess.run(["swift", "build", "-c", "release"], cwd=ROOT, check=True, stdout=sys.stderr)
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    needed = arguments.connections + 512
    if hard < needed:
        sys.exit(f"the descriptor limit ({hard}) cannot hold {arguments.connections} connections: raise it (ulimit -Hn)")
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))

    limit = str(arguments.connections + 200)
    host, port = start_host(["--max-connections", limit, "--max-connections-per-peer", limit], pin)
    try:
        time.sleep(1)
        print(f"## Soak: {arguments.connections} connections, then {arguments.requests} requests "
              f"({'pinned to core 0' if arguments.pinned else 'unpinned'})\n")
        print("| phase | before (RSS, descriptors) | peak | after | RSS after against before |")
        print("|---|---|---|---|---|")
        start = sample(host.pid)

        # Phase 1: hold the connections (hello done) for 6 s, sampling the peak.
        before = sample(host.pid)
        holder = subprocess.Popen(
            pin + [os.path.join(RELEASE, "atrium"), "bench", f"127.0.0.1:{port}", "--insecure", "--idle", "--connections",
                   str(arguments.connections), "--duration", "6", "--timeout", "60"],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        holder.stdout.readline()  # "holding N idle connections ..." once all said hello
        peak = before
        finish = time.time() + 6
        while time.time() < finish and holder.poll() is None:
            now = sample(host.pid)
            peak = max(peak, now)
            time.sleep(0.2)
        holder.wait(timeout=120)
        time.sleep(5)  # the host gives memory back a few seconds after a burst
        after = sample(host.pid)
        line(f"{arguments.connections} idle connections", before, peak, after)
        per_connection = (peak[0] - before[0]) * 1024 / arguments.connections

        # Phase 2: the requests, in rounds of bench until the count is reached (at most 10 min).
        before = after
        peak = before
        done = 0
        failed = 0
        give_up = time.time() + 600
        while done < arguments.requests and time.time() < give_up:
            result = subprocess.run(
                pin + [os.path.join(RELEASE, "atrium"), "bench", f"127.0.0.1:{port}", "--insecure", "--connections", "64",
                       "--pipeline", "16", "--duration", "5", "--json-output"],
                capture_output=True, text=True, check=True)
            outcome = json.loads(result.stdout)
            done += outcome["completed"]
            failed += outcome["failed"]
            peak = max(peak, sample(host.pid))
        time.sleep(5)
        after = sample(host.pid)
        line(f"{done} requests over 64 connections ({failed} failed)", before, peak, after)

        end = sample(host.pid)
        print(f"\n- memory per idle connection at the peak: {per_connection / 1024:.1f} KiB")
        print(f"- RSS at the end against the start: {start[0] / 1024:.1f} MiB → {end[0] / 1024:.1f} MiB "
              f"({(end[0] - start[0]) / start[0] * 100:+.1f}%); descriptors {start[1]} → {end[1]}")
    finally:
        host.terminate()
        host.wait()


if __name__ == "__main__":
    main()
