#!/usr/bin/env python3
"""Small files against one large one (BENCHMARKS.md, "Small files"): 1,000 files of 100 KiB
fetched one after another on one connection through the Files reference service (TLS on
loopback), against one file of --big-mib fetched alone from the same host, measured alternately;
with the host's CPU time per small file, by thread (counted until the host is idle again, so
that work it does after the last file, its journal's writes, counts too). Every measurement
starts with the hosts idle.

Each small-file run is made twice, taking turns: with an `attach` after each answer (two round
trips a file), and with each download started by its request (`--started`: one round trip).

With --against DIR, a second host built elsewhere (DIR holds its release `atriumd` and
`libFiles.so`, e.g. a worktree of an earlier commit) is measured in the same run, the two taking
turns, with the same client: a change's effect as a ratio of two hosts measured together.

    for p in atriumd atrium-transfer-bench Files; do swift build -c release --product $p; done
    python3 Benchmarks/small_files.py --pinned
    python3 Benchmarks/small_files.py --pinned --against /tmp/before/.build/release
    python3 Benchmarks/small_files.py --delay-ms 1 --count 300   # a round trip of 2 ms more

The same files are also fetched from nginx over HTTPS by one curl on one kept-alive connection
(Debian's packages, what a user would pick instead): its small files against its own single file
say what the goal asks of any stack on this machine.

With --delay-ms D, the client reaches each host through Benchmarks/delay_proxy.py, which holds
every byte D ms each way (a network's round trip, where the kernel has no netem); the proxy is
not pinned, as a network is not on the machine's cores.
"""
import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import transfers  # noqa: E402
from hosttools import RELEASE  # noqa: E402


def thread_seconds(pid):
    """CPU seconds of each thread name of process `pid`."""
    ticks = os.sysconf("SC_CLK_TCK")
    seconds = {}
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{tid}/stat") as file:
                text = file.read()
        except OSError:
            continue
        name = text[text.index("(") + 1:text.rindex(")")]
        fields = text[text.rindex(")") + 2:].split()
        seconds[name] = seconds.get(name, 0) + (int(fields[11]) + int(fields[12])) / ticks
    return seconds


def settle(pids, limit=60):
    """Waits (at most `limit` s) until no host uses CPU for half a second: work one host left
    behind (its journal's writes, say) is not counted against the next measurement."""
    import time
    deadline = time.time() + limit
    last = None
    while time.time() < deadline:
        now = [sum(thread_seconds(pid).values()) for pid in pids]
        if now == last:
            return
        last = now
        time.sleep(0.5)


