import AtriumProtocol
import AtriumTesting
import AtriumValues
import Foundation
import NIOCore
import Testing

/// Downloads (CONTRACT section 8) through the Files reference service against a real atriumd:
/// whole and exact, within the client's window, resumed on a new connection and after the
/// host's restart, owned by their caller, cancelled, listed, changed under the host, expired.
struct TransferDownloadTests {
    static let filesPackage = "atrium.examples.files"
    static let filesService = "atrium.files"

    /// A folder with one file of `size` random bytes, named `name`, and the manifests that
    /// serve it with Files.
    struct Served {
        let folder: URL
        let bytes: [UInt8]
        let name: String
        var manifests: [String: String] {
            [
                "files.json": """
                {
                  "manifestVersion": 1,
                  "package": "\(TransferDownloadTests.filesPackage)",
                  "displayName": "Files",
                  "library": "libFiles.so",
                  "services": [{ "name": "\(TransferDownloadTests.filesService)", "supportsRemoteSystems": true }],
                  "config": { "folder": "\(folder.path)" }
                }
                """
            ]
        }

        /// The same, Files in a worker process (`"isolation": "process"`).
        var workerManifests: [String: String] {
            manifests.mapValues {
                $0.replacingOccurrences(
                    of: #""library": "libFiles.so","#, with: #""library": "libFiles.so", "isolation": "process","#)
            }
        }

        init(size: Int, name: String = "photo.jpg") throws {
            folder = FileManager.default.temporaryDirectory.appendingPathComponent("atrium-files-\(UUID())")
            try FileManager.default.createDirectory(at: folder, withIntermediateDirectories: true)
            bytes = TransferUploadTests.random(size)
            self.name = name
            try Data(bytes).write(to: folder.appendingPathComponent(name))
        }
    }

    /// Opens Files and asks for `name`: the answer's transfer id and size.
    static func get(_ name: String, on client: TestClient, channel: UInt64 = 1) async throws -> (UUID, Int64) {
        #expect(try await client.open(channel: channel, service: filesService, package: filesPackage) == .success)
        let response = try await client.request(channel: channel, id: 1, ["Command": "get", "Name": .string(name)])
        #expect(response.status == .success, "\(response.error ?? "")")
        let answer = try response.decoded
        guard case .uuid(let transfer)? = answer["Transfer"], case .int(let size)? = answer["Size"] else {
            throw TestFailure("get was answered \(answer)")
        }
        return (transfer, size)
    }

    struct TestFailure: Error, CustomStringConvertible {
        var description: String
        init(_ description: String) { self.description = description }
    }

    /// The next frame that is not a `transferState` of a running transfer (sent each second
    /// while bytes move).
    static func nextSignificant(_ client: TestClient) async throws -> HostFrame? {
        while true {
            let frame = try await client.next()
            if case .transfer(.state(let state))? = frame, state.state == "running" { continue }
            return frame
        }
    }

    /// Receives chunks of `transfer`, acknowledging each with `window`, until `until` bytes are
    /// held or the transfer completes; returns the bytes and the final state, if one came.
    static func receive(
        _ transfer: UUID, on client: TestClient, from offset: Int, until: Int, window: UInt64,
        into bytes: inout [UInt8]
    ) async throws -> TransferStateFrame? {
        var held = offset
        while held < until {
            let frame = try await nextSignificant(client)
            switch frame {
            case .transfer(.chunk(let chunk))?:
                #expect(chunk.transfer == transfer)
                #expect(chunk.offset == UInt64(held), "chunks come in order from the agreed offset")
                bytes += chunk.data.readableBytesView
                held += chunk.data.readableBytes
                try await client.send(
                    .transfer(.ack(AckFrame(transfer: transfer, offset: UInt64(held), window: window))))
            case .transfer(.state(let state))?:
                return state
            default:
                throw TestFailure("expected a chunk, got \(String(describing: frame))")
            }
        }
        return nil
    }

    /// The host's answer to `transfers` (every transfer of `client`'s caller).
    static func transfers(on client: TestClient) async throws -> TransfersFrame {
        try await client.send(.transfer(.transfers(TransfersQueryFrame(id: 1))))
        guard case .transfer(.transfers(let list))? = try await nextSignificant(client) else {
            throw TestFailure("transfers was not answered")
        }
        return list
    }

