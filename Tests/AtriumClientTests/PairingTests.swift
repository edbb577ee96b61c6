import AtriumProtocol
import AtriumTLS
import AtriumTesting
import AtriumValues
import Foundation
import NIOCore
import NIOSSL
import Testing

@testable import AtriumClient

/// Pairing (CONTRACT section 7), against a real atriumd on loopback that requires it: an
/// unpaired device gets only hello, ping and pair; the operator sees the request with the
/// same code the device shows, over the local socket, and accepts or refuses it; a revoked
/// device is cut off mid-connection; the `atrium` tool pairs, remembers the host and refuses
/// it when its key changes. Waits are bounded in count and time.
@Suite(.serialized)
struct PairingTests {
    static let arguments = ["--tls", "required", "--pairing", "required"]

    static func device(_ host: TestHost, identity folder: URL? = nil) async throws -> AtriumConnection {
        let folder = folder ?? TLSTests.temporaryFolder("device")
        return try await AtriumConnection.connect(
            to: TLSTests.endpoint(host), clientName: "test device",
            tls: ClientTLS(identity: try ClientTLS.defaultIdentity(in: folder)))
    }

    /// A device that is not paired has no transfer: its transfer frames are refused, and
    /// counted as its other refused frames are, until its connection is closed.
    @Test func transferFramesOfADeviceThatIsNotPairedAreRefusedAndCounted() async throws {
        let host = try await TestHost.start(manifests: ClientTests.manifests, arguments: Self.arguments)
        let stranger = try await Self.device(host)
        let transfer = UUID()
        let frames: [ClientTransferFrame] = [
            .attach(AttachFrame(id: 1, transfer: transfer)), .transfers(TransfersQueryFrame(id: 2)),
            .chunk(ChunkFrame(transfer: transfer, offset: 0, data: ByteBuffer(bytes: [1]))),
            .cancel(transfer: transfer),
        ]
        // One more than the 32 a connection that is not authorized may have refused.
        for index in 0..<33 { try await stranger.send(.transfer(frames[index % frames.count])) }
        // The refusals come back as the client's calls fail, the last saying the connection
        // was closed (bounded: a few calls at most).
        var reasons: [String] = []
        for _ in 0..<5 {
            do {
                _ = try await stranger.apps(timeout: .seconds(10))
                Issue.record("the host served a device that is not paired")
            } catch let error as AtriumClientError {
                reasons.append(error.message)
                if error.message.contains("32 frames refused") { break }
            }
        }
        // Closed within five calls of its own: the transfer frames were refused and counted
        // (five refused calls alone would not reach 32).
        #expect(reasons.last?.contains("32 frames refused") == true, "\(reasons)")
        await stranger.close()
        #expect(await host.stop() == 0)
    }

    static func operatorConnection(_ host: TestHost) async throws -> AtriumConnection {
        try await AtriumConnection.connect(to: AtriumEndpoint(.unix(path: host.socketPath)))
    }

    /// The requests waiting, as the operator sees them, once there are `count` (within 60 s:
    /// a loaded machine may take a while to file them).
    static func waiting(_ admin: AtriumConnection, count: Int = 1) async throws -> [ValueSet] {
        for _ in 0..<1200 {
            let requests = try await admin.admin("pairing.list")["requests"]?.array?.maps ?? []
            if requests.count >= count { return requests }
            try await Task.sleep(for: .milliseconds(50))
        }
        return []
    }

    static func opensEcho(_ connection: AtriumConnection) async throws -> AppServiceConnectionStatus {
        try await AppServiceConnection(
            appServiceName: "atrium.echo", packageId: "atrium.examples.echo", connection: connection
        ).openRemote()
    }

    @Test func anUnpairedDeviceGetsOnlyHelloPingAndPair() async throws {
        let host = try await TestHost.start(manifests: ClientTests.manifests, arguments: Self.arguments)
        let device = try await Self.device(host)
        _ = try await device.ping()
        #expect(try await Self.opensEcho(device) == .notAuthorized)
        let launch = try await RemoteLauncher(connection: device).launchUri("roman-test://x")
        #expect(launch.status == .deniedByRemoteSystem)
        #expect(launch.error?.contains("not paired") == true, "\(launch.error ?? "")")
        await #expect(throws: AtriumClientError.self) { _ = try await device.apps() }
        do {
            _ = try await device.apps()
        } catch let error as AtriumClientError {
            #expect(error.code == .notAuthorized, "\(error)")
        }
        // Admin commands are for the local socket only.
        await #expect(throws: AtriumClientError.self) { _ = try await device.admin("pairing.list") }
        // The connection is still served.
        _ = try await device.ping()
        // A local client needs no pairing.
        let local = try await Self.operatorConnection(host)
        #expect(try await Self.opensEcho(local) == .success)
        await device.close()
        await local.close()
        #expect(await host.stop() == 0)
    }

