"""What the benchmark scripts share: starting a release atriumd on a free port, and reading a
process's memory and descriptors from /proc."""
import os
import re
import shutil
import subprocess
import tempfile
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RELEASE = os.path.join(ROOT, ".build", "release")


def start_host(arguments, pin=(), manifests=os.path.join(ROOT, "manifests")):
    """Starts the release atriumd with the reference manifests (or those of `manifests`), on a
    free port, without the local socket, logging errors only, plus `arguments`; returns
    (process, port)."""
    process = subprocess.Popen(
        list(pin) + [os.path.join(RELEASE, "atriumd"), "--manifests", manifests, "--listen",
                     "127.0.0.1:0", "--socket", "off", "--log-level", "error", *arguments],
        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    deadline = time.time() + 30
    while time.time() < deadline:
        match = re.search(r"listening on tcp 127\.0\.0\.1:(\d+)", process.stdout.readline())
        if match:
            return process, int(match.group(1))
        if process.poll() is not None:
            break
    process.kill()
    sys.exit("atriumd did not start")


def copy_of_reference_manifests():
    """A fresh temporary folder holding the reference manifests, for a benchmark to add to."""
    folder = tempfile.mkdtemp(prefix="atrium-bench-")
    for name in os.listdir(os.path.join(ROOT, "manifests")):
        shutil.copy(os.path.join(ROOT, "manifests", name), folder)
    return folder


def rss_bytes(pid):
    """The resident memory of `pid` (VmRSS), in bytes."""
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    return 0


def descriptors(pid):
    """How many descriptors `pid` has open."""
    return len(os.listdir(f"/proc/{pid}/fd"))