    static func attach(
        _ transfer: UUID, on client: TestClient, offset: UInt64? = nil, window: UInt64? = nil, id: UInt64 = 9
    ) async throws -> AttachedFrame {
        try await client.send(
            .transfer(.attach(AttachFrame(id: id, transfer: transfer, offset: offset, window: window))))
        while true {
            let frame = try await nextSignificant(client)
            // A channel closed meanwhile (a reload) says nothing about the transfer.
            if case .closed? = frame { continue }
            guard case .transfer(.attached(let attached))? = frame else {
                throw TestFailure("attach was not answered with attached: \(String(describing: frame))")
            }
            return attached
        }
    }

    // MARK: - Tests

    @Test func aFileOfferedByFilesDownloadsWholeAndExactAndItsOutcomeWaits() async throws {
        let served = try Served(size: 1_300_000)
        let host = try await TestHost.start(manifests: served.manifests)
        let client = try await connectedClient(host)
        let (transfer, size) = try await Self.get(served.name, on: client)
        #expect(size == 1_300_000)

        let attached = try await Self.attach(transfer, on: client, window: 1 << 20)
        #expect(attached.status == .success && attached.error == nil)
        #expect(attached.direction == "download" && attached.size == 1_300_000 && attached.offset == 0)
        #expect(attached.chunkBytes == 256 << 10 && attached.window == 1 << 20 && attached.name == served.name)
        #expect(attached.expires.secondsSince1970 > Date().timeIntervalSince1970 + 3600)

        var bytes: [UInt8] = []
        let beforeEnd = try await Self.receive(
            transfer, on: client, from: 0, until: Int(size), window: 1 << 20, into: &bytes)
        #expect(beforeEnd == nil, "no state before the last byte: \(String(describing: beforeEnd))")
        #expect(bytes == served.bytes, "the bytes are the file's, exactly")
        guard case .transfer(.state(let done))? = try await Self.nextSignificant(client) else {
            throw TestFailure("no state after the last ack")
        }
        #expect(done.transfer == transfer && done.state == "completed" && done.offset == UInt64(size))

        // The outcome waits: listed, then forgotten.
        try await client.send(.transfer(.transfers(TransfersQueryFrame(id: 2))))
        guard case .transfer(.transfers(let list))? = try await Self.nextSignificant(client) else {
            throw TestFailure("transfers was not answered")
        }
        #expect(list.transfers.map(\.transfer) == [transfer] && list.transfers.first?.state == "completed")
        try await client.send(.transfer(.transfers(TransfersQueryFrame(id: 3, since: list.cursor))))
        guard case .transfer(.transfers(let none))? = try await Self.nextSignificant(client) else {
            throw TestFailure("transfers was not answered")
        }
        #expect(none.transfers.isEmpty && none.cursor == list.cursor, "nothing changed since the cursor")
        try await client.send(.transfer(.transfers(TransfersQueryFrame(id: 4, forget: [transfer]))))
        guard case .transfer(.transfers(let forgotten))? = try await Self.nextSignificant(client) else {
            throw TestFailure("transfers was not answered")
        }
        #expect(forgotten.transfers.isEmpty, "a forgotten transfer is gone")
        #expect(try await Self.attach(transfer, on: client).error == "notFound")
        #expect(await host.stop() == 0)
    }

    @Test func aDownloadCutIsResumedOnANewConnectionFromTheBytesTheClientHolds() async throws {
        let served = try Served(size: 900_000)
        let host = try await TestHost.start(manifests: served.manifests)
        let first = try await connectedClient(host)
        let (transfer, size) = try await Self.get(served.name, on: first)
        // Cut at a random point: the window ends there, and the connection goes.
        let cut = Int.random(in: 1..<Int(size))
        _ = try await Self.attach(transfer, on: first, window: UInt64(cut))
        var bytes: [UInt8] = []
        _ = try await Self.receive(transfer, on: first, from: 0, until: cut, window: 0, into: &bytes)
        #expect(bytes.count == cut, "the host sent past the window")
        await first.close()

        // The same caller (on plain loopback: its clientId) on a new connection.
        let second = try await connectedClient(host)
        let resumed = try await Self.attach(transfer, on: second, offset: UInt64(bytes.count), window: 1 << 20)
        #expect(resumed.status == .success && resumed.offset == UInt64(bytes.count))
        _ = try await Self.receive(
            transfer, on: second, from: bytes.count, until: Int(size), window: 1 << 20, into: &bytes)
        #expect(bytes == served.bytes)
        #expect(await host.stop() == 0)
    }

