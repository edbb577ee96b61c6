#!/usr/bin/env python3
"""Measures atriumd against the raw SwiftNIO baseline in one run, and prints the tables of
BENCHMARKS.md.

    Benchmarks/compare.py [--pinned] [--duration SECONDS] [--previous PATH/TO/atriumd] [--service roman]
                          [--tls] [--metrics]

Builds the release products, starts atriumd (with the reference services) and atrium-baseline
on free ports, and runs `atrium bench` against each, alternating in three rounds (each figure
is the median of its rounds), for: 1 connection
one request at a time, 8 and 64 connections, and 1 connection pipelined 64 deep. Then it
measures atriumd's memory (RSS) idle and holding 1,000 idle connections, and its time from
start to ready with 100 generated manifests. With --pinned, the host, the baseline and the
load generator all run on core 0 (taskset -c 0), for repeatable ratios on a noisy machine.
With --previous, it measures this atriumd against another build of it instead (an earlier
commit's, built in a git worktree), in the same alternating rounds: the cost of a change.
With --service roman, the host's side is the Roman ping service (a Swift plugin, through
PluginKit) instead of Echo (a C plugin that answers inline); the baseline stays the same.
With --tls, it measures atriumd over TLS against the same atriumd over plain TCP instead (in
the same alternating rounds), then the connection setup (connect to welcome, the TLS
handshake included) and the memory of 1,000 idle connections, each both ways.
With --metrics, it measures atriumd recording metrics (--metrics 127.0.0.1:0, scraped by
nobody) against the same atriumd without them, and a second atriumd without them against the
first, all three in the same rotating rounds: what recording costs the request path, beside
what two identical hosts differ by on this machine (the noise a figure must stand out of).
Then atrium-metrics-bench measures what recording adds to one request, part by part with the
host's own code, and sets it against the CPU time a whole request cost the host without
metrics in the rounds before: a ratio the machine's noise hardly moves.
"""
import argparse
import json
import os
import re
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

from hosttools import rss_bytes

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RELEASE = os.path.join(ROOT, ".build", "release")
SERVICES = {"echo": ("Echo", []),
            "roman": ("Roman ping", ["--package", "5085ShawnHenry.RomanTestApp_jsjw7knzsgcce",
                                     "--service", "com.microsoft.test.cdppingpongservice"])}
CONFIGURATIONS = [("1 connection, sequential", 1, 1), ("8 connections", 8, 1), ("64 connections", 64, 1),
                  ("1 connection, pipelined 64", 1, 64)]


ROUNDS = 4


def median_result(results):
    """Each figure's median over the rounds."""
    return {key: statistics.median(result[key] for result in results)
            for key in results[0] if isinstance(results[0][key], (int, float))}


def alternating(measure, first, second):
    """ROUNDS pairs of (measure(first), measure(second)), which one goes first alternating
    from round to round: the one measured first in a pair was measured slower in A/A runs
    (the same binary on both sides), by up to 10% with 8 connections."""
    pairs = []
    for index in range(ROUNDS):
        if index % 2 == 0:
            a = measure(first)
            b = measure(second)
        else:
            b = measure(second)
            a = measure(first)
        pairs.append((a, b))
    return pairs


