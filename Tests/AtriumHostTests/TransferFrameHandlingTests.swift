import AtriumProtocol
import AtriumTesting
import AtriumValues
import Foundation
import Testing

/// Transfer frames against a real atriumd that has no transfer of anyone's (no service can make
/// one yet): each is answered as CONTRACT section 8 says for a transfer the caller does not
/// have, the connection stays usable, and a malformed one is a protocol error.
struct TransferFrameHandlingTests {
    @Test func framesAboutATransferTheCallerDoesNotHaveAreAnsweredAsNotFound() async throws {
        let host = try await TestHost.start(manifests: Fixtures.referenceManifests)
        let client = try await TestClient.connect(port: host.port)
        _ = try await client.hello()
        let transfer = UUID()

        try await client.send(.transfer(.attach(AttachFrame(id: 1, transfer: transfer, offset: 10, window: 1 << 20))))
        guard case .transfer(.attached(let attached)) = try await client.next() else {
            Issue.record("attach was not answered with attached")
            return
        }
        #expect(attached.id == 1 && attached.transfer == transfer)
        #expect(attached.status == .failure && attached.error == "notFound")

        // Bytes, acks and a detach for it change nothing and are not answered: the next answer
        // is the pong.
        try await client.send(.transfer(.chunk(ChunkFrame(transfer: transfer, offset: 0, data: .init(bytes: [1, 2])))))
        try await client.send(.transfer(.ack(AckFrame(transfer: transfer, offset: 0, window: 10))))
        try await client.send(.transfer(.detach(transfer: transfer)))
        try await client.send(.ping(id: 5))
        #expect(try await client.next() == .pong(id: 5))

        try await client.send(.transfer(.cancel(transfer: transfer)))
        guard case .transfer(.state(let state)) = try await client.next() else {
            Issue.record("cancelTransfer was not answered with transferState")
            return
        }
        #expect(state.transfer == transfer && state.state == "failed" && state.error == "notFound")

        try await client.send(.transfer(.transfers(TransfersQueryFrame(id: 7, since: 3, forget: [transfer]))))
        guard case .transfer(.transfers(let list)) = try await client.next() else {
            Issue.record("transfers was not answered with transfers")
            return
        }
        #expect(list.id == 7 && list.transfers.isEmpty && list.cursor == 0)

        // The connection still serves requests.
        #expect(
            try await client.open(channel: 1, service: Fixtures.echoService, package: Fixtures.echoPackage) == .success)
        #expect(await host.stop() == 0)
    }

    @Test func aMalformedTransferFrameIsAProtocolError() async throws {
        let host = try await TestHost.start(manifests: Fixtures.referenceManifests)
        let client = try await TestClient.connect(port: host.port)
        _ = try await client.hello()
        let body = (["type": "attach", "id": 1, "transfer": "not-a-uuid"] as ValueSet).cborBytes()
        try await client.sendRaw(TestClient.frame(body))
        guard case .error(let error) = try await client.next() else {
            Issue.record("a malformed attach was not refused")
            return
        }
        #expect(error.code == .malformedFrame)
        #expect(error.message.contains(#"attach: key "transfer" must be a uuid"#), "\(error.message)")
        #expect(try await client.isClosedByHost())
        #expect(await host.stop() == 0)
    }
}
