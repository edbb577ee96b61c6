import AtriumProtocol
import AtriumTesting
import AtriumValues
import Crypto
import Foundation
import Testing

@testable import AtriumClient

/// Transfers as an app developer and a person at a terminal use them, against a real atriumd
/// serving a folder with the Files reference service: `DownloadOperation` and
/// `UploadOperation` (progress, pause, resume on a new connection, the service's result), and
/// `atrium get`, `put` and `transfers` (the same command run again resumes).
@Suite(.serialized)
struct TransferClientTests {
    static let package = "atrium.examples.files"
    static let service = "atrium.files"

    /// A folder Files serves, and its manifest.
    static func served() throws -> (folder: URL, manifests: [String: String]) {
        let folder = FileManager.default.temporaryDirectory.appendingPathComponent("atrium-files-\(UUID())")
        try FileManager.default.createDirectory(at: folder, withIntermediateDirectories: true)
        let manifest = """
            { "manifestVersion": 1, "package": "\(package)", "library": "libFiles.so",
              "services": [{ "name": "\(service)", "supportsRemoteSystems": true }],
              "config": { "folder": "\(folder.path)" } }
            """
        return (folder, ["files.json": manifest])
    }

    static func random(_ count: Int) -> Data {
        var generator = SystemRandomNumberGenerator()
        return Data((0..<count).map { _ in UInt8.random(in: 0...255, using: &generator) })
    }

    static func connect(_ host: TestHost) async throws -> AtriumConnection {
        try await AtriumConnection.connect(
            to: AtriumEndpoint(.tcp(host: "127.0.0.1", port: host.port)), clientId: "transfer-client-tests")
    }

    /// Asks Files for `message` and returns the `Transfer` of its answer.
    static func transfer(_ message: ValueSet, on connection: AtriumConnection, startingDownload: Bool = false)
        async throws -> UUID
    {
        let app = AppServiceConnection(appServiceName: service, packageId: package, connection: connection)
        #expect(try await app.openRemote() == .success)
        let answer = try await app.sendMessage(message, startingDownload: startingDownload)
        guard answer.status == .success, case .uuid(let transfer)? = answer.message["Transfer"] else {
            throw AtriumClientError(.protocolError, "answered \(answer.status) \(answer.error ?? "")")
        }
        return transfer
    }