def start(command, ready_pattern, pin):
    """Starts a server and returns (process, port) once it printed its port."""
    process = subprocess.Popen(pin + command, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    deadline = time.time() + 30
    while time.time() < deadline:
        line = process.stdout.readline()
        match = re.search(ready_pattern, line)
        if match:
            return process, int(match.group(1))
        if process.poll() is not None:
            break
    process.kill()
    sys.exit(f"{command[0]} did not start")


def wait_ready(process):
    for line in process.stdout:
        if "ready" in line:
            return


def bench(port, connections, pipeline, duration, pin, extra=(), tls=False):
    command = pin + [os.path.join(RELEASE, "atrium"), "bench", f"127.0.0.1:{port}", "--connections", str(connections),
                     "--pipeline", str(pipeline), "--duration", str(duration), "--json-output", *extra]
    if not tls:
        command.append("--insecure")
    output = subprocess.run(command, capture_output=True, text=True, check=True).stdout
    return json.loads(output)


def rss_kib(pid):
    return rss_bytes(pid) // 1024


def startup_with_manifests(count, pin, runs=5):
    folder = tempfile.mkdtemp(prefix="atrium-startup-")
    echo = os.path.join(RELEASE, "libEcho.so")
    try:
        for index in range(count):
            with open(os.path.join(folder, f"p{index:03}.json"), "w") as manifest:
                json.dump({"manifestVersion": 1, "package": f"bench.package{index:03}", "library": echo,
                           "services": [{"name": "bench.echo", "supportsRemoteSystems": True}]}, manifest)
        times = []
        for _ in range(runs):
            began = time.perf_counter()
            process = subprocess.Popen(pin + [os.path.join(RELEASE, "atriumd"), "--manifests", folder, "--listen",
                                              "127.0.0.1:0", "--socket", "off", "--log-level", "error"],
                                       stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
            wait_ready(process)
            times.append((time.perf_counter() - began) * 1000)
            process.terminate()
            process.wait()
        return statistics.median(times), min(times)
    finally:
        shutil.rmtree(folder)


def run_against_previous(arguments, port, previous_port, pin):
    """The table of this build against an earlier one, in alternating rounds."""
    mode = "pinned to core 0" if arguments.pinned else "unpinned"
    service_name, service_arguments = SERVICES[arguments.service]
    print(f"## This atriumd against {arguments.previous}, {service_name}, {mode}, {arguments.duration:g} s each\n")
    print("| configuration | this req/s | previous req/s | throughput ratio | this p50 µs | previous p50 µs "
          "| p50 ratio | this p99 µs | previous p99 µs |")
    print("|---|---|---|---|---|---|---|---|---|")
    for name, connections, pipeline in CONFIGURATIONS:
        rounds = alternating(lambda target: bench(target, connections, pipeline, arguments.duration / ROUNDS, pin,
                                                  service_arguments),
                             port, previous_port)
        ours, theirs = median_result([r[0] for r in rounds]), median_result([r[1] for r in rounds])
        print(f"| {name} | {ours['requestsPerSecond']:.0f} | {theirs['requestsPerSecond']:.0f} "
              f"| {ours['requestsPerSecond'] / theirs['requestsPerSecond']:.3f} "
              f"| {ours['p50Microseconds']:.1f} | {theirs['p50Microseconds']:.1f} "
              f"| {ours['p50Microseconds'] / theirs['p50Microseconds']:.3f} "
              f"| {ours['p99Microseconds']:.1f} | {theirs['p99Microseconds']:.1f} |")
        sys.stdout.flush()


def idle_memory_kib(host, port, pin, tls, connections=1000):
    """The host's RSS growth while `connections` idle connections are held, in KiB."""
    before = rss_kib(host.pid)
    holder = subprocess.Popen(pin + [os.path.join(RELEASE, "atrium"), "bench", f"127.0.0.1:{port}", "--idle",
                                     "--connections", str(connections), "--duration", "8"]
                              + ([] if tls else ["--insecure"]),
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    holder.stdout.readline()  # "holding N idle connections ..."
    time.sleep(2)
    loaded = rss_kib(host.pid)
    holder.wait()
    time.sleep(1)
    return loaded - before


def cpu_seconds(pid):
    """The CPU time (user and system) a process has used."""
    with open(f"/proc/{pid}/stat") as stat:
        fields = stat.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def run_metrics(arguments, hosts, pin):
    """Metrics on against off, beside off against off, in rotating rounds. `hosts` are
    (process, port) of the host with metrics, the host without, and its twin. Besides the
    round trips, each host's CPU time per request: what the host itself spent, which the
    machine's other work disturbs far less than it does latency."""
    mode = "pinned to core 0" if arguments.pinned else "unpinned"
    service_name, service_arguments = SERVICES[arguments.service]
    print(f"## Metrics recorded against none, {service_name}, {mode}, {arguments.duration:g} s each\n")
    print("The twin is a second atriumd without metrics, measured against the first: what two identical "
          "hosts differ by here.\n")
    print("| configuration | metrics req/s | none req/s | throughput ratio | twin ratio | metrics p50 µs | none p50 µs "
          "| p50 ratio | twin p50 ratio | metrics CPU µs/request | none CPU µs/request | CPU ratio | twin CPU ratio |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    ports = [port for _, port in hosts]
    cpu_per_request = []
    for name, connections, pipeline in CONFIGURATIONS:
        results = {port: [] for port in ports}
        cpu = {port: 0.0 for port in ports}
        completed = {port: 0 for port in ports}
        for index in range(ROUNDS * 2):
            # Each host goes first, second and third in turn.
            for process, port in hosts[index % 3:] + hosts[:index % 3]:
                before = cpu_seconds(process.pid)
                result = bench(port, connections, pipeline, arguments.duration / (ROUNDS * 2), pin, service_arguments)
                cpu[port] += cpu_seconds(process.pid) - before
                completed[port] += result["completed"]
                results[port].append(result)
        on, off, twin = (median_result(results[port]) for port in ports)
        on_cpu, off_cpu, twin_cpu = (cpu[port] / completed[port] * 1e6 for port in ports)
        print(f"| {name} | {on['requestsPerSecond']:.0f} | {off['requestsPerSecond']:.0f} "
              f"| {on['requestsPerSecond'] / off['requestsPerSecond']:.3f} "
              f"| {twin['requestsPerSecond'] / off['requestsPerSecond']:.3f} "
              f"| {on['p50Microseconds']:.1f} | {off['p50Microseconds']:.1f} "
              f"| {on['p50Microseconds'] / off['p50Microseconds']:.3f} "
              f"| {twin['p50Microseconds'] / off['p50Microseconds']:.3f} "
              f"| {on_cpu:.2f} | {off_cpu:.2f} | {on_cpu / off_cpu:.3f} | {twin_cpu / off_cpu:.3f} |")
        sys.stdout.flush()
        cpu_per_request.append((name, off_cpu))

    # What recording adds to one request, measured part by part with the host's own code
    # (atrium-metrics-bench), against what a whole request cost the host without metrics above.
    parts = json.loads(subprocess.run(pin + [os.path.join(RELEASE, "atrium-metrics-bench"), "--json"],
                                      capture_output=True, text=True, check=True).stdout)
    print(f"\n### Recording, part by part, against a whole request ({mode})\n")
    print(f"atrium-metrics-bench: the byte-counting handler {parts['handlerNanoseconds']:.1f} ns, the clock "
          f"reads and the answer's recording {parts['recordingNanoseconds']:.1f} ns, counting the bytes written "
          f"{parts['encoderNanoseconds']:.1f} ns: {parts['totalNanoseconds']:.1f} ns for a request that comes "
          "in a read of its own (a pipelined request shares its read's handler pass and first clock read, "
          "so costs less; the table charges it the whole).\n")
    print("| configuration | recording ns/request | none CPU µs/request | recording ÷ request |")
    print("|---|---|---|---|")
    for name, off_cpu in cpu_per_request:
        print(f"| {name} | {parts['totalNanoseconds']:.1f} | {off_cpu:.2f} "
              f"| {parts['totalNanoseconds'] / (off_cpu * 1000):.3f} |")
    sys.stdout.flush()


def run_tls(arguments, host, port, pin):
    """atriumd over TLS against the same atriumd over plain TCP."""
    mode = "pinned to core 0" if arguments.pinned else "unpinned"
    service_name, service_arguments = SERVICES[arguments.service]
    print(f"## TLS against plain TCP, the same atriumd, {service_name}, {mode}, {arguments.duration:g} s each\n")
    print("| configuration | TLS req/s | plain req/s | throughput ratio | TLS p50 µs | plain p50 µs "
          "| p50 ratio | TLS p99 µs | plain p99 µs |")
    print("|---|---|---|---|---|---|---|---|---|")
    for name, connections, pipeline in CONFIGURATIONS:
        rounds = alternating(lambda tls: bench(port, connections, pipeline, arguments.duration / ROUNDS, pin,
                                               service_arguments, tls=tls), True, False)
        secure, plain = median_result([r[0] for r in rounds]), median_result([r[1] for r in rounds])
        print(f"| {name} | {secure['requestsPerSecond']:.0f} | {plain['requestsPerSecond']:.0f} "
              f"| {secure['requestsPerSecond'] / plain['requestsPerSecond']:.2f} "
              f"| {secure['p50Microseconds']:.1f} | {plain['p50Microseconds']:.1f} "
              f"| {secure['p50Microseconds'] / plain['p50Microseconds']:.2f} "
              f"| {secure['p99Microseconds']:.1f} | {plain['p99Microseconds']:.1f} |")
        sys.stdout.flush()
    setups = alternating(lambda tls: [bench(port, 1, 1, 0.05, pin, service_arguments, tls=tls)["setupP50Microseconds"]
                                      for _ in range(5)], True, False)
    secure = statistics.median(value for pair in setups for value in pair[0])
    plain = statistics.median(value for pair in setups for value in pair[1])
    print(f"\n## Connection setup and memory, TLS and plain ({mode})\n")
    print(f"- connect to welcome, one connection at a time (median of {5 * ROUNDS} each): TLS {secure / 1000:.2f} ms, "
          f"plain {plain / 1000:.2f} ms: the TLS handshake adds {(secure - plain) / 1000:.2f} ms")
    secure_kib = idle_memory_kib(host, port, pin, True)
    plain_kib = idle_memory_kib(host, port, pin, False)
    print(f"- 1,000 idle connections: TLS {secure_kib / 1000:.1f} KiB each, plain {plain_kib / 1000:.1f} KiB each")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--pinned", action="store_true", help="run everything on core 0 (taskset -c 0)")
    parser.add_argument("--duration", type=float, default=5, help="seconds per measurement (default 5)")
    parser.add_argument("--service", choices=sorted(SERVICES), default="echo",
                        help="the service the host answers with (default echo)")
    parser.add_argument("--tls", action="store_true",
                        help="measure atriumd over TLS against the same atriumd over plain TCP")
    parser.add_argument("--previous", metavar="ATRIUMD",
                        help="another build of atriumd (an earlier commit's) to measure in the same rounds, "
                             "for the cost of a change: new ÷ previous")
    parser.add_argument("--metrics", action="store_true",
                        help="measure atriumd recording metrics against the same atriumd without: on ÷ off")
    arguments = parser.parse_args()
    pin = ["taskset", "-c", "0"] if arguments.pinned else []
    service_name, service_arguments = SERVICES[arguments.service]

    subprocess.run(["swift", "build", "-c", "release"], cwd=ROOT, check=True, stdout=sys.stderr)
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, 8192), hard))

    host, host_port = start([os.path.join(RELEASE, "atriumd"), "--manifests", os.path.join(ROOT, "manifests"),
                             "--listen", "127.0.0.1:0", "--socket", "off", "--log-level", "error",
                             "--max-in-flight", "1024", "--max-connections", "4000",
                             "--max-connections-per-peer", "4000"], r"listening on tcp 127\.0\.0\.1:(\d+)", pin)
    baseline, baseline_port = start([os.path.join(RELEASE, "atrium-baseline"), "0"],
                                    r"listening on tcp 127\.0\.0\.1:(\d+)", pin)
    previous, previous_port = None, None
    if arguments.previous:
        # An earlier build knows only the flags it had: the manifests, the listener, the log, and
        # the connection limits once it has them.
        known = subprocess.run([arguments.previous, "--help"], capture_output=True, text=True).stdout
        limits = (["--max-connections", "4000", "--max-connections-per-peer", "4000"]
                  if "--max-connections-per-peer" in known else [])
        previous, previous_port = start([arguments.previous, "--manifests", os.path.join(ROOT, "manifests"),
                                         "--listen", "127.0.0.1:0", "--socket", "off", "--log-level", "error",
                                         "--max-in-flight", "1024", *limits],
                                        r"listening on tcp 127\.0\.0\.1:(\d+)", pin)
    twin = None
    if arguments.metrics:
        # The same atriumd recording metrics (served on a port nobody scrapes), and a twin of
        # the host without.
        common = [os.path.join(RELEASE, "atriumd"), "--manifests", os.path.join(ROOT, "manifests"), "--listen",
                  "127.0.0.1:0", "--socket", "off", "--log-level", "error", "--max-in-flight", "1024",
                  "--max-connections", "4000", "--max-connections-per-peer", "4000"]
        previous, previous_port = start(common + ["--metrics", "127.0.0.1:0"],
                                        r"listening on tcp 127\.0\.0\.1:(\d+)", pin)
        twin, twin_port = start(common, r"listening on tcp 127\.0\.0\.1:(\d+)", pin)
    try:
        if arguments.metrics:
            run_metrics(arguments, [(previous, previous_port), (host, host_port), (twin, twin_port)], pin)
            return
        if previous:
            run_against_previous(arguments, host_port, previous_port, pin)
            return
        if arguments.tls:
            run_tls(arguments, host, host_port, pin)
            return
        mode = "pinned to core 0" if arguments.pinned else "unpinned"
        print(f"## Round trips against {service_name}, {mode}, {arguments.duration:g} s each\n")
        print("| configuration | atriumd req/s | baseline req/s | throughput ratio | atriumd p50 µs | baseline p50 µs "
              "| p50 ratio | atriumd p99 µs | baseline p99 µs | atriumd p99.9 µs |")
        print("|---|---|---|---|---|---|---|---|---|---|")
        for name, connections, pipeline in CONFIGURATIONS:
            # Alternate short rounds and keep each side's median, so that a burst of noise
            # from the shared machine lands on both rather than on one.
            rounds = alternating(
                lambda target: bench(target, connections, pipeline, arguments.duration / ROUNDS, pin,
                                     service_arguments if target == host_port else ()),
                host_port, baseline_port)
            ours, theirs = median_result([r[0] for r in rounds]), median_result([r[1] for r in rounds])
            print(f"| {name} | {ours['requestsPerSecond']:.0f} | {theirs['requestsPerSecond']:.0f} "
                  f"| {ours['requestsPerSecond'] / theirs['requestsPerSecond']:.2f} "
                  f"| {ours['p50Microseconds']:.1f} | {theirs['p50Microseconds']:.1f} "
                  f"| {ours['p50Microseconds'] / theirs['p50Microseconds']:.2f} "
                  f"| {ours['p99Microseconds']:.1f} | {theirs['p99Microseconds']:.1f} | {ours['p99.9Microseconds']:.1f} |")
            sys.stdout.flush()

        idle = rss_kib(host.pid)
        holder = subprocess.Popen(pin + [os.path.join(RELEASE, "atrium"), "bench", f"127.0.0.1:{host_port}", "--idle",
                                         "--connections", "1000", "--duration", "8", "--insecure"],
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        holder.stdout.readline()  # "holding 1000 idle connections ..."
        time.sleep(2)
        loaded = rss_kib(host.pid)
        holder.wait()
        print(f"\n## Memory ({mode})\n")
        print(f"- atriumd RSS idle, after the runs above: {idle / 1024:.1f} MiB")
        print(f"- with 1,000 idle connections: {loaded / 1024:.1f} MiB, "
              f"{(loaded - idle) / 1000:.1f} KiB per connection")
    finally:
        for process in [host, baseline] + ([previous] if previous else []) + ([twin] if twin else []):
            process.terminate()
            process.wait()

    median, best = startup_with_manifests(100, pin)
    print(f"\n## Start-up ({mode})\n")
    print(f"- start to ready with 100 manifests (each loading libEcho.so): median {median:.0f} ms, best {best:.0f} ms "
          "of 5 runs")


if __name__ == "__main__":
    main()
