import AtriumProtocol
import AtriumTesting
import AtriumValues
import Crypto
import Foundation
import Testing

/// The Swift SDK's side of transfers, through the Swift test service: a request offers a file
/// and accepts an upload, the finished upload reaches `upload(_:)` and its answer is the
/// transfer's result, and a cancel reaches `transferEnded`.
struct TransferPluginKitTests {
    typealias Download = TransferDownloadTests
    typealias Upload = TransferUploadTests

    @Test func aSwiftServiceOffersAFileAndTakesAnUploadAndHearsOfACancel() async throws {
        let host = try await TestHost.start(manifests: Fixtures.all)
        let client = try await connectedClient(host)
        #expect(try await client.open(channel: 1, service: "test", package: Fixtures.testPackage) == .success)
        let folder = FileManager.default.temporaryDirectory.appendingPathComponent("atrium-sdk-\(UUID())")
        try FileManager.default.createDirectory(at: folder, withIntermediateDirectories: true)

        // A download of a file the service offers.
        let offered = Upload.random(600_000)
        let source = folder.appendingPathComponent("offered.bin")
        try Data(offered).write(to: source)
        let offer = try await client.request(channel: 1, id: 1, ["Action": "offer", "Path": .string(source.path)])
        guard case .uuid(let download)? = try offer.decoded["Transfer"] else {
            throw Download.TestFailure("offer was answered \(offer.status) \(offer.error ?? "")")
        }
        #expect(try offer.decoded["Size"] == .int(600_000))
        let attached = try await Download.attach(download, on: client, window: 1 << 20)
        #expect(attached.name == "offered.bin")
        var bytes: [UInt8] = []
        _ = try await Download.receive(download, on: client, from: 0, until: 600_000, window: 1 << 20, into: &bytes)
        #expect(bytes == offered)
        guard case .transfer(.state(let done))? = try await Download.nextSignificant(client) else {
            throw Download.TestFailure("no state after the last ack")
        }
        #expect(done.state == "completed")

        // An upload the service accepts, stores, and answers.
        let target = folder.appendingPathComponent("taken.bin")
        let sent = Upload.random(900_000)
        let accept = try await client.request(
            channel: 1, id: 2, ["Action": "accept", "Path": .string(target.path), "Size": 900_000])
        guard case .uuid(let upload)? = try accept.decoded["Transfer"] else {
            throw Download.TestFailure("accept was answered \(accept.status) \(accept.error ?? "")")
        }
        let uploading = try await Download.attach(upload, on: client)
        let (_, states) = try await Upload.send(
            sent, of: upload, on: client, from: uploading, digest: Upload.sha256(sent))
        #expect(states.last?.state == "completed", "\(states)")
        let result = try #require(states.last?.result).decode()
        #expect(result["Stored"] == .string(target.path) && result["Digest"] == .bytes(Upload.sha256(sent)))
        #expect(Array(try Data(contentsOf: target)) == sent)

        // A refusal comes back as the SDK's answer: a file that is not there.
        let missing = try await client.request(channel: 1, id: 3, ["Action": "offer", "Path": "/nonexistent/x"])
        #expect(missing.status == .failure && missing.error?.contains("cannot be opened") == true)

        // A cancel of an accepted upload reaches the service.
        let other = try await client.request(
            channel: 1, id: 4, ["Action": "accept", "Path": .string(folder.appendingPathComponent("never").path)])
        guard case .uuid(let canceled)? = try other.decoded["Transfer"] else {
            throw Download.TestFailure("no transfer")
        }
        try await client.send(.transfer(.cancel(transfer: canceled)))
        _ = try await Download.nextSignificant(client)
        #expect(await host.waitForLog("transfer \(canceled.uuidString) ended: canceled by its client"), "\(host.log)")
        #expect(await host.stop() == 0)
    }
}
