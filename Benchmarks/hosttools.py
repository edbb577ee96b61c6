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


def start_host(arguments, pin=(), manifests=os.path.join(ROOT, "manifests"), live_bytes=None, atriumd=None):
    """Starts the release atriumd (or the build at `atriumd`) with the reference manifests (or
    those of `manifests`), on a free port, without the local socket, logging errors only, plus
    `arguments`; returns (process, port). With `live_bytes` (a file's path), the host's
    allocations are counted (see `counting_allocations` and `read_live_bytes`)."""
    process = subprocess.Popen(
        list(pin) + [atriumd or os.path.join(RELEASE, "atriumd"), "--manifests", manifests, "--listen",
                     "127.0.0.1:0", "--socket", "off", "--log-level", "error", *arguments],
        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, env=counting_allocations(live_bytes))
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


def rss_bytes(pid, field="VmRSS"):
    """The resident memory of `pid` (VmRSS), in bytes; with `field="RssAnon"`, only its anonymous
    part (heap, stacks: what a leak grows), without the program's and libraries' pages read
    from their files (RssFile), which the first run of a piece of code brings in for good."""
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith(field + ":"):
                return int(line.split()[1]) * 1024
    return 0


def descriptors(pid):
    """How many descriptors `pid` has open."""
    return len(os.listdir(f"/proc/{pid}/fd"))


def counting_allocations(answer_file):
    """The environment that makes a process count what it has allocated and not freed
    (Benchmarks/livebytes.c, built here into .build/release/livebytes.so when it is missing or
    older than its source), answering in `answer_file`; the plain environment without one."""
    if answer_file is None:
        return None
    source = os.path.join(ROOT, "Benchmarks", "livebytes.c")
    library = os.path.join(RELEASE, "livebytes.so")
    if not os.path.exists(library) or os.path.getmtime(library) < os.path.getmtime(source):
        subprocess.run(["cc", "-O2", "-shared", "-fPIC", "-o", library, source, "-ldl", "-lpthread"], check=True)
    return dict(os.environ, LD_PRELOAD=library, LIVEBYTES_FILE=answer_file)


def read_live_bytes(answer_file, timeout=5):
    """What the process started with `counting_allocations(answer_file)` has allocated and not
    freed now: (bytes, blocks)."""
    if os.path.exists(answer_file):
        os.unlink(answer_file)
    open(answer_file + ".ask", "w").close()
    deadline = time.time() + timeout
    while time.time() < deadline:
        if os.path.exists(answer_file):
            with open(answer_file) as file:
                bytes_, blocks = file.read().split()
            return int(bytes_), int(blocks)
        time.sleep(0.02)
    sys.exit("the host did not say what it has allocated (is livebytes.so loaded?)")


def resident_mappings(pid):
    """The resident bytes of each of `pid`'s mappings, keyed by (start address, what is mapped:
    a file's path, `[heap]`, `[stack]`, or `anonymous`), from /proc/PID/smaps. Keyed by start
    rather than range, so that a mapping that grows (the heap) stays one entry."""
    mappings, key = {}, None
    with open(f"/proc/{pid}/smaps") as smaps:
        for line in smaps:
            fields = line.split()
            if re.match(r"^[0-9a-f]+-[0-9a-f]+ ", line):
                key = (int(fields[0].split("-")[0], 16), fields[5] if len(fields) > 5 else "anonymous")
            elif fields[0] == "Rss:" and key is not None:
                mappings[key] = int(fields[1]) * 1024
    return mappings


def mapping_growth(before, after, limit=6):
    """What grew or shrank between two `resident_mappings` readings, largest change first, as
    text: `[heap] +28.0 KiB, anonymous @7f12.. +4.0 KiB (new)`; at most `limit` entries."""
    changes = []
    for key in set(before) | set(after):
        change = after.get(key, 0) - before.get(key, 0)
        if change:
            start, name = key
            # [heap] and [stack] are one each; anything else is told apart by where it starts.
            label = name if name.startswith("[") else f"{os.path.basename(name)} @{start:x}"
            note = " (new)" if key not in before else " (gone)" if key not in after else ""
            changes.append((abs(change), f"{label} {change / 1024:+.1f} KiB{note}"))
    changes.sort(reverse=True)
    return ", ".join(text for _, text in changes[:limit]) or "no mapping changed"
