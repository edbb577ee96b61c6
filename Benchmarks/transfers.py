#!/usr/bin/env python3
"""Transfers' speed, as ratios measured in one run (BENCHMARKS.md, "Transfers"):

- a download and an upload of one file (1 GiB by default) through the Files reference service,
  over TLS and over plain TCP on loopback, each against
  (a) a bare SwiftNIO sender and receiver (swift-nio-ssl for TLS) moving the same bytes from
      and to files: the ceiling of this stack, and
  (b) nginx serving the same file over HTTPS to curl (Debian's packages): what a user would
      pick instead;
- the same download with curl over atriumd's HTTPS (a transfer's link, the host's key pinned)
  against curl from nginx, and an upload with curl's tus PATCH against that download;
- 1,000 files of 100 KiB fetched one after another (each download started by its request),
  against the single file's rate;
- a download resumed at 90%: the bytes moved again;
- the host's CPU seconds per GiB, and its memory while transfers are active;
- the disk's own synced write rate (what an upload does: written into a reserved file, synced
  every half window), the ceiling of an upload that acknowledges only synced bytes;
- the same uploads to a second host whose spool and folder are in tmpfs, where a sync costs
  nothing: what uploads do when the disk is not their bound.

Every receiver writes into tmpfs (/dev/shm) where there is one. With --pinned the host, the servers and the
clients all run on core 0 (taskset -c 0), for repeatable ratios on a noisy machine; without, the
scheduler places them. Each figure is the median of --rounds, the pairs measured alternately.

    for p in atriumd atrium-transfer-bench Files; do swift build -c release --product $p; done
    python3 Benchmarks/transfers.py --pinned
    python3 Benchmarks/transfers.py --size-mib 256 --rounds 3
"""
import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from hosttools import RELEASE, rss_bytes  # noqa: E402

BENCH = os.path.join(RELEASE, "atrium-transfer-bench")


def cpu_seconds(pid):
    with open(f"/proc/{pid}/stat") as stat:
        fields = stat.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def host_written(pid):
    """The bytes `pid` has written (to sockets and files), from /proc/PID/io."""
    with open(f"/proc/{pid}/io") as io:
        for line in io:
            if line.startswith("wchar:"):
                return int(line.split()[1])
    return 0


def run(command, pin):
    """Runs a bench command; returns (bytes, seconds) from its 'bytes B seconds S' line."""
    result = subprocess.run(pin + command, capture_output=True, text=True, timeout=1800)
    if result.returncode != 0:
        sys.exit(f"{' '.join(command)} failed: {result.stderr.strip()}")
    words = result.stdout.split()
    return int(words[words.index("bytes") + 1]), float(words[words.index("seconds") + 1])


