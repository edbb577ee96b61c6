import AtriumProtocol
import AtriumTesting
import AtriumValues
import Foundation
import NIOCore
import Testing

/// A download started with its request (docs/PROTOCOL.md, "A download started with its
/// request"): a `request` with `attach` is answered with the download the service offered
/// already attached, its chunks right behind the response, with no `attach` round trip; every
/// other answer is as without it; the limits hold; a malformed `attach` is a protocol error.
struct TransferStartedDownloadTests {
    typealias Download = TransferDownloadTests

    /// Opens Files on channel 1 and sends `message` with `attach`: the response.
    static func request(
        _ message: ValueSet, on client: TestClient, id: UInt64, window: UInt64? = nil, open: Bool = true
    ) async throws -> ResponseFrame {
        if open {
            #expect(
                try await client.open(channel: 1, service: Download.filesService, package: Download.filesPackage)
                    == .success)
        }
        try await client.send(
            .request(
                RequestFrame(
                    channel: 1, id: id, message: EncodedValueSet(message), attach: RequestAttach(window: window))))
        // A download attached here already sends its state each second: that may come first.
        let frame = try await Download.nextSignificant(client)
        guard case .response(let response)? = frame else {
            throw Download.TestFailure("expected a response, got \(String(describing: frame))")
        }
        return response
    }

    @Test func aRequestThatAsksToAttachGetsItsDownloadWithTheAnswerAndItsBytesBehindIt() async throws {
        let served = try Download.Served(size: 1_100_000)
        let host = try await TestHost.start(manifests: served.manifests)
        let client = try await connectedClient(host)
        let response = try await Self.request(
            ["Command": "get", "Name": .string(served.name)], on: client, id: 7, window: 1 << 20)
        #expect(response.status == .success)
        guard case .uuid(let transfer)? = try response.decoded["Transfer"], let attached = response.attached else {
            throw Download.TestFailure("get was answered without an attached download: \(response)")
        }
        #expect(attached.id == 7 && attached.transfer == transfer && attached.status == .success)
        #expect(attached.direction == "download" && attached.size == 1_100_000 && attached.offset == 0)
        #expect(attached.window == 1 << 20 && attached.name == served.name && attached.chunkBytes == 256 << 10)
        // No attach: the chunks come, from 0, and the download completes as any other.
        var bytes: [UInt8] = []
        let early = try await Download.receive(
            transfer, on: client, from: 0, until: served.bytes.count, window: 1 << 20, into: &bytes)
        #expect(early == nil, "\(String(describing: early))")
        #expect(bytes == served.bytes)
        guard case .transfer(.state(let done))? = try await Download.nextSignificant(client) else {
            throw Download.TestFailure("no state after the last ack")
        }
        #expect(done.transfer == transfer && done.state == "completed")
        #expect(await host.stop() == 0)
    }

    @Test func theWindowARequestAsksForHoldsUntilTheClientAcknowledges() async throws {
        let served = try Download.Served(size: 600_000)
        let host = try await TestHost.start(manifests: served.manifests)
        let client = try await connectedClient(host)
        let window = 100_000
        let response = try await Self.request(
            ["Command": "get", "Name": .string(served.name)], on: client, id: 1, window: UInt64(window))
        guard let attached = response.attached, attached.status == .success else {
            throw Download.TestFailure("no attached download: \(response)")
        }
        var bytes: [UInt8] = []
        _ = try await Download.receive(
            attached.transfer, on: client, from: 0, until: window, window: 0, into: &bytes)
        #expect(bytes.count == window, "the host sent past the window the request asked for")
        // Nothing more until an ack moves the window (a state each second at most).
        if case .transfer(.chunk)? = try? await client.next(timeout: .milliseconds(300)) {
            Issue.record("a chunk past the window")
        }
        try await client.send(
            .transfer(.ack(AckFrame(transfer: attached.transfer, offset: UInt64(window), window: 1 << 20))))
        _ = try await Download.receive(
            attached.transfer, on: client, from: window, until: served.bytes.count, window: 1 << 20, into: &bytes)
        #expect(bytes == served.bytes)
        #expect(await host.stop() == 0)
    }

    @Test func answersThatStartNoDownloadAreAnsweredAsWithoutAttach() async throws {
        let served = try Download.Served(size: 10_000)
        let host = try await TestHost.start(manifests: served.manifests)
        let client = try await connectedClient(host)
        // No transfer at all.
        let list = try await Self.request(["Command": "list"], on: client, id: 1)
        #expect(list.status == .success && list.attached == nil)
        // A refusal.
        let missing = try await Self.request(["Command": "get", "Name": "not-there"], on: client, id: 2, open: false)
        #expect(missing.status == .failure && missing.attached == nil)
        // An upload: the client attaches it itself, as always.
        let put = try await Self.request(
            ["Command": "put", "Name": "up.bin", "Size": 5], on: client, id: 3, open: false)
        #expect(put.status == .success && put.attached == nil)
        guard case .uuid(let upload)? = try put.decoded["Transfer"] else {
            throw Download.TestFailure("put was answered \(put)")
        }
        #expect(try await Download.attach(upload, on: client).direction == "upload")
        // And a request without attach still gets its download unattached.
        let plain = try await client.request(channel: 1, id: 4, ["Command": "get", "Name": .string(served.name)])
        #expect(plain.status == .success && plain.attached == nil)
        #expect(await host.stop() == 0)
    }

    @Test func aStartedDownloadPastTheConnectionsAttachedLimitIsRefusedInItsAnswerAndAttachesLater() async throws {
        let served = try Download.Served(size: 300_000)
        let host = try await TestHost.start(
            manifests: served.manifests, arguments: ["--transfers-per-connection", "1"])
        let client = try await connectedClient(host)
        // The first holds the connection's one attachment (a window of one byte keeps it going).
        let first = try await Self.request(
            ["Command": "get", "Name": .string(served.name)], on: client, id: 1, window: 1)
        #expect(first.attached?.status == .success)
        var held: [UInt8] = []
        _ = try await Download.receive(
            first.attached!.transfer, on: client, from: 0, until: 1, window: 0, into: &held)
        let second = try await Self.request(
            ["Command": "get", "Name": .string(served.name)], on: client, id: 2, open: false)
        #expect(second.status == .success, "the service's answer stands")
        guard let refused = second.attached else {
            throw Download.TestFailure("no attached in the answer: \(second)")
        }
        #expect(refused.status == .resourceLimitsExceeded && refused.id == 2)
        guard case .uuid(let transfer)? = try second.decoded["Transfer"] else {
            throw Download.TestFailure("get was answered \(second)")
        }
        #expect(refused.transfer == transfer)
        // Once the first is detached, the second attaches as any download does.
        try await client.send(.transfer(.detach(transfer: first.attached!.transfer)))
        let later = try await Download.attach(transfer, on: client, window: 1 << 20)
        #expect(later.status == .success)
        var bytes: [UInt8] = []
        _ = try await Download.receive(transfer, on: client, from: 0, until: 300_000, window: 1 << 20, into: &bytes)
        #expect(bytes == served.bytes)
        #expect(await host.stop() == 0)
    }

    @Test func aDownloadOfferedByAWorkerStartsWithItsAnswerToo() async throws {
        let served = try Download.Served(size: 500_000)
        let host = try await TestHost.start(manifests: served.workerManifests)
        let client = try await connectedClient(host)
        let response = try await Self.request(["Command": "get", "Name": .string(served.name)], on: client, id: 3)
        guard let attached = response.attached, attached.status == .success else {
            throw Download.TestFailure("no attached download: \(response)")
        }
        #expect(attached.window == 4 << 20, "the default window, as attach's")
        var bytes: [UInt8] = []
        _ = try await Download.receive(
            attached.transfer, on: client, from: 0, until: 500_000, window: 1 << 20, into: &bytes)
        #expect(bytes == served.bytes)
        #expect(await host.stop() == 0)
    }

    @Test(arguments: [
        ("attach", Value.int(5)),
        ("attach", Value.string("yes")),
        ("attach", Value.map(["window": "all"])),
        ("attach", Value.map(["window": .int(-1)])),
    ])
    func aMalformedAttachIsAProtocolErrorThatTouchesNoOtherConnection(key: String, value: Value) async throws {
        let served = try Download.Served(size: 10_000)
        let host = try await TestHost.start(manifests: served.manifests)
        let bystander = try await connectedClient(host)
        let hostile = try await connectedClient(host)
        #expect(
            try await hostile.open(channel: 1, service: Download.filesService, package: Download.filesPackage)
                == .success)
        let frame: ValueSet = [
            "type": "request", "channel": 1, "id": 1,
            "message": .map(["Command": "get", "Name": .string(served.name)]),
            key: value,
        ]
        try await hostile.sendRaw(TestClient.frame(frame.cborBytes()))
        guard case .error(let error)? = try await hostile.next() else {
            throw Download.TestFailure("a malformed attach was not refused")
        }
        #expect(error.code == .malformedFrame && error.message.contains("attach"), "\(error)")
        #expect(try await hostile.isClosedByHost(), "the connection is closed after a protocol error")
        // The other client goes on.
        let response = try await Self.request(
            ["Command": "get", "Name": .string(served.name)], on: bystander, id: 1)
        #expect(response.attached?.status == .success)
        #expect(await host.stop() == 0)
    }

    /// `attached` belongs to the host's responses, `attach` to the client's requests: the same
    /// keys on the other side's frames are unknown keys, ignored as any other.
    @Test func attachedInAClientsResponseIsAnUnknownKeyNotAProtocolError() async throws {
        let served = try Download.Served(size: 10_000)
        let host = try await TestHost.start(manifests: served.manifests)
        let client = try await connectedClient(host)
        let frame: ValueSet = [
            "type": "response", "channel": 1, "id": 1, "status": 0, "message": .map([:]), "attached": 5,
        ]
        try await client.sendRaw(TestClient.frame(frame.cborBytes()))
        try await client.send(.ping(id: 3))
        guard case .pong(let id)? = try await client.next() else {
            throw Download.TestFailure("the connection did not go on")
        }
        #expect(id == 3)
        #expect(await host.stop() == 0)
    }
}
