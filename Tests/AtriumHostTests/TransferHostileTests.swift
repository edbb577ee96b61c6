import AtriumProtocol
import AtriumTesting
import AtriumValues
import Foundation
import NIOCore
import Testing

#if canImport(Glibc)
    import Glibc
#endif

/// What a hostile or careless client, or a failing service or disk, can make the host do with
/// transfers: hold memory (clients that grant huge windows and never read), grow its tables
/// (thousands of `get`s and attaches), fill a disk, or fail a service; each against a real
/// atriumd, and each answered by a limit, not by memory or a crash. Loops are bounded.
@Suite(.serialized) struct TransferHostileTests {
    typealias Download = TransferDownloadTests
    typealias Upload = TransferUploadTests

    @Test func clientsThatGrantHugeWindowsAndNeverReadHoldTheHostsMemoryToAFewChunks() async throws {
        let served = try Download.Served(size: 48 << 20, name: "big.bin")
        let host = try await TestHost.start(manifests: served.manifests)
        let before = try #require(host.residentBytes)
        var greedy: [TestClient] = []
        for index in 0..<6 {
            let client = try await TestClient.connect(port: host.port, autoRead: false)
            client.readMore()
            try await client.send(.hello(HelloFrame(clientId: "greedy-\(index)")))
            _ = try await client.next()
            client.readMore()
            try await client.send(
                .open(OpenFrame(channel: 1, service: Download.filesService, package: Download.filesPackage)))
            _ = try await client.next()
            client.readMore()
            try await client.send(
                .request(
                    RequestFrame(
                        channel: 1, id: 1, message: EncodedValueSet(["Command": "get", "Name": "big.bin"]))))
            guard case .response(let response)? = try await client.next(),
                case .uuid(let transfer)? = try response.message.decode()["Transfer"]
            else { throw Download.TestFailure("get was not answered with a transfer") }
            // The largest window the contract allows, then nothing is read again.
            try await client.send(
                .transfer(.attach(AttachFrame(id: 2, transfer: transfer, window: UInt64(Int64.max)))))
            greedy.append(client)
        }
        // Time for the host to fill what the sockets hold, and to try to go on.
        try await Task.sleep(for: .seconds(2))
        let during = try #require(host.residentBytes)
        // Each connection holds at most a chunk being read and one being written (256 KiB each),
        // whatever window its client granted: 6 × 48 MiB would be sent otherwise.
        // (AddressSanitizer keeps freed memory in quarantine: resident memory says nothing there.)
        if !TestEnvironment.addressSanitizer {
            #expect(during - before < 40 << 20, "RSS grew by \((during - before) >> 20) MiB")
        }
        // Another client is served meanwhile.
        let fine = try await connectedClient(host, clientId: "fine")
        try await fine.send(.ping(id: 9))
        #expect(try await fine.next() == .pong(id: 9))
        for client in greedy { await client.close() }
        #expect(await host.stop() == 0)
    }