    @Test func theHostSendsNoMoreThanTheClientsWindowUntilItAcknowledges() async throws {
        let served = try Served(size: 2_000_000)
        let host = try await TestHost.start(manifests: served.manifests)
        let client = try await connectedClient(host)
        let (transfer, _) = try await Self.get(served.name, on: client)
        _ = try await Self.attach(transfer, on: client, window: 100_000)
        // The whole window comes (however slowly a loaded machine sends it)...
        var received = 0
        while received < 100_000 {
            let frame = try await Self.nextSignificant(client)
            guard case .transfer(.chunk(let chunk))? = frame else {
                throw TestFailure("expected a chunk, got \(String(describing: frame)) after \(received) bytes")
            }
            received += chunk.data.readableBytes
        }
        #expect(received == 100_000, "the host sent past the client's window")
        // ...and nothing more: two pings a moment apart are answered with no chunk before them.
        for (index, pause) in [(1, Duration.zero), (2, .milliseconds(500))] {
            try await Task.sleep(for: pause)
            try await client.send(.ping(id: UInt64(index)))
            let frame = try await Self.nextSignificant(client)
            #expect(
                frame == .pong(id: UInt64(index)),
                "the host sent past the client's window: \(String(describing: frame))")
        }
        #expect(await host.stop() == 0)
    }

    @Test func anotherCallersTransferDoesNotExistForIt() async throws {
        let served = try Served(size: 10_000)
        let host = try await TestHost.start(manifests: served.manifests)
        let owner = try await connectedClient(host, clientId: "alice")
        let (transfer, _) = try await Self.get(served.name, on: owner)

        let stranger = try await connectedClient(host, clientId: "mallory")
        let attached = try await Self.attach(transfer, on: stranger)
        #expect(attached.status == .failure && attached.error == "notFound")
        try await stranger.send(.transfer(.cancel(transfer: transfer)))
        guard case .transfer(.state(let state))? = try await Self.nextSignificant(stranger) else {
            throw TestFailure("cancelTransfer was not answered")
        }
        #expect(state.error == "notFound" && state.state == "failed")
        try await stranger.send(.transfer(.transfers(TransfersQueryFrame(id: 1, forget: [transfer]))))
        guard case .transfer(.transfers(let list))? = try await Self.nextSignificant(stranger) else {
            throw TestFailure("transfers was not answered")
        }
        #expect(list.transfers.isEmpty && list.cursor == 0)

        // Untouched for its owner.
        let mine = try await Self.attach(transfer, on: owner, window: 1 << 20)
        #expect(mine.status == .success)
        var bytes: [UInt8] = []
        _ = try await Self.receive(transfer, on: owner, from: 0, until: 10_000, window: 1 << 20, into: &bytes)
        #expect(bytes == served.bytes)
        #expect(await host.stop() == 0)
    }

    @Test func theLatestAttachWinsAndTheEarlierConnectionIsTold() async throws {
        let served = try Served(size: 600_000)
        let host = try await TestHost.start(manifests: served.manifests)
        let first = try await connectedClient(host)
        let (transfer, _) = try await Self.get(served.name, on: first)
        _ = try await Self.attach(transfer, on: first, window: 1000)
        let second = try await connectedClient(host)
        #expect(try await Self.attach(transfer, on: second, window: 1 << 20).status == .success)
        var told: TransferStateFrame?
        while told == nil {
            let frame = try await Self.nextSignificant(first)
            if case .transfer(.state(let state))? = frame { told = state }
        }
        #expect(told?.transfer == transfer && told?.error == "attachedElsewhere" && told?.state == "waiting")
        var bytes: [UInt8] = []
        _ = try await Self.receive(transfer, on: second, from: 0, until: 600_000, window: 1 << 20, into: &bytes)
        #expect(bytes == served.bytes)
        #expect(await host.stop() == 0)
    }

    @Test func aCanceledDownloadEndsAndSaysSo() async throws {
        let served = try Served(size: 600_000)
        let host = try await TestHost.start(manifests: served.manifests)
        let client = try await connectedClient(host)
        let (transfer, _) = try await Self.get(served.name, on: client)
        _ = try await Self.attach(transfer, on: client, window: 1000)
        try await client.send(.transfer(.cancel(transfer: transfer)))
        var state: TransferStateFrame?
        while state == nil {
            if case .transfer(.state(let told))? = try await Self.nextSignificant(client) { state = told }
        }
        #expect(state?.state == "canceled")
        let again = try await Self.attach(transfer, on: client)
        #expect(again.status == .failure && again.error == "ended")
        #expect(await host.stop() == 0)
    }

