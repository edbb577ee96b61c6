import AtriumProtocol
import AtriumTesting
import AtriumValues
import Foundation
import Testing

/// Transfers of plugins in worker processes (`"isolation": "process"`): the same plugin offers
/// and takes files there as in process, the descriptors crossing on the worker's descriptor
/// socket (SCM_RIGHTS); a worker that crashes while it takes an upload gets it again once it
/// is restarted.
@Suite(.serialized) struct TransferWorkerTests {
    typealias Download = TransferDownloadTests
    typealias Upload = TransferUploadTests

    @Test func filesInAWorkerProcessSendsAndTakesFilesAsInProcess() async throws {
        let served = try Download.Served(size: 700_000)
        let host = try await TestHost.start(manifests: served.workerManifests)
        let client = try await connectedClient(host)
        let (download, size) = try await Download.get(served.name, on: client)
        _ = try await Download.attach(download, on: client, window: 1 << 20)
        var bytes: [UInt8] = []
        _ = try await Download.receive(download, on: client, from: 0, until: Int(size), window: 1 << 20, into: &bytes)
        #expect(bytes == served.bytes, "a file offered from a worker arrives exact")
        guard case .transfer(.state(let done))? = try await Download.nextSignificant(client) else {
            throw Download.TestFailure("no state after the last ack")
        }
        #expect(done.state == "completed")

        let sent = Upload.random(900_000)
        let response = try await client.request(
            channel: 1, id: 2, ["Command": "put", "Name": "from-phone.bin", "Size": .int(Int64(sent.count))])
        guard case .uuid(let upload)? = try response.decoded["Transfer"] else {
            throw Download.TestFailure("put was answered \(response.status) \(response.error ?? "")")
        }
        let attached = try await Download.attach(upload, on: client)
        let (_, states) = try await Upload.send(
            sent, of: upload, on: client, from: attached, digest: Upload.sha256(sent))
        #expect(states.last?.state == "completed", "\(states)")
        #expect(try states.last?.result?.decode()["Name"] == "from-phone.bin")
        #expect(Array(try Data(contentsOf: served.folder.appendingPathComponent("from-phone.bin"))) == sent)
        #expect(await host.stop() == 0)
    }

    @Test func aWorkerThatCrashesWhileTakingAnUploadGetsItAgainAfterItsRestart() async throws {
        let host = try await WorkerIsolationTests.startWorkerHost()
        let client = try await connectedClient(host)
        #expect(try await client.open(channel: 1, service: "c", package: WorkerIsolationTests.package) == .success)
        let target = FileManager.default.temporaryDirectory.appendingPathComponent("atrium-crash-\(UUID()).bin")
        let response = try await client.request(
            channel: 1, id: 1, ["Accept": .string(target.path), "CrashOnce": true])
        guard case .uuid(let upload)? = try response.decoded["Transfer"] else {
            throw Download.TestFailure("accept was answered \(try response.decoded)")
        }
        let sent = Upload.random(400_000)
        let attached = try await Download.attach(upload, on: client)
        let (_, states) = try await Upload.send(
            sent, of: upload, on: client, from: attached, digest: Upload.sha256(sent), knownSize: false)
        #expect(states.last?.state == "delivering" || states.last?.state == "completed", "\(states)")
        // The worker died taking it (the marker says it got there), was restarted, and took it again.
        let done = try await eventually(within: .seconds(30), every: .milliseconds(200)) {
            let other = try await connectedClient(host)
            defer { Task { await other.close() } }
            try await other.send(.transfer(.transfers(TransfersQueryFrame(id: 1))))
            guard case .transfer(.transfers(let list))? = try await Download.nextSignificant(other) else {
                return false
            }
            return list.transfers.first { $0.transfer == upload }?.state == "completed"
        }
        #expect(done, "\(host.log)")
        #expect(
            FileManager.default.fileExists(atPath: target.path + ".crashed"), "the first delivery crashed the worker")
        #expect(Array(try Data(contentsOf: target)) == sent)
        #expect(host.log.contains("signal 6") || host.log.contains("SIGABRT"), "\(host.log)")
        #expect(await host.stop() == 0)
    }
}
