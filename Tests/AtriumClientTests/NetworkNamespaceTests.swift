import AtriumClient
import AtriumTesting
import Foundation
import Testing

/// Two machines on one: a host and a client in network namespaces of their own, joined by a
/// veth pair (10.77.x.1 and .2), so that the host listens on an address that is not
/// loopback, with its defaults: TLS only and pairing required. Making namespaces needs root
/// and iproute2: elsewhere the tests are skipped, and say why.
@Suite(.serialized)
struct NetworkNamespaceTests {
    static let available: Bool = {
        guard geteuid() == 0, FileManager.default.isExecutableFile(atPath: "/usr/sbin/ip") else { return false }
        let probe = "atrium-probe-\(getpid())"
        guard (try? runProgramWaiting("/usr/sbin/ip", ["netns", "add", probe]))?.status == 0 else { return false }
        _ = try? runProgramWaiting("/usr/sbin/ip", ["netns", "del", probe])
        return true
    }()

    /// A host namespace and a client namespace, joined by a veth pair.
    final class Network: Sendable {
        let host: String
        let client: String
        let hostAddress: String

        init() throws {
            let tag = String(UUID().uuidString.prefix(4)).lowercased()
            host = "atrium-h-\(tag)"
            client = "atrium-c-\(tag)"
            let subnet = Int.random(in: 1...250)
            hostAddress = "10.77.\(subnet).1"
            let (hostLink, clientLink) = ("avh\(tag)", "avc\(tag)")
            let steps: [[String]] = [
                ["netns", "add", host], ["netns", "add", client],
                ["link", "add", hostLink, "type", "veth", "peer", "name", clientLink],
                ["link", "set", hostLink, "netns", host], ["link", "set", clientLink, "netns", client],
                ["-n", host, "addr", "add", "\(hostAddress)/24", "dev", hostLink],
                ["-n", client, "addr", "add", "10.77.\(subnet).2/24", "dev", clientLink],
                ["-n", host, "link", "set", hostLink, "up"], ["-n", client, "link", "set", clientLink, "up"],
                ["-n", host, "link", "set", "lo", "up"], ["-n", client, "link", "set", "lo", "up"],
            ]
            for step in steps {
                let result = try runProgramWaiting("/usr/sbin/ip", step)
                guard result.status == 0 else {
                    tearDown()
                    throw NetworkError(description: "ip \(step.joined(separator: " ")): \(result.output)")
                }
            }
        }

        func tearDown() {
            _ = try? runProgramWaiting("/usr/sbin/ip", ["netns", "del", host])
            _ = try? runProgramWaiting("/usr/sbin/ip", ["netns", "del", client])
        }
    }

    /// `atrium` run in the client's namespace, with a state folder of the test's own.
    static func atrium(in network: Network, _ arguments: [String], state: URL) async throws -> ProgramOutput {
        try await runProgram(
            "/usr/sbin/ip",
            ["netns", "exec", network.client, TestHost.buildFolder.appendingPathComponent("atrium").path] + arguments,
            environment: ["XDG_STATE_HOME": state.path])
    }