    /// Answers that wait for the journal (a `cancelTransfer`'s outcome) hold the client's next
    /// frames until they have gone, so answers come in the order asked; an outcome the journal
    /// already holds, asked for again and again, is answered at once, and queues nothing
    /// behind the journal.
    @Test func outcomesAskedAgainAreAnsweredInTheOrderOfTheRequests() async throws {
        let served = try Served(size: 1000)
        let host = try await TestHost.start(manifests: served.manifests)
        let client = try await connectedClient(host)
        let (transfer, _) = try await Self.get(served.name, on: client)
        _ = try await Self.attach(transfer, on: client, window: 1000)
        let rounds = 300
        // All sent at once: the first cancel ends the transfer, the others find it ended.
        for round in 0..<rounds {
            try await client.send(.transfer(.cancel(transfer: transfer)))
            try await client.send(.transfer(.transfers(TransfersQueryFrame(id: UInt64(round + 10)))))
        }
        for round in 0..<rounds {
            var answer = try await Self.nextSignificant(client)
            // Chunks sent before the cancel came.
            while case .transfer(.chunk)? = answer, round == 0 { answer = try await Self.nextSignificant(client) }
            guard case .transfer(.state(let again))? = answer else {
                throw TestFailure(
                    "round \(round): the cancel's answer did not come first: \(String(describing: answer))")
            }
            #expect(again.transfer == transfer && again.state == "canceled")
            guard case .transfer(.transfers(let list))? = try await Self.nextSignificant(client) else {
                throw TestFailure("round \(round): transfers was not answered next")
            }
            #expect(list.id == UInt64(round + 10))
            #expect(list.transfers.first { $0.transfer == transfer }?.state == "canceled")
        }
        // The connection goes on.
        try await client.send(.ping(id: 5))
        #expect(try await Self.nextSignificant(client) == .pong(id: 5))
        #expect(await host.stop() == 0)
    }

    /// An outcome a `transfers` answer lists is one the journal holds: a host killed the moment
    /// after lists it the same.
    @Test func anOutcomeListedSurvivesKill9TheMomentAfterIt() async throws {
        let served = try Served(size: 1000)
        let state = FileManager.default.temporaryDirectory.appendingPathComponent("atrium-state-\(UUID())").path
        var host = try await TestHost.start(manifests: served.manifests, arguments: ["--state-dir", state])
        for round in 0..<3 {
            let client = try await connectedClient(host)
            let (transfer, _) = try await Self.get(served.name, on: client)
            // Canceled and listed at once, before anything is written.
            try await client.send(.transfer(.cancel(transfer: transfer)))
            try await client.send(.transfer(.transfers(TransfersQueryFrame(id: 7))))
            var listed: TransferStateFrame?
            while listed == nil {
                if case .transfer(.transfers(let list))? = try await Self.nextSignificant(client) {
                    listed = list.transfers.first { $0.transfer == transfer }
                }
            }
            _ = await host.stop(signal: SIGKILL)
            #expect(listed?.state == "canceled")

            host = try await TestHost.start(manifests: served.manifests, arguments: ["--state-dir", state])
            let later = try await connectedClient(host)
            let list = try await Self.transfers(on: later)
            let kept = list.transfers.first { $0.transfer == transfer }
            #expect(kept?.state == "canceled", "round \(round): \(String(describing: kept))")
        }
        #expect(await host.stop() == 0)
    }

