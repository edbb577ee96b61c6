import AtriumProtocol
import AtriumTesting
import AtriumValues
import Foundation
import Synchronization
import Testing

@testable import AtriumHost

#if canImport(Glibc)
    import Glibc
#endif

/// Running under systemd, tested without a running systemd: `systemd-socket-activate` hands
/// the host its sockets as a socket unit would, a datagram socket of the test's stands in
/// for NOTIFY_SOCKET, and `systemd-analyze verify` checks the units the packages install.
@Suite(.serialized) struct SystemdTests {
    struct SetupError: Error, CustomStringConvertible {
        var description: String
    }

    static let socketActivate = "/usr/bin/systemd-socket-activate"
    static let analyze = "/usr/bin/systemd-analyze"
    static var hasSocketActivate: Bool { FileManager.default.isExecutableFile(atPath: socketActivate) }
    static var hasAnalyze: Bool { FileManager.default.isExecutableFile(atPath: analyze) }

    /// A free TCP port on 127.0.0.1 for systemd-socket-activate to bind, below Linux's ephemeral
    /// range (32768 and up): a port bound as 0, or a client's own port, which the other tests'
    /// thousands of connections take all the time, is never one of these.
    static func freePort() throws -> Int {
        for _ in 0..<200 {
            let port = Int.random(in: 20_000..<32_000)
            let descriptor = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
            defer { close(descriptor) }
            var address = sockaddr_in()
            address.sin_family = sa_family_t(AF_INET)
            address.sin_addr.s_addr = inet_addr("127.0.0.1")
            address.sin_port = in_port_t(UInt16(port).bigEndian)
            let size = socklen_t(MemoryLayout<sockaddr_in>.size)
            let bound = withUnsafeMutablePointer(to: &address) { pointer in
                pointer.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(descriptor, $0, size) == 0 }
            }
            if bound { return port }
        }
        throw SetupError(description: "no free port between 20000 and 32000")
    }

    /// A program started with its output and error into a pipe read by a thread of its own.
    /// Not Foundation's `Process`: its children are watched through a socket they inherit,
    /// and systemd-socket-activate closes every descriptor it does not pass on, which makes
    /// Foundation wait for it, blocking, on the thread that watches every other child too.
    final class Program: @unchecked Sendable {
        let process: ChildProcess
        private let lock = NSLock()
        private var collected = Data()
        private var outputEnded = false

        init(_ executable: String, _ arguments: [String]) throws {
            // Not inherited by what another test starts meanwhile (the child gets its own copy).
            guard let pipe = PrivatePipe.ends() else { throw SetupError(description: "no pipe") }
            let ends = [pipe.reading, pipe.writing]
            process = try ChildProcess(
                executable: URL(fileURLWithPath: executable), arguments: arguments,
                environment: ProcessInfo.processInfo.environment, output: ends[1], error: ends[1]
            ) { _ in }
            close(ends[1])
            let reading = ends[0]
            Thread.detachNewThread { [self] in
                var buffer = [UInt8](repeating: 0, count: 4096)
                while true {
                    let count = read(reading, &buffer, buffer.count)
                    if count <= 0 { break }
                    lock.withLock { collected.append(contentsOf: buffer[..<count]) }
                }
                close(reading)
                lock.withLock { outputEnded = true }
            }
        }

        var output: String { lock.withLock { String(decoding: collected, as: UTF8.self) } }

        /// Its exit status once it has ended and all it wrote has been read (waiting at most
        /// `timeout`), or nil.
        func exitStatus(within timeout: Duration = .seconds(60)) async -> Int32? {
            let deadline = ContinuousClock.now + timeout
            while process.isRunning || !lock.withLock({ outputEnded }), ContinuousClock.now < deadline {
                try? await Task.sleep(for: .milliseconds(20))
            }
            return process.isRunning ? nil : process.terminationStatus
        }
    }

    /// A Unix datagram socket that collects what is sent to it, as systemd's NOTIFY_SOCKET.
    final class NotifySocket: @unchecked Sendable {
        let path: String
        private let descriptor: Int32
        private let received = NSLock()
        private var messages: [String] = []

        init() throws {
            path =
                FileManager.default.temporaryDirectory.appendingPathComponent(
                    "atrium-notify-\(UUID().uuidString.prefix(8))"
                ).path
            descriptor = socket(AF_UNIX, Int32(SOCK_DGRAM.rawValue), 0)
            var address = sockaddr_un()
            address.sun_family = sa_family_t(AF_UNIX)
            withUnsafeMutableBytes(of: &address.sun_path) { bytes in
                bytes.copyBytes(from: path.utf8.prefix(bytes.count - 1))
            }
            let bound = withUnsafePointer(to: &address) { pointer in
                pointer.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                    bind(descriptor, $0, socklen_t(MemoryLayout<sockaddr_un>.size)) == 0
                }
            }
            guard bound else { throw SetupError(description: "cannot bind \(path)") }
            var timeout = timeval(tv_sec: 0, tv_usec: 100_000)
            setsockopt(descriptor, SOL_SOCKET, SO_RCVTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
        }

        deinit {
            close(descriptor)
            unlink(path)
        }

        /// The first message holding `field` (a whole line) within `timeout`.
        func waitFor(_ field: String, timeout: Duration = .seconds(60)) async -> String? {
            await waitFor(timeout: timeout) { $0.split(separator: "\n").contains { $0 == field } }
        }

        /// The first message for which `matches` holds, within `timeout`, reading what has come.
        func waitFor(timeout: Duration = .seconds(60), where matches: (String) -> Bool) async -> String? {
            var found: String?
            _ = await eventually(within: timeout) {
                var buffer = [UInt8](repeating: 0, count: 4096)
                while true {
                    let count = recv(descriptor, &buffer, buffer.count, Int32(MSG_DONTWAIT))
                    guard count > 0 else { break }
                    messages.append(String(decoding: buffer[..<count], as: UTF8.self))
                }
                found = messages.first(where: matches)
                return found != nil
            }
            return found
        }
    }

    @Test(
        .disabled(if: !SystemdTests.hasSocketActivate, "systemd-socket-activate is not installed (Debian's systemd)"))
    func socketActivationHandsTheHostItsSocketsAndTheHostTellsSystemdHowItIs() async throws {
        let port = try Self.freePort()
        let notify = try NotifySocket()
        let started = ContinuousClock.now
        do {
            try await activate(port: port, notify: notify)
        } catch {
            Issue.record(
                "\(error) (after \(ContinuousClock.now - started)); the program said: \(Self.lastProgramOutput.withLock { $0 })"
            )
        }
    }

    /// What the activation test's program printed, for its failure message.
    static let lastProgramOutput = Mutex("")

    func activate(port: Int, notify: NotifySocket) async throws {
        let scratch = FileManager.default.temporaryDirectory.appendingPathComponent(
            "atrium-activation-\(UUID().uuidString.prefix(8))")
        try FileManager.default.createDirectory(at: scratch, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: scratch) }
        let manifests = scratch.appendingPathComponent("manifests")
        try TestHost.writeManifests(Fixtures.all, to: manifests)
        let socketPath = scratch.appendingPathComponent("activated.sock").path
        // The host's own --listen and --socket name other places: the sockets handed over win.
        let program = try Program(
            Self.socketActivate,
            [
                "--listen", "127.0.0.1:\(port)", "--listen", socketPath, "--setenv", "NOTIFY_SOCKET=\(notify.path)",
                TestHost.buildFolder.appendingPathComponent("atriumd").path,
                "--manifests", manifests.path, "--state-dir", scratch.appendingPathComponent("state").path,
                "--listen", "127.0.0.1:1", "--socket", scratch.appendingPathComponent("not-this.sock").path,
                // The suite's first seconds are busy (under AddressSanitizer, CPU-bound tests hold
                // both of the threads tests run on for 15 s and more): the first client may say
                // hello well after it connected. What is tested here is not the hello timeout.
                "--hello-timeout", "120",
            ])
        defer {
            Self.lastProgramOutput.withLock { $0 = program.output }
            program.process.signal(SIGKILL)
        }

        // systemd-socket-activate listens first and starts the host for the first client,
        // whose connection waits in the socket's queue meanwhile: nothing is lost.
        var client: TestClient?
        let listening = ContinuousClock.now + .seconds(60)
        while client == nil, ContinuousClock.now < listening {
            client = try? await TestClient.connect(port: port)
            if client == nil { try await Task.sleep(for: .milliseconds(50)) }
        }
        let tcp = try #require(client, "nothing listens on 127.0.0.1:\(port): \(program.output)")
        // The host starts only now, for this client: under AddressSanitizer on a busy machine,
        // loading every fixture (some in worker processes) before the first welcome has taken
        // more than the 10 s a test client usually waits.
        let welcome = try await tcp.hello(clientId: "first-client", timeout: .seconds(90))
        #expect(welcome.limits.maxMessageBytes > 0)

        let ready = await notify.waitFor("READY=1")
        #expect(ready?.contains("STATUS=serving") == true, "\(String(describing: ready))")
        #expect(ready?.contains("MAINPID=") == true, "\(String(describing: ready))")

        // The local socket is the one handed over too, and the host says what it listens on.
        let local = try await TestClient.connect(unixSocket: socketPath)
        _ = try await local.hello()
        let report = try await ChurnTests.status(local, id: 1)
        let listeners = report["listeners"]?.array?.strings
        #expect(listeners == ["tcp 127.0.0.1:\(port)", "unix \(socketPath)"])
        #expect(report["version"]?.string == AtriumVersion.current)
        #expect(!FileManager.default.fileExists(atPath: scratch.appendingPathComponent("not-this.sock").path))
        await local.close()
        await tcp.close()

        #expect(program.output.contains("atriumd: listening on tcp 127.0.0.1:\(port)"), "\(program.output)")
        program.process.signal(SIGTERM)  // as systemctl stop does
        let stopping = await notify.waitFor("STOPPING=1")
        #expect(stopping != nil)
        let status = await program.exitStatus()
        #expect(status == 0, "\(program.output)")
        // The socket is systemd's: it stays for the next start.
        #expect(FileManager.default.fileExists(atPath: socketPath))
    }

    @Test(arguments: [
        ("LISTEN_FDS=abc", "LISTEN_FDS is \"abc\", not a count of sockets"),
        ("LISTEN_FDS=-1", "LISTEN_FDS is \"-1\", not a count of sockets"),
        ("LISTEN_FDS=17", "LISTEN_FDS is \"17\", not a count of sockets"),
    ])
    func activationVariablesThatMakeNoSenseAreRefused(_ setting: String, _ reason: String) async throws {
        let atriumd = TestHost.buildFolder.appendingPathComponent("atriumd").path
        let program = try Program(
            "/bin/sh",
            [
                "-c",
                "LISTEN_PID=$$ \(setting) exec \"$0\" --manifests /nonexistent --socket off",
                atriumd,
            ])
        defer { program.process.signal(SIGKILL) }
        let status = await program.exitStatus()
        #expect(status != nil && status != 0)
        #expect(program.output.contains(reason), "\(program.output)")
    }

    @Test func activationVariablesForAnotherProcessAreLeftAlone() async throws {
        // LISTEN_PID names someone else: the variables are not the host's, whatever they say.
        let atriumd = TestHost.buildFolder.appendingPathComponent("atriumd").path
        let program = try Program(
            "/bin/sh", ["-c", "LISTEN_PID=1 LISTEN_FDS=1 exec \"$0\" --check --manifests /nonexistent", atriumd])
        defer { program.process.signal(SIGKILL) }
        let status = await program.exitStatus()
        #expect(!program.output.contains("passed by systemd"), "\(program.output)")
        #expect(status != nil)
    }

    @Test func aDescriptorThatIsNotAListeningSocketIsRefusedWithTheReason() async throws {
        // LISTEN_PID must name the host itself: the shell's pid, which exec keeps.
        let atriumd = TestHost.buildFolder.appendingPathComponent("atriumd").path
        let program = try Program(
            "/bin/sh",
            ["-c", "LISTEN_PID=$$ LISTEN_FDS=1 exec \"$0\" --manifests /nonexistent --socket off 3</dev/null", atriumd])
        defer { program.process.signal(SIGKILL) }
        let status = await program.exitStatus()
        #expect(status != nil && status != 0)
        #expect(program.output.contains("socket 3, passed by systemd, is not a socket"), "\(program.output)")
    }

    @Test func theJournalGetsEachEventWithItsFields() async throws {
        let journal = try NotifySocket()
        let host = try await startHost(arguments: ["--log-format", "journal", "--journal-socket", journal.path])
        // A package's event carries the package as a field of its own.
        let loaded = await journal.waitFor { $0.contains("\nPACKAGE=\(Fixtures.echoPackage)\n") }
        #expect(loaded?.hasPrefix("MESSAGE=") == true, "\(String(describing: loaded))")
        #expect(loaded?.contains("\nPRIORITY=6\n") == true, "\(String(describing: loaded))")
        #expect(loaded?.contains("\nSYSLOG_IDENTIFIER=atriumd\n") == true, "\(String(describing: loaded))")
        // Nothing but what the host prints for people (on standard output) went out as text.
        let text = host.log.split(separator: "\n").filter { !$0.hasPrefix("atriumd: ") }
        #expect(text.isEmpty, "\(text.prefix(5))")
        #expect(await host.stop() == 0)
        // A value with a newline travels in the protocol's binary form, whole.
        let field = JournalLogHandler.field("MESSAGE", "a\nb")
        #expect(field == Array("MESSAGE\n".utf8) + [3, 0, 0, 0, 0, 0, 0, 0] + Array("a\nb\n".utf8))
        #expect(JournalLogHandler.fieldName("peer address") == "PEER_ADDRESS")
        #expect(JournalLogHandler.fieldName("_hidden") == "HIDDEN")
        #expect(JournalLogHandler.fieldName("3d") == "F_3D")
    }

    @Test func aStateFolderNamedThroughALinkIsUsed() async throws {
        // As systemd's StateDirectory under DynamicUser: /var/lib/atrium is a link to
        // private/atrium. The host's identity is made in the folder the link names.
        let scratch = FileManager.default.temporaryDirectory.appendingPathComponent(
            "atrium-state-link-\(UUID().uuidString.prefix(8))")
        defer { try? FileManager.default.removeItem(at: scratch) }
        let real = scratch.appendingPathComponent("private/atrium")
        try FileManager.default.createDirectory(at: real, withIntermediateDirectories: true)
        try FileManager.default.setAttributes([.posixPermissions: 0o700], ofItemAtPath: real.path)
        let link = scratch.appendingPathComponent("atrium")
        try FileManager.default.createSymbolicLink(at: link, withDestinationURL: real)
        let host = try await startHost(arguments: ["--state-dir", link.path])
        #expect(await host.stop() == 0)
        #expect(FileManager.default.fileExists(atPath: real.appendingPathComponent("host-key.pem").path))
    }

    @Test func jsonLogsAreOneObjectPerLine() async throws {
        let host = try await startHost(arguments: ["--log-format", "json"])
        #expect(await host.stop() == 0)
        let objects = host.log.split(separator: "\n").filter { $0.hasPrefix("{") }.compactMap {
            (try? JSONSerialization.jsonObject(with: Data($0.utf8))) as? [String: String]
        }
        // Every log line parsed; the ones the host prints for people stay text on standard output.
        let logLines = host.log.split(separator: "\n").filter { !$0.hasPrefix("atriumd: ") }
        #expect(objects.count == logLines.count && objects.count > 3, "\(host.log.prefix(600))")
        let echo = objects.first { $0["package"] == Fixtures.echoPackage }
        #expect(echo?["level"] == "info" && echo?["label"] == "atriumd" && echo?["time"]?.hasSuffix("Z") == true)
        #expect(objects.contains { $0["message"] == "shutting down: 0 connections open" })
    }

    @Test(.disabled(if: !SystemdTests.hasAnalyze, "systemd-analyze is not installed (Debian's systemd)"))
    func theUnitsPassSystemdAnalyzeVerify() async throws {
        let source = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
            .deletingLastPathComponent().appendingPathComponent("Packaging/systemd")
        let scratch = FileManager.default.temporaryDirectory.appendingPathComponent(
            "atrium-units-\(UUID().uuidString.prefix(8))")
        defer { try? FileManager.default.removeItem(at: scratch) }
        for user in [false, true] {
            let folder = user ? scratch.appendingPathComponent("user") : scratch
            try FileManager.default.createDirectory(at: folder, withIntermediateDirectories: true)
            var units: [String] = []
            for name in ["atriumd.socket", "atriumd.service"] {
                let template = try String(
                    contentsOf: (user ? source.appendingPathComponent("user") : source).appendingPathComponent(name),
                    encoding: .utf8)
                // As the installers fill it in, with the build's atriumd, which must exist.
                let unit = template.replacingOccurrences(of: "@BINDIR@", with: TestHost.buildFolder.path)
                    .replacingOccurrences(
                        of: "@CONFIGFILE@",
                        with: user ? "/home/someone/.config/atrium/atriumd.conf" : "/etc/atrium/atriumd.conf")
                #expect(!unit.contains("@"), "\(name) has a placeholder the installers do not fill in")
                try unit.write(to: folder.appendingPathComponent(name), atomically: true, encoding: .utf8)
                units.append(folder.appendingPathComponent(name).path)
            }
            let verified = try await runProgram(
                Self.analyze, (user ? ["--user"] : []) + ["verify", "--man=no"] + units,
                environment: ["XDG_RUNTIME_DIR": ProcessInfo.processInfo.environment["XDG_RUNTIME_DIR"] ?? scratch.path]
            )
            // Exit 0 is not enough: an unknown key is only a warning there.
            #expect(
                verified.status == 0 && verified.output.isEmpty, "\(user ? "user" : "system") units: \(verified.output)"
            )
        }
    }
}
