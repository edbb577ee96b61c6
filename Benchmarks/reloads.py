#!/usr/bin/env python3
"""What a manifest reload leaves behind: a release atriumd with the reference manifests and one
more package, whose manifest is rewritten (its config changed) for each reload, so that every
reload restarts that package. Prints the host's resident memory (RSS) and open descriptors
before and after, per reload, with the package in a worker process and then in process, how
many worker processes are left running, and what the host itself still holds (`atrium
status`: backends retired by a reload and not yet freed).

    Benchmarks/reloads.py [--reloads 1000] [--warmup N] [--only worker|process] [--rss-only]
                          [--by watcher|signal] [--checkpoints N]

With `--by signal` the host runs with `--no-watch` and each reload is asked for with SIGHUP
after the manifest is written, which skips the watcher's 300 ms of settling: long runs (10,000
reloads) then take minutes rather than hours. `--checkpoints N` reads the host every N measured
reloads too, so that a run shows whether what it keeps grows with the reloads or levels off.

Benchmarks/churn.py runs the same after its other cycles. The figures go to BENCHMARKS.md.
"""
import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time

from hosttools import (RELEASE, ROOT, copy_of_reference_manifests, counting_allocations, descriptors, mapping_growth,
                       read_live_bytes, resident_mappings, rss_bytes)


def host_status(socket_path):
    """The host's own counts (`atrium status --json` over its local socket)."""
    answer = subprocess.run([os.path.join(RELEASE, "atrium"), "status", "--json", "--socket", socket_path],
                            capture_output=True, text=True, timeout=30)
    return json.loads(answer.stdout) if answer.returncode == 0 else {}