    /// A client that half-closes right after a request whose answer waits for the journal
    /// (a `cancelTransfer`, alone or followed by `transfers`) gets every answer before the host
    /// closes.
    @Test func answersThatWaitForTheJournalReachAClientThatHalfClosed() async throws {
        let served = try Served(size: 1000)
        let host = try await TestHost.start(manifests: served.manifests)
        for asksForList in [false, true] {
            let client = try await connectedClient(host)
            let (transfer, _) = try await Self.get(served.name, on: client)
            let (second, _) = try await Self.get(served.name, on: client, channel: 2)
            // Two cancels whose answers each wait for the journal, then the end of the input.
            try await client.send(.transfer(.cancel(transfer: transfer)))
            try await client.send(.transfer(.cancel(transfer: second)))
            if asksForList { try await client.send(.transfer(.transfers(TransfersQueryFrame(id: 4)))) }
            try await client.closeOutput()
            var frames: [HostFrame] = []
            while let frame = try await client.next(timeout: .seconds(5)) { frames.append(frame) }
            let states = frames.compactMap { frame -> TransferStateFrame? in
                if case .transfer(.state(let state)) = frame { state } else { nil }
            }
            #expect(states.map(\.transfer) == [transfer, second], "\(frames)")
            #expect(states.map(\.state) == ["canceled", "canceled"], "\(frames)")
            let lists = frames.compactMap { frame -> TransfersFrame? in
                if case .transfer(.transfers(let list)) = frame { list } else { nil }
            }
            #expect(lists.map(\.id) == (asksForList ? [4] : []), "\(frames)")
        }
        #expect(await host.stop() == 0)
    }

    @Test func aDownloadResumesAfterTheHostRestarts() async throws {
        let served = try Served(size: 700_000)
        let state = FileManager.default.temporaryDirectory.appendingPathComponent("atrium-state-\(UUID())").path
        let host = try await TestHost.start(manifests: served.manifests, arguments: ["--state-dir", state])
        let client = try await connectedClient(host)
        let (transfer, size) = try await Self.get(served.name, on: client)
        _ = try await Self.attach(transfer, on: client, window: 250_000)
        var bytes: [UInt8] = []
        _ = try await Self.receive(transfer, on: client, from: 0, until: 250_000, window: 0, into: &bytes)
        #expect(await host.stop() == 0)

        let restarted = try await TestHost.start(manifests: served.manifests, arguments: ["--state-dir", state])
        #expect(restarted.log.contains("transfers: 1 kept from the journal"), "\(restarted.log)")
        let again = try await connectedClient(restarted)
        let resumed = try await Self.attach(transfer, on: again, offset: UInt64(bytes.count), window: 1 << 20)
        #expect(resumed.status == .success && resumed.size == size)
        _ = try await Self.receive(
            transfer, on: again, from: bytes.count, until: Int(size), window: 1 << 20, into: &bytes)
        #expect(bytes == served.bytes)
        #expect(await restarted.stop() == 0)
    }

    /// A download's `completed`, like every outcome, is told once the journal holds it: a host
    /// killed the moment after lists it completed, not running (to expire a day later).
    @Test func aDownloadsToldCompletionSurvivesKill9TheMomentAfterIt() async throws {
        let served = try Served(size: 300_000)
        let state = FileManager.default.temporaryDirectory.appendingPathComponent("atrium-state-\(UUID())").path
        var host = try await TestHost.start(manifests: served.manifests, arguments: ["--state-dir", state])
        for round in 0..<3 {
            let client = try await connectedClient(host)
            let (transfer, size) = try await Self.get(served.name, on: client)
            _ = try await Self.attach(transfer, on: client, window: 1 << 20)
            var bytes: [UInt8] = []
            _ = try await Self.receive(transfer, on: client, from: 0, until: Int(size), window: 1 << 20, into: &bytes)
            guard case .transfer(.state(let done))? = try await Self.nextSignificant(client) else {
                throw TestFailure("no state after the last ack")
            }
            _ = await host.stop(signal: SIGKILL)
            #expect(done.state == "completed" && bytes == served.bytes)

            host = try await TestHost.start(manifests: served.manifests, arguments: ["--state-dir", state])
            let later = try await connectedClient(host)
            let list = try await Self.transfers(on: later)
            let kept = list.transfers.first { $0.transfer == transfer }
            #expect(kept?.state == "completed", "round \(round): \(String(describing: kept))")
        }
        #expect(await host.stop() == 0)
    }

