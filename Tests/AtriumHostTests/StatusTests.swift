import AtriumProtocol
import AtriumTesting
import AtriumValues
import Foundation
import NIOCore
import Testing

/// Every open status and every response status the host produces reaches the client.
@Suite(.serialized)
struct StatusTests {
    @Test func openStatuses() async throws {
        let host = try await startHost()
        let client = try await connectedClient(host)
        #expect(try await client.open(channel: 1, service: "x", package: "no.such.package") == .appNotInstalled)
        #expect(
            try await client.open(channel: 2, service: "nothing", package: "atrium.tests.missing") == .appUnavailable)
        #expect(
            try await client.open(channel: 3, service: "no.such.service", package: Fixtures.echoPackage)
                == .appServiceUnavailable)
        #expect(
            try await client.open(channel: 4, service: "local.only", package: Fixtures.testPackage)
                == .remoteSystemNotSupportedByApp)
        #expect(
            try await client.open(channel: 5, service: "refuse.7", package: Fixtures.testPackage) == .notAuthorized,
            "the plugin's own status")
        #expect(try await client.open(channel: 6, service: "test", package: Fixtures.testPackage) == .success)
        // A refused channel is not open: requests on it fail with a reason.
        let onRefused = try await client.request(channel: 5, id: 1, ["Action": "echo"])
        #expect(onRefused.status == .failure && onRefused.error == "channel 5 is not open")
        await client.close()
        #expect(await host.stop() == 0)
        #expect(host.logged("libDoesNotExist.so not found"), "the load failure is in the log with its reason")
    }

    @Test func pluginFailuresBecomeStatusOne() async throws {
        let host = try await startHost()
        let client = try await connectedClient(host)
        #expect(try await client.open(channel: 1, service: "test", package: Fixtures.testPackage) == .success)
        let failed = try await client.request(channel: 1, id: 1, ["Action": "fail"])
        #expect(failed.status == .failure && failed.error == "failed, as asked")
        let thrown = try await client.request(channel: 1, id: 2, ["Action": "throw"])
        #expect(thrown.status == .failure && thrown.error == "the test service threw, as asked")
        #expect(try thrown.decoded == [:])
        // A plugin's reason is its own words: it reaches the client escaped and cut, as a
        // client's text reaches the log (a plugin is not trusted).
        let hostile = "line\r\n\u{1b}[2J" + String(repeating: "r", count: 100_000)
        let cut = try await client.request(channel: 1, id: 3, ["Action": "fail", "Reason": .string(hostile)])
        #expect(cut.status == .failure)
        let reason = try #require(cut.error)
        #expect(reason.hasPrefix("line\\u{D}\\u{A}\\u{1B}[2J"), "\(reason.prefix(40))")
        #expect(reason.utf8.count < 1100 && reason.hasSuffix("more bytes)"), "\(reason.suffix(40))")
        await client.close()
        #expect(await host.stop() == 0)
    }

    @Test func unansweredRequestsTimeOutWithStatusTwoAndLateAnswersAreDropped() async throws {
        let host = try await startHost(arguments: ["--response-timeout", "0.5"])
        let client = try await connectedClient(host)
        #expect(try await client.open(channel: 1, service: "test", package: Fixtures.testPackage) == .success)
        try await client.send(.request(RequestFrame(channel: 1, id: 1, message: EncodedValueSet(["Action": "hang"]))))
        try await client.send(
            .request(RequestFrame(channel: 1, id: 2, message: EncodedValueSet(["Action": "late", "DelayMs": 900]))))
        let first = try await client.response()
        let second = try await client.response()
        #expect(Set([first.id, second.id]) == [1, 2])
        for answer in [first, second] {
            #expect(answer.status == .resourceLimitsExceeded)
            #expect(answer.error == "the service did not answer within 0.5 seconds")
        }
        // The late answer (at 0.9 s) must not reach the client: the next frame is the pong.
        try await Task.sleep(for: .milliseconds(600))
        try await client.send(.ping(id: 99))
        #expect(try await client.next() == .pong(id: 99))
        await client.close()
        #expect(await host.stop() == 0)
    }

    /// One timer a connection answers every overdue request: a request that comes later than
    /// the first is answered at its own deadline, not the first one's, and not never.
    @Test func eachUnansweredRequestTimesOutAtItsOwnDeadline() async throws {
        let host = try await startHost(arguments: ["--response-timeout", "0.5"])
        let client = try await connectedClient(host)
        #expect(try await client.open(channel: 1, service: "test", package: Fixtures.testPackage) == .success)
        let clock = ContinuousClock()
        try await client.send(.request(RequestFrame(channel: 1, id: 1, message: EncodedValueSet(["Action": "hang"]))))
        try await Task.sleep(for: .milliseconds(300))
        let secondSent = clock.now
        try await client.send(.request(RequestFrame(channel: 1, id: 2, message: EncodedValueSet(["Action": "hang"]))))
        // Each answer as it comes, with when it came (on a loaded machine the timer may find
        // both overdue at once, and answer them in either order).
        var answers: [UInt64: (frame: ResponseFrame, came: ContinuousClock.Instant)] = [:]
        for _ in 0..<2 {
            let answer = try await client.response(timeout: .seconds(10))
            answers[answer.id] = (answer, clock.now)
        }
        let first = try #require(answers[1])
        let second = try #require(answers[2])
        #expect(first.frame.status == .resourceLimitsExceeded)
        #expect(second.frame.status == .resourceLimitsExceeded)
        #expect(second.frame.error == "the service did not answer within 0.5 seconds")
        // Not before its own deadline: the host took the request after it was sent.
        #expect(second.came - secondSent >= .milliseconds(490))
        // The connection goes on as before.
        let echo = try await client.request(channel: 1, id: 3, ["Action": "echo", "N": 3])
        #expect(echo.status == .success)
        await client.close()
        #expect(await host.stop() == 0)
    }

    /// A service's message the client never answers is answered to the service with status 2
    /// at the response timeout, while the client stays connected.
    @Test func aServicesMessageTheClientDoesNotAnswerTimesOut() async throws {
        let host = try await startHost(arguments: ["--response-timeout", "0.5"])
        let client = try await connectedClient(host)
        #expect(try await client.open(channel: 1, service: "test", package: Fixtures.testPackage) == .success)
        let clock = ContinuousClock()
        // The question is sent after this, and answered for the client 0.5 s after it is sent.
        let asked = clock.now
        try await client.send(.request(RequestFrame(channel: 1, id: 1, message: EncodedValueSet(["Action": "ask"]))))
        // The answer and the service's question come in either order.
        var question: RequestFrame?
        var answered = false
        for _ in 0..<2 {
            switch try await client.next() {
            case .response(let asked):
                #expect(try asked.decoded == ["Asking": true])
                answered = true
            case .request(let asking):
                question = asking
            case let other:
                Issue.record("expected the answer and the service's question, got \(String(describing: other))")
            }
        }
        #expect(answered)
        guard let question else {
            Issue.record("the service's message did not arrive")
            return
        }
        #expect(try question.message.decode() == ["Question": 1])
        // Not answered: the host answers the service for the client.
        guard case .request(let status) = try await client.next(timeout: .seconds(5)) else {
            Issue.record("the service did not hear that its message went unanswered")
            return
        }
        #expect(try status.message.decode() == ["FirstAnswerStatus": 2])
        #expect(clock.now - asked >= .milliseconds(490))
        await client.close()
        #expect(await host.stop() == 0)
    }

    @Test func lateButInTimeDeferredAndTwice() async throws {
        let host = try await startHost()
        let client = try await connectedClient(host)
        #expect(try await client.open(channel: 1, service: "test", package: Fixtures.testPackage) == .success)
        let late = try await client.request(channel: 1, id: 1, ["Action": "late", "DelayMs": 100])
        #expect(late.status == .success)
        #expect(try late.decoded["DelayMs"] == 100)
        let deferred = try await client.request(channel: 1, id: 2, ["Action": "deferred", "DelayMs": 50])
        #expect(try deferred.decoded == ["Deferred": true])
        let twice = try await client.request(channel: 1, id: 3, ["Action": "twice"])
        #expect(twice.status == .success, "the first answer wins")
        try await client.send(.ping(id: 4))
        #expect(try await client.next() == .pong(id: 4), "and the second never reaches the client")
        await client.close()
        #expect(await host.stop() == 0)
        #expect(host.logged("answered twice: first taken true, second taken false"))
    }

    @Test func servicesSendTheirOwnMessagesAndCloseChannels() async throws {
        let host = try await startHost()
        let client = try await connectedClient(host)
        #expect(try await client.open(channel: 3, service: "test", package: Fixtures.testPackage) == .success)
        try await client.send(.request(RequestFrame(channel: 3, id: 1, message: EncodedValueSet(["Action": "send"]))))
        guard case .request(let fromService) = try await client.next() else {
            Issue.record("the service's message did not arrive")
            return
        }
        #expect(fromService.channel == 3)
        #expect(try fromService.message.decode() == ["Hello": "client"])
        try await client.send(
            .response(
                ResponseFrame(
                    channel: 3, id: fromService.id, status: .success, message: EncodedValueSet(["Reply": "hi"]))))
        let answer = try await client.response()
        #expect(try answer.decoded == ["ClientSaid": ["Reply": "hi"], "ClientStatus": 0])

        let closing = try await client.request(channel: 3, id: 2, ["Action": "close", "Status": 2])
        #expect(closing.status == .success)
        #expect(try await client.next() == .closed(ClosedFrame(channel: 3, status: .resourceLimitsExceeded)))
        let afterClose = try await client.request(channel: 3, id: 3, ["Action": "echo"])
        #expect(afterClose.status == .failure && afterClose.error == "channel 3 is not open")
        await client.close()
        #expect(await host.stop() == 0)
    }

    @Test func tooLargeInvalidAndTooMany() async throws {
        let host = try await startHost(arguments: ["--max-message-bytes", "1000", "--max-in-flight", "2"])
        let client = try await connectedClient(host)
        #expect(try await client.open(channel: 1, service: "test", package: Fixtures.testPackage) == .success)
        let big = try await client.request(channel: 1, id: 1, ["Blob": .bytes(Array(repeating: 1, count: 2000))])
        #expect(big.status == .messageSizeTooLarge)
        #expect(big.error?.hasPrefix("the message is 2") == true)

        // {"items": [1, "two"]}: well-formed CBOR, not a ValueSet.
        let invalid: [UInt8] = [0xa1, 0x65] + Array("items".utf8) + [0x82, 0x01, 0x63] + Array("two".utf8)
        var body = ByteBuffer()
        body.writeFrame(
            ClientFrame.request(
                RequestFrame(channel: 1, id: 2, message: EncodedValueSet(uncheckedBytes: ByteBuffer(bytes: invalid)))))
        try await client.sendRaw(Array(body.readableBytesView))
        let refused = try await client.response()
        #expect(refused.status == .failure)
        #expect(refused.error == "message.items[1]: array mixes int and string")

        // Two requests that wait for a release: the third is over the limit however slow the machine.
        for id in 10..<12 {
            try await client.send(
                .request(RequestFrame(channel: 1, id: UInt64(id), message: EncodedValueSet(["Action": "wait"]))))
        }
        let third = try await client.request(channel: 1, id: 12, ["Action": "echo"])
        #expect(third.id == 12 && third.status == .resourceLimitsExceeded, "over max-in-flight: answered at once")
        let releaser = try await connectedClient(host, clientId: "releaser")
        #expect(try await releaser.open(channel: 1, service: "test", package: Fixtures.testPackage) == .success)
        #expect(try await releaser.request(channel: 1, id: 1, ["Action": "release"]).status == .success)
        await releaser.close()
        let answers = [try await client.response(), try await client.response()]
        #expect(Set(answers.map(\.id)) == [10, 11] && answers.allSatisfy { $0.status == .success })
        // The connection is still usable.
        #expect(try await client.request(channel: 1, id: 13, ["Action": "echo"]).status == .success)
        await client.close()
        #expect(await host.stop() == 0)
    }
}