    @Test func theOperatorSeesTheSameCodeAndAcceptsTheDevice() async throws {
        let host = try await TestHost.start(manifests: ClientTests.manifests, arguments: Self.arguments)
        let folder = TLSTests.temporaryFolder("device")
        let device = try await Self.device(host, identity: folder)
        let admin = try await Self.operatorConnection(host)
        let (codes, shown) = AsyncStream<String>.makeStream()
        let pairing = Task {
            try await device.pair(deviceName: "Ana's phone", timeout: .seconds(60)) { shown.yield($0) }
        }
        let requests = try await Self.waiting(admin)
        #expect(requests.count == 1)
        let request = try #require(requests.first)
        var iterator = codes.makeAsyncIterator()
        let code = try #require(await iterator.next())
        #expect(code.count == 6 && code.allSatisfy(\.isNumber))
        #expect(request["code"]?.string == code, "both sides show the same code")
        #expect(request["deviceName"]?.string == "Ana's phone")
        #expect(request["identity"]?.string == device.clientIdentity)
        #expect(await host.waitForLog("verification code \(code)"))
        let accepted = try await admin.admin("pairing.accept", ["request": request["request"] ?? 0])
        #expect(accepted["identity"]?.string == device.clientIdentity)
        #expect(try await pairing.value.status == .paired)

        // Paired: served on this connection, and on the next one at once.
        #expect(try await Self.opensEcho(device) == .success)
        let again = try await Self.device(host, identity: folder)
        #expect(try await Self.opensEcho(again) == .success)
        #expect(try await again.pair(deviceName: "Ana's phone").status == .paired, "paired already")
        let devices = try await admin.admin("devices.list")["devices"]?.array?.maps ?? []
        #expect(devices.count == 1 && devices.first?["name"]?.string == "Ana's phone")
        #expect(try await admin.admin("pairing.list")["requests"]?.array?.maps?.isEmpty == true)
        // Kept across a restart of the host.
        let devicesFile = host.stateFolder.appendingPathComponent("devices.json")
        #expect(try TLSTests.mode(devicesFile) == 0o600)
        await device.close()
        await again.close()
        await admin.close()
        #expect(await host.stop() == 0)
        let restarted = try await TestHost.start(
            manifests: ClientTests.manifests, arguments: Self.arguments + ["--state-dir", host.stateFolder.path])
        let later = try await Self.device(restarted, identity: folder)
        #expect(try await Self.opensEcho(later) == .success)
        await later.close()
        #expect(await restarted.stop() == 0)
    }

    @Test func aRefusedOrUnansweredPairingIsToldAndLetsNothingIn() async throws {
        // Refused, on a host that waits for its operator as long as by default (the refusal
        // takes several steps of this task, which may run late).
        let host = try await TestHost.start(manifests: ClientTests.manifests, arguments: Self.arguments)
        let admin = try await Self.operatorConnection(host)
        let refusedDevice = try await Self.device(host)
        let refusing = Task { try await refusedDevice.pair(deviceName: "stranger", timeout: .seconds(60)) }
        let request = try #require(try await Self.waiting(admin).first)
        _ = try await admin.admin("pairing.refuse", ["request": request["request"] ?? 0])
        let refused = try await refusing.value
        #expect(refused.status == .refused)
        #expect(try await Self.opensEcho(refusedDevice) == .notAuthorized)
        // A decision on a request that is gone, and an unknown command, are refused plainly.
        do {
            _ = try await admin.admin("pairing.accept", ["request": 999])
            Issue.record("an unknown request was accepted")
        } catch let error as AtriumClientError {
            #expect(error.code == .refused && error.message.contains("no pairing request 999"))
        }
        await #expect(throws: AtriumClientError.self) { _ = try await admin.admin("devices.destroy") }
        await refusedDevice.close()
        await admin.close()
        #expect(await host.stop() == 0)

        // Unanswered, on a host that waits 0.5 s for its operator.
        let hasty = try await TestHost.start(
            manifests: ClientTests.manifests, arguments: Self.arguments + ["--pairing-timeout", "0.5"])
        let watching = try await Self.operatorConnection(hasty)
        let slowDevice = try await Self.device(hasty)
        let unanswered = try await slowDevice.pair(deviceName: "nobody looks", timeout: .seconds(60))
        #expect(unanswered.status == .timedOut)
        #expect(try await Self.opensEcho(slowDevice) == .notAuthorized)
        #expect(try await watching.admin("pairing.list")["requests"]?.array?.maps?.isEmpty == true)
        await slowDevice.close()
        await watching.close()
        #expect(await hasty.stop() == 0)
    }