    @Test func aSecondHostOnTheSameStateFolderKeepsOutOfItsTransfers() async throws {
        let served = try Served(size: 300_000)
        let state = FileManager.default.temporaryDirectory.appendingPathComponent("atrium-state-\(UUID())").path
        let first = try await TestHost.start(manifests: served.manifests, arguments: ["--state-dir", state])
        let client = try await connectedClient(first)
        let (transfer, size) = try await Self.get(served.name, on: client)
        let second = try await TestHost.start(manifests: served.manifests, arguments: ["--state-dir", state])
        #expect(second.log.contains("another process (an atriumd?) keeps its transfers in"), "\(second.log)")
        // The second host's clients are refused a transfer, with a reason.
        let other = try await connectedClient(second)
        #expect(try await other.open(channel: 1, service: Self.filesService, package: Self.filesPackage) == .success)
        let refused = try await other.request(channel: 1, id: 1, ["Command": "get", "Name": .string(served.name)])
        #expect(refused.status != .success, "\(refused)")
        #expect(await second.stop() == 0)
        // The first host's transfer is untouched by it.
        let attached = try await Self.attach(transfer, on: client, window: 1 << 20)
        #expect(attached.status == .success && attached.size == size)
        var bytes: [UInt8] = []
        _ = try await Self.receive(transfer, on: client, from: 0, until: Int(size), window: 1 << 20, into: &bytes)
        #expect(bytes == served.bytes)
        #expect(await first.stop() == 0)
    }

    @Test func aFileChangedUnderADownloadFailsItRatherThanSendAMix() async throws {
        let served = try Served(size: 600_000)
        let host = try await TestHost.start(manifests: served.manifests)
        let client = try await connectedClient(host)
        let (transfer, _) = try await Self.get(served.name, on: client)
        _ = try await Self.attach(transfer, on: client, window: 100_000)
        var bytes: [UInt8] = []
        _ = try await Self.receive(transfer, on: client, from: 0, until: 100_000, window: 0, into: &bytes)
        // Appended to in place while the download waits for the client's window.
        let handle = try FileHandle(forWritingTo: served.folder.appendingPathComponent(served.name))
        try handle.seekToEnd()
        try handle.write(contentsOf: Data([1, 2, 3]))
        try handle.close()
        try await client.send(.transfer(.ack(AckFrame(transfer: transfer, offset: 100_000, window: 1 << 20))))
        var state: TransferStateFrame?
        while state == nil {
            let frame = try await Self.nextSignificant(client)
            if case .transfer(.state(let told))? = frame { state = told }
        }
        #expect(state?.state == "failed" && state?.error == "changed")
        #expect(await host.stop() == 0)
    }

    @Test func aDownloadNobodyMovesExpiresWithTheShortExpiryItWasGiven() async throws {
        let served = try Served(size: 10_000)
        let host = try await TestHost.start(manifests: served.manifests, arguments: ["--transfer-expiry", "1"])
        let client = try await connectedClient(host)
        let (transfer, _) = try await Self.get(served.name, on: client)
        let expired = try await eventually(within: .seconds(20), every: .milliseconds(200)) {
            try await client.send(.transfer(.transfers(TransfersQueryFrame(id: 1))))
            guard case .transfer(.transfers(let list))? = try await Self.nextSignificant(client) else { return false }
            return list.transfers.first { $0.transfer == transfer }?.state == "expired"
        }
        #expect(expired, "the download did not expire")
        #expect(try await Self.attach(transfer, on: client).error == "ended")
        #expect(await host.stop() == 0)
    }

    @Test func namesThatAreNotOnePlainFileNameAreRefusedWithAReason() async throws {
        let served = try Served(size: 10)
        let host = try await TestHost.start(manifests: served.manifests)
        let client = try await connectedClient(host)
        #expect(try await client.open(channel: 1, service: Self.filesService, package: Self.filesPackage) == .success)
        let names = [
            "../" + served.name, "a/b", "", "..", ".", "x\u{0}y", "new\nline", String(repeating: "n", count: 300),
            "missing.txt",
        ]
        for (index, name) in names.enumerated() {
            let response = try await client.request(
                channel: 1, id: UInt64(index + 1), ["Command": "get", "Name": .string(name)])
            #expect(response.status == .failure, "\(name.debugDescription) was not refused")
            #expect(response.error?.isEmpty == false, "\(name.debugDescription) was refused without a reason")
        }
        let list = try await client.request(channel: 1, id: 100, ["Command": "list"])
        #expect(try list.decoded == ["Names": .array([.string(served.name)])])
        try await client.send(.transfer(.transfers(TransfersQueryFrame(id: 1))))
        guard case .transfer(.transfers(let none))? = try await Self.nextSignificant(client) else {
            throw TestFailure("transfers was not answered")
        }
        #expect(none.transfers.isEmpty, "no refused name made a transfer")
        #expect(await host.stop() == 0)
    }