def curl_many(port, count, output, pin):
    """The small files from nginx, one after another on one connection (one curl, one URL and
    one output each): bytes a second."""
    into = os.path.join(output, "nginx-many")
    os.makedirs(into)
    listing = os.path.join(output, "nginx-many.curl")
    with open(listing, "w") as file:
        for index in range(count):
            file.write(f'url = "https://127.0.0.1:{port}/small{index}"\noutput = "{into}/{index}"\n')
    import time
    start = time.monotonic()
    subprocess.run(pin + ["curl", "-sSk", "--fail", "--tlsv1.3", "-K", listing], check=True)
    seconds = time.monotonic() - start
    moved = sum(os.path.getsize(os.path.join(into, name)) for name in os.listdir(into))
    shutil.rmtree(into)
    os.unlink(listing)
    if moved != count * (100 << 10):
        raise SystemExit(f"nginx + curl moved {moved} bytes, not {count * (100 << 10)}")
    return moved / seconds


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--pinned", action="store_true", help="host and client on core 0 (taskset -c 0)")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--count", type=int, default=1000)
    parser.add_argument("--big-mib", type=int, default=256)
    parser.add_argument("--against", help="a second release folder (atriumd, libFiles.so) measured alongside")
    parser.add_argument("--no-nginx", action="store_true", help="leave out nginx + curl")
    parser.add_argument("--delay-ms", type=float, default=0,
                        help="through a proxy that holds every byte this long each way (delay_proxy.py)")
    arguments = parser.parse_args()
    pin = ["taskset", "-c", "0"] if arguments.pinned else []
    builds = {"this build": RELEASE}
    if arguments.against:
        builds = {"against": os.path.abspath(arguments.against), **builds}
    client = os.path.join(RELEASE, "atrium-transfer-bench")
    output = tempfile.mkdtemp(prefix="atrium-small-out-", dir="/dev/shm" if os.path.isdir("/dev/shm") else None)
    scratches, hosts, proxies, web = [], {}, [], None
    try:
        for name, release in builds.items():
            scratch = tempfile.mkdtemp(prefix="atrium-small-", dir="/var/tmp")
            scratches.append(scratch)
            folder = os.path.join(scratch, "served")
            os.makedirs(folder)
            small = os.urandom(100 << 10)
            for index in range(arguments.count):
                with open(os.path.join(folder, f"small{index}"), "wb") as file:
                    file.write(small)
            with open(os.path.join(folder, "big.bin"), "wb") as file:
                for _ in range(arguments.big_mib):
                    file.write(os.urandom(1 << 20))
            transfers.RELEASE = release
            host, port = transfers.start_host(folder, scratch, pin)
            if not web and not arguments.no_nginx and not arguments.delay_ms:
                # nginx's workers read the files as another user.
                os.chmod(scratch, 0o755)
                os.chmod(folder, 0o755)
                web = transfers.nginx(folder, scratch, pin)
            if arguments.delay_ms:
                proxy = subprocess.Popen(
                    [sys.executable, os.path.join(os.path.dirname(os.path.abspath(__file__)), "delay_proxy.py"),
                     str(port), str(arguments.delay_ms)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
                proxies.append(proxy)
                port = int(proxy.stdout.readline().split()[1])
            hosts[name] = (host, port)
        results = {name: {"single": [], "many": [], "cpu": [], "started": [], "startedCpu": []} for name in builds}
        nginx = {"single": [], "many": []}
        for round in range(arguments.rounds):
            if web:
                settle([host.pid for host, _ in hosts.values()])
                big = os.path.join(output, "big")
                moved, seconds = transfers.curl(web[1], "big.bin", big, pin)
                os.unlink(big)
                nginx["single"].append(moved / seconds)
                nginx["many"].append(curl_many(web[1], arguments.count, output, pin))
            order = list(hosts.items()) if round % 2 == 0 else list(reversed(list(hosts.items())))
            for name, (host, port) in order:
                settle([host.pid for host, _ in hosts.values()])
                big = os.path.join(output, "big")
                moved, seconds = transfers.run([client, "get", str(port), "big.bin", big, "--tls"], pin)
                os.unlink(big)
                results[name]["single"].append(moved / seconds)
                modes = [("many", "cpu", []), ("started", "startedCpu", ["--started"])]
                for key, cpu, flags in (modes if round % 2 == 0 else list(reversed(modes))):
                    settle([host.pid for host, _ in hosts.values()])
                    into = os.path.join(output, f"many-{round}")
                    os.makedirs(into)
                    before = thread_seconds(host.pid)
                    moved, seconds = transfers.run(
                        [client, "many", str(port), "small", str(arguments.count), into, "--tls", *flags], pin)
                    settle([host.pid])
                    after = thread_seconds(host.pid)
                    shutil.rmtree(into)
                    results[name][key].append(moved / seconds)
                    results[name][cpu].append({key: after[key] - before.get(key, 0) for key in after})
        delayed = f", through a proxy adding {arguments.delay_ms:g} ms each way" if arguments.delay_ms else ""
        print(f"{'pinned to core 0' if pin else 'unpinned'}, median of {arguments.rounds}, "
              f"{arguments.count} x 100 KiB against {arguments.big_mib} MiB{delayed}:")
        for name in builds:
            single = statistics.median(results[name]["single"])
            print(f"  {name}: single file {single / 2**20:.1f} MiB/s")
            for key, cpu_key, label in (("many", "cpu", "attached after each answer"),
                                        ("started", "startedCpu", "started with each request")):
                many = statistics.median(results[name][key])
                per_file = 100 * 1024 / many * 1000
                threads = {}
                for sample in results[name][cpu_key]:
                    for thread, value in sample.items():
                        threads.setdefault(thread, []).append(value)
                cpu = {thread: statistics.median(values) / arguments.count * 1000 for thread, values in threads.items()}
                busy = ", ".join(f"{thread} {value:.3f}" for thread, value in sorted(cpu.items(), key=lambda x: -x[1])
                                 if value >= 0.005)
                print(f"    small files, {label}: {many / 2**20:.1f} MiB/s ({per_file:.3f} ms a file), "
                      f"ratio to the single file {many / single:.2f}; host CPU {sum(cpu.values()):.3f} ms a file ({busy})")
            started = statistics.median(results[name]["started"]) / statistics.median(results[name]["many"])
            print(f"    small files started with each request / attached after each answer: {started:.2f}")
        if web:
            single, many = statistics.median(nginx["single"]), statistics.median(nginx["many"])
            print(f"  nginx + curl: single file {single / 2**20:.1f} MiB/s, small files {many / 2**20:.1f} MiB/s "
                  f"({100 * 1024 / many * 1000:.3f} ms a file), ratio to the single file {many / single:.2f}")
            ratio = statistics.median(results["this build"]["started"]) / many
            print(f"  small files, this build started with each request / nginx + curl: {ratio:.2f}")
        if arguments.against:
            ratio = statistics.median(results["this build"]["many"]) / statistics.median(results["against"]["many"])
            print(f"  small files attached after each answer, this build / against: {ratio:.2f}")
            ratio = statistics.median(results["this build"]["started"]) / statistics.median(results["against"]["many"])
            print(f"  small files, this build started with each request / against attached after each answer: "
                  f"{ratio:.2f}")
    finally:
        if web:
            web[0].kill()
        for host, _ in hosts.values():
            host.kill()
        for proxy in proxies:
            proxy.stdin.close()
            proxy.wait(timeout=10)
        for scratch in scratches:
            shutil.rmtree(scratch, ignore_errors=True)
        shutil.rmtree(output, ignore_errors=True)


if __name__ == "__main__":
    main()