    @Test func aRevokedDeviceIsCutOffMidConnection() async throws {
        let host = try await TestHost.start(manifests: ClientTests.manifests, arguments: Self.arguments)
        let admin = try await Self.operatorConnection(host)
        let device = try await Self.device(host)
        let pairing = Task { try await device.pair(deviceName: "lost phone", timeout: .seconds(60)) }
        let request = try #require(try await Self.waiting(admin).first)
        _ = try await admin.admin("pairing.accept", ["request": request["request"] ?? 0])
        #expect(try await pairing.value.status == .paired)
        let echo = AppServiceConnection(
            appServiceName: "atrium.echo", packageId: "atrium.examples.echo", connection: device)
        #expect(try await echo.openRemote() == .success)
        #expect(try await echo.sendMessage(["n": 1]).status == .success)

        let identity = try #require(device.clientIdentity)
        let revoked = try await admin.admin("devices.revoke", ["device": .string(String(identity.prefix(8)))])
        #expect(revoked["identity"]?.string == identity)
        // Cut off at once: the channel's next message fails, the connection is gone.
        await #expect(throws: AtriumClientError.self) { _ = try await echo.sendMessage(["n": 2]) }
        #expect(await host.waitForLog("pairing was revoked"))
        // And it must pair again.
        let back = try await Self.device(host)
        #expect(try await Self.opensEcho(back) == .notAuthorized)
        #expect(try await admin.admin("devices.list")["devices"]?.array?.maps?.isEmpty == true)
        await back.close()
        await admin.close()
        #expect(await host.stop() == 0)
    }

