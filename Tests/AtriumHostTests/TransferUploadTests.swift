import AtriumProtocol
import AtriumTesting
import AtriumValues
import Crypto
import Foundation
import NIOCore
import Testing

/// Uploads (CONTRACT section 8) through the Files reference service against a real atriumd:
/// stored exact, checked, resumed from what the host holds on stable storage (after a cut, and
/// after `kill -9`), refused past the window or off the next byte, and refused at once when
/// the disk cannot hold them.
struct TransferUploadTests {
    typealias Served = TransferDownloadTests.Served
    typealias TestFailure = TransferDownloadTests.TestFailure

    /// Opens Files and puts `name` (of `size` bytes, or of unknown size): the transfer id.
    static func put(_ name: String, size: Int?, on client: TestClient, channel: UInt64 = 1) async throws -> UUID {
        #expect(
            try await client.open(
                channel: channel, service: TransferDownloadTests.filesService,
                package: TransferDownloadTests.filesPackage) == .success)
        var message: ValueSet = ["Command": "put", "Name": .string(name)]
        if let size { message["Size"] = .int(Int64(size)) }
        let response = try await client.request(channel: channel, id: 1, message)
        guard response.status == .success, case .uuid(let transfer)? = try response.decoded["Transfer"] else {
            throw TestFailure("put was answered \(response.status) \(response.error ?? "")")
        }
        return transfer
    }

    /// Sends `bytes` from the offset the host holds, within each window it grants, until
    /// `until` bytes are sent (the last chunk carries `last` and `digest` when it ends the
    /// file); returns the last offset the host acknowledged, and the states it told.
    static func send(
        _ bytes: [UInt8], of transfer: UUID, on client: TestClient, from attached: AttachedFrame, until: Int? = nil,
        digest: [UInt8]? = nil, knownSize: Bool = true
    ) async throws -> (held: Int, states: [TransferStateFrame]) {
        let until = until ?? bytes.count
        var held = Int(attached.offset)
        var edge = held + Int(attached.window)
        var sent = held
        var states: [TransferStateFrame] = []
        let chunkBytes = Int(attached.chunkBytes)
        while true {
            while sent < until, sent < edge {
                let count = min(chunkBytes, until - sent, edge - sent)
                let last = sent + count == bytes.count && (until == bytes.count)
                let data = ByteBuffer(bytes: bytes[sent..<(sent + count)])
                try await client.send(
                    .transfer(
                        .chunk(
                            ChunkFrame(
                                transfer: transfer, offset: UInt64(sent), data: data, last: last && !knownSize || last,
                                digest: last ? digest : nil))))
                sent += count
            }
            if sent == until, until < bytes.count, held == sent { return (held, states) }
            let frame = try await TransferDownloadTests.nextSignificant(client)
            switch frame {
            case .transfer(.ack(let ack))?:
                #expect(ack.transfer == transfer)
                #expect(Int(ack.offset) >= held && Int(ack.offset) <= sent, "an ack within what was sent")
                held = Int(ack.offset)
                edge = max(edge, held + Int(ack.window))
                if until < bytes.count, held == until { return (held, states) }
            case .transfer(.state(let state))?:
                states.append(state)
                if ["completed", "failed", "canceled", "expired"].contains(state.state) { return (held, states) }
                if state.state == "waiting" { return (held, states) }
            case .closed?:
                // A channel closed under the transfer (its worker died): the transfer is the host's, and goes on.
                continue
            default:
                throw TestFailure("expected an ack or a state, got \(String(describing: frame))")
            }
        }
    }

    /// `count` random bytes (eight at a time: tests ask for tens of MiB).
    static func random(_ count: Int) -> [UInt8] {
        var generator = SystemRandomNumberGenerator()
        var bytes = [UInt8](repeating: 0, count: count)
        bytes.withUnsafeMutableBytes { raw in
            var offset = 0
            while offset < raw.count {
                var word = generator.next()
                let take = min(8, raw.count - offset)
                withUnsafeBytes(of: &word) {
                    raw.baseAddress!.advanced(by: offset).copyMemory(from: $0.baseAddress!, byteCount: take)
                }
                offset += take
            }
        }
        return bytes
    }

    static func sha256(_ bytes: [UInt8]) -> [UInt8] { Array(SHA256.hash(data: bytes)) }

    // MARK: - Tests

    @Test func anUploadArrivesWholeIsCheckedStoredAndItsResultWaits() async throws {
        let served = try Served(size: 1, name: "other.txt")
        let host = try await TestHost.start(manifests: served.manifests)
        let client = try await connectedClient(host)
        let bytes = Self.random(1_500_000)
        let transfer = try await Self.put("holiday.mov", size: bytes.count, on: client)
        let attached = try await TransferDownloadTests.attach(transfer, on: client)
        #expect(attached.status == .success && attached.direction == "upload")
        #expect(attached.size == 1_500_000 && attached.offset == 0 && attached.window > 0)
        #expect(attached.name == "holiday.mov")

        let (held, states) = try await Self.send(
            bytes, of: transfer, on: client, from: attached, digest: Self.sha256(bytes))
        #expect(held == bytes.count, "every byte acknowledged")
        #expect(states.map(\.state) == ["verifying", "delivering", "completed"], "\(states)")
        let result = try #require(states.last?.result).decode()
        #expect(result["Name"] == "holiday.mov" && result["Size"] == .int(1_500_000))
        #expect(result["Digest"] == .bytes(Self.sha256(bytes)))
        let stored = try Data(contentsOf: served.folder.appendingPathComponent("holiday.mov"))
        #expect(Array(stored) == bytes, "the stored file is the bytes sent, exactly")

        // Its outcome waits for a client that was away.
        let later = try await connectedClient(host)
        try await later.send(.transfer(.transfers(TransfersQueryFrame(id: 1))))
        guard case .transfer(.transfers(let list))? = try await TransferDownloadTests.nextSignificant(later) else {
            throw TestFailure("transfers was not answered")
        }
        let outcome = try #require(list.transfers.first { $0.transfer == transfer })
        let kept = try outcome.result?.decode()
        #expect(outcome.state == "completed" && kept == result)
        // Nothing of it is left in the spool.
        let spool = host.stateFolder.appendingPathComponent("transfers/spool")
        #expect((try FileManager.default.contentsOfDirectory(atPath: spool.path)).isEmpty)
        #expect(await host.stop() == 0)
    }

    @Test func anUploadOfUnknownSizeEndsWithItsLastChunkAndATakenNameGetsAFreeOne() async throws {
        let served = try Served(size: 3, name: "notes.txt")
        let host = try await TestHost.start(manifests: served.manifests)
        let client = try await connectedClient(host)
        let bytes = Self.random(700_001)
        let transfer = try await Self.put("notes.txt", size: nil, on: client)
        let attached = try await TransferDownloadTests.attach(transfer, on: client)
        #expect(attached.size == -1)
        let (_, states) = try await Self.send(bytes, of: transfer, on: client, from: attached, knownSize: false)
        #expect(states.last?.state == "completed" && states.last?.size == 700_001, "\(states)")
        let result = try #require(states.last?.result).decode()
        #expect(result["Name"] == "notes (1).txt", "\(result)")
        #expect(Array(try Data(contentsOf: served.folder.appendingPathComponent("notes (1).txt"))) == bytes)
        #expect(Array(try Data(contentsOf: served.folder.appendingPathComponent("notes.txt"))) == served.bytes)
        #expect(await host.stop() == 0)
    }

    @Test func aWrongDigestFailsTheUploadAndNothingReachesTheService() async throws {
        let served = try Served(size: 1, name: "x")
        let host = try await TestHost.start(manifests: served.manifests)
        let client = try await connectedClient(host)
        let bytes = Self.random(300_000)
        let transfer = try await Self.put("bad.bin", size: bytes.count, on: client)
        let attached = try await TransferDownloadTests.attach(transfer, on: client)
        let (_, states) = try await Self.send(
            bytes, of: transfer, on: client, from: attached, digest: [UInt8](repeating: 7, count: 32))
        #expect(states.last?.state == "failed" && states.last?.error == "digestMismatch", "\(states)")
        #expect(!FileManager.default.fileExists(atPath: served.folder.appendingPathComponent("bad.bin").path))
        #expect(await host.stop() == 0)
    }

    @Test func chunksOffTheNextBytePastTheWindowOrPastTheSizeAreRefused() async throws {
        let served = try Served(size: 1, name: "x")
        let host = try await TestHost.start(manifests: served.manifests)
        let client = try await connectedClient(host)
        let transfer = try await Self.put("y", size: 100, on: client)
        func state(after frame: ChunkFrame) async throws -> TransferStateFrame {
            try await client.send(.transfer(.chunk(frame)))
            while true {
                let next = try await TransferDownloadTests.nextSignificant(client)
                if case .transfer(.state(let state))? = next { return state }
                guard case .transfer(.ack)? = next else { throw TestFailure("unexpected \(String(describing: next))") }
            }
        }
        _ = try await TransferDownloadTests.attach(transfer, on: client)
        let skipped = try await state(after: ChunkFrame(transfer: transfer, offset: 5, data: ByteBuffer(bytes: [1])))
        #expect(skipped.state == "waiting" && skipped.error == "offsetMismatch")
        // Nothing is taken until a new attach.
        let ignored = ChunkFrame(transfer: transfer, offset: 0, data: ByteBuffer(bytes: [1]))
        try await client.send(.transfer(.chunk(ignored)))
        try await client.send(.ping(id: 3))
        #expect(try await TransferDownloadTests.nextSignificant(client) == .pong(id: 3))

        let small = try await TransferDownloadTests.attach(transfer, on: client)
        #expect(small.status == .success && small.offset == 0)
        let tooLong = try await state(
            after: ChunkFrame(transfer: transfer, offset: 0, data: ByteBuffer(bytes: [UInt8](repeating: 1, count: 101)))
        )
        #expect(tooLong.state == "failed" && tooLong.error == "lengthExceeded")
        #expect(await host.stop() == 0)
    }

    @Test func chunksPastTheWindowWaitForANewAttach() async throws {
        let served = try Served(size: 1, name: "x")
        let host = try await TestHost.start(
            manifests: served.manifests, arguments: ["--transfer-window", "1000"])
        let client = try await connectedClient(host)
        let transfer = try await Self.put("w", size: 5000, on: client)
        let attached = try await TransferDownloadTests.attach(transfer, on: client)
        #expect(attached.window == 1000)
        try await client.send(
            .transfer(
                .chunk(
                    ChunkFrame(
                        transfer: transfer, offset: 0, data: ByteBuffer(bytes: [UInt8](repeating: 2, count: 1001))))))
        var told: TransferStateFrame?
        while told == nil {
            if case .transfer(.state(let state))? = try await TransferDownloadTests.nextSignificant(client) {
                told = state
            }
        }
        #expect(told?.state == "waiting" && told?.error == "windowExceeded")
        #expect(await host.stop() == 0)
    }

    @Test func anUploadCutIsResumedFromWhatTheHostHoldsOnANewConnection() async throws {
        let served = try Served(size: 1, name: "x")
        let host = try await TestHost.start(manifests: served.manifests)
        let first = try await connectedClient(host)
        let bytes = Self.random(2_000_000)
        let transfer = try await Self.put("cut.bin", size: bytes.count, on: first)
        let attached = try await TransferDownloadTests.attach(transfer, on: first)
        let cut = Int.random(in: 100_000..<1_500_000)
        let (held, _) = try await Self.send(bytes, of: transfer, on: first, from: attached, until: cut)
        #expect(held == cut)
        await first.close()

        let second = try await connectedClient(host)
        let resumed = try await TransferDownloadTests.attach(transfer, on: second)
        #expect(resumed.status == .success && Int(resumed.offset) == cut, "the host holds every acknowledged byte")
        let (_, states) = try await Self.send(
            bytes, of: transfer, on: second, from: resumed, digest: Self.sha256(bytes))
        #expect(states.last?.state == "completed", "\(states)")
        #expect(Array(try Data(contentsOf: served.folder.appendingPathComponent("cut.bin"))) == bytes)
        #expect(await host.stop() == 0)
    }

    @Test func anUploadSurvivesKill9OfTheHostAtSeveralPointsAndNoAcknowledgedByteIsLost() async throws {
        let served = try Served(size: 1, name: "x")
        let state = FileManager.default.temporaryDirectory.appendingPathComponent("atrium-state-\(UUID())").path
        let bytes = Self.random(3_000_000)
        var host = try await TestHost.start(manifests: served.manifests, arguments: ["--state-dir", state])
        var client = try await connectedClient(host)
        let transfer = try await Self.put("killed.bin", size: bytes.count, on: client)
        var attached = try await TransferDownloadTests.attach(transfer, on: client)
        for cut in [400_000, 1_300_000, 2_200_000] {
            let (held, _) = try await Self.send(bytes, of: transfer, on: client, from: attached, until: cut)
            // The host dies without a word; the client keeps sending what it has not sent.
            _ = await host.stop(signal: SIGKILL)
            host = try await TestHost.start(manifests: served.manifests, arguments: ["--state-dir", state])
            client = try await connectedClient(host)
            attached = try await TransferDownloadTests.attach(transfer, on: client)
            #expect(attached.status == .success)
            #expect(Int(attached.offset) >= held, "the host lost an acknowledged byte: \(attached.offset) < \(held)")
        }
        let (_, states) = try await Self.send(
            bytes, of: transfer, on: client, from: attached, digest: Self.sha256(bytes))
        #expect(states.last?.state == "completed", "\(states)")
        #expect(Array(try Data(contentsOf: served.folder.appendingPathComponent("killed.bin"))) == bytes)
        #expect(await host.stop() == 0)
    }

    /// What a client is told of an upload's end is what a host killed the moment after says:
    /// the outcome is journaled before it is told, and the spool file goes only after that
    /// (a host killed between the two found the upload still being handed over, its file gone,
    /// and failed it, after its client had been told it completed with its result).
    @Test func anUploadsToldOutcomeSurvivesKill9TheMomentAfterIt() async throws {
        let served = try Served(size: 1, name: "x")
        let state = FileManager.default.temporaryDirectory.appendingPathComponent("atrium-state-\(UUID())").path
        var host = try await TestHost.start(manifests: served.manifests, arguments: ["--state-dir", state])
        for round in 0..<3 {
            let client = try await connectedClient(host)
            let bytes = Self.random(100_000 + round)
            let transfer = try await Self.put("told-\(round).bin", size: bytes.count, on: client)
            let attached = try await TransferDownloadTests.attach(transfer, on: client)
            let (_, states) = try await Self.send(
                bytes, of: transfer, on: client, from: attached, digest: Self.sha256(bytes))
            // Killed the moment the client heard how it ended.
            _ = await host.stop(signal: SIGKILL)
            let told = try #require(states.last)
            #expect(told.state == "completed", "\(states)")
            let toldResult = try #require(told.result).decode()

            host = try await TestHost.start(manifests: served.manifests, arguments: ["--state-dir", state])
            let later = try await connectedClient(host)
            let list = try await TransferDownloadTests.transfers(on: later)
            let kept = try #require(list.transfers.first { $0.transfer == transfer })
            #expect(kept.state == "completed" && kept.error == nil, "round \(round): \(kept.state) \(kept.error ?? "")")
            #expect(try kept.result?.decode() == toldResult, "round \(round): the result told is the one kept")
            let spool = URL(fileURLWithPath: state).appendingPathComponent(
                "transfers/spool/\(transfer.uuidString.lowercased()).part")
            #expect(!FileManager.default.fileExists(atPath: spool.path), "round \(round): its spool file is gone")
            #expect(
                Array(try Data(contentsOf: served.folder.appendingPathComponent("told-\(round).bin"))) == bytes)
        }
        #expect(await host.stop() == 0)
    }

    /// A spool file no unfinished upload owns (its end was journaled, and the host stopped
    /// before the file went) is removed at the next start; an unfinished upload's stays, and
    /// resumes.
    @Test func spoolFilesOfNoUnfinishedUploadAreRemovedAtStart() async throws {
        let served = try Served(size: 1, name: "x")
        let state = URL(fileURLWithPath: FileManager.default.temporaryDirectory.path)
            .appendingPathComponent("atrium-state-\(UUID())")
        var host = try await TestHost.start(manifests: served.manifests, arguments: ["--state-dir", state.path])
        var client = try await connectedClient(host)
        let bytes = Self.random(500_000)
        let transfer = try await Self.put("kept.bin", size: bytes.count, on: client)
        var attached = try await TransferDownloadTests.attach(transfer, on: client)
        let (held, _) = try await Self.send(bytes, of: transfer, on: client, from: attached, until: 200_000)
        #expect(await host.stop() == 0)
        let spool = state.appendingPathComponent("transfers/spool")
        let stray = spool.appendingPathComponent("\(UUID().uuidString.lowercased()).part")
        let odd = spool.appendingPathComponent("not-a-transfer.part")
        for file in [stray, odd] { try Data(repeating: 7, count: 4096).write(to: file) }

        host = try await TestHost.start(manifests: served.manifests, arguments: ["--state-dir", state.path])
        let left = try FileManager.default.contentsOfDirectory(atPath: spool.path)
        #expect(left == ["\(transfer.uuidString.lowercased()).part"], "\(left)")
        #expect(host.log.contains("belongs to no unfinished upload; removed"), "\(host.log)")
        client = try await connectedClient(host)
        attached = try await TransferDownloadTests.attach(transfer, on: client)
        #expect(attached.status == .success && Int(attached.offset) >= held)
        let (_, states) = try await Self.send(
            bytes, of: transfer, on: client, from: attached, digest: Self.sha256(bytes))
        #expect(states.last?.state == "completed", "\(states)")
        #expect(Array(try Data(contentsOf: served.folder.appendingPathComponent("kept.bin"))) == bytes)
        #expect(await host.stop() == 0)
    }

    /// The host keeps freed memory for the next chunks while bytes move (MallocArenas), and
    /// gives it back once they stop: once, not at every look while it is idle.
    @Test func theHostGivesBackWhatItKeptOnceTransfersStopMoving() async throws {
        let served = try Served(size: 1, name: "x")
        let host = try await TestHost.start(manifests: served.manifests, arguments: ["--log-level", "debug"])
        let client = try await connectedClient(host)
        let bytes = Self.random(3_000_000)
        let transfer = try await Self.put("kept.bin", size: bytes.count, on: client)
        let attached = try await TransferDownloadTests.attach(transfer, on: client)
        let (_, states) = try await Self.send(
            bytes, of: transfer, on: client, from: attached, digest: Self.sha256(bytes))
        #expect(states.last?.state == "completed", "\(states)")
        let said = "transfers' bytes stopped moving: freed memory"
        // The host looks every 2 s, and trims at the second look that finds it quiet.
        let trimmed = await eventually(within: .seconds(20), every: .milliseconds(200)) {
            host.log.contains(said)
        }
        #expect(trimmed, "\(host.log)")
        try await Task.sleep(for: .seconds(5))
        #expect(host.log.components(separatedBy: said).count == 2, "given back once while idle: \(host.log)")
        #expect(await host.stop() == 0)
    }

    @Test func anUploadTheDiskCannotHoldIsRefusedAtOnceWithStatus2() async throws {
        let served = try Served(size: 1, name: "x")
        // A free-space floor no disk has: every upload of a known size is refused as it is accepted.
        let host = try await TestHost.start(
            manifests: served.manifests, arguments: ["--transfer-free-space", "\(Int64(1) << 60)"])
        let client = try await connectedClient(host)
        #expect(
            try await client.open(
                channel: 1, service: TransferDownloadTests.filesService, package: TransferDownloadTests.filesPackage)
                == .success)
        let response = try await client.request(channel: 1, id: 1, ["Command": "put", "Name": "big", "Size": 1000])
        #expect(response.status == .resourceLimitsExceeded, "\(response.error ?? "")")
        #expect(host.log.contains("keeps"), "the log says why: \(host.log)")
        // And one over the caller's spool limit, whatever the disk.
        let huge = try await client.request(
            channel: 1, id: 2, ["Command": "put", "Name": "huge", "Size": .int(Int64(1) << 40)])
        #expect(huge.status == .resourceLimitsExceeded)
        let spool = host.stateFolder.appendingPathComponent("transfers/spool")
        #expect((try FileManager.default.contentsOfDirectory(atPath: spool.path)).isEmpty, "no file was left")
        #expect(await host.stop() == 0)
    }

    @Test func chunksAfterTheLastAreNeverWrittenIntoTheCheckedFile() async throws {
        let served = try Served(size: 1, name: "x")
        let host = try await TestHost.start(manifests: served.manifests)
        let client = try await connectedClient(host)
        let bytes = Self.random(500_000)
        let transfer = try await Self.put("sealed.bin", size: nil, on: client)
        let attached = try await TransferDownloadTests.attach(transfer, on: client)
        var sent = 0
        while sent < bytes.count {
            let count = min(Int(attached.chunkBytes), bytes.count - sent)
            try await client.send(
                .transfer(
                    .chunk(
                        ChunkFrame(
                            transfer: transfer, offset: UInt64(sent),
                            data: ByteBuffer(bytes: bytes[sent..<(sent + count)]), last: sent + count == bytes.count))))
            sent += count
        }
        // At once, before the host has checked it: attached again, and more bytes past the end.
        try await client.send(.transfer(.attach(AttachFrame(id: 2, transfer: transfer))))
        try await client.send(
            .transfer(
                .chunk(
                    ChunkFrame(
                        transfer: transfer, offset: UInt64(bytes.count), data: ByteBuffer(bytes: [9, 9, 9]), last: true,
                        digest: [UInt8](repeating: 1, count: 32)))))
        // Either every byte was held before that attach (the upload is checked as it was, and
        // the bytes past its end are never written), or the attach came first and says where to
        // go on from: the client sends the rest again, as a client does.
        var final: TransferStateFrame?
        var resent = false
        while final == nil {
            let frame = try await TransferDownloadTests.nextSignificant(client)
            if case .transfer(.attached(let again))? = frame, again.id == 2, again.status == .success,
                Int(again.offset) < bytes.count, !resent
            {
                resent = true
                try await client.send(.transfer(.detach(transfer: transfer)))
                try await client.send(.transfer(.attach(AttachFrame(id: 3, transfer: transfer))))
                // The bad chunk's refusal (offsetMismatch) may come before the answer.
                var fresh: AttachedFrame?
                while fresh == nil {
                    if case .transfer(.attached(let attached))? = try await TransferDownloadTests.nextSignificant(
                        client),
                        attached.id == 3
                    {
                        fresh = attached
                    }
                }
                guard let fresh else { continue }
                let (_, states) = try await Self.send(bytes, of: transfer, on: client, from: fresh, knownSize: false)
                final = states.last { ["completed", "failed"].contains($0.state) }
                continue
            }
            if case .transfer(.state(let state))? = frame, ["completed", "failed"].contains(state.state) {
                final = state
            }
        }
        #expect(final?.state == "completed", "\(String(describing: final))")
        #expect(Array(try Data(contentsOf: served.folder.appendingPathComponent("sealed.bin"))) == bytes)
        #expect(await host.stop() == 0)
    }

    @Test func anUploadWhoseSpoolFileIsGoneFailsRatherThanResumeOverAHole() async throws {
        let served = try Served(size: 1, name: "x")
        let state = FileManager.default.temporaryDirectory.appendingPathComponent("atrium-state-\(UUID())").path
        var host = try await TestHost.start(manifests: served.manifests, arguments: ["--state-dir", state])
        var client = try await connectedClient(host)
        let bytes = Self.random(800_000)
        let transfer = try await Self.put("gone.bin", size: bytes.count, on: client)
        let attached = try await TransferDownloadTests.attach(transfer, on: client)
        _ = try await Self.send(bytes, of: transfer, on: client, from: attached, until: 300_000)
        #expect(await host.stop() == 0)
        let spool = URL(fileURLWithPath: state).appendingPathComponent(
            "transfers/spool/\(transfer.uuidString.lowercased()).part")
        try FileManager.default.removeItem(at: spool)

        host = try await TestHost.start(manifests: served.manifests, arguments: ["--state-dir", state])
        client = try await connectedClient(host)
        let again = try await TransferDownloadTests.attach(transfer, on: client)
        #expect(again.status == .failure && again.error == "ended")
        try await client.send(.transfer(.transfers(TransfersQueryFrame(id: 1))))
        guard case .transfer(.transfers(let list))? = try await TransferDownloadTests.nextSignificant(client) else {
            throw TestFailure("transfers was not answered")
        }
        #expect(
            list.transfers.first { $0.transfer == transfer }.map { ($0.state, $0.error) } ?? ("", nil) == (
                "failed", "serviceFailed"
            ))
        #expect(!FileManager.default.fileExists(atPath: spool.path), "no empty file was made in its place")
        #expect(await host.stop() == 0)
    }

    @Test func anUploadARestartCaughtBeingCheckedIsCheckedAgainstItsClientsDigest() async throws {
        let served = try Served(size: 1, name: "x")
        let state = FileManager.default.temporaryDirectory.appendingPathComponent("atrium-state-\(UUID())")
        let journal = state.appendingPathComponent("transfers/journal")
        let spool = state.appendingPathComponent("transfers/spool")
        try FileManager.default.createDirectory(at: journal, withIntermediateDirectories: true)
        try FileManager.default.createDirectory(at: spool, withIntermediateDirectories: true)
        // Two uploads a host left being checked: one whose bytes match its client's digest, one not.
        let bytes = Self.random(100_000)
        var made: [UUID] = []
        for (name, digest) in [("good.bin", Self.sha256(bytes)), ("bad.bin", [UInt8](repeating: 3, count: 32))] {
            let id = UUID()
            made.append(id)
            let lower = id.uuidString.lowercased()
            try Data(bytes).write(to: spool.appendingPathComponent("\(lower).part"))
            let record: [String: Any] = [
                "id": ["uuid": id.uuidString], "owner": ["client": ["_0": "test-client"]], "direction": "upload",
                "package": TransferDownloadTests.filesPackage, "service": TransferDownloadTests.filesService,
                "name": name, "size": bytes.count, "maxSize": -1, "offset": bytes.count, "phase": "verifying",
                "created": 1_800_000_000_000, "lastProgress": 1_800_000_000_000, "sequence": 5,
                "clientDigest": digest,
            ]
            try JSONSerialization.data(withJSONObject: record).write(
                to: journal.appendingPathComponent("\(lower).json"))
        }
        let host = try await TestHost.start(manifests: served.manifests, arguments: ["--state-dir", state.path])
        let client = try await connectedClient(host)
        let outcomes = try await eventually(within: .seconds(20), every: .milliseconds(100)) {
            try await client.send(.transfer(.transfers(TransfersQueryFrame(id: 1))))
            guard case .transfer(.transfers(let list))? = try await TransferDownloadTests.nextSignificant(client) else {
                return false
            }
            return list.transfers.filter { ["completed", "failed"].contains($0.state) }.count == 2
        }
        #expect(outcomes, "\(host.log)")
        try await client.send(.transfer(.transfers(TransfersQueryFrame(id: 2))))
        guard case .transfer(.transfers(let list))? = try await TransferDownloadTests.nextSignificant(client) else {
            throw TestFailure("transfers was not answered")
        }
        #expect(list.transfers.first { $0.transfer == made[0] }?.state == "completed")
        let bad = list.transfers.first { $0.transfer == made[1] }
        #expect(bad?.state == "failed" && bad?.error == "digestMismatch")
        #expect(Array(try Data(contentsOf: served.folder.appendingPathComponent("good.bin"))) == bytes)
        #expect(!FileManager.default.fileExists(atPath: served.folder.appendingPathComponent("bad.bin").path))
        #expect(await host.stop() == 0)
    }
}
