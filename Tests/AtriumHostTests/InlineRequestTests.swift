import AtriumProtocol
import AtriumTesting
import AtriumValues
import Foundation
import Testing

/// A Swift service that says its requests never block (`requestsNeverBlock`) has each
/// request started where it arrives, on a network thread, until its first suspension. These
/// tests run the test service that way, in process and in a worker process, beside the same
/// service run the usual way, and check that what a request may do (answer at once, answer
/// after an `await`, message the client, close its channel) still works from there.
@Suite(.serialized) struct InlineRequestTests {
    static let inline = "atrium.tests.inline"
    static let inlineWorker = "atrium.tests.inline.worker"

    static func manifest(_ package: String, worker: Bool) -> String {
        """
        { "manifestVersion": 1, "package": "\(package)", "library": "libAtriumTestService.so",
          \(worker ? #""isolation": "process","# : "")
          "services": [{ "name": "test", "supportsRemoteSystems": true }],
          "config": { "requestsNeverBlock": true } }
        """
    }

    static let manifests = Fixtures.all.merging([
        "inline.json": manifest(inline, worker: false),
        "inline-worker.json": manifest(inlineWorker, worker: true),
    ]) { $1 }

    static func thread(_ client: TestClient, channel: UInt64, id: UInt64) async throws -> String? {
        let answer = try await client.request(channel: channel, id: id, ["Action": "thread"])
        #expect(answer.status == .success)
        return try answer.decoded["Thread"]?.string
    }

    @Test func requestsStartOnTheNetworkThreadOnlyWhenTheServiceSaysTheyNeverBlock() async throws {
        let host = try await startHost(manifests: Self.manifests)
        let client = try await connectedClient(host)
        #expect(try await client.open(channel: 1, service: "test", package: Self.inline) == .success)
        #expect(try await client.open(channel: 2, service: "test", package: Fixtures.testPackage) == .success)
        #expect(try await client.open(channel: 3, service: "test", package: Self.inlineWorker) == .success)
        // SwiftNIO names its event loops' threads "NIO-…", and a worker process the threads that
        // read its links to the host "atrium-link-N"; a plugin's own queue is neither.
        let inline = try await Self.thread(client, channel: 1, id: 1)
        let usual = try await Self.thread(client, channel: 2, id: 2)
        let worker = try await Self.thread(client, channel: 3, id: 3)
        #expect(inline?.hasPrefix("NIO-") == true, "inline: \(inline ?? "no name")")
        #expect(usual != nil && usual?.hasPrefix("NIO-") == false, "usual: \(usual ?? "no name")")
        #expect(worker?.hasPrefix("atrium-link-") == true, "in a worker: \(worker ?? "no name")")
        await client.close()
        #expect(await host.stop() == 0)
    }

    @Test(arguments: [inline, inlineWorker])
    func whatARequestMayDoStillWorksFromTheNetworkThread(package: String) async throws {
        let host = try await startHost(manifests: Self.manifests)
        let client = try await connectedClient(host)
        #expect(try await client.open(channel: 1, service: "test", package: package) == .success)

        // At once, and after a suspension (the rest runs on the plugin's executor).
        let echoed = try await client.request(channel: 1, id: 1, ["Action": "echo", "n": 1])
        let echoedN = try echoed.decoded["n"]
        #expect(echoed.status == .success && echoedN == .int(1))
        let late = try await client.request(channel: 1, id: 2, ["Action": "late", "DelayMs": 20])
        #expect(late.status == .success)

        // A message to the client: in a worker, `send` waits for the host's reply, which the
        // network thread the request started on is the one to read.
        try await client.send(.request(RequestFrame(channel: 1, id: 3, message: EncodedValueSet(["Action": "send"]))))
        let arrived = try await client.next()
        guard case .request(let fromService) = arrived else {
            Issue.record("the service's message did not arrive; instead: \(String(describing: arrived))")
            return
        }
        #expect(try fromService.message.decode() == ["Hello": "client"])
        try await client.send(
            .response(
                ResponseFrame(
                    channel: 1, id: fromService.id, status: .success, message: EncodedValueSet(["Reply": "hi"]))))
        let answer = try await client.response()
        #expect(try answer.decoded == ["ClientSaid": ["Reply": "hi"], "ClientStatus": 0])

        // The channel closed from the request itself, before it returns.
        try await client.send(
            .request(RequestFrame(channel: 1, id: 4, message: EncodedValueSet(["Action": "closeNow", "Status": 2]))))
        var closed: ClosedFrame?
        var settled: ResponseFrame?
        for _ in 0..<2 {
            switch try await client.next() {
            case .closed(let frame): closed = frame
            case .response(let frame): settled = frame
            case let other: Issue.record("unexpected \(String(describing: other))")
            }
        }
        #expect(closed == ClosedFrame(channel: 1, status: .resourceLimitsExceeded))
        #expect(settled?.id == 4)
        #expect(settled.map { $0.status != .success } == true, "the request was closed with its channel")

        // The package, and the host, keep answering.
        #expect(try await client.open(channel: 2, service: "test", package: package) == .success)
        let again = try await client.request(channel: 2, id: 5, ["Action": "echo"])
        #expect(again.status == .success)
        await client.close()
        #expect(await host.stop() == 0)
    }
}