    @Test func thousandsOfGetsAndAttachesFromOneClientMeetItsLimitsNotTheHostsMemory() async throws {
        let served = try Download.Served(size: 1000)
        let host = try await TestHost.start(
            manifests: served.manifests, arguments: ["--transfers-per-caller", "100"])
        let client = try await connectedClient(host)
        #expect(
            try await client.open(channel: 1, service: Download.filesService, package: Download.filesPackage)
                == .success)
        let before = try #require(host.residentBytes)
        var made = 0
        var refused = 0
        for index in 0..<2_000 {
            let response = try await client.request(
                channel: 1, id: UInt64(index + 1), ["Command": "get", "Name": .string(served.name)])
            if response.status == .success {
                made += 1
            } else if response.status == .resourceLimitsExceeded {
                refused += 1
            }
        }
        #expect(made == 100 && refused == 1_900, "made \(made), refused \(refused)")
        // Attaches of transfers that do not exist, and of the caller's own beyond its limit.
        for index in 0..<5_000 {
            try await client.send(.transfer(.attach(AttachFrame(id: UInt64(index), transfer: UUID(), window: 1))))
        }
        var notFound = 0
        for _ in 0..<5_000 {
            if case .transfer(.attached(let attached))? = try await client.next(), attached.error == "notFound" {
                notFound += 1
            }
        }
        #expect(notFound == 5_000)
        let after = try #require(host.residentBytes)
        if !TestEnvironment.addressSanitizer {
            #expect(after - before < 32 << 20, "RSS grew by \((after - before) >> 20) MiB")
        }
        // The listing of its 100 comes in pages of at most 256, with a cursor that moves on.
        try await client.send(.transfer(.transfers(TransfersQueryFrame(id: 1))))
        guard case .transfer(.transfers(let list))? = try await client.next() else {
            throw Download.TestFailure("transfers was not answered")
        }
        #expect(list.transfers.count == 100)
        #expect(await host.stop() == 0)
    }

    @Test func aServiceThatCannotTakeAnUploadFailsItWithServiceFailedAndTheResultSaysWhy() async throws {
        let host = try await TestHost.start(manifests: Fixtures.all)
        let client = try await connectedClient(host)
        #expect(try await client.open(channel: 1, service: "test", package: Fixtures.testPackage) == .success)
        // The Swift test service stores an upload where its request said: a folder that is not there.
        let response = try await client.request(
            channel: 1, id: 1, ["Action": "accept", "Path": "/nonexistent/folder/file.bin", "Size": 5000])
        guard case .uuid(let upload)? = try response.decoded["Transfer"] else {
            throw Download.TestFailure("accept was answered \(response.status)")
        }
        let attached = try await Download.attach(upload, on: client)
        let sent = Upload.random(5000)
        let (_, states) = try await Upload.send(
            sent, of: upload, on: client, from: attached, digest: Upload.sha256(sent))
        #expect(states.last?.state == "failed" && states.last?.error == "serviceFailed", "\(states)")
        #expect(await host.stop() == 0)
    }

    @Test func aDiskThatFillsFailsAnUploadWithInsufficientStorageAndRefusesOneThatCannotFit() async throws {
        // A small tmpfs of its own, where the machine lets this test make one (root, in CI).
        let mount = FileManager.default.temporaryDirectory.appendingPathComponent("atrium-tmpfs-\(UUID())")
        try FileManager.default.createDirectory(at: mount, withIntermediateDirectories: true)
        let mounted = try await runProgram("/bin/mount", ["-t", "tmpfs", "-o", "size=6m", "tmpfs", mount.path])
        guard mounted.status == 0 else {
            print(
                "skipped: no tmpfs can be mounted here (\(mounted.output.trimmingCharacters(in: .whitespacesAndNewlines)))"
            )
            return
        }
        defer { _ = try? Process.run(URL(fileURLWithPath: "/bin/umount"), arguments: [mount.path]) }
        let served = try Download.Served(size: 1, name: "x")
        let host = try await TestHost.start(
            manifests: served.manifests,
            arguments: ["--transfer-dir", mount.appendingPathComponent("transfers").path, "--transfer-free-space", "0"])
        let client = try await connectedClient(host)
        #expect(
            try await client.open(channel: 1, service: Download.filesService, package: Download.filesPackage)
                == .success)
        // A known size that cannot fit: refused as it is accepted, with status 2.
        let tooBig = try await client.request(channel: 1, id: 1, ["Command": "put", "Name": "a", "Size": 20_000_000])
        #expect(tooBig.status == .resourceLimitsExceeded, "\(tooBig.status) \(tooBig.error ?? "")")
        // An unknown size fills the disk: the upload fails, and the client is told why.
        let open = try await client.request(channel: 1, id: 2, ["Command": "put", "Name": "b"])
        guard case .uuid(let upload)? = try open.decoded["Transfer"] else { throw Download.TestFailure("no transfer") }
        let attached = try await Download.attach(upload, on: client)
        let (_, states) = try await Upload.send(
            Upload.random(12_000_000), of: upload, on: client, from: attached, knownSize: false)
        #expect(states.last?.state == "failed" && states.last?.error == "insufficientStorage", "\(states)")
        // Its bytes are gone: the disk is free again for the next.
        let spool = mount.appendingPathComponent("transfers/spool")
        let left = await eventually(within: .seconds(5)) {
            ((try? FileManager.default.contentsOfDirectory(atPath: spool.path)) ?? ["?"]).isEmpty
        }
        #expect(left)
        #expect(await host.stop() == 0)
    }
}
