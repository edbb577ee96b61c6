import AtriumProtocol
import AtriumTesting
import AtriumValues
import Foundation
import Testing

/// The reference services, end to end, against a real atriumd.
@Suite(.serialized)
struct ReferenceServiceTests {
    @Test func helloPingAndApps() async throws {
        let host = try await startHost()
        let client = try await TestClient.connect(port: host.port)
        let welcome = try await client.hello()
        #expect(welcome.version == 1 && welcome.platform == "linux")
        #expect(welcome.limits == .default)
        try await client.send(.ping(id: 42))
        #expect(try await client.next() == .pong(id: 42))
        try await client.send(.apps(id: 7))
        guard case .apps(let apps) = try await client.next() else {
            Issue.record("no apps answer")
            return
        }
        #expect(apps.id == 7)
        let byPackage = Dictionary(uniqueKeysWithValues: apps.apps.map { ($0.package, $0) })
        #expect(byPackage[Fixtures.romanPackage]?.services == [Fixtures.romanService])
        #expect(byPackage[Fixtures.romanPackage]?.schemes == ["roman-test"])
        #expect(byPackage[Fixtures.romanPackage]?.displayName == "Roman Test App")
        #expect(byPackage[Fixtures.echoPackage]?.services == [Fixtures.echoService])
        #expect(
            byPackage[Fixtures.testPackage]?.services == ["test", "refuse.7", "refuse.-1", "refuse.4294967296"],
            "local-only services are not listed")
        #expect(byPackage["atrium.tests.missing"] != nil, "a package whose plugin failed stays listed")
        await client.close()
        #expect(await host.stop() == 0)
    }

    @Test func romanPingEchoesDatesAndTextUnchanged() async throws {
        let host = try await startHost()
        let client = try await connectedClient(host)
        #expect(
            try await client.open(channel: 1, service: Fixtures.romanService, package: Fixtures.romanPackage)
                == .success)

        let when = Timestamp(secondsSince1970: 1_763_700_000.123)
        let pong = try await client.request(
            channel: 1, id: 1, ["Type": "ping", "CreationDate": .date(when), "TargetId": "phone"])
        #expect(pong.status == .success)
        #expect(try pong.decoded == ["Type": "pong", "CreationDate": .date(when), "TargetId": "phone"])

        let text = try await client.request(
            channel: 1, id: 2, ["Type": "ping", "CreationDate": "11/21/2026 5:00:00 AM", "TargetId": 7])
        #expect(
            try text.decoded == ["Type": "pong", "CreationDate": "11/21/2026 5:00:00 AM", "TargetId": 7],
            "kinds are kept")

        let before = Timestamp.now
        let ack = try await client.request(channel: 1, id: 3, ["Type": "hello"])
        #expect(try ack.decoded["Type"] == "Ack")
        let ackDate = try #require(try ack.decoded["CreationDate"]?.timestamp)
        #expect(ackDate >= Timestamp(secondsSince1970: before.secondsSince1970 - 1))

        let launched = try await client.request(
            channel: 1, id: 4, ["Type": "LaunchUri", "Uri": "atrium-test://from-roman"])
        #expect(try launched.decoded["Type"] == "Ok")
        let noUri = try await client.request(channel: 1, id: 5, ["Type": "LaunchUri"])
        #expect(noUri.status == .failure)
        #expect(noUri.error == "a LaunchUri message needs a Uri string")
        await client.close()
        #expect(await host.stop() == 0)
    }

    @Test func echoReturnsGeneratedValueSetsByteForByte() async throws {
        let host = try await startHost()
        let client = try await connectedClient(host)
        #expect(
            try await client.open(channel: 9, service: Fixtures.echoService, package: Fixtures.echoPackage) == .success)
        var generator = ValueGenerator(seed: 2026)
        for id in 0..<200 {
            let message = generator.valueSet()
            let sent = EncodedValueSet(message)
            try await client.send(.request(RequestFrame(channel: 9, id: UInt64(id), message: sent)))
            let answer = try await client.response()
            #expect(answer.id == UInt64(id) && answer.channel == 9 && answer.status == .success)
            #expect(answer.message == sent, "the C plugin answers with the very bytes it got")
            #expect(try answer.decoded == message)
        }
        await client.close()
        #expect(await host.stop() == 0)
    }

    @Test func theLocalSocketWorksAndMayOpenLocalOnlyServices() async throws {
        let host = try await startHost()
        let local = try await TestClient.connect(unixSocket: host.socketPath)
        try await local.hello(clientId: "local")
        #expect(try await local.open(channel: 1, service: "local.only", package: Fixtures.testPackage) == .success)
        let answer = try await local.request(channel: 1, id: 1, ["Action": "echo", "N": 1])
        #expect(
            try answer.decoded == ["Action": "echo", "N": 1, "Greeting": "hi"],
            "the manifest's config reached the plugin")
        let remote = try await connectedClient(host)
        #expect(
            try await remote.open(channel: 1, service: "local.only", package: Fixtures.testPackage)
                == .remoteSystemNotSupportedByApp
        )
        await local.close()
        await remote.close()
        #expect(await host.stop() == 0)
    }
}

/// A client written in Python from docs/PROTOCOL.md alone (Scripts/contract_client.py), with
/// cbor2 for CBOR, talks to the real host: the contract holds for someone else's code.
@Suite(.serialized)
struct IndependentClientTests {
    @Test func aPythonClientWrittenFromTheContractGetsEveryAnswerRight() async throws {
        let host = try await startHost(manifests: Fixtures.referenceManifests)
        let script = Fixtures.repositoryRoot.appendingPathComponent("Scripts/contract_client.py").path
        let result = try await runProgram("python3", [script, String(host.port)])
        #expect(result.status == 0, "\(result.output)")
        #expect(result.output.contains("13 passed, 0 failed"))
        #expect(await host.stop() == 0)
    }
}
