import AtriumProtocol
import AtriumTesting
import AtriumValues
import Foundation
import Testing

/// A channel closes in one place, on its connection's loop: a backend never gets a request
/// on a channel after it was told the channel closed, even when the backend closes the
/// channel itself while the client's requests keep coming.
@Suite(.serialized) struct ChannelOrderTests {
    @Test(arguments: [false, true])
    func noRequestReachesAServiceAfterItsChannelClosed(inWorker: Bool) async throws {
        let manifest =
            inWorker
            ? WorkerIsolationTests.manifest()
            : WorkerIsolationTests.manifest().replacingOccurrences(of: #""isolation": "process","#, with: "")
        let package = WorkerIsolationTests.package
        let host = try await startHost(manifests: Fixtures.referenceManifests.merging(["w.json": manifest]) { $1 })
        let client = try await connectedClient(host)
        // Rounds of: open, a request that makes the service close its own channel from its
        // callback, and right behind it more requests on the same channel, not waiting.
        let rounds = 20
        let behind = 50
        for round in 0..<rounds {
            let channel = UInt64(round + 1)
            #expect(try await client.open(channel: channel, service: "c", package: package) == .success)
            var frames: [ClientFrame] = [
                .request(RequestFrame(channel: channel, id: 1, message: EncodedValueSet(["CloseChannel": 2])))
            ]
            for id in 2...UInt64(behind + 1) {
                frames.append(.request(RequestFrame(channel: channel, id: id, message: EncodedValueSet(["Int": 1]))))
            }
            for frame in frames { try await client.send(frame) }
            // Every request is answered exactly once, and the client hears the channel closed once.
            var answered: Set<UInt64> = []
            var closed = 0
            while answered.count < behind + 1 || closed == 0 {
                guard let frame = try await client.next(timeout: .seconds(10)) else { break }
                switch frame {
                case .response(let response):
                    #expect(response.channel == channel)
                    #expect(answered.insert(response.id).inserted, "request \(response.id) answered twice")
                    if response.status == .success {
                        if response.id == 1 {
                            #expect(try response.decoded["Closed"] == 0, "close_channel returned ATRIUM_OK")
                        }
                    } else {
                        // What the service had not answered when the channel closed is answered
                        // Failure by the host; what came after is refused; each with a reason.
                        #expect(response.status == .failure)
                        let reasons = [
                            "the service closed the channel", "channel \(channel) is closing",
                            "channel \(channel) is not open",
                        ]
                        #expect(reasons.contains(response.error ?? ""), "\(response.error ?? "")")
                    }
                case .closed(let closedFrame):
                    #expect(closedFrame == ClosedFrame(channel: channel, status: .resourceLimitsExceeded))
                    closed += 1
                default:
                    Issue.record("unexpected frame \(frame)")
                }
            }
            #expect(answered.count == behind + 1 && closed == 1)
        }
        // The service counted the requests it got on a channel it had been told was closed.
        let last = UInt64(rounds + 1)
        #expect(try await client.open(channel: last, service: "c", package: package) == .success)
        let count = try await client.request(channel: last, id: 1, ["AfterClosed": true])
        #expect(count.status == .success)
        #expect(try count.decoded["AfterClosed"] == 0)
        await client.close()
        #expect(await host.stop() == 0)
    }
}
