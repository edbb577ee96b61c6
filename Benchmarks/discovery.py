#!/usr/bin/env python3
"""How fast a RemoteSystemWatcher sees a host come and go, on two machines on one.

Builds atriumd and atrium (release), makes two network namespaces joined by a veth pair,
each with its own system bus (dbus-daemon) and avahi-daemon (in a private mount namespace),
runs `atrium discover --watch --json` in one, and starts and stops atriumd in the other,
ROUNDS times. Prints, per round and as medians:

  added:   from atriumd printing "ready" to the watcher's `added` event;
  removed: from SIGTERM to atriumd to the watcher's `removed` event (the watcher's default
           removal delay of 1 s included: a host that comes back within it is an update).

and, in the same rounds, Avahi's own floor: `avahi-publish` of a service in the host
namespace to `avahi-browse -r` resolving it in the other, and SIGTERM to avahi-publish to
avahi-browse's removal.

Needs root, iproute2, dbus-daemon and avahi-daemon (apt: avahi-daemon avahi-utils).

    sudo python3 Benchmarks/discovery.py --rounds 10
"""

import argparse
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def run(*command, **options):
    return subprocess.run(command, check=True, capture_output=True, text=True, **options)


class Lab:
    def __init__(self, folder):
        self.folder = folder
        tag = str(os.getpid() % 10000)
        self.host, self.client = f"atrium-bh-{tag}", f"atrium-bc-{tag}"
        self.address = "10.78.0.1"
        steps = [
            ["netns", "add", self.host], ["netns", "add", self.client],
            ["link", "add", f"bh{tag}", "type", "veth", "peer", "name", f"bc{tag}"],
            ["link", "set", f"bh{tag}", "netns", self.host], ["link", "set", f"bc{tag}", "netns", self.client],
            ["-n", self.host, "addr", "add", f"{self.address}/24", "dev", f"bh{tag}"],
            ["-n", self.client, "addr", "add", "10.78.0.2/24", "dev", f"bc{tag}"],
            ["-n", self.host, "link", "set", f"bh{tag}", "up"], ["-n", self.client, "link", "set", f"bc{tag}", "up"],
        ]
        for step in steps:
            run("ip", *step)
        os.makedirs("/run/avahi-daemon", exist_ok=True)
        self.processes = []
        for namespace in (self.host, self.client):
            side = os.path.join(folder, namespace)
            os.makedirs(side)
            with open(os.path.join(side, "bus.conf"), "w") as file:
                file.write(f"""<!DOCTYPE busconfig PUBLIC "-//freedesktop//DTD D-Bus Bus Configuration 1.0//EN"
 "http://www.freedesktop.org/standards/dbus/1.0/busconfig.dtd">
<busconfig><type>system</type><listen>unix:path={side}/bus</listen><auth>EXTERNAL</auth>
<policy context="default"><allow user="*"/><allow own="*"/><allow send_type="method_call"/>
<allow send_type="signal"/><allow send_destination="*"/><allow receive_type="*"/></policy></busconfig>
""")
            with open(os.path.join(side, "avahi.conf"), "w") as file:
                file.write(f"[server]\nhost-name={namespace}\nuse-ipv6=no\nenable-dbus=yes\n"
                           "[publish]\npublish-workstation=no\npublish-hinfo=no\n")
            self.processes.append(subprocess.Popen(
                ["dbus-daemon", f"--config-file={side}/bus.conf", "--nofork", "--nopidfile"],
                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
            for _ in range(250):
                if os.path.exists(f"{side}/bus"):
                    break
                time.sleep(0.02)
            log = open(os.path.join(side, "avahi.log"), "w")
            self.processes.append(subprocess.Popen(
                ["ip", "netns", "exec", namespace, "unshare", "-m", "sh", "-c",
                 f"mount -t tmpfs tmpfs /run/avahi-daemon && exec avahi-daemon -f {side}/avahi.conf "
                 "--no-chroot --no-drop-root --no-rlimits"],
                env=self.env(namespace), stdout=log, stderr=log))
            for _ in range(400):
                if "Server startup complete" in open(os.path.join(side, "avahi.log")).read():
                    break
                time.sleep(0.025)

    def env(self, namespace):
        return dict(os.environ, DBUS_SYSTEM_BUS_ADDRESS=f"unix:path={self.folder}/{namespace}/bus",
                    XDG_STATE_HOME=os.path.join(self.folder, "client-state"))

    def close(self):
        for process in reversed(self.processes):
            process.kill()  # dbus-daemon blocks SIGTERM
            process.wait()
        for namespace in (self.host, self.client):
            subprocess.run(["ip", "netns", "del", namespace])


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=10)
    arguments = parser.parse_args()
    if os.geteuid() != 0 or not shutil.which("avahi-daemon") or not shutil.which("dbus-daemon"):
        sys.exit("discovery.py needs root, avahi-daemon and dbus-daemon (apt: avahi-daemon avahi-utils)")
    run("swift", "build", "-c", "release", "--product", "atriumd", cwd=ROOT)
    run("swift", "build", "-c", "release", "--product", "atrium", cwd=ROOT)
    binaries = run("swift", "build", "-c", "release", "--show-bin-path", cwd=ROOT).stdout.strip()
    folder = tempfile.mkdtemp(prefix="atrium-discovery-")
    lab = Lab(folder)
    events = []  # (time, event)
    watcher = subprocess.Popen(
        ["ip", "netns", "exec", lab.client, f"{binaries}/atrium", "discover", "--watch", "--json"],
        env=lab.env(lab.client), stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)

    def read_events():
        for line in watcher.stdout:
            try:
                events.append((time.monotonic(), json.loads(line)))
            except ValueError:
                pass
    threading.Thread(target=read_events, daemon=True).start()
    browsed = []  # (time, "+" / "=" / "-")
    browser = subprocess.Popen(
        ["ip", "netns", "exec", lab.client, "avahi-browse", "-rp", "_atrium-floor._tcp"],
        env=lab.env(lab.client), stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)

    def read_browsed():
        for line in browser.stdout:
            browsed.append((time.monotonic(), line[:1]))
    threading.Thread(target=read_browsed, daemon=True).start()

    def wait_browsed(kind, since, limit=15):
        deadline = time.monotonic() + limit
        while time.monotonic() < deadline:
            for at, seen in browsed:
                if at >= since and seen == kind:
                    return at
            time.sleep(0.005)
        return None

    def wait_for(kind, since, limit=15):
        deadline = time.monotonic() + limit
        while time.monotonic() < deadline:
            for at, event in events:
                if at >= since and event.get("event") == kind:
                    return at
            time.sleep(0.005)
        return None

    added, removed, floor_added, floor_removed = [], [], [], []
    try:
        for round_number in range(arguments.rounds):
            host = subprocess.Popen(
                ["ip", "netns", "exec", lab.host, f"{binaries}/atriumd", "--manifests", f"{ROOT}/manifests",
                 "--listen", f"{lab.address}:0", "--socket", "off", "--state-dir", f"{folder}/host-state",
                 "--advertise-name", "Bench Host"],
                env=lab.env(lab.host), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
            ready = None
            for line in host.stdout:
                if "atriumd: ready" in line:
                    ready = time.monotonic()
                    break
            threading.Thread(target=host.stdout.read, daemon=True).start()
            if ready is None:
                sys.exit("atriumd ended before it was ready")
            seen = wait_for("added", ready)
            time.sleep(0.5)
            stopped = time.monotonic()
            host.send_signal(signal.SIGTERM)
            host.wait()
            gone = wait_for("removed", stopped)
            if seen is None or gone is None:
                print(f"round {round_number + 1}: no {'added' if seen is None else 'removed'} event within 15 s")
                continue
            added.append((seen - ready) * 1000)
            removed.append((gone - stopped) * 1000)
            time.sleep(0.5)
            started = time.monotonic()
            publisher = subprocess.Popen(
                ["ip", "netns", "exec", lab.host, "avahi-publish", "-s", "Floor", "_atrium-floor._tcp", "9", "id=x"],
                env=lab.env(lab.host), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            resolved = wait_browsed("=", started)
            time.sleep(0.5)
            stopped_floor = time.monotonic()
            publisher.terminate()
            publisher.wait()
            withdrawn = wait_browsed("-", stopped_floor)
            if resolved is not None and withdrawn is not None:
                floor_added.append((resolved - started) * 1000)
                floor_removed.append((withdrawn - stopped_floor) * 1000)
            print(f"round {round_number + 1}: added {added[-1]:.0f} ms after ready, "
                  f"removed {removed[-1]:.0f} ms after SIGTERM; Avahi alone: "
                  + (f"{floor_added[-1]:.0f} and {floor_removed[-1]:.0f} ms" if floor_added else "-"))
            time.sleep(0.5)
    finally:
        watcher.terminate()
        browser.terminate()
        lab.close()
        shutil.rmtree(folder, ignore_errors=True)
    if added:
        print(f"median of {len(added)}: added {statistics.median(added):.0f} ms "
              f"(min {min(added):.0f}, max {max(added):.0f}), removed {statistics.median(removed):.0f} ms "
              f"(min {min(removed):.0f}, max {max(removed):.0f})")
    if floor_added:
        print(f"Avahi alone, median of {len(floor_added)}: resolved {statistics.median(floor_added):.0f} ms after "
              f"avahi-publish started, removed {statistics.median(floor_removed):.0f} ms after it ended; ratios: "
              f"added {statistics.median(added) / statistics.median(floor_added):.2f}, "
              f"removed {statistics.median(removed) / statistics.median(floor_removed):.2f}")


if __name__ == "__main__":
    main()