    @Test func aDownloadWaitingForTheConnectionsRoomGoesOnOnceAnotherEnds() async throws {
        let served = try Served(size: 300_000)
        try Data(served.bytes.reversed()).write(to: served.folder.appendingPathComponent("second.bin"))
        let host = try await TestHost.start(
            manifests: served.manifests, arguments: ["--transfer-connection-window", "300000"])
        let client = try await connectedClient(host)
        let (first, _) = try await Self.get(served.name, on: client)
        let second = try await client.request(channel: 1, id: 2, ["Command": "get", "Name": "second.bin"])
        guard case .uuid(let other)? = try second.decoded["Transfer"] else { throw TestFailure("no transfer") }
        try await client.send(.transfer(.attach(AttachFrame(id: 1, transfer: first, window: 1 << 20))))
        try await client.send(.transfer(.attach(AttachFrame(id: 2, transfer: other, window: 1 << 20))))
        // The first fills the connection's room; the client acknowledges it once, whole.
        var bytes: [UInt8] = []
        while bytes.count < 300_000 {
            let frame = try await Self.nextSignificant(client)
            if case .transfer(.attached)? = frame { continue }
            guard case .transfer(.chunk(let chunk))? = frame else {
                throw TestFailure("expected a chunk, got \(String(describing: frame))")
            }
            #expect(chunk.transfer == first, "the second sent past the connection's room")
            bytes += chunk.data.readableBytesView
        }
        try await client.send(.transfer(.ack(AckFrame(transfer: first, offset: 300_000, window: 1 << 20))))
        // The second, which had no room and nothing in flight, goes on.
        var secondBytes: [UInt8] = []
        while secondBytes.count < 300_000 {
            let frame = try await Self.nextSignificant(client)
            if case .transfer(.chunk(let chunk))? = frame, chunk.transfer == other {
                secondBytes += chunk.data.readableBytesView
                try await client.send(
                    .transfer(.ack(AckFrame(transfer: other, offset: UInt64(secondBytes.count), window: 1 << 20))))
            }
        }
        #expect(bytes == served.bytes && secondBytes == served.bytes.reversed())
        #expect(await host.stop() == 0)
    }

    @Test func aDownloadAttachedAgainAtAnotherOffsetGetsNoChunkOfTheEarlierAttachment() async throws {
        let served = try Served(size: 2_000_000)
        let host = try await TestHost.start(manifests: served.manifests)
        let client = try await connectedClient(host)
        let (transfer, size) = try await Self.get(served.name, on: client)
        try await client.send(.transfer(.attach(AttachFrame(id: 1, transfer: transfer, offset: 0, window: 1 << 20))))
        try await client.send(
            .transfer(.attach(AttachFrame(id: 2, transfer: transfer, offset: 1_500_000, window: 1 << 20))))
        var afterSecond = false
        var held = 1_500_000
        var bytes = Array(served.bytes.prefix(1_500_000))
        while held < Int(size) {
            let frame = try await Self.nextSignificant(client)
            switch frame {
            case .transfer(.attached(let attached))?:
                afterSecond = attached.id == 2
            case .transfer(.chunk(let chunk))? where afterSecond:
                #expect(chunk.offset == UInt64(held), "a chunk of the earlier attachment came after the later one")
                bytes += chunk.data.readableBytesView
                held += chunk.data.readableBytes
                try await client.send(
                    .transfer(.ack(AckFrame(transfer: transfer, offset: UInt64(held), window: 1 << 20))))
            default:
                continue
            }
        }
        #expect(bytes == served.bytes)
        #expect(await host.stop() == 0)
    }

    @Test func aCallerThatMayNoLongerOpenTheServiceLosesItsTransfersOnReload() async throws {
        let served = try Served(size: 100_000)
        let host = try await TestHost.start(manifests: served.manifests, arguments: ["--no-watch"])
        let client = try await connectedClient(host)
        let (transfer, _) = try await Self.get(served.name, on: client)
        // The service now takes local clients only: this TCP client may no longer open it.
        let local = served.manifests["files.json"]!.replacingOccurrences(
            of: #""supportsRemoteSystems": true"#, with: #""supportsRemoteSystems": false"#)
        try TestHost.writeManifests(["files.json": local], to: host.manifestsFolder)
        kill(host.process.processIdentifier, SIGHUP)
        #expect(await host.waitForLog("transfers: 1 removed: their callers may no longer open their services"))
        #expect(try await Self.attach(transfer, on: client).error == "notFound")
        #expect(await host.stop() == 0)
    }
}