def measure_reloads(reloads, pin=(), warmup=None, kinds=(True, False), count_allocations=True, by_signal=False,
                    checkpoint=None, on_checkpoint=None):
    """Yields (kind, reloads, RSS bytes per reload, bytes allocated and not freed per reload,
    heap bytes in use per reload (glibc's count), descriptors before, after, worker processes
    left, workersInMemory, pluginsInMemory, anonymous RSS bytes per reload) for the package in a
    worker, then in process. With `checkpoint`, calls `on_checkpoint(kind, reloads so far, RSS
    growth, anonymous RSS growth, allocated growth, heap growth)` (bytes since the measured
    reloads began, and which of the host's mappings grew, as text) every `checkpoint` measured
    reloads."""
    folder = copy_of_reference_manifests()
    scratch = tempfile.mkdtemp(prefix="atrium-reloads-")
    socket_path = os.path.join(scratch, "atriumd.sock")
    # Counting every allocation (livebytes.c) tells a leak from the allocator's state, but it
    # moves RSS too: --rss-only measures the host as it runs.
    live_file = os.path.join(scratch, "live-bytes") if count_allocations else None

    def write(version, isolated):
        manifest = {"manifestVersion": 1, "package": "bench.reloaded", "library": os.path.join(RELEASE, "libEcho.so"),
                    "services": [{"name": "atrium.echo", "supportsRemoteSystems": True}], "config": {"v": version}}
        if isolated:
            manifest["isolation"] = "process"
        # Written whole, then renamed into place: one change for the watcher.
        next_file = os.path.join(folder, ".next")
        with open(next_file, "w") as file:
            json.dump(manifest, file)
        os.rename(next_file, os.path.join(folder, "zz-reloaded.json"))

    write(0, True)
    # The log (standard error) says when each reload is done.
    host = subprocess.Popen(
        list(pin) + [os.path.join(RELEASE, "atriumd"), "--manifests", folder, "--listen", "127.0.0.1:0", "--socket",
                     socket_path, "--state-dir", scratch, "--log-level", "notice"]
        + (["--no-watch"] if by_signal else []),
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=counting_allocations(live_file))
    reloaded = [0]

    def read():
        for line in host.stdout:
            if "manifests reloaded" in line:
                reloaded[0] += 1
    threading.Thread(target=read, daemon=True).start()

    def cycle(count, isolated, base):
        for index in range(count):
            wanted = reloaded[0] + 1
            write(base + index, isolated)
            if by_signal:
                host.send_signal(signal.SIGHUP)
            deadline = time.time() + 5
            while reloaded[0] < wanted and time.time() < deadline:
                time.sleep(0.005)
            if reloaded[0] < wanted:
                # Every figure is per reload: one that did not happen would make them wrong.
                sys.exit(f"reload {index + 1} of {count} did not happen within 5 s")
    try:
        # Until the host answers, it may not have its SIGHUP handler yet (and ignores SIGHUP).
        deadline = time.time() + 30
        while not host_status(socket_path) and time.time() < deadline:
            time.sleep(0.1)
        for isolated in kinds:
            base = 1_000_000 if isolated else 2_000_000
            cycle(warmup if warmup is not None else max(reloads // 10, 20), isolated, base)  # warm-up
            time.sleep(11)  # a retired worker's start timer (10 s) lets go of it
            # The host's status first: the first `atrium status` brings the code that answers it
            # into memory (RSS counts the program's pages too), which is not the reloads' doing.
            heap = host_status(socket_path).get("heapInUseBytes", 0)
            rss, anon, fds = rss_bytes(host.pid), rss_bytes(host.pid, "RssAnon"), descriptors(host.pid)
            live = read_live_bytes(live_file)[0] if live_file else 0
            mappings = resident_mappings(host.pid)
            done = 0
            while done < reloads:  # configs unlike every warm-up one
                step = min(checkpoint or reloads, reloads - done)
                cycle(step, isolated, base + 500_000 + done)
                done += step
                time.sleep(11)
                if checkpoint and on_checkpoint:
                    on_checkpoint("in a worker process" if isolated else "in process", done, rss_bytes(host.pid) - rss,
                                  rss_bytes(host.pid, "RssAnon") - anon,
                                  (read_live_bytes(live_file)[0] - live) if live_file else 0,
                                  host_status(socket_path).get("heapInUseBytes", 0) - heap,
                                  mapping_growth(mappings, resident_mappings(host.pid)))
            rss_after, anon_after, fds_after = rss_bytes(host.pid), rss_bytes(host.pid, "RssAnon"), descriptors(host.pid)
            workers = subprocess.run(["pgrep", "-P", str(host.pid)], capture_output=True, text=True).stdout.split()
            status = host_status(socket_path)
            live_after = read_live_bytes(live_file)[0] if live_file else 0
            yield ("in a worker process" if isolated else "in process", reloads, (rss_after - rss) / reloads,
                   (live_after - live) / reloads, (status.get("heapInUseBytes", 0) - heap) / reloads, fds, fds_after, len(workers),
                   status.get("workersInMemory"), status.get("pluginsInMemory"), (anon_after - anon) / reloads)
    finally:
        host.terminate()
        host.wait()
        shutil.rmtree(folder, ignore_errors=True)
        shutil.rmtree(scratch, ignore_errors=True)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--reloads", type=int, default=1000, help="reloads measured for each kind (default 1000)")
    parser.add_argument("--warmup", type=int, default=None,
                        help="reloads before the measured ones (default a tenth of --reloads, at least 20)")
    parser.add_argument("--only", choices=["worker", "process"], default=None,
                        help="measure the package only in a worker process, or only in process (default both)")
    parser.add_argument("--rss-only", action="store_true",
                        help="run the host without counting its allocations (Benchmarks/livebytes.c), which "
                             "moves its RSS too: the allocated column then reads 0")
    parser.add_argument("--by", choices=["watcher", "signal"], default="watcher",
                        help="how each reload is asked for: the folder's watcher (300 ms of settling each), or "
                             "SIGHUP to a host run with --no-watch (default watcher)")
    parser.add_argument("--checkpoints", type=int, default=None, metavar="N",
                        help="also print what the host holds, and which of its mappings grew, every N measured "
                             "reloads (each reading waits 11 s)")
    arguments = parser.parse_args()
    if arguments.reloads < 1 or (arguments.warmup is not None and arguments.warmup < 0) \
            or (arguments.checkpoints is not None and arguments.checkpoints < 1):
        parser.error("--reloads and --checkpoints take 1 or more, --warmup 0 or more")

    def checkpoint(kind, done, rss, anon, live, heap, mappings):
        print(f"  {kind}, after {done} reloads: RSS {rss / 1024:+.1f} KiB ({rss / done:.1f} B a reload), "
              f"of it anonymous {anon / 1024:+.1f} KiB ({anon / done:.1f} B a reload); allocated "
              f"{live / 1024:+.1f} KiB, heap in use {heap / 1024:+.1f} KiB; by mapping: {mappings}")
        sys.stdout.flush()
    kinds = {"worker": (True,), "process": (False,)}.get(arguments.only, (True, False))
    subprocess.run(["swift", "build", "-c", "release"], cwd=ROOT, check=True, stdout=sys.stderr)
    for kind, count, per_reload, live, heap_per_reload, fds, fds_after, workers, worker_objects, plugin_objects, anon in \
            measure_reloads(arguments.reloads, warmup=arguments.warmup, kinds=kinds,
                            count_allocations=not arguments.rss_only, by_signal=arguments.by == "signal",
                            checkpoint=arguments.checkpoints, on_checkpoint=checkpoint):
        print(f"- {kind}: {count} reloads: {live:.1f} B allocated and not freed, {heap_per_reload:.1f} B of heap in "
              f"use (glibc) and {per_reload:.1f} B of RSS a reload ({anon:.1f} B of it anonymous), descriptors {fds} -> {fds_after}, "
              f"worker processes left: {workers}; the host holds {worker_objects} worker backends and "
              f"{plugin_objects} plugin instances")
        sys.stdout.flush()


if __name__ == "__main__":
    main()