    @Test func theCodeIsTheDocumentedDerivation() {
        // Vectors computed independently (Python's hashlib) from the derivation in SECURITY.md.
        let (host, client) = (String(repeating: "ab", count: 32), String(repeating: "cd", count: 32))
        let (clientNonce, hostNonce) = (String(repeating: "01", count: 32), String(repeating: "02", count: 32))
        #expect(
            PairingCode.between(host: host, client: client, clientNonce: clientNonce, hostNonce: hostNonce) == "700969")
        #expect(
            PairingCode.between(
                host: host, client: client, clientNonce: clientNonce, hostNonce: String(repeating: "03", count: 32))
                == "441515", "another nonce, another code")
        #expect(PairingCode.between(host: host, client: client) == "768863")
        #expect(
            PairingCode.commitment(to: clientNonce)
                == "c2f562ad9fee0208571ec1f672d4b3398ce74f2bacec06d0ea898df008602580")
        #expect(PairingCode.isWellFormed(PairingCode.makeNonce()))
        #expect(PairingCode.makeNonce() != PairingCode.makeNonce())
    }

    @Test func aNonceThatDoesNotMatchItsCommitmentFilesNothing() async throws {
        let host = try await TestHost.start(manifests: ClientTests.manifests, arguments: Self.arguments)
        let admin = try await Self.operatorConnection(host)
        let device = try await Self.device(host)
        let committed = PairingCode.makeNonce()
        let first = try await device.call(
            .pair(PairFrame(id: 1, deviceName: "cheat", commitment: PairingCode.commitment(to: committed))),
            awaiting: .paired(1), timeout: .seconds(5))
        guard case .pairNonce = first else {
            Issue.record("no nonce from the host: \(first)")
            return
        }
        // Another nonce than the one committed to: what someone steering the code would need.
        let reveal = try await device.call(
            .pairReveal(id: 1, nonce: PairingCode.makeNonce()), awaiting: .paired(1), timeout: .seconds(5))
        guard case .paired(let outcome) = reveal else {
            Issue.record("no answer to the reveal: \(reveal)")
            return
        }
        #expect(outcome.status == .notPossible)
        #expect(outcome.error?.contains("does not match the commitment") == true)
        #expect(try await admin.admin("pairing.list")["requests"]?.array?.maps?.isEmpty == true)
        // A reveal with nothing committed is refused too, and a malformed commitment.
        let stray = try await device.call(
            .pairReveal(id: 2, nonce: committed), awaiting: .paired(2), timeout: .seconds(5))
        #expect(
            stray == .paired(PairedFrame(id: 2, status: .notPossible, error: "no pairing of this id waits for a nonce"))
        )
        let malformed = try await device.call(
            .pair(PairFrame(id: 3, deviceName: "x", commitment: "zz")), awaiting: .paired(3), timeout: .seconds(5))
        guard case .paired(let refused) = malformed else {
            Issue.record("a malformed commitment got \(malformed)")
            return
        }
        #expect(refused.status == .notPossible)
        // Unpaired, a request on a channel it cannot have is refused as such.
        let request = try await device.call(
            .request(RequestFrame(channel: 1, id: 9, message: EncodedValueSet(["x": 1]))),
            awaiting: .response(1, 9), timeout: .seconds(5))
        guard case .response(let response) = request else {
            Issue.record("no response: \(request)")
            return
        }
        #expect(response.status == .authenticationError)
        await device.close()
        await admin.close()
        #expect(await host.stop() == 0)
    }

    @Test func pairingAttemptsAreLimitedAndNamesCleaned() async throws {
        let host = try await TestHost.start(
            manifests: ClientTests.manifests, arguments: Self.arguments + ["--log-level", "notice"])
        let admin = try await Self.operatorConnection(host)
        // A name that would rewrite the operator's line and forge a code in the log.
        let hostile =
            "phone\r\u{1b}[2K\" at 10.0.0.9: verification code 123456; \u{202e}" + String(repeating: "x", count: 80)
        let first = try await Self.device(host)
        let filing = Task { try await first.pair(deviceName: hostile, timeout: .seconds(60)) }
        let request = try #require(try await Self.waiting(admin).first)
        let shown = try #require(request["deviceName"]?.string)
        #expect(!shown.unicodeScalars.contains { $0.value < 0x20 || $0 == "\"" || $0.value == 0x202e }, "\(shown)")
        #expect(shown.count <= 65)
        #expect(!host.logged("\u{1b}[2K"))
        // One more from this address may wait; the next is refused.
        let second = try await Self.device(host)
        let secondFiling = Task { try await second.pair(deviceName: "second", timeout: .seconds(60)) }
        _ = try await Self.waiting(admin, count: 2)
        let third = try await Self.device(host)
        let refused = try await third.pair(deviceName: "third", timeout: .seconds(60))
        #expect(refused.status == .notPossible)
        #expect(refused.error?.contains("from this address") == true, "\(refused.error ?? "")")
        // Attempts from one address: at most 5 a minute (three made above).
        var limited: PairedFrame?
        for _ in 0..<20 {
            let attempt = try await Self.device(host)
            let outcome = try await attempt.pair(deviceName: "flood", timeout: .seconds(60))
            await attempt.close()
            if outcome.error?.contains("too many pairing attempts") == true {
                limited = outcome
                break
            }
        }
        #expect(limited?.status == .notPossible, "the flood was not limited")
        await first.close()
        await second.close()
        await third.close()
        _ = try? await filing.value
        _ = try? await secondFiling.value
        await admin.close()
        #expect(await host.stop() == 0)
    }

    /// A TLS client at `address` (another loopback address is another peer to the host),
    /// with an identity of its own, that has said hello.
    static func stranger(_ host: TestHost, from address: String, identity: TLSIdentity) async throws -> TestClient {
        let context = try identity.makeClientContext()
        let client = try await TestClient.connect(port: host.port, from: address) { channel in
            try channel.pipeline.syncOperations.addHandler(
                NIOSSLClientHandler(
                    context: context, serverHostname: nil,
                    customVerificationCallback: { _, promise in promise.succeed(.certificateVerified) }))
        }
        try await client.hello(clientId: "stranger")
        return client
    }

    /// A stranger's pairing attempts from one address, each a commitment whose nonce it never
    /// reveals, use up that address's share, not the host's: a device elsewhere pairs meanwhile.
    @Test func oneStrangerCannotShutPairingForEveryone() async throws {
        let host = try await TestHost.start(manifests: ClientTests.manifests, arguments: Self.arguments)
        let admin = try await Self.operatorConnection(host)
        let identity = try TLSIdentity.loadOrCreate(
            in: TLSTests.temporaryFolder("stranger"), name: "client", commonName: "stranger")
        var strangers: [TestClient] = []
        var refusedFrom: Int?
        // More attempts than the host takes in a minute from everyone (20).
        for attempt in 0..<24 {
            let stranger = try await Self.stranger(host, from: "127.0.0.2", identity: identity)
            strangers.append(stranger)
            let commitment = String(repeating: "a", count: 64)
            try await stranger.send(.pair(PairFrame(id: 1, deviceName: "stranger", commitment: commitment)))
            switch try await stranger.next() {
            case .pairNonce:
                #expect(refusedFrom == nil, "attempt \(attempt) began after one was refused")
            case .paired(let refused):
                #expect(refused.status == .notPossible)
                #expect(refused.error?.contains("from this address") == true, "\(refused.error ?? "")")
                refusedFrom = refusedFrom ?? attempt
            case let other:
                Issue.record("attempt \(attempt) was answered \(String(describing: other))")
            }
        }
        #expect(refusedFrom == 5, "an address's share is 5 attempts a minute")

        let device = try await Self.device(host)
        let pairing = Task { try await device.pair(deviceName: "elsewhere", timeout: .seconds(60)) }
        let request = try #require(try await Self.waiting(admin).first)
        #expect(request["deviceName"]?.string == "elsewhere")
        _ = try await admin.admin("pairing.accept", ["request": request["request"] ?? 0])
        #expect(try await pairing.value.status == .paired)
        #expect(try await Self.opensEcho(device) == .success)
        for stranger in strangers { await stranger.close() }
        await device.close()
        await admin.close()
        #expect(await host.stop() == 0)
    }

    /// Pairs the tool (state in `stateHome`) with `host` at `address`: the operator accepts the
    /// request once the tool has shown its code. Returns the tool's exit status and output.
    static func toolPairs(
        _ host: TestHost, _ address: String, stateHome: URL, _ extra: [String] = []
    ) async throws -> ProgramOutput {
        let output = TLSTests.temporaryFolder("pair-output").appendingPathExtension("txt")
        let pairing = try startAtrium(
            ["pair", address, "--name", "pinned"] + extra, stateHome: stateHome, file: output)
        let admin = try await Self.operatorConnection(host)
        defer { Task { await admin.close() } }
        let request = try #require(try await Self.waiting(admin).first)
        // The code is out before the decision, also with the output in a file.
        let code = try #require(request["code"]?.string)
        let shown = await eventually(within: .seconds(5)) {
            ((try? String(contentsOf: output, encoding: .utf8)) ?? "").contains("\(code.prefix(3)) \(code.suffix(3))")
        }
        #expect(shown, "the verification code was not written before the operator decided")
        _ = try await admin.admin("pairing.accept", ["request": request["request"] ?? 0])
        return await pairing.finish()
    }

    /// A host that claims the id of a host this client paired with (ids are public) does not
    /// take its place by pairing: refused, with both identities, until --forget; then the tool
    /// says which identity it replaced.
    @Test func aHostClaimingAnotherHostsIdDoesNotReplaceItsPin() async throws {
        let stateHome = TLSTests.temporaryFolder("pin-state")
        let known = KnownHosts(folder: stateHome.appendingPathComponent("atrium"))
        let first = try await TestHost.start(manifests: ClientTests.manifests, arguments: Self.arguments)
        let paired = try await Self.toolPairs(first, "127.0.0.1:\(first.port)", stateHome: stateHome)
        #expect(paired.status == 0, "\(paired.output)")
        let local = try await Self.operatorConnection(first)
        let (hostId, firstIdentity) = (local.welcome.hostId, try #require(local.welcome.hostIdentity))
        await local.close()
        #expect(known.identity(ofHostId: hostId) == firstIdentity)

        // Every host of this machine has the same id: this one claims the first's, with a key
        // of its own.
        let second = try await TestHost.start(manifests: ClientTests.manifests, arguments: Self.arguments)
        let admin = try await Self.operatorConnection(second)
        let secondIdentity = try #require(admin.welcome.hostIdentity)
        #expect(admin.welcome.hostId == hostId && secondIdentity != firstIdentity)
        let refused = try startAtrium(["pair", "127.0.0.1:\(second.port)"], stateHome: stateHome)
        let outcome = await refused.finish()
        #expect(outcome.status == 1, "\(outcome.output)")
        #expect(outcome.output.contains("which this client paired with before"), "\(outcome.output)")
        #expect(outcome.output.contains(firstIdentity) && outcome.output.contains(secondIdentity))
        #expect(try await admin.admin("pairing.list")["requests"]?.array?.maps?.isEmpty ?? true, "nothing filed")
        #expect(known.identity(ofHostId: hostId) == firstIdentity, "the pin is unchanged")
        await admin.close()

        let replaced = try await Self.toolPairs(second, "127.0.0.1:\(second.port)", stateHome: stateHome, ["--forget"])
        #expect(replaced.status == 0, "\(replaced.output)")
        #expect(
            replaced.output.contains("Replaced the identity remembered for host \(hostId) (was \(firstIdentity))"),
            "\(replaced.output)")
        #expect(known.identity(ofHostId: hostId) == secondIdentity)
        #expect(await first.stop() == 0)
        #expect(await second.stop() == 0)
    }

    /// A device that is not paired is held to frames of 64 KiB (its welcome says so): what a
    /// stranger can make the host buffer over its many connections stays small, not 4 MiB a
    /// connection. A paired device gets the host's whole limit.
    @Test func aStrangersFramesAreHeldSmall() async throws {
        let host = try await TestHost.start(manifests: ClientTests.manifests, arguments: Self.arguments)
        let identity = try TLSIdentity.loadOrCreate(
            in: TLSTests.temporaryFolder("small-frames"), name: "client", commonName: "stranger")
        let context = try identity.makeClientContext()
        let stranger = try await TestClient.connect(port: host.port) { channel in
            try channel.pipeline.syncOperations.addHandler(
                NIOSSLClientHandler(
                    context: context, serverHostname: nil,
                    customVerificationCallback: { _, promise in promise.succeed(.certificateVerified) }))
        }
        let welcome = try await stranger.hello(clientId: "stranger")
        #expect(welcome.limits.maxFrameBytes == 64 << 10, "\(welcome.limits)")
        #expect(welcome.limits.maxMessageBytes < 64 << 10)
        // A frame of 1 MiB is refused as soon as its length arrives.
        try await stranger.sendRaw(Array(withUnsafeBytes(of: UInt32(1 << 20).bigEndian) { Array($0) }) + [0xa0])
        guard case .error(let refused) = try await stranger.next() else {
            Issue.record("no error frame")
            return
        }
        #expect(refused.code == .frameTooLarge && refused.message.contains("65536"), "\(refused)")
        await stranger.close()

        // Paired: the whole limit.
        let admin = try await Self.operatorConnection(host)
        let folder = TLSTests.temporaryFolder("big-frames-device")
        let device = try await Self.device(host, identity: folder)
        #expect(device.welcome.limits.maxFrameBytes == 64 << 10)
        let pairing = Task { try await device.pair(deviceName: "big frames", timeout: .seconds(60)) }
        let request = try #require(try await Self.waiting(admin).first)
        _ = try await admin.admin("pairing.accept", ["request": request["request"] ?? 0])
        #expect(try await pairing.value.status == .paired)
        let again = try await Self.device(host, identity: folder)
        #expect(again.welcome.limits.maxFrameBytes == 4 << 20)
        let echo = AppServiceConnection(
            appServiceName: "atrium.echo", packageId: "atrium.examples.echo", connection: again)
        #expect(try await echo.openRemote() == .success)
        let big = try await echo.sendMessage(["Blob": .bytes(Array(repeating: 1, count: 512 << 10))])
        #expect(big.status == .success)
        await device.close()
        await again.close()
        await admin.close()
        #expect(await host.stop() == 0)
    }

    @Test func plainTCPCannotPair() async throws {
        let host = try await TestHost.start(
            manifests: ClientTests.manifests, arguments: ["--tls", "optional", "--pairing", "required"])
        let plain = try await AtriumConnection.connect(to: TLSTests.endpoint(host))
        let outcome = try await plain.pair(deviceName: "no identity")
        #expect(outcome.status == .notPossible)
        #expect(outcome.error?.contains("needs TLS") == true, "\(outcome.error ?? "")")
        #expect(try await Self.opensEcho(plain) == .notAuthorized)
        await plain.close()
        #expect(await host.stop() == 0)
    }

    @Test func theToolPairsRemembersTheHostAndRefusesItWhenItsKeyChanges() async throws {
        let host = try await TestHost.start(manifests: ClientTests.manifests, arguments: Self.arguments)
        let address = "127.0.0.1:\(host.port)"
        let pairing = try startAtrium(["pair", address, "--name", "tool test"])
        let admin = try await Self.operatorConnection(host)
        let request = try #require(try await Self.waiting(admin).first)
        let list = try await atrium(["pairing", "--socket", host.socketPath])
        #expect(list.status == 0)
        let code = try #require(request["code"]?.string)
        #expect(list.output.contains("\(code.prefix(3)) \(code.suffix(3))"), "\(list.output)")
        let accept = try await atrium([
            "pairing", "accept", "\(request["request"]?.int ?? 0)", "--socket", host.socketPath,
        ])
        #expect(accept.status == 0, "\(accept.output)")
        let paired = await pairing.finish()
        #expect(paired.status == 0, "\(paired.output)")
        #expect(paired.output.contains("Verification code: \(code.prefix(3)) \(code.suffix(3))"), "\(paired.output)")
        let known = try KnownHosts(folder: toolStateHome.appendingPathComponent("atrium")).identity(
            of: AtriumEndpoint(address)!)
        let local = try await Self.operatorConnection(host)
        #expect(known != nil && known == local.welcome.hostIdentity)
        await local.close()
        let devices = try await atrium(["devices", "--socket", host.socketPath])
        #expect(devices.output.contains("tool test"), "\(devices.output)")
        let ping = try await atrium(["ping", address, "-c", "1"])
        #expect(ping.status == 0, "\(ping.output)")
        await admin.close()
        #expect(await host.stop() == 0)

        // The same address, a host with another key: refused, saying what was expected.
        let impostor = try await TestHost.start(
            manifests: ClientTests.manifests, arguments: Self.arguments + ["--listen", address])
        let refused = try await atrium(["ping", address, "-c", "1"])
        #expect(refused.status == 3)
        #expect(refused.output.contains("is not the host you know"), "\(refused.output)")
        #expect(refused.output.contains(known ?? "?"), "\(refused.output)")
        #expect(await impostor.stop() == 0)
    }
}