    @Test(.enabled(if: available, "network namespaces need root and iproute2 (ip netns)"))
    func aClientOnAnotherMachinePairsOverTLSAndIsServed() async throws {
        let network = try Network()
        defer { network.tearDown() }
        let folder = TLSTests.temporaryFolder("netns")
        let manifests = folder.appendingPathComponent("manifests")
        try FileManager.default.createDirectory(at: manifests, withIntermediateDirectories: true)
        for (name, json) in ClientTests.manifests {
            try json.write(to: manifests.appendingPathComponent(name), atomically: true, encoding: .utf8)
        }
        let socket = folder.appendingPathComponent("atriumd.sock").path
        // The host with its defaults for an address that is not loopback.
        let host = try startProgram(
            "/usr/sbin/ip",
            [
                "netns", "exec", network.host, TestHost.buildFolder.appendingPathComponent("atriumd").path,
                "--manifests", manifests.path, "--listen", "\(network.hostAddress):0", "--socket", socket,
                "--state-dir", folder.appendingPathComponent("host-state").path,
            ])
        defer { host.process.terminate() }
        let port = try #require(await host.port(on: network.hostAddress), "the host did not start: \(host.output)")
        let address = "\(network.hostAddress):\(port)"
        let state = folder.appendingPathComponent("client-state")

        // Unpaired: the host is reached (over TLS, with a warning that nothing proves who it
        // is), and everything but hello, ping and pair is refused, the Roman ping service too.
        let ping = try await Self.atrium(in: network, ["ping", address, "-c", "1"], state: state)
        #expect(ping.status == 1, "\(ping.output)")
        #expect(ping.output.contains("is not a host this client paired with"), "\(ping.output)")
        #expect(ping.output.contains("NotAuthorized (7) (this device is not paired"), "\(ping.output)")
        let apps = try await Self.atrium(in: network, ["apps", address], state: state)
        #expect(apps.status != 0 && apps.output.contains("not paired"), "\(apps.output)")
        #expect(try await Self.atrium(in: network, ["ping", address, "--insecure"], state: state).status == 64)

        // Plain TCP from the other machine gets, in plain words, that only TLS is taken.
        let hello =
            "000000" + "20" + "a3647479706565" + "68656c6c6f" + "6776657273696f6e01" + "68636c69656e74496461" + "70"
        let plain = try await runProgram(
            "/usr/sbin/ip",
            [
                "netns", "exec", network.client, "/usr/bin/python3", "-c",
                "import socket; s = socket.create_connection(('\(network.hostAddress)', \(port)), 5); "
                    + "s.sendall(bytes.fromhex('\(hello)')); s.settimeout(5); print(s.recv(4096))",
            ])
        #expect(plain.output.contains("tlsRequired"), "\(plain.output)")

        // Pairing across the two machines: the codes match, the operator accepts.
        let pairing = try startProgram(
            "/usr/sbin/ip",
            [
                "netns", "exec", network.client, TestHost.buildFolder.appendingPathComponent("atrium").path, "pair",
                address, "--name", "the other machine",
            ], environment: ["XDG_STATE_HOME": state.path])
        var listed = ""
        for _ in 0..<100 where !listed.contains("the other machine") {
            try await Task.sleep(for: .milliseconds(50))
            listed = try await runProgram(
                TestHost.buildFolder.appendingPathComponent("atrium").path, ["pairing", "--socket", socket]
            ).output
        }
        let row = try #require(listed.split(separator: "\n").first { $0.contains("the other machine") })
        let number = try #require(row.split(separator: " ").first.map(String.init))
        let accepted = try await runProgram(
            TestHost.buildFolder.appendingPathComponent("atrium").path,
            ["pairing", "accept", number, "--socket", socket])
        #expect(accepted.status == 0, "\(accepted.output)")
        let paired = await pairing.finish()
        #expect(paired.status == 0, "\(paired.output)")
        let columns = row.split(separator: " ", omittingEmptySubsequences: true)
        #expect(columns.count > 2 && paired.output.contains("Verification code: \(columns[1]) \(columns[2])"), "\(row)")

        let served = try await Self.atrium(in: network, ["apps", address], state: state)
        #expect(served.status == 0 && served.output.contains("Roman Test App"), "\(served.output)")
        #expect(!served.output.contains("is not a host this client paired with"), "known now")
        let pinged = try await Self.atrium(in: network, ["ping", address, "-c", "2", "-i", "0"], state: state)
        #expect(pinged.status == 0 && pinged.output.contains("2 sent, 2 received"), "\(pinged.output)")
    }
}

struct NetworkError: Error, CustomStringConvertible {
    var description: String
}

/// A program running in the background, its output collected.
final class BackgroundProgram: @unchecked Sendable {
    let process: Process
    private let lock = NSLock()
    private var collected = Data()

    init(process: Process) { self.process = process }

    var output: String { lock.withLock { String(decoding: collected, as: UTF8.self) } }

    func append(_ data: Data) { lock.withLock { collected.append(data) } }

    /// Whether the program's output meets `condition` within `seconds`: for a line the program
    /// logs when something happens that another process may see first.
    func says(within seconds: Double = 15, _ condition: (String) -> Bool) async -> Bool {
        for _ in 0..<Int(seconds * 20) {
            if condition(output) { return true }
            try? await Task.sleep(for: .milliseconds(50))
        }
        return condition(output)
    }

    /// The TCP port from atriumd's "listening on tcp ADDRESS:PORT", once it is ready (20 s).
    func port(on address: String) async -> Int? {
        for _ in 0..<400 {
            let text = output
            if text.contains("atriumd: ready"),
                let line = text.split(separator: "\n").first(where: {
                    $0.contains("listening on tcp \(address):")
                })
            {
                return line.split(separator: ":").last.flatMap { Int($0.trimmingCharacters(in: .whitespaces)) }
            }
            if !process.isRunning { return nil }
            try? await Task.sleep(for: .milliseconds(50))
        }
        return nil
    }

    /// Waits (at most 20 s) for the program to end, and returns its status and output.
    func finish() async -> ProgramOutput {
        for _ in 0..<400 where process.isRunning { try? await Task.sleep(for: .milliseconds(50)) }
        if process.isRunning { process.terminate() }
        process.waitUntilExit()
        return ProgramOutput(status: process.terminationStatus, output: output)
    }
}

func startProgram(_ executable: String, _ arguments: [String], environment: [String: String] = [:]) throws
    -> BackgroundProgram
{
    let process = Process()
    process.executableURL = URL(fileURLWithPath: executable)
    process.arguments = arguments
    process.environment = ProcessInfo.processInfo.environment.merging(environment) { $1 }
    let pipe = Pipe()
    process.standardOutput = pipe
    process.standardError = pipe
    let program = BackgroundProgram(process: process)
    pipe.fileHandleForReading.readabilityHandler = { handle in program.append(handle.availableData) }
    try process.run()
    return program
}
