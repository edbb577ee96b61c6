import AtriumProtocol
import AtriumTesting
import AtriumValues
import Crypto
import Foundation
import Testing

@testable import AtriumClient

/// Transfers over HTTPS (CONTRACT section 8), with the clients people use against a real
/// atriumd serving a folder with Files: curl (through the command `atrium link` prints),
/// Python's `http.client` over `ssl`, and raw requests of a hostile client.
@Suite(.serialized)
struct TransferHTTPTests {
    /// A new empty folder.
    static func folder(_ name: String) throws -> URL {
        let folder = TLSTests.temporaryFolder(name)
        try FileManager.default.createDirectory(at: folder, withIntermediateDirectories: true)
        return folder
    }

    /// Runs the probes of `probes` (see ``probeScript``) against `port`; their results, in order.
    static func probe(port: Int, _ probes: [[String: Any]]) async throws -> [[String: Any]] {
        let folder = try Self.folder("http-probe")
        let script = folder.appendingPathComponent("probe.py")
        try probeScript.write(to: script, atomically: true, encoding: .utf8)
        let input = folder.appendingPathComponent("probes.json")
        try JSONSerialization.data(withJSONObject: probes).write(to: input)
        let run = try await runProgram("python3", [script.path, "\(port)", input.path])
        #expect(run.status == 0, "\(run.output)")
        let line = run.output.split(separator: "\n").last.map(String.init) ?? ""
        return (try JSONSerialization.jsonObject(with: Data(line.utf8)) as? [[String: Any]]) ?? []
    }

    static func sha256(_ data: Data) -> String { SHA256.hash(data: data).map { String(format: "%02x", $0) }.joined() }

    /// The clients' side of the probes: each a request over `http.client` (method, path,
    /// headers) or raw bytes over TLS with ALPN `http/1.1` (`raw`: parts sent with pauses,
    /// then read until the host closes or `wait` seconds pass), with what came back.
    static let probeScript = #"""
        import hashlib, json, os, socket, ssl, sys, time
        from http.client import HTTPSConnection

        port = int(sys.argv[1])
        probes = json.load(open(sys.argv[2]))

        def context():
            c = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
            c.check_hostname = False
            c.verify_mode = ssl.CERT_NONE
            c.set_alpn_protocols(["http/1.1"])
            return c

        def payload(part):
            if "file" not in part:
                return part.get("bytes", "").encode("latin-1")
            with open(part["file"], "rb") as f:
                f.seek(part.get("from", 0))
                return f.read(part["to"] - part.get("from", 0)) if "to" in part else f.read()

        def request(p):
            conn = HTTPSConnection("127.0.0.1", port, context=context(), timeout=20)
            conn.request(p["method"], p["path"], body=payload(p) if "file" in p else None, headers=p.get("headers", {}))
            r = conn.getresponse()
            body = r.read()
            conn.close()
            return {"status": r.status, "headers": {k.lower(): v for k, v in r.getheaders()},
                    "length": len(body), "sha256": hashlib.sha256(body).hexdigest(),
                    "text": body[:300].decode("latin-1")}

        def raw(p):
            s = context().wrap_socket(socket.create_connection(("127.0.0.1", port)))
            start = time.monotonic()
            try:
                for part in p["raw"]:
                    s.sendall(payload(part))
                    time.sleep(part.get("pause", 0))
            except (BrokenPipeError, ConnectionResetError, ssl.SSLError):
                pass  # the host answered and closed before taking it all
            s.settimeout(0.2)
            got = b""
            closed = False
            while time.monotonic() - start < p.get("wait", 5):
                try:
                    chunk = s.recv(65536)
                except socket.timeout:
                    continue
                except (ConnectionResetError, ssl.SSLError):
                    closed = True
                    break
                if not chunk:
                    closed = True
                    break
                got += chunk
                if p.get("stopAfter") and len(got) >= p["stopAfter"]:
                    break
            s.close()
            return {"text": got[:3000].decode("latin-1"), "received": len(got), "closed": closed,
                    "seconds": time.monotonic() - start}

        def resume(p):
            # What a tus client does after a cut: HEAD for the offset, then PATCH the rest.
            auth = {"Authorization": "Bearer " + p["bearer"], "Tus-Resumable": "1.0.0"}
            head = request({"method": "HEAD", "path": p["path"], "headers": auth})
            offset = int(head["headers"]["upload-offset"])
            headers = dict(auth)
            headers["Upload-Offset"] = str(offset)
            headers["Content-Type"] = p.get("type", "application/offset+octet-stream")
            headers.update(p.get("extra", {}))
            done = request({"method": "PATCH", "path": p["path"], "headers": headers, "file": p["file"], "from": offset})
            done["from"] = offset
            return done