/// The `atrium` tool running in the background, for commands that wait (`atrium pair`).
final class RunningProgram: Sendable {
    let process: Process
    let output: FileHandle

    init(process: Process, output: FileHandle) {
        self.process = process
        self.output = output
    }

    /// Waits (at most 20 s) for the program to end, and returns its exit status and output.
    func finish() async -> ProgramOutput {
        for _ in 0..<400 where process.isRunning { try? await Task.sleep(for: .milliseconds(50)) }
        if process.isRunning { process.terminate() }
        process.waitUntilExit()
        let data = output.readDataToEndOfFile()
        return ProgramOutput(status: process.terminationStatus, output: String(decoding: data, as: UTF8.self))
    }
}

/// Starts the `atrium` tool with `stateHome` as its XDG_STATE_HOME; its output goes to a
/// pipe, or to `file` as `atrium ... > file &` would have it (``RunningProgram/finish()``
/// reads the file then).
func startAtrium(_ arguments: [String], stateHome: URL = toolStateHome, file: URL? = nil) throws -> RunningProgram {
    let process = Process()
    process.executableURL = TestHost.buildFolder.appendingPathComponent("atrium")
    process.arguments = arguments
    process.environment = ProcessInfo.processInfo.environment.merging(["XDG_STATE_HOME": stateHome.path]) { $1 }
    if let file {
        _ = FileManager.default.createFile(atPath: file.path, contents: nil)
        let handle = try FileHandle(forWritingTo: file)
        process.standardOutput = handle
        process.standardError = handle
        try process.run()
        try handle.close()
        return RunningProgram(process: process, output: try FileHandle(forReadingFrom: file))
    }
    let pipe = try PrivatePipe()
    process.standardOutput = pipe.writing
    process.standardError = pipe.writing
    try process.run()
    pipe.childStarted()
    return RunningProgram(process: process, output: pipe.reading)
}