def start(command, pin, ready):
    process = subprocess.Popen(pin + command, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    deadline = time.time() + 30
    while time.time() < deadline:
        line = process.stdout.readline()
        found = ready(line)
        if found:
            return process, found
        if process.poll() is not None:
            break
    process.kill()
    sys.exit(f"{command[0]} did not start")


def start_host(folder, state, pin):
    manifests = os.path.join(state, "manifests")
    os.makedirs(manifests, exist_ok=True)
    with open(os.path.join(manifests, "files.json"), "w") as file:
        json.dump({"manifestVersion": 1, "package": "atrium.examples.files", "library": "libFiles.so",
                   "services": [{"name": "atrium.files", "supportsRemoteSystems": True}],
                   "config": {"folder": folder}}, file)
    import re
    return start(
        [os.path.join(RELEASE, "atriumd"), "--manifests", manifests, "--listen", "127.0.0.1:0", "--socket", "off",
         "--log-level", "error", "--state-dir", os.path.join(state, "host"), "--transfer-free-space", "0"],
        pin, lambda line: (m := re.search(r"listening on tcp 127\.0\.0\.1:(\d+)", line)) and int(m.group(1)))


def nginx(folder, state, pin):
    """nginx serving `folder` over HTTPS on a free port (installed from Debian when missing)."""
    if shutil.which("nginx") is None and not os.path.exists("/usr/sbin/nginx"):
        subprocess.run(["apt-get", "install", "-y", "-q", "nginx-light"], check=True, capture_output=True)
    conf = os.path.join(state, "nginx")
    os.makedirs(conf, exist_ok=True)
    key, cert = os.path.join(conf, "key.pem"), os.path.join(conf, "cert.pem")
    subprocess.run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
                    "-keyout", key, "-out", cert, "-subj", "/CN=bench", "-days", "1"], check=True, capture_output=True)
    import socket
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    with open(os.path.join(conf, "nginx.conf"), "w") as file:
        file.write(f"""daemon off; worker_processes 1; pid {conf}/nginx.pid; error_log {conf}/error.log;
events {{ worker_connections 64; }}
http {{ access_log off; sendfile on; client_body_temp_path {conf}; proxy_temp_path {conf};
  fastcgi_temp_path {conf}; uwsgi_temp_path {conf}; scgi_temp_path {conf};
  server {{ listen 127.0.0.1:{port} ssl; ssl_protocols TLSv1.3; ssl_certificate {cert};
    ssl_certificate_key {key}; root {folder}; }} }}
""")
    process = subprocess.Popen(pin + ["nginx", "-c", os.path.join(conf, "nginx.conf"), "-p", conf],
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    time.sleep(0.5)
    return process, port


def curl(port, name, out, pin):
    start_time = time.monotonic()
    subprocess.run(pin + ["curl", "-sk", "--tlsv1.3", "-o", out, f"https://127.0.0.1:{port}/{name}"], check=True)
    return os.path.getsize(out), time.monotonic() - start_time


def link(port, name, pin, size=None):
    """A new transfer of `name` through Files (an upload of `size` bytes when given) and its
    HTTPS link: (url, bearer, curl's pin of the host's key)."""
    command = [BENCH, "link", str(port), name] + ([str(size)] if size is not None else []) + ["--tls"]
    words = subprocess.run(pin + command, capture_output=True, text=True, check=True).stdout.split()
    return words[words.index("url") + 1], words[words.index("bearer") + 1], words[words.index("pin") + 1]


def curl_link(port, name, out, pin):
    """curl fetching a download through its HTTPS link, the host's key pinned."""
    url, bearer, key = link(port, name, pin)
    start_time = time.monotonic()
    subprocess.run(pin + ["curl", "-sSk", "--fail", "--pinnedpubkey", f"sha256//{key}", "-H",
                          f"Authorization: Bearer {bearer}", "-o", out, url], check=True)
    return os.path.getsize(out), time.monotonic() - start_time


def curl_patch(port, source, size, pin):
    """curl sending a file to an upload's HTTPS link in one tus PATCH (streamed, -T)."""
    url, bearer, key = link(port, f"up-{os.urandom(4).hex()}", pin, size)
    start_time = time.monotonic()
    subprocess.run(pin + ["curl", "-sSk", "--fail", "--pinnedpubkey", f"sha256//{key}", "-X", "PATCH", "-T", source,
                          "-H", f"Authorization: Bearer {bearer}", "-H", "Tus-Resumable: 1.0.0",
                          "-H", "Upload-Offset: 0", "-H", "Content-Type: application/offset+octet-stream",
                          "-o", "/dev/null", url], check=True)
    return size, time.monotonic() - start_time


def synced_writes(path, size, batch=2 << 20):
    """This disk's own ceiling for what an upload does: `size` bytes written into a reserved
    file and synced every `batch` (the host's half window); returns (bytes, seconds)."""
    block = os.urandom(1 << 20)
    descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    start_time = time.monotonic()
    os.posix_fallocate(descriptor, 0, size)
    written = 0
    while written < size:
        os.pwrite(descriptor, block, written)
        written += len(block)
        if written % batch == 0 or written == size:
            os.fdatasync(descriptor)
    os.close(descriptor)
    seconds = time.monotonic() - start_time
    os.unlink(path)
    return size, seconds


def median_rate(samples):
    return statistics.median(b / s for b, s in samples)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--pinned", action="store_true", help="run everything on core 0 (taskset -c 0)")
    parser.add_argument("--size-mib", type=int, default=1024, help="the file's size (default 1024: 1 GiB)")
    parser.add_argument("--rounds", type=int, default=3, help="rounds of each measurement (default 3)")
    parser.add_argument("--many", type=int, default=1000, help="small files fetched one after another")
    arguments = parser.parse_args()
    pin = ["taskset", "-c", "0"] if arguments.pinned else []
    for program in ("atriumd", "atrium-transfer-bench", "libFiles.so"):
        if not os.path.exists(os.path.join(RELEASE, program)):
            sys.exit(f"{program} is missing: swift build -c release first (see the top of this file)")
    scratch = tempfile.mkdtemp(prefix="atrium-transfers-", dir=os.environ.get("TMPDIR", "/var/tmp"))
    folder = os.path.join(scratch, "served")
    os.makedirs(folder)
    # nginx's worker reads the files as its own user.
    os.chmod(scratch, 0o755)
    os.chmod(folder, 0o755)
    size = arguments.size_mib << 20
    with open(os.path.join(folder, "big.bin"), "wb") as file:
        for _ in range(arguments.size_mib):
            file.write(os.urandom(1 << 20))
    small = os.urandom(100 << 10)
    for index in range(arguments.many):
        with open(os.path.join(folder, f"small{index}"), "wb") as file:
            file.write(small)
    # What the clients receive goes to memory (tmpfs) where there is one: a download measures
    # the transfer, not the writeback of the client's disk (an upload measures the host's disk,
    # against its own synced-write ceiling below).
    received = tempfile.mkdtemp(prefix="atrium-received-", dir="/dev/shm" if os.path.isdir("/dev/shm") else scratch)
    out = os.path.join(received, "out.bin")
    host, port = start_host(folder, scratch, pin)
    # A second host whose state (its spool) and served folder are in tmpfs, where a sync costs
    # nothing: what an upload does when the disk is not its bound.
    memory_state = os.path.join(received, "host-in-memory")
    memory_folder = os.path.join(memory_state, "served")
    os.makedirs(memory_folder)
    memory_host, memory_port = start_host(memory_folder, memory_state, pin)
    bare_tls, bare_tls_port = start([BENCH, "serve-bare", os.path.join(folder, "big.bin"), "--tls"], pin,
                                    lambda line: line.startswith("port") and int(line.split()[1]))
    bare_tcp, bare_tcp_port = start([BENCH, "serve-bare", os.path.join(folder, "big.bin")], pin,
                                    lambda line: line.startswith("port") and int(line.split()[1]))
    web, web_port = nginx(folder, scratch, pin)
    samples = {key: [] for key in ("tls", "tcp", "bare-tls", "bare-tcp", "nginx", "up-tls", "up-tcp", "disk",
                                   "curl", "up-curl", "up-tls-mem", "up-curl-mem")}
    cpu = {"tls": [], "up-tls": []}
    peak = rss_bytes(host.pid)
    try:
        for _ in range(arguments.rounds):
            for key, command in (
                ("bare-tls", [BENCH, "fetch-bare", str(bare_tls_port), out, "--tls"]),
                ("tls", [BENCH, "get", str(port), "big.bin", out, "--tls"]),
                ("bare-tcp", [BENCH, "fetch-bare", str(bare_tcp_port), out]),
                ("tcp", [BENCH, "get", str(port), "big.bin", out]),
                ("up-tls", [BENCH, "put", str(port), os.path.join(folder, "big.bin"), "--tls"]),
                ("up-tcp", [BENCH, "put", str(port), os.path.join(folder, "big.bin")]),
                ("up-tls-mem", [BENCH, "put", str(memory_port), os.path.join(folder, "big.bin"), "--tls"]),
            ):
                before = cpu_seconds(host.pid)
                samples[key].append(run(command, pin))
                if key in cpu:
                    cpu[key].append((cpu_seconds(host.pid) - before) / (size / (1 << 30)))
                peak = max(peak, rss_bytes(host.pid))
                if os.path.exists(out):
                    os.unlink(out)
                for place in (folder, memory_folder):
                    for name in os.listdir(place):
                        if name.startswith("up-"):
                            os.unlink(os.path.join(place, name))
            samples["nginx"].append(curl(web_port, "big.bin", out, pin))
            os.unlink(out)
            # The same file over atriumd's HTTPS (a transfer's link), and curl's tus PATCH.
            samples["curl"].append(curl_link(port, "big.bin", out, pin))
            os.unlink(out)
            samples["up-curl"].append(curl_patch(port, os.path.join(folder, "big.bin"), size, pin))
            samples["up-curl-mem"].append(curl_patch(memory_port, os.path.join(folder, "big.bin"), size, pin))
            for place in (folder, memory_folder):
                for name in os.listdir(place):
                    if name.startswith("up-"):
                        os.unlink(os.path.join(place, name))
            samples["disk"].append(synced_writes(os.path.join(scratch, "synced.bin"), size))
        many_folder = os.path.join(received, "many")
        os.makedirs(many_folder)
        # Each download started by its request, as atrium get and startingDownload do.
        many = run([BENCH, "many", str(port), "small", str(arguments.many), many_folder, "--tls", "--started"], pin)
        # A download resumed at 90%: the partial file holds 90%, the rest is what moves again.
        partial = out + ".held"
        with open(os.path.join(folder, "big.bin"), "rb") as source, open(partial, "wb") as target:
            remaining = size * 9 // 10
            while remaining:
                block = source.read(min(remaining, 1 << 20))
                target.write(block)
                remaining -= len(block)
        # What the host wrote meanwhile (its sockets, its files), from the kernel's count.
        written = host_written(host.pid)
        run([BENCH, "get", str(port), "big.bin", out, "--tls", partial], pin)
        resent = host_written(host.pid) - written
        os.unlink(out)
        shutil.rmtree(many_folder, ignore_errors=True)
        # Memory while transfers are active: four TLS downloads at once, the host's RSS
        # sampled while they run, against the idle host's.
        idle = rss_bytes(host.pid)
        clients = [subprocess.Popen(pin + [BENCH, "get", str(port), "big.bin", f"{out}.{index}", "--tls"],
                                    stdout=subprocess.DEVNULL) for index in range(4)]
        busiest = idle
        while any(client.poll() is None for client in clients):
            busiest = max(busiest, rss_bytes(host.pid))
            time.sleep(0.02)
        per_transfer = (busiest - idle) / 4
    finally:
        for process in (host, memory_host, bare_tls, bare_tcp, web):
            process.kill()
        shutil.rmtree(scratch, ignore_errors=True)
        shutil.rmtree(received, ignore_errors=True)

    def mib(rate):
        return rate / (1 << 20)

    rate = {key: median_rate(value) for key, value in samples.items()}
    print(f"{'pinned' if pin else 'unpinned'}, {arguments.size_mib} MiB, median of {arguments.rounds}")
    for key in ("tls", "bare-tls", "nginx", "curl", "tcp", "bare-tcp", "up-tls", "up-tcp", "up-curl", "disk",
                "up-tls-mem", "up-curl-mem"):
        print(f"  {key:11} {mib(rate[key]):8.1f} MiB/s")
    print(f"  curl from atriumd (HTTPS) ÷ curl from nginx: {rate['curl'] / rate['nginx']:.2f}")
    print(f"  curl PATCH upload ÷ curl download (HTTPS): {rate['up-curl'] / rate['curl']:.2f}")
    print(f"  TLS download ÷ bare TLS pair: {rate['tls'] / rate['bare-tls']:.2f}")
    print(f"  TLS download ÷ nginx + curl:  {rate['tls'] / rate['nginx']:.2f}")
    print(f"  TCP download ÷ bare TCP pair: {rate['tcp'] / rate['bare-tcp']:.2f}")
    print(f"  TLS upload ÷ TLS download:    {rate['up-tls'] / rate['tls']:.2f}")
    print(f"  TCP upload ÷ TCP download:    {rate['up-tcp'] / rate['tcp']:.2f}")
    print(f"  TLS upload ÷ the disk's own synced writes: {rate['up-tls'] / rate['disk']:.2f}")
    print(f"  spool in tmpfs: TLS upload ÷ TLS download: {rate['up-tls-mem'] / rate['tls']:.2f}, "
          f"curl PATCH ÷ curl download: {rate['up-curl-mem'] / rate['curl']:.2f}")
    many_rate = many[0] / many[1]
    print(f"  {arguments.many} × 100 KiB, one after another (TLS): {mib(many_rate):.1f} MiB/s, "
          f"{many_rate / rate['tls']:.2f} of the single file's rate")
    print(f"  resumed at 90%: the host wrote {resent / (1 << 20):.1f} MiB ({resent / size:.3f} of the file, "
          f"TLS records and its journal included)")
    print(f"  memory per active TLS download (4 at once): {per_transfer / (1 << 20):.2f} MiB "
          f"(the window is 4 MiB)")
    print(f"  host CPU seconds per GiB: download {statistics.median(cpu['tls']):.2f}, "
          f"upload {statistics.median(cpu['up-tls']):.2f} (TLS)")
    print(f"  host peak RSS: {peak / (1 << 20):.1f} MiB")


if __name__ == "__main__":
    main()