        results = []
        held = []
        for p in probes:
            if "hold" in p:
                # Connections that complete TLS and say nothing (or a request they never read).
                for _ in range(p["hold"]):
                    plain = socket.socket()
                    if "rcvbuf" in p:
                        # A small receive buffer: what the client does not read stays with the host.
                        plain.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, p["rcvbuf"])
                    plain.connect(("127.0.0.1", port))
                    s = context().wrap_socket(plain)
                    sent = 0
                    if "send" in p:
                        # The host may stop reading before it has all of it: what it took counts.
                        data = p["send"].encode("latin-1")
                        s.settimeout(3)
                        try:
                            while sent < len(data):
                                sent += s.send(data[sent:sent + 65536])
                        except (socket.timeout, OSError, ssl.SSLError):
                            pass
                        s.settimeout(None)
                    held.append(s)
                results.append({"held": len(held), "sent": sent})
            elif "sleep" in p:
                time.sleep(p["sleep"])
                results.append({"slept": p["sleep"]})
            elif "waitFile" in p:
                # Until the test says (by making the file) that the host did what it waited for.
                deadline = time.monotonic() + p.get("timeout", 120)
                while not os.path.exists(p["waitFile"]) and time.monotonic() < deadline:
                    time.sleep(0.05)
                results.append({"waited": os.path.exists(p["waitFile"])})
            elif "drain" in p:
                # Reads each held connection until the host closes it (or `drain` seconds).
                drained = []
                for s in held:
                    s.settimeout(p["drain"])
                    got, closed = 0, False
                    try:
                        while True:
                            chunk = s.recv(1 << 20)
                            if not chunk:
                                closed = True
                                break
                            got += len(chunk)
                    except (socket.timeout, ConnectionResetError, ssl.SSLError) as error:
                        closed = not isinstance(error, socket.timeout)
                    drained.append({"received": got, "closed": closed})
                results.append({"drained": drained})
            elif "release" in p:
                for s in held:
                    s.close()
                held = []
                results.append({"released": True})
            elif "raw" in p:
                results.append(raw(p))
            elif "resume" in p:
                results.append(resume(p))
            else:
                results.append(request(p))
        for s in held:
            s.close()
        print(json.dumps(results))
        """#

    /// The `Transfer` uuid in what `atrium send` printed (`37(h'…')`).
    static func transfer(printedIn output: String) -> UUID? {
        guard let hex = output.firstMatch(of: /37\(h'([0-9a-f]{32})'\)/).map({ Array($0.1) }) else { return nil }
        return UUID(
            uuidString: [hex[0..<8], hex[8..<12], hex[12..<16], hex[16..<20], hex[20...]].map { String($0) }
                .joined(separator: "-"))
    }

    /// A device's connection over TLS (its transfers are its identity's), and a download it
    /// asked Files for.
    static func download(_ name: String, on device: AtriumConnection) async throws -> UUID {
        try await TransferClientTests.transfer(["Command": "get", "Name": .string(name)], on: device)
    }

    @Test func curlFetchesADownloadThroughTheLinkAtriumPrintsAndResumesWithDashC() async throws {
        guard (try? await runProgram("curl", ["--version"]))?.status == 0 else {
            Issue.record("curl is not installed (.ci/run installs it)")
            return
        }
        let (folder, manifests) = try TransferClientTests.served()
        let bytes = TransferClientTests.random(3_000_000)
        try bytes.write(to: folder.appendingPathComponent("photo.jpg"))
        let host = try await TestHost.start(manifests: manifests)
        let address = "127.0.0.1:\(host.port)"

        // The tool asks for the file (over TLS: the transfer is its identity's) and a link.
        let sent = try await atrium(
            [
                "send", address, "--package", TransferClientTests.package, "--service", TransferClientTests.service,
                "Command=get", "Name=photo.jpg",
            ])
        #expect(sent.status == 0, "\(sent.output)")
        let transfer = try #require(Self.transfer(printedIn: sent.output))
        let link = try await atrium(["link", transfer.uuidString, address])
        #expect(link.status == 0, "\(link.output)")
        #expect(
            link.output.contains("url: https://127.0.0.1:\(host.port)/transfers/\(transfer.uuidString.lowercased())"))
        let command = link.output.components(separatedBy: "\n\n").dropFirst().first ?? ""
        #expect(command.hasPrefix("curl --fail --insecure --pinnedpubkey 'sha256//"), "\(link.output)")

        // The command as printed, in a folder of its own where an interrupted run left the
        // first megabyte: it resumes from there (-C -).
        let work = try Self.folder("curl")
        let name = transfer.uuidString.lowercased()
        try bytes.prefix(1_000_000).write(to: work.appendingPathComponent(name))
        let fetched = try await runProgram(
            "bash", ["-c", command.replacingOccurrences(of: "\\\n", with: " ")], in: work)
        #expect(fetched.status == 0, "\(fetched.output)")
        #expect(try Data(contentsOf: work.appendingPathComponent(name)) == bytes)

        // Its outcome, over frames: completed.
        let listed = try await atrium(["transfers", address])
        #expect(listed.output.contains("\(transfer.uuidString.lowercased())  completed"), "\(listed.output)")

        // A key other than the host's is refused before anything moves.
        let pin = try #require(command.firstMatch(of: /sha256\/\/([A-Za-z0-9+\/=]+)/)?.1)
        let wrong = command.replacingOccurrences(of: String(pin), with: String(pin.reversed()))
            .replacingOccurrences(of: "-o '\(name)'", with: "-o 'other'")
        let refused = try await runProgram("bash", ["-c", wrong.replacingOccurrences(of: "\\\n", with: " ")], in: work)
        #expect(refused.status == 90, "curl: the pinned key does not match: \(refused.output)")
        #expect(!FileManager.default.fileExists(atPath: work.appendingPathComponent("other").path))
        #expect(await host.stop() == 0)
    }

    @Test func atriumLinkPrintsTusCommandsForAnUploadThatCurlRuns() async throws {
        guard (try? await runProgram("curl", ["--version"]))?.status == 0 else {
            Issue.record("curl is not installed (.ci/run installs it)")
            return
        }
        let (folder, manifests) = try TransferClientTests.served()
        let host = try await TestHost.start(manifests: manifests)
        let address = "127.0.0.1:\(host.port)"
        let work = try Self.folder("curl-up")
        let source = work.appendingPathComponent("it's here.bin")
        let bytes = TransferClientTests.random(700_000)
        try bytes.write(to: source)
        // The tool asks Files to take the file (over TLS: the upload is its identity's) and keeps
        // it as `atrium put` would have, had it been cut before sending anything.
        let sent = try await atrium(
            [
                "send", address, "--package", TransferClientTests.package, "--service", TransferClientTests.service,
                "Command=put", "Name=up.bin", "Size=\(bytes.count)",
            ])
        #expect(sent.status == 0, "\(sent.output)")
        let transfer = try #require(Self.transfer(printedIn: sent.output))
        try ClientTransferStore(folder: toolStateHome.appendingPathComponent("atrium/client-transfers")).save(
            ClientTransferRecord(
                transfer: transfer, direction: "upload", host: address, package: TransferClientTests.package,
                service: TransferClientTests.service, path: source.path, size: Int64(bytes.count)))
        let link = try await atrium(["link", String(transfer.uuidString.lowercased().prefix(8))])
        #expect(link.status == 0, "\(link.output)")
        let commands = (link.output.components(separatedBy: "\n\n").dropFirst().first ?? "")
            .replacingOccurrences(of: "\\\n", with: " ").split(separator: "\n").map(String.init)
        try #require(commands.count == 2, "\(link.output)")
        #expect(
            commands[0].contains(" -I ")
                && commands[1].contains("-X PATCH -T '\(source.path.replacingOccurrences(of: "'", with: "'\\''"))'"))
        let head = try await runProgram("bash", ["-c", commands[0]], in: work)
        #expect(head.status == 0 && head.output.contains("Upload-Offset: 0"), "\(head.output)")
        let patch = try await runProgram("bash", ["-c", commands[1]], in: work)
        #expect(patch.status == 0, "\(patch.output)")
        var state: TransferStateFrame?
        let device = try await AtriumConnection.connect(
            to: AtriumEndpoint(.tcp(host: "127.0.0.1", port: host.port)),
            tls: ClientTLS(identity: try ClientTLS.defaultIdentity(in: toolStateHome.appendingPathComponent("atrium"))))
        for _ in 0..<100 {
            state = try await device.transfers().transfers.first { $0.transfer == transfer }
            if state?.state == "completed" { break }
            try await Task.sleep(for: .milliseconds(50))
        }
        #expect(state?.state == "completed", "\(String(describing: state))")
        #expect(try Data(contentsOf: folder.appendingPathComponent("up.bin")) == bytes)
        await device.close()
        #expect(await host.stop() == 0)
    }

    @Test func aDownloadBegunWithFramesIsFinishedOverHTTPAndTheReverse() async throws {
        let (folder, manifests) = try TransferClientTests.served()
        let bytes = TransferClientTests.random(2_000_000)
        try bytes.write(to: folder.appendingPathComponent("a.bin"))
        let host = try await TestHost.start(manifests: manifests)
        let device = try await PairingTests.device(host)
        let partials = try Self.folder("http-partials")

        // Frames first: paused past 300 KB; then HTTP from where the frames stopped.
        let first = try await Self.download("a.bin", on: device)
        let operation = DownloadOperation(
            transfer: first, destination: partials.appendingPathComponent("a.bin"), connection: device,
            partialFolder: partials)
        operation.pauseOnce(atBytes: 300_000)
        #expect(try await operation.run(window: 128 << 10).state == "waiting")
        let held = try Data(contentsOf: operation.partialFile)
        let link = try await device.transferLink(first)
        #expect(link.status == .success && link.url.hasSuffix("/transfers/\(first.uuidString.lowercased())"))
        let rest = try await Self.probe(
            port: host.port,
            [
                [
                    "method": "GET", "path": "/transfers/\(first)",
                    "headers": [
                        "Authorization": "Bearer \(link.bearer)", "Range": "bytes=\(held.count)-",
                    ],
                ]
            ])
        #expect(rest.first?["status"] as? Int == 206)
        #expect(rest.first?["sha256"] as? String == Self.sha256(bytes.suffix(from: held.count)))
        let states = try await device.transfers().transfers
        #expect(states.first { $0.transfer == first }?.state == "completed")

        // HTTP first, then frames from the bytes HTTP brought.
        let second = try await Self.download("a.bin", on: device)
        let secondLink = try await device.transferLink(second)
        let head = try await Self.probe(
            port: host.port,
            [
                [
                    "method": "GET", "path": "/transfers/\(second)",
                    "headers": [
                        "Authorization": "Bearer \(secondLink.bearer)", "Range": "bytes=0-499999",
                    ],
                ]
            ])
        #expect(head.first?["status"] as? Int == 206 && head.first?["length"] as? Int == 500_000)
        let resumed = DownloadOperation(
            transfer: second, destination: partials.appendingPathComponent("b.bin"), connection: device,
            partialFolder: partials)
        try bytes.prefix(500_000).write(to: resumed.partialFile)
        #expect(try await resumed.run().state == "completed")
        #expect(try Data(contentsOf: partials.appendingPathComponent("b.bin")) == bytes)
        await device.close()
        #expect(await host.stop() == 0)
    }

    @Test func aLinkAnswersAsAStaticFileAndAnythingElseIs404() async throws {
        let (folder, manifests) = try TransferClientTests.served()
        let bytes = TransferClientTests.random(300_000)
        try bytes.write(to: folder.appendingPathComponent("report.pdf"))
        try Data("naïve".utf8).write(to: folder.appendingPathComponent("résumé — 2026.txt"))
        let host = try await TestHost.start(manifests: manifests)
        let device = try await PairingTests.device(host)
        let other = try await PairingTests.device(host)
        let transfer = try await Self.download("report.pdf", on: device)
        let link = try await device.transferLink(transfer)
        let named = try await Self.download("résumé — 2026.txt", on: device)
        let namedLink = try await device.transferLink(named)
        // Another device's transfer, and that device's own link to it.
        let foreign = try await Self.download("report.pdf", on: other)
        let foreignLink = try await other.transferLink(foreign)
        // A device cannot have a link to a transfer of another.
        let stolen = try await device.transferLink(foreign)
        #expect(stolen.status == .failure && stolen.error == "notFound" && stolen.bearer.isEmpty)

        let bearer = ["Authorization": "Bearer \(link.bearer)"]
        let path = "/transfers/\(transfer)"
        func get(_ headers: [String: String], method: String = "GET", path: String = path) -> [String: Any] {
            ["method": method, "path": path, "headers": bearer.merging(headers) { $1 }]
        }
        let results = try await Self.probe(
            port: host.port,
            [
                get([:], method: "HEAD"),
                get(["Range": "bytes=100-199"]),
                get(["Range": "bytes=-10"]),
                get(["Range": "bytes=300000-"]),
                get(["Range": "bytes=0-9,20-29"]),
                get(["Range": "bytes=100-199", "If-Range": "\"not-the-tag\""]),
                [
                    "method": "GET", "path": "/transfers/\(named)",
                    "headers": ["Authorization": "Bearer \(namedLink.bearer)"],
                ],
                ["method": "GET", "path": path, "headers": ["Authorization": "Bearer x\(link.bearer)"]],
                ["method": "GET", "path": path, "headers": [:]],
                ["method": "GET", "path": "/transfers/\(foreign)", "headers": bearer],
                ["method": "GET", "path": path, "headers": ["Authorization": "Bearer \(foreignLink.bearer)"]],
                get([:], path: "/"),
                get([:], path: "/transfers/\(UUID())"),
                get([:], method: "POST"),
            ])
        try #require(results.count == 14)
        let head = results[0]["headers"] as? [String: String] ?? [:]
        #expect(
            results[0]["status"] as? Int == 200 && head["content-length"] == "300000"
                && results[0]["length"] as? Int == 0)
        #expect(
            head["accept-ranges"] == "bytes" && head["content-disposition"] == "attachment; filename=\"report.pdf\"")
        let tag = try #require(head["etag"])
        #expect(tag.hasPrefix("\"") && tag.hasSuffix("\"") && head["last-modified"]?.hasSuffix(" GMT") == true)
        #expect(results[1]["status"] as? Int == 206 && results[1]["sha256"] as? String == Self.sha256(bytes[100..<200]))
        #expect((results[1]["headers"] as? [String: String])?["content-range"] == "bytes 100-199/300000")
        #expect(results[2]["status"] as? Int == 206 && results[2]["sha256"] as? String == Self.sha256(bytes.suffix(10)))
        #expect(results[3]["status"] as? Int == 416)
        #expect((results[3]["headers"] as? [String: String])?["content-range"] == "bytes */300000")
        #expect(
            results[4]["status"] as? Int == 200 && results[4]["length"] as? Int == 300_000, "several ranges: the whole")
        #expect(results[5]["status"] as? Int == 200 && results[5]["sha256"] as? String == Self.sha256(bytes))
        let disposition = (results[6]["headers"] as? [String: String])?["content-disposition"]
        #expect(
            disposition
                == "attachment; filename=\"r_sum_ _ 2026.txt\"; filename*=UTF-8''r%C3%A9sum%C3%A9%20%E2%80%94%202026.txt"
        )
        for index in 7...12 { #expect(results[index]["status"] as? Int == 404, "probe \(index): \(results[index])") }
        #expect(
            results[13]["status"] as? Int == 405
                && (results[13]["headers"] as? [String: String])?["allow"] == "GET, HEAD, OPTIONS")

        // If-Range with the file's own tag: the range. Two requests pipelined in one write:
        // both answered, in order.
        let pipelined = "HEAD \(path) HTTP/1.1\r\nHost: h\r\nAuthorization: Bearer \(link.bearer)\r\n\r\n"
        let again = try await Self.probe(
            port: host.port,
            [
                get(["Range": "bytes=100-199", "If-Range": tag]),
                [
                    "raw": [["bytes": pipelined + pipelined.replacingOccurrences(of: "HEAD", with: "GET")]], "wait": 5,
                    "stopAfter": 300_000,
                ],
            ])
        #expect(again.first?["status"] as? Int == 206)
        let raw = again.last?["text"] as? String ?? ""
        #expect(raw.components(separatedBy: "HTTP/1.1 200 OK").count == 3, "\(raw.prefix(400))")
        #expect(host.log.contains("HTTP request refused"))
        await device.close()
        await other.close()
        #expect(await host.stop() == 0)
    }

    @Test func hostileHTTPIsAnsweredAndClosedWhileOtherClientsGoOn() async throws {
        let (folder, manifests) = try TransferClientTests.served()
        // Larger than what the sockets' buffers hold between the two sides (32 MiB here).
        let big = folder.appendingPathComponent("big.bin")
        #expect(FileManager.default.createFile(atPath: big.path, contents: nil))
        try FileHandle(forWritingTo: big).truncate(atOffset: 64 << 20)
        let host = try await TestHost.start(
            manifests: manifests, arguments: ["--transfer-http-timeout", "1"])
        let device = try await PairingTests.device(host)
        let transfer = try await Self.download("big.bin", on: device)
        let link = try await device.transferLink(transfer)
        let path = "/transfers/\(transfer)"
        let auth = "Authorization: Bearer \(link.bearer)\r\n"
        func raw(_ text: String, pause: Double = 0, wait: Double = 5) -> [String: Any] {
            ["raw": [["bytes": text, "pause": pause]], "wait": wait]
        }
        // Made once the host has given up on the client that does not read.
        let gaveUp = try Self.folder("http-gave-up").appendingPathComponent("gave-up")
        async let probed = Self.probe(
            port: host.port,
            [
                raw("GET /transfers/\(String(repeating: "a", count: 5000)) HTTP/1.1\r\nHost: h\r\n\r\n"),
                raw("GET \(path) HTTP/1.1\r\nHost: h\r\n\(auth)X-Big: \(String(repeating: "b", count: 20000))\r\n\r\n"),
                raw(
                    "GET \(path) HTTP/1.1\r\nHost: h\r\n\(auth)X-Huge: \(String(repeating: "c", count: 100_000))\r\n\r\n"
                ),
                raw(
                    "POST \(path) HTTP/1.1\r\nHost: h\r\n\(auth)Content-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n"
                ),
                raw("POST \(path) HTTP/1.1\r\nHost: h\r\n\(auth)Content-Length: 5\r\nContent-Length: 6\r\n\r\nhello"),
                raw("GET \(path) HTTP/1.1\r\nHost: h\r\n\(auth)Content-Length: 3\r\n\r\nabc"),
                // A head that never ends: closed after the timeout (1 s), with no answer.
                raw("GET \(path) HTTP/1.1\r\nHost: h\r\n", wait: 6),
                // A request whose answer is never read: closed after the timeout too.
                ["hold": 1, "send": "GET \(path) HTTP/1.1\r\nHost: h\r\n\(auth)\r\n"],
                // Meanwhile another client is answered at once.
                ["method": "HEAD", "path": path, "headers": ["Authorization": "Bearer \(link.bearer)"]],
                // Until the host has given up on the client that does not read (however long
                // it takes a loaded machine to fill the sockets' buffers).
                ["waitFile": gaveUp.path, "timeout": 120],
                ["drain": 10],
            ])
        let readLess = await eventually(within: .seconds(120)) {
            host.log.contains("waiting for its client to read a response")
        }
        #expect(readLess, "the host did not give up on the client that does not read")
        #expect(FileManager.default.createFile(atPath: gaveUp.path, contents: nil))
        let results = try await probed
        try #require(results.count == 11)
        func status(_ index: Int) -> String {
            (results[index]["text"] as? String ?? "").components(separatedBy: "\r\n").first ?? ""
        }
        #expect(status(0) == "HTTP/1.1 414 URI Too Long" && results[0]["closed"] as? Bool == true)
        #expect(status(1) == "HTTP/1.1 431 Request Header Fields Too Large" && results[1]["closed"] as? Bool == true)
        #expect(status(2) == "HTTP/1.1 431 Request Header Fields Too Large" && results[2]["closed"] as? Bool == true)
        #expect(status(3) == "HTTP/1.1 400 Bad Request" && results[3]["closed"] as? Bool == true, "\(results[3])")
        #expect(status(4) == "HTTP/1.1 400 Bad Request" && results[4]["closed"] as? Bool == true, "\(results[4])")
        #expect(status(5) == "HTTP/1.1 400 Bad Request" && results[5]["closed"] as? Bool == true, "\(results[5])")
        #expect(results[6]["text"] as? String == "" && results[6]["closed"] as? Bool == true)
        #expect((results[6]["seconds"] as? Double ?? 99) < 5)
        #expect(results[8]["status"] as? Int == 200)
        // The client that never read: closed, having been sent what the socket buffers hold,
        // not the file.
        let drained = try #require((results[10]["drained"] as? [[String: Any]])?.first)
        #expect(drained["closed"] as? Bool == true && (drained["received"] as? Int ?? .max) < 64 << 20, "\(drained)")
        // Frames were never disturbed.
        #expect(try await device.ping() > .zero)
        await device.close()
        #expect(await host.stop() == 0)
    }

    @Test func aLinkExpiresAndANewOneAdmitsAgainAlsoAfterARestart() async throws {
        let (folder, manifests) = try TransferClientTests.served()
        try Data("x".utf8).write(to: folder.appendingPathComponent("small.txt"))
        let state = try Self.folder("http-state").path
        func head(_ transfer: UUID, _ bearer: String) -> [String: Any] {
            ["method": "HEAD", "path": "/transfers/\(transfer)", "headers": ["Authorization": "Bearer \(bearer)"]]
        }
        // Links that live 2 s: the first one has expired once 2.5 s have gone, however slow
        // the machine is.
        let short = try await TestHost.start(
            manifests: manifests, arguments: ["--transfer-link-lifetime", "2", "--state-dir", state])
        let identity = try Self.folder("http-device")
        var device = try await PairingTests.device(short, identity: identity)
        let transfer = try await Self.download("small.txt", on: device)
        let old = try await device.transferLink(transfer)
        try await Task.sleep(for: .seconds(2.5))
        let expired = try await Self.probe(port: short.port, [head(transfer, old.bearer)])
        #expect(expired.first?["status"] as? Int == 404)
        await device.close()
        #expect(await short.stop() == 0)

        // The same transfer on a host whose links live an hour: a new link admits, the old
        // one still does not.
        let arguments = ["--transfer-link-lifetime", "3600", "--state-dir", state]
        let host = try await TestHost.start(manifests: manifests, arguments: arguments)
        device = try await PairingTests.device(host, identity: identity)
        let fresh = try await device.transferLink(transfer)
        #expect(fresh.status == .success && fresh.bearer != old.bearer && fresh.expires.date > old.expires.date)
        let results = try await Self.probe(port: host.port, [head(transfer, fresh.bearer), head(transfer, old.bearer)])
        #expect(results.first?["status"] as? Int == 200 && results.last?["status"] as? Int == 404, "\(results)")
        await device.close()
        #expect(await host.stop() == 0)

        // The link is in the transfer's journal record: it admits after a restart too.
        let restarted = try await TestHost.start(manifests: manifests, arguments: arguments)
        let again = try await Self.probe(port: restarted.port, [head(transfer, fresh.bearer)])
        #expect(again.first?["status"] as? Int == 200)
        #expect(await restarted.stop() == 0)
    }

    /// A host started with `arguments`, a device, a download of a one-byte file, its link, and
    /// a raw HEAD request of it.
    static func smallDownload(_ arguments: [String]) async throws
        -> (TestHost, AtriumConnection, UUID, TransferLinkFrame, String)
    {
        let (folder, manifests) = try TransferClientTests.served()
        try Data("x".utf8).write(to: folder.appendingPathComponent("small.txt"))
        let host = try await TestHost.start(manifests: manifests, arguments: arguments)
        let device = try await PairingTests.device(host)
        let transfer = try await Self.download("small.txt", on: device)
        let link = try await device.transferLink(transfer)
        let head = "HEAD /transfers/\(transfer) HTTP/1.1\r\nHost: h\r\nAuthorization: Bearer \(link.bearer)\r\n\r\n"
        return (host, device, transfer, link, head)
    }

    @Test func moreHTTPConnectionsThanAllowedAreAnswered503UntilOnesClose() async throws {
        let (host, device, _, _, head) = try await Self.smallDownload(["--transfer-http-connections", "3"])
        // Three connections that asked for the link's head and went quiet: answered, they wait
        // for a next request (30 s), each holding its place meanwhile.
        let results = try await Self.probe(
            port: host.port,
            [
                ["hold": 3, "send": head],
                ["raw": [["bytes": head]], "wait": 5, "stopAfter": 12],
                ["release": true],
            ])
        try #require(results.count == 3)
        #expect((results[1]["text"] as? String ?? "").hasPrefix("HTTP/1.1 503 Service Unavailable\r\nRetry-After: 5"))
        // Once the host has seen them close (soon; a loaded machine may take a while), the next
        // one is served; until then it is told 503 again.
        var answers: [String] = []
        let served = await eventually(within: .seconds(30), every: .milliseconds(200)) {
            let again =
                (try? await Self.probe(port: host.port, [["raw": [["bytes": head]], "wait": 5, "stopAfter": 12]]))
            let text = again?.first?["text"] as? String ?? ""
            answers.append(text.components(separatedBy: "\r\n").first ?? "")
            return text.hasPrefix("HTTP/1.1 200 OK")
        }
        #expect(served && answers.dropLast().allSatisfy { $0 == "HTTP/1.1 503 Service Unavailable" }, "\(answers)")
        #expect(host.log.contains("HTTP connection refused"))
        // The frames' connections are not counted: a device still does everything.
        #expect(try await device.transfers().transfers.count == 1)
        await device.close()
        #expect(await host.stop() == 0)
    }

    /// A device's upload that Files accepts (`Size` when given), and a link to it.
    static func upload(_ name: String, size: Int?, on device: AtriumConnection) async throws -> (
        UUID, TransferLinkFrame
    ) {
        var message: ValueSet = ["Command": "put", "Name": .string(name)]
        if let size { message["Size"] = .int(Int64(size)) }
        let transfer = try await TransferClientTests.transfer(message, on: device)
        let link = try await device.transferLink(transfer)
        #expect(link.status == .success)
        return (transfer, link)
    }

    @Test func anUploadOverHTTPIsCutAndResumedAsTusDoesAndItsOutcomeIsTheFramesOne() async throws {
        let (folder, manifests) = try TransferClientTests.served()
        let host = try await TestHost.start(manifests: manifests)
        let device = try await PairingTests.device(host)
        let bytes = TransferClientTests.random(3_000_000)
        let source = try Self.folder("http-up").appendingPathComponent("video.mp4")
        try bytes.write(to: source)
        let (transfer, link) = try await Self.upload("video.mp4", size: bytes.count, on: device)
        let path = "/transfers/\(transfer)"
        let tus = ["Authorization": "Bearer \(link.bearer)", "Tus-Resumable": "1.0.0"]
        let cut =
            "PATCH \(path) HTTP/1.1\r\nHost: h\r\nAuthorization: Bearer \(link.bearer)\r\nTus-Resumable: 1.0.0\r\n"
            + "Upload-Offset: 0\r\nContent-Type: application/offset+octet-stream\r\nContent-Length: \(bytes.count)\r\n\r\n"
        let results = try await Self.probe(
            port: host.port,
            [
                ["method": "OPTIONS", "path": path, "headers": tus],
                ["method": "HEAD", "path": path, "headers": tus],
                // The body cut after 1.2 MB: the connection goes away mid-request.
                ["raw": [["bytes": cut], ["file": source.path, "to": 1_200_000, "pause": 0.3]], "wait": 0.2],
                // A PATCH at an offset the host does not hold.
                [
                    "method": "PATCH", "path": path, "file": source.path, "from": 17, "to": 100,
                    "headers": tus.merging(["Upload-Offset": "17", "Content-Type": "application/offset+octet-stream"]) {
                        $1
                    },
                ],
                ["resume": true, "path": path, "bearer": link.bearer, "file": source.path],
                ["method": "HEAD", "path": path, "headers": tus],
            ])
        try #require(results.count == 6)
        func headers(_ index: Int) -> [String: String] { results[index]["headers"] as? [String: String] ?? [:] }
        #expect(results[0]["status"] as? Int == 204 && headers(0)["tus-resumable"] == "1.0.0")
        #expect(headers(0)["tus-version"] == "1.0.0" && headers(0)["allow"] == "OPTIONS, HEAD, PATCH")
        #expect(results[1]["status"] as? Int == 200 && headers(1)["upload-offset"] == "0")
        #expect(headers(1)["upload-length"] == "3000000")
        #expect(results[3]["status"] as? Int == 409, "\(results[3])")
        let held = Int(headers(3)["upload-offset"] ?? "") ?? -1
        #expect(held >= 0 && held <= 1_200_000, "what the host holds on stable storage after the cut: \(held)")
        #expect(results[4]["from"] as? Int == held)
        #expect(
            results[4]["status"] as? Int == 204
                && (results[4]["headers"] as? [String: String])?["upload-offset"] == "3000000")
        #expect(results[5]["status"] as? Int == 200 && headers(5)["upload-offset"] == "3000000")
        #expect(headers(5)["upload-complete"] == "?1")

        // A client that waits to be told to send its body (Expect: 100-continue, as curl
        // sends for a large one) is told at once.
        let (other, otherLink) = try await Self.upload("other.bin", size: 1000, on: device)
        let expecting =
            "PATCH /transfers/\(other) HTTP/1.1\r\nHost: h\r\nAuthorization: Bearer \(otherLink.bearer)\r\n"
            + "Tus-Resumable: 1.0.0\r\nUpload-Offset: 0\r\nContent-Type: application/offset+octet-stream\r\n"
            + "Content-Length: 1000\r\nExpect: 100-continue\r\n\r\n"
        let told = try await Self.probe(
            port: host.port,
            [
                [
                    "raw": [["bytes": expecting, "pause": 0.5], ["file": source.path, "to": 1000]], "wait": 5,
                    "stopAfter": 60,
                ]
            ])
        let text = told.first?["text"] as? String ?? ""
        #expect(text.hasPrefix("HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 204 No Content\r\n"), "\(text)")

        // The outcome, over frames: completed, with Files' result; the file exact.
        var outcome: TransferStateFrame?
        for _ in 0..<100 {
            outcome = try await device.transfers().transfers.first { $0.transfer == transfer }
            if outcome?.state == "completed" { break }
            try await Task.sleep(for: .milliseconds(50))
        }
        #expect(outcome?.state == "completed" && outcome?.result != nil, "\(String(describing: outcome))")
        #expect(try Data(contentsOf: folder.appendingPathComponent("video.mp4")) == bytes)
        await device.close()
        #expect(await host.stop() == 0)
    }

    @Test func theResumableUploadDraftAChecksumAndUploadsThatChangeSidesBetweenHTTPAndFrames() async throws {
        let (folder, manifests) = try TransferClientTests.served()
        // A small window, so that an upload with frames can be paused before all of it is sent.
        let host = try await TestHost.start(manifests: manifests, arguments: ["--transfer-window", "262144"])
        let device = try await PairingTests.device(host)
        let bytes = TransferClientTests.random(2_000_000)
        let source = try Self.folder("http-up").appendingPathComponent("notes.bin")
        try bytes.write(to: source)
        let checksum = "sha256 " + Data(SHA256.hash(data: bytes)).base64EncodedString()

        // The draft's partial uploads, of a size not announced: ?0 then ?1, with the SHA-256.
        let (draft, draftLink) = try await Self.upload("draft.bin", size: nil, on: device)
        // The same with a SHA-256 that is not the file's.
        let (wrong, wrongLink) = try await Self.upload("wrong.bin", size: nil, on: device)
        // Begun over HTTP, finished with frames.
        let (handed, handedLink) = try await Self.upload("handed.bin", size: bytes.count, on: device)
        func patch(
            _ transfer: UUID, _ bearer: String, from: Int, to: Int, complete: Bool, extra: [String: String] = [:]
        )
            -> [String: Any]
        {
            [
                "method": "PATCH", "path": "/transfers/\(transfer)", "file": source.path, "from": from, "to": to,
                "headers": [
                    "Authorization": "Bearer \(bearer)", "Content-Type": "application/partial-upload",
                    "Upload-Offset": "\(from)", "Upload-Complete": complete ? "?1" : "?0",
                ].merging(extra) { $1 },
            ]
        }
        let results = try await Self.probe(
            port: host.port,
            [
                patch(draft, draftLink.bearer, from: 0, to: 700_000, complete: false),
                patch(
                    draft, draftLink.bearer, from: 700_000, to: bytes.count, complete: true,
                    extra: ["Upload-Checksum": checksum]),
                patch(
                    wrong, wrongLink.bearer, from: 0, to: bytes.count, complete: true,
                    extra: [
                        "Upload-Checksum": "sha256 " + Data(repeating: 7, count: 32).base64EncodedString()
                    ]),
                patch(handed, handedLink.bearer, from: 0, to: 900_000, complete: false),
            ])
        try #require(results.count == 4)
        func headers(_ index: Int) -> [String: String] { results[index]["headers"] as? [String: String] ?? [:] }
        #expect(results[0]["status"] as? Int == 204 && headers(0)["upload-offset"] == "700000")
        #expect(headers(0)["upload-complete"] == "?0")
        #expect(results[1]["status"] as? Int == 204 && headers(1)["upload-offset"] == "2000000")
        #expect(headers(1)["upload-complete"] == "?1")
        #expect(results[2]["status"] as? Int == 460, "\(results[2])")
        #expect(results[3]["status"] as? Int == 204 && headers(3)["upload-offset"] == "900000")

        // The upload begun over HTTP goes on with frames from the bytes the host holds.
        let finished = try await UploadOperation(transfer: handed, source: source, connection: device).run()
        #expect(finished.state == "completed", "\(finished)")

        // Begun with frames (paused past 500 KB), finished over HTTP as tus resumes.
        let (framed, framedLink) = try await Self.upload("framed.bin", size: bytes.count, on: device)
        let operation = UploadOperation(transfer: framed, source: source, connection: device)
        operation.pauseOnce(atBytes: 500_000)
        #expect(try await operation.run().state == "waiting")
        let resumed = try await Self.probe(
            port: host.port,
            [["resume": true, "path": "/transfers/\(framed)", "bearer": framedLink.bearer, "file": source.path]])
        #expect(
            (resumed.first?["from"] as? Int ?? 0) >= 500_000 && resumed.first?["status"] as? Int == 204, "\(resumed)")

        var states: [UUID: TransferStateFrame] = [:]
        for _ in 0..<100 {
            states = Dictionary(try await device.transfers().transfers.map { ($0.transfer, $0) }) { $1 }
            if [draft, handed, framed].allSatisfy({ states[$0]?.state == "completed" }) { break }
            try await Task.sleep(for: .milliseconds(50))
        }
        for transfer in [draft, handed, framed] { #expect(states[transfer]?.state == "completed", "\(transfer)") }
        #expect(states[wrong]?.state == "failed" && states[wrong]?.error == "digestMismatch")
        for name in ["draft.bin", "handed.bin", "framed.bin"] {
            #expect(try Data(contentsOf: folder.appendingPathComponent(name)) == bytes, "\(name)")
        }
        #expect(!FileManager.default.fileExists(atPath: folder.appendingPathComponent("wrong.bin").path))
        await device.close()
        #expect(await host.stop() == 0)
    }

    @Test func hostileUploadsAreAnsweredAndTheUploadIsLeftAsItWas() async throws {
        let (_, manifests) = try TransferClientTests.served()
        let host = try await TestHost.start(manifests: manifests, arguments: ["--transfer-http-timeout", "1"])
        let device = try await PairingTests.device(host)
        let source = try Self.folder("http-up").appendingPathComponent("x.bin")
        try TransferClientTests.random(200_000).write(to: source)
        let (transfer, link) = try await Self.upload("x.bin", size: 100_000, on: device)
        let (over, overLink) = try await Self.upload("over.bin", size: 100_000, on: device)
        let path = "/transfers/\(transfer)"
        func patch(_ headers: [String: String], to: Int = 1000, path: String = path, bearer: String = link.bearer)
            -> [String: Any]
        {
            [
                "method": "PATCH", "path": path, "file": source.path, "to": to,
                "headers": [
                    "Authorization": "Bearer \(bearer)", "Tus-Resumable": "1.0.0", "Upload-Offset": "0",
                    "Content-Type": "application/offset+octet-stream",
                ].merging(headers) { $1 },
            ]
        }
        let trickle =
            "PATCH \(path) HTTP/1.1\r\nHost: h\r\nAuthorization: Bearer \(link.bearer)\r\nTus-Resumable: 1.0.0\r\n"
            + "Upload-Offset: 0\r\nContent-Type: application/offset+octet-stream\r\nContent-Length: 1000\r\n\r\nab"
        let results = try await Self.probe(
            port: host.port,
            [
                patch(["Content-Type": "text/plain"]),
                patch(["Tus-Resumable": "0.2.2"]),
                patch(["Upload-Offset": "x"]),
                patch(["Upload-Checksum": "md5 abc"]),
                // A body declared longer than the upload: refused before any byte is taken.
                patch([:], to: 150_000, path: "/transfers/\(over)", bearer: overLink.bearer),
                // A body that trickles: closed after the timeout, the upload still there.
                ["raw": [["bytes": trickle]], "wait": 6],
                ["method": "HEAD", "path": path, "headers": ["Authorization": "Bearer \(link.bearer)"]],
            ])
        try #require(results.count == 7)
        #expect(results[0]["status"] as? Int == 415)
        #expect(results[1]["status"] as? Int == 412)
        #expect(results[2]["status"] as? Int == 400)
        #expect(results[3]["status"] as? Int == 400)
        #expect(results[4]["status"] as? Int == 413, "\(results[4])")
        #expect(results[5]["text"] as? String == "" && results[5]["closed"] as? Bool == true, "\(results[5])")
        #expect((results[5]["seconds"] as? Double ?? 99) < 5)
        #expect(results[6]["status"] as? Int == 200)
        #expect((results[6]["headers"] as? [String: String])?["upload-complete"] == "?0")
        let states = Dictionary(try await device.transfers().transfers.map { ($0.transfer, $0) }) { $1 }
        #expect(states[over]?.state == "waiting" && states[over]?.offset == 0)
        #expect(states[transfer]?.state == "waiting")
        await device.close()
        #expect(await host.stop() == 0)
    }

    /// What an attack review of the HTTP side found, each an attack that must now fail.
    @Test func overflowsStaleFramesChecksumsAndBoundariesOfHTTPUploads() async throws {
        let (folder, manifests) = try TransferClientTests.served()
        let host = try await TestHost.start(manifests: manifests)
        let device = try await PairingTests.device(host)
        let source = try Self.folder("http-up").appendingPathComponent("x.bin")
        let bytes = TransferClientTests.random(1 << 20)
        try bytes.write(to: source)
        func patch(
            _ transfer: UUID, _ bearer: String, from: Int = 0, to: Int,
            type: String = "application/offset+octet-stream",
            extra: [String: String] = [:]
        ) -> [String: Any] {
            [
                "method": "PATCH", "path": "/transfers/\(transfer)", "file": source.path, "from": from, "to": to,
                "headers": [
                    "Authorization": "Bearer \(bearer)", "Tus-Resumable": "1.0.0", "Upload-Offset": "\(from)",
                    "Content-Type": type,
                ].merging(extra) { $1 },
            ]
        }
        // A Content-Length past Int64's reach once added to what the host holds.
        let (huge, hugeLink) = try await Self.upload("huge.bin", size: 1000, on: device)
        let overflow =
            "PATCH /transfers/\(huge) HTTP/1.1\r\nHost: h\r\nAuthorization: Bearer \(hugeLink.bearer)\r\n"
            + "Tus-Resumable: 1.0.0\r\nUpload-Offset: 10\r\nContent-Type: application/offset+octet-stream\r\n"
            + "Content-Length: 9223372036854775807\r\n\r\n"
        // A wrong SHA-256 on an upload of known size.
        let (sized, sizedLink) = try await Self.upload("sized.bin", size: bytes.count, on: device)
        // A PATCH that does not end the upload, of whole chunks (1 MiB): answered at once.
        let (boundary, boundaryLink) = try await Self.upload("boundary.bin", size: 2 << 20, on: device)
        // Two PATCHes on one connection: the first reaches its size without saying it ends it
        // (its check and delivery come later), the second is another upload's.
        let (first, firstLink) = try await Self.upload("first.bin", size: 1000, on: device)
        let (second, secondLink) = try await Self.upload("second.bin", size: 2000, on: device)
        func raw(_ transfer: UUID, _ bearer: String, _ count: Int, draft: Bool) -> String {
            "PATCH /transfers/\(transfer) HTTP/1.1\r\nHost: h\r\nAuthorization: Bearer \(bearer)\r\n"
                + (draft
                    ? "Content-Type: application/partial-upload\r\nUpload-Complete: ?0\r\n"
                    : "Tus-Resumable: 1.0.0\r\nContent-Type: application/offset+octet-stream\r\n")
                + "Upload-Offset: 0\r\nContent-Length: \(count)\r\n\r\n"
        }
        // An empty file, downloaded whole.
        try Data().write(to: folder.appendingPathComponent("empty.txt"))
        let empty = try await Self.download("empty.txt", on: device)
        let emptyLink = try await device.transferLink(empty)
        let results = try await Self.probe(
            port: host.port,
            [
                patch(huge, hugeLink.bearer, to: 10),
                ["raw": [["bytes": overflow]], "wait": 5, "stopAfter": 40],
                patch(
                    sized, sizedLink.bearer, to: bytes.count,
                    extra: [
                        "Upload-Checksum": "sha256 " + Data(repeating: 1, count: 32).base64EncodedString()
                    ]),
                patch(boundary, boundaryLink.bearer, to: 1 << 20),
                [
                    "raw": [
                        ["bytes": raw(first, firstLink.bearer, 1000, draft: true)],
                        ["file": source.path, "to": 1000, "pause": 1],
                        ["bytes": raw(second, secondLink.bearer, 1500, draft: false)],
                        ["file": source.path, "to": 1500],
                    ], "wait": 5, "stopAfter": 300,
                ],
                [
                    "method": "GET", "path": "/transfers/\(empty)",
                    "headers": ["Authorization": "Bearer \(emptyLink.bearer)"],
                ],
            ])
        try #require(results.count == 6)
        #expect(results[0]["status"] as? Int == 204)
        let refused = results[1]["text"] as? String ?? ""
        #expect(refused.hasPrefix("HTTP/1.1 413 Payload Too Large"), "\(refused)")
        #expect(results[2]["status"] as? Int == 460, "\(results[2])")
        #expect(results[3]["status"] as? Int == 204, "\(results[3])")
        #expect((results[3]["headers"] as? [String: String])?["upload-offset"] == "1048576")
        let answers = (results[4]["text"] as? String ?? "").components(separatedBy: "HTTP/1.1 ").dropFirst()
        #expect(answers.count == 2, "\(results[4])")
        #expect(answers.first?.contains("Upload-Offset: 1000") == true, "\(results[4])")
        #expect(
            answers.last?.hasPrefix("204") == true && answers.last?.contains("Upload-Offset: 1500") == true,
            "\(results[4])")
        #expect(results[5]["status"] as? Int == 200 && results[5]["length"] as? Int == 0)

        var states: [UUID: TransferStateFrame] = [:]
        for _ in 0..<100 {
            states = Dictionary(try await device.transfers().transfers.map { ($0.transfer, $0) }) { $1 }
            if states[first]?.state == "completed" { break }
            try await Task.sleep(for: .milliseconds(50))
        }
        #expect(states[huge]?.state == "waiting" && states[huge]?.offset == 10, "the host took nothing of it")
        #expect(states[sized]?.state == "failed" && states[sized]?.error == "digestMismatch")
        #expect(
            states[first]?.state == "completed" && states[second]?.offset == 1500 && states[second]?.state == "waiting")
        #expect(states[empty]?.state == "completed")
        #expect(try await device.ping() > .zero, "the host is alive")
        await device.close()
        #expect(await host.stop() == 0)
    }

    @Test func aClientThatAsksWithoutReadingOrSaysNothingIsClosed() async throws {
        let (host, device, transfer, link, head) = try await Self.smallDownload(["--transfer-http-timeout", "2"])
        let results = try await Self.probe(
            port: host.port,
            [
                // 100,000 requests (about 12 MB), their answers never read: the host stops
                // reading once its unsent answers pass the high-water mark, and closes the
                // connection once nothing has moved for the timeout.
                ["hold": 1, "send": String(repeating: head, count: 100_000), "rcvbuf": 8192],
                // Meanwhile, another client is answered.
                [
                    "method": "HEAD", "path": "/transfers/\(transfer)",
                    "headers": ["Authorization": "Bearer \(link.bearer)"],
                ],
                ["sleep": 5],
                ["drain": 10],
            ])
        try #require(results.count == 4)
        #expect(results[1]["status"] as? Int == 200)
        let drained = try #require((results[3]["drained"] as? [[String: Any]])?.first)
        #expect(drained["closed"] as? Bool == true, "\(drained)")
        // The host stopped reading the requests (its answers waited unsent): the client could
        // not send them all before its sends stalled for 3 s. A host that read on would have
        // taken all 12 MB, answering each.
        let sent = results[0]["sent"] as? Int ?? 0
        let all = 100_000 * head.utf8.count
        #expect(sent > 0 && sent < all * 3 / 4, "the client sent \(sent) of \(all) bytes")
        await device.close()
        #expect(await host.stop() == 0)
    }
}
