#!/usr/bin/env python3
"""An independent client of the Atrium wire protocol, written from docs/PROTOCOL.md with
Python's socket and cbor2 and nothing of Atrium's: it pings the Roman ping service and the
Echo service of a running host, and checks every answer against the contract.

    contract_client.py PORT        prints "N passed, 0 failed" and exits 0 when all is right
"""
import datetime
import socket
import struct
import sys

import cbor2

ROMAN = ("5085ShawnHenry.RomanTestApp_jsjw7knzsgcce", "com.microsoft.test.cdppingpongservice")
ECHO = ("atrium.examples.echo", "atrium.echo")


class Client:
    def __init__(self, port):
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=10)

    def send(self, frame):
        body = cbor2.dumps(frame)
        self.sock.sendall(struct.pack(">I", len(body)) + body)

    def receive(self):
        (length,) = struct.unpack(">I", self.exactly(4))
        return cbor2.loads(self.exactly(length))

    def exactly(self, count):
        data = b""
        while len(data) < count:
            chunk = self.sock.recv(count - len(data))
            if not chunk:
                raise EOFError("the host closed the connection")
            data += chunk
        return data


def main(port):
    checks = []

    def check(name, condition):
        checks.append((name, bool(condition)))

    client = Client(port)
    client.send({"type": "hello", "version": 1, "clientId": "python-contract-client"})
    welcome = client.receive()
    check("welcome", welcome["type"] == "welcome" and welcome["version"] == 1 and welcome["platform"] == "linux")
    check("limits", set(welcome["limits"]) >= {"maxMessageBytes", "maxFrameBytes", "maxChannels", "maxInFlight"})
    # Optional in the contract; this host says it, where the contract puts it.
    timeout = welcome["limits"].get("responseTimeoutSeconds")
    check("response timeout", isinstance(timeout, int) and timeout > 0)

    client.send({"type": "ping", "id": 1})
    check("pong", client.receive() == {"type": "pong", "id": 1})

    client.send({"type": "open", "channel": 1, "package": ROMAN[0], "service": ROMAN[1]})
    check("opened roman", client.receive() == {"type": "opened", "channel": 1, "status": 0})
    when = datetime.datetime(2026, 11, 21, 5, 0, 0, 250000, tzinfo=datetime.timezone.utc)
    body = cbor2.dumps({"type": "request", "channel": 1, "id": 7,
                        "message": {"Type": "ping", "CreationDate": when, "TargetId": "python"}},
                       datetime_as_timestamp=True)
    client.sock.sendall(struct.pack(">I", len(body)) + body)
    answer = client.receive()
    check("pong status", answer["type"] == "response" and answer["id"] == 7 and answer["status"] == 0)
    check("pong message", answer["message"] == {"Type": "pong", "CreationDate": when, "TargetId": "python"})

    client.send({"type": "open", "channel": 2, "package": ECHO[0], "service": ECHO[1]})
    check("opened echo", client.receive()["status"] == 0)
    message = {"text": "ünï 水", "int": -(2**63), "double": 1.5, "bytes": b"\x00\xff", "list": [1, 2, 3],
               "nested": {"deeper": {"ok": True}}}
    client.send({"type": "request", "channel": 2, "id": 8, "message": message})
    echoed = client.receive()
    check("echo", echoed["status"] == 0 and echoed["message"] == message)

    client.send({"type": "open", "channel": 3, "package": "no.such.package", "service": "x"})
    refused = client.receive()
    check("not installed", {k: refused[k] for k in ("type", "channel", "status")} == {"type": "opened", "channel": 3, "status": 1}
          and set(refused) <= {"type", "channel", "status", "error"})
    check("why", refused.get("error") == 'no package "no.such.package" is installed')

    client.send({"type": "request", "channel": 2, "id": 9, "message": {"bad": None}})
    refused = client.receive()
    check("not a ValueSet", refused["status"] == 1 and "bad" in refused.get("error", ""))

    client.send({"type": "apps", "id": 10})
    apps = client.receive()
    check("apps", ROMAN[0] in {app["package"] for app in apps["apps"]})

    failed = [name for name, ok in checks if not ok]
    for name in failed:
        print(f"failed: {name}", file=sys.stderr)
    print(f"{len(checks) - len(failed)} passed, {len(failed)} failed")
    return 0 if not failed else 1


if __name__ == "__main__":
    sys.exit(main(int(sys.argv[1])))