/// Plugins are told when a channel closes, and why.
@Suite(.serialized)
struct ChannelClosingTests {
    @Test func pluginsHearOfClosesAndDroppedConnections() async throws {
        let host = try await startHost()
        let closer = try await connectedClient(host, clientId: "closer")
        #expect(try await closer.open(channel: 1, service: "test", package: Fixtures.testPackage) == .success)
        try await closer.send(.request(RequestFrame(channel: 1, id: 1, message: EncodedValueSet(["Action": "hang"]))))
        try await closer.send(.close(channel: 1))
        let cut = try await closer.response()
        #expect(
            cut.id == 1 && cut.status == .failure && cut.error == "the channel was closed",
            "the pending request is answered")

        let dropper = try await connectedClient(host, clientId: "dropper")
        #expect(try await dropper.open(channel: 1, service: "test", package: Fixtures.testPackage) == .success)
        await dropper.close()

        var log = ""
        _ = await eventually(within: .seconds(10)) {
            log = host.log
            return log.contains("of closer closed: Completed (0)") && log.contains("of dropper closed: Canceled (1)")
        }
        #expect(log.contains("of closer closed: Completed (0)"), "a client's close reaches the plugin as completed")
        #expect(log.contains("of dropper closed: Canceled (1)"), "a dropped connection reaches the plugin as canceled")
        await closer.close()
        #expect(await host.stop() == 0)
    }
}