    @Test(arguments: [DownloadOperation.defaultWindow, 64 << 10])
    func downloadsStartedWithTheirRequestsArriveExactOneAfterAnother(window: UInt64) async throws {
        let (folder, manifests) = try Self.served()
        let files = (0..<20).map { Self.random(1_000 + $0 * 17_000) }
        for (index, bytes) in files.enumerated() { try bytes.write(to: folder.appendingPathComponent("photo\(index)")) }
        let host = try await TestHost.start(manifests: manifests)
        let out = FileManager.default.temporaryDirectory.appendingPathComponent("atrium-started-\(UUID())")
        try FileManager.default.createDirectory(at: out, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: out) }
        let connection = try await Self.connect(host)
        let app = AppServiceConnection(appServiceName: Self.service, packageId: Self.package, connection: connection)
        #expect(try await app.openRemote() == .success)
        for (index, bytes) in files.enumerated() {
            let answer = try await app.sendMessage(
                ["Command": "get", "Name": .string("photo\(index)")], startingDownload: true)
            guard case .uuid(let transfer)? = answer.message["Transfer"] else {
                Issue.record("get was answered \(answer.status) \(answer.error ?? "")")
                return
            }
            let destination = out.appendingPathComponent("photo\(index)")
            // A window other than the one the request asked for is the run's from its start.
            let done = try await DownloadOperation(
                transfer: transfer, destination: destination, connection: connection, partialFolder: out
            ).run(window: window)
            #expect(done.state == "completed" && done.bytes == Int64(bytes.count))
            #expect(try Data(contentsOf: destination) == bytes, "photo\(index)")
        }
        #expect(connection.state.withLock { $0.startedDownloads.isEmpty && $0.transfers.isEmpty })
        // Each was started by its request: the host never saw an attach.
        let list = try await connection.transfers()
        #expect(list.transfers.count == files.count && list.transfers.allSatisfy { $0.state == "completed" })
        await connection.close()
        #expect(await host.stop() == 0)
    }

    @Test func aStartedDownloadNoOneRunsIsHeldToItsWindowAndDetachedWithNothingLeft() async throws {
        let (folder, manifests) = try Self.served()
        let bytes = Self.random(9_000_000)
        try bytes.write(to: folder.appendingPathComponent("big.bin"))
        let host = try await TestHost.start(manifests: manifests)
        let connection = try await Self.connect(host)
        let transfer = try await Self.transfer(
            ["Command": "get", "Name": "big.bin"], on: connection, startingDownload: true)
        #expect(connection.state.withLock { $0.startedDownloads[transfer] != nil })
        try await connection.sendTransfer(.detach(transfer: transfer))
        #expect(connection.state.withLock { $0.startedDownloads[transfer] == nil && $0.transfers[transfer] == nil })
        // Detached, it is still the client's, and resumable from nothing.
        let destination = FileManager.default.temporaryDirectory.appendingPathComponent("atrium-dl-\(UUID())")
        defer { try? FileManager.default.removeItem(at: destination) }
        let done = try await DownloadOperation(transfer: transfer, destination: destination, connection: connection)
            .run()
        #expect(done.state == "completed")
        #expect(try Data(contentsOf: destination) == bytes)
        await connection.close()
        #expect(await host.stop() == 0)
    }

    @Test func aDownloadPausedAndResumedOnANewConnectionEndsExactWithItsProgressTold() async throws {
        let (folder, manifests) = try Self.served()
        let bytes = Self.random(3_000_000)
        try bytes.write(to: folder.appendingPathComponent("movie.mp4"))
        let host = try await TestHost.start(manifests: manifests)
        let destination = FileManager.default.temporaryDirectory.appendingPathComponent("atrium-dl-\(UUID()).mp4")
        // The partial bytes wait in the client's state folder; on a file system other than the
        // destination's where the machine has one (tmpfs), so that completing copies across.
        let shm = URL(fileURLWithPath: "/dev/shm")
        let partials = (FileManager.default.fileExists(atPath: shm.path) ? shm : FileManager.default.temporaryDirectory)
            .appendingPathComponent("atrium-partials-\(UUID())")
        defer { try? FileManager.default.removeItem(at: partials) }

        let first = try await Self.connect(host)
        let transfer = try await Self.transfer(["Command": "get", "Name": "movie.mp4"], on: first)
        let operation = DownloadOperation(
            transfer: transfer, destination: destination, connection: first, partialFolder: partials)
        #expect(operation.partialFile.deletingLastPathComponent().standardizedFileURL.path == partials.path)
        // Paused once a first part is in.
        operation.pauseOnce(atBytes: 500_000)
        let paused = try await operation.run(window: 256 << 10)
        #expect(paused.state == "waiting", "\(paused)")
        #expect(paused.bytes >= 500_000)
        let partial = try FileManager.default.attributesOfItem(atPath: operation.partialFile.path)[.size] as? Int ?? 0
        #expect(partial >= 500_000 && partial < bytes.count)
        #expect(!FileManager.default.fileExists(atPath: destination.path), "nothing at the destination until whole")
        await first.close()

        // A new connection (a new process would do the same): on from the partial file.
        let second = try await Self.connect(host)
        let resumed = DownloadOperation(
            transfer: transfer, destination: destination, connection: second, partialFolder: partials)
        #expect(resumed.partialFile == operation.partialFile)
        let steps = Task { await resumed.progress.reduce(into: [TransferProgress]()) { $0.append($1) } }
        let done = try await resumed.run()
        #expect(done.state == "completed" && done.bytes == Int64(bytes.count))
        #expect(try Data(contentsOf: destination) == bytes)
        #expect(!FileManager.default.fileExists(atPath: resumed.partialFile.path))
        let told = await steps.value
        #expect(told.first?.bytes == Int64(partial), "progress begins at the bytes already here")
        #expect(told.map(\.bytes) == told.map(\.bytes).sorted(), "progress never goes back")
        await second.close()
        #expect(await host.stop() == 0)
    }

    @Test func aDownloadWhoseFileChangesOnTheHostFailsAndLeavesNoPartialBytes() async throws {
        let (folder, manifests) = try Self.served()
        let served = folder.appendingPathComponent("draft.doc")
        try Self.random(2_000_000).write(to: served)
        let host = try await TestHost.start(manifests: manifests)
        let destination = FileManager.default.temporaryDirectory.appendingPathComponent("atrium-ch-\(UUID()).doc")
        let partials = FileManager.default.temporaryDirectory.appendingPathComponent("atrium-ch-partials-\(UUID())")
        defer { try? FileManager.default.removeItem(at: partials) }
        let connection = try await Self.connect(host)
        let transfer = try await Self.transfer(["Command": "get", "Name": "draft.doc"], on: connection)
        let operation = DownloadOperation(
            transfer: transfer, destination: destination, connection: connection, partialFolder: partials)
        operation.pauseOnce(atBytes: 300_000)
        #expect(try await operation.run(window: 128 << 10).state == "waiting")
        #expect(FileManager.default.fileExists(atPath: operation.partialFile.path))

        // The file is written anew on the host while the download waits.
        try Self.random(2_000_000).write(to: served)
        await #expect {
            _ = try await operation.run()
        } throws: { error in
            (error as? AtriumClientError)?.code == .transferFailed && "\(error)".contains("has ended at the host")
        }
        #expect(!FileManager.default.fileExists(atPath: operation.partialFile.path), "its bytes can never be whole")
        #expect(!FileManager.default.fileExists(atPath: destination.path))
        let outcome = try await connection.transfers().transfers.first { $0.transfer == transfer }
        #expect(outcome?.state == "failed" && outcome?.error == "changed", "\(String(describing: outcome))")
        await connection.close()
        #expect(await host.stop() == 0)
    }

    @Test func anUploadSendsTheFileAndReturnsTheServicesResultAndACancelEndsOne() async throws {
        let (folder, manifests) = try Self.served()
        let host = try await TestHost.start(manifests: manifests)
        let source = FileManager.default.temporaryDirectory.appendingPathComponent("atrium-up-\(UUID()).bin")
        let bytes = Self.random(1_200_000)
        try bytes.write(to: source)
        let connection = try await Self.connect(host)
        let transfer = try await Self.transfer(
            ["Command": "put", "Name": "up.bin", "Size": .int(Int64(bytes.count))], on: connection)
        let done = try await UploadOperation(transfer: transfer, source: source, connection: connection).run()
        #expect(done.state == "completed")
        #expect(done.result?["Name"] == "up.bin" && done.result?["Digest"] == .bytes(Array(SHA256.hash(data: bytes))))
        #expect(try Data(contentsOf: folder.appendingPathComponent("up.bin")) == bytes)

        // Cancelled before it moved: its state says so, and the client's list has it.
        let other = try await Self.transfer(["Command": "put", "Name": "never.bin", "Size": 10], on: connection)
        let canceled = try await UploadOperation(transfer: other, source: source, connection: connection).cancel()
        #expect(canceled.state == "canceled")
        let list = try await connection.transfers()
        #expect(Set(list.transfers.map(\.transfer)) == [transfer, other])
        #expect(list.transfers.first { $0.transfer == other }?.state == "canceled")
        // A file that does not match the size the service accepted is not sent.
        let third = try await Self.transfer(["Command": "put", "Name": "x", "Size": 5], on: connection)
        await #expect(throws: AtriumClientError.self) {
            try await UploadOperation(transfer: third, source: source, connection: connection).run()
        }
        await connection.close()
        #expect(await host.stop() == 0)
    }

    @Test func atriumGetAndPutMoveFilesAndTheSameCommandRunAgainResumes() async throws {
        let (folder, manifests) = try Self.served()
        let host = try await TestHost.start(manifests: manifests)
        let address = "127.0.0.1:\(host.port)"
        let scratch = FileManager.default.temporaryDirectory.appendingPathComponent("atrium-cli-\(UUID())")
        try FileManager.default.createDirectory(at: scratch, withIntermediateDirectories: true)
        let source = scratch.appendingPathComponent("report.pdf")
        let bytes = Self.random(2_500_000)
        try bytes.write(to: source)
        let common = ["--package", Self.package, "--service", Self.service]

        let put = try await atrium(["put", source.path, address] + common + ["Command=put"])
        #expect(put.status == 0, "\(put.output)")
        #expect(put.output.contains("sent \(source.path) (2.4 MiB)") && put.output.contains("\"Name\": \"report.pdf\""))
        #expect(try Data(contentsOf: folder.appendingPathComponent("report.pdf")) == bytes)

        // A download cut short: its record in the tool's state folder and its partial file, as
        // a run that was killed leaves them (over plain TCP on loopback the tool's transfers are
        // its clientId's). The same command goes on from the partial file.
        let output = scratch.appendingPathComponent("copy.pdf")
        let asTheTool = try await AtriumConnection.connect(
            to: AtriumEndpoint(.tcp(host: "127.0.0.1", port: host.port)), clientId: "atrium-cli-\(getuid())")
        let cut = try await Self.transfer(["Command": "get", "Name": "report.pdf"], on: asTheTool)
        await asTheTool.close()
        let toolStore = ClientTransferStore(folder: toolStateHome.appendingPathComponent("atrium/client-transfers"))
        try toolStore.save(
            ClientTransferRecord(
                transfer: cut, direction: "download", host: address, package: Self.package, service: Self.service,
                path: output.path, size: Int64(bytes.count)))
        try bytes.prefix(1_000_000).write(to: toolStore.partialFile(of: cut))
        let get = try await atrium(
            ["get", address, "--insecure"] + common + ["Command=get", "Name=report.pdf", "-o", output.path])
        #expect(get.status == 0, "\(get.output)")
        #expect(get.output.contains("resuming transfer \(cut) into \(output.path)"), "\(get.output)")
        #expect(get.output.contains("saved \(output.path) (2.4 MiB)"))
        #expect(try Data(contentsOf: output) == bytes)
        #expect(!FileManager.default.fileExists(atPath: toolStore.partialFile(of: cut).path))
        // A new download of another file: nothing of the cut one is used, and nothing but the
        // records is left in the state folder.
        let fresh = scratch.appendingPathComponent("fresh.pdf")
        let clean = try await atrium(["get", address] + common + ["Command=get", "Name=report.pdf", "-o", fresh.path])
        #expect(clean.status == 0, "\(clean.output)")
        #expect(try Data(contentsOf: fresh) == bytes)
        let kept = try FileManager.default.contentsOfDirectory(atPath: toolStore.folder.path)
        #expect(kept.allSatisfy { $0.hasSuffix(".json") }, "\(kept)")

        let transfers = try await atrium(["transfers", address])
        #expect(transfers.status == 0, "\(transfers.output)")
        #expect(
            transfers.output.contains("completed  2.4 MiB of 2.4 MiB  upload \(source.path)"), "\(transfers.output)")
        #expect(transfers.output.contains("download \(fresh.path)"), "\(transfers.output)")

        // A name Files refuses: the service's reason, and exit 1.
        let refused = try await atrium(["get", address] + common + ["Command=get", "Name=../x", "-o", output.path])
        #expect(refused.status == 1 && refused.output.contains("error: Name holds a /"), "\(refused.output)")
        let missing = try await atrium(["transfers", "resume", "ffffffff", address])
        #expect(missing.status == 1 && missing.output.contains("no transfer ffffffff"), "\(missing.output)")
        #expect(await host.stop() == 0)
    }

    @Test func aDeviceWhosePairingIsRevokedLosesItsTransfersAtOnce() async throws {
        let (folder, manifests) = try Self.served()
        try Self.random(2_000_000).write(to: folder.appendingPathComponent("album.zip"))
        let host = try await TestHost.start(manifests: manifests, arguments: PairingTests.arguments)
        let admin = try await PairingTests.operatorConnection(host)
        let identity = TLSTests.temporaryFolder("transfer-device")
        let device = try await PairingTests.device(host, identity: identity)
        let pairing = Task { try await device.pair(deviceName: "phone", timeout: .seconds(60)) }
        let request = try #require(try await PairingTests.waiting(admin).first)
        _ = try await admin.admin("pairing.accept", ["request": request["request"] ?? 0])
        #expect(try await pairing.value.status == .paired)

        // A download under way, and an upload accepted with its space reserved.
        let download = try await Self.transfer(["Command": "get", "Name": "album.zip"], on: device)
        let upload = try await Self.transfer(["Command": "put", "Name": "new.bin", "Size": 100_000], on: device)
        let spool = host.stateFolder.appendingPathComponent("transfers/spool")
        #expect(try FileManager.default.contentsOfDirectory(atPath: spool.path).count == 1)
        // The download is attached with a 64 KiB window the device never acknowledges: its
        // first bytes have come, the rest wait at the host however slow the host runs.
        let (attached, events) = try await device.attachTransfer(download, offset: 0, window: 64 << 10)
        #expect(attached.status == .success && attached.size == 2_000_000)
        var received: UInt64 = 0
        for await event in events {
            if case .chunk(let chunk) = event { received = chunk.offset + UInt64(chunk.data.readableBytes) }
            if received > 0 { break }
        }
        #expect(received > 0 && received <= 64 << 10)

        let fingerprint = try #require(device.clientIdentity)
        _ = try await admin.admin("devices.revoke", ["device": .string(String(fingerprint.prefix(8)))])
        // The device is cut off: its download's frames end without its completing, and a
        // download operation on the connection fails.
        let ending = Task {
            var states: [String] = []
            for await event in events { if case .state(let state) = event { states.append(state.state) } }
            return Task.isCancelled ? nil : states
        }
        let bound = Task {
            try await Task.sleep(for: .seconds(30))
            ending.cancel()
        }
        let states = await ending.value
        bound.cancel()
        #expect(states != nil, "the download's frames did not end within 30 s of the revocation")
        #expect(states?.contains("completed") == false, "\(states ?? [])")
        let operation = DownloadOperation(
            transfer: download,
            destination: FileManager.default.temporaryDirectory.appendingPathComponent("atrium-rv-\(UUID())"),
            connection: device,
            partialFolder: FileManager.default.temporaryDirectory.appendingPathComponent("atrium-rv-partials-\(UUID())")
        )
        await #expect(throws: AtriumClientError.self) { _ = try await operation.run(window: 64 << 10) }
        // Gone at once: the upload's reserved bytes too.
        #expect(try FileManager.default.contentsOfDirectory(atPath: spool.path).isEmpty)
        #expect(await host.waitForLog("transfers: 2 of device"), "\(host.log)")

        // Paired again, the same device finds neither.
        let again = try await PairingTests.device(host, identity: identity)
        let repairing = Task { try await again.pair(deviceName: "phone", timeout: .seconds(60)) }
        let second = try #require(try await PairingTests.waiting(admin).first)
        _ = try await admin.admin("pairing.accept", ["request": second["request"] ?? 0])
        #expect(try await repairing.value.status == .paired)
        for transfer in [download, upload] {
            #expect(try await again.attachTransfer(transfer).attached.error == "notFound")
        }
        await again.close()
        await admin.close()
        #expect(await host.stop() == 0)
    }
}
