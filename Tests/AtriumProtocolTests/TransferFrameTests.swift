import AtriumProtocol
import AtriumValues
import Foundation
import NIOCore
import Testing

/// The frames of transfers (CONTRACT section 8): each is the map the contract gives, carries
/// a chunk's bytes as a slice of what was read, and names what it breaks (each round-trips
/// with the other frames, in ``FrameCodecTests``).
struct TransferFrameTests {
    static let id = UUID(uuidString: "7F1D9D5E-8A3B-4C59-9E0A-2B6F4C1D8E21")!
    static let digest = [UInt8](repeating: 0xab, count: 32)

    static let clientFrames: [ClientFrame] = [
        .transfer(.attach(AttachFrame(id: 1, transfer: id))),
        .transfer(.attach(AttachFrame(id: 2, transfer: id, offset: 1 << 33, window: 4 << 20))),
        .transfer(.chunk(ChunkFrame(transfer: id, offset: 0, data: ByteBuffer(bytes: [1, 2, 3])))),
        .transfer(.chunk(ChunkFrame(transfer: id, offset: 3, data: ByteBuffer(), last: true, digest: digest))),
        .transfer(.ack(AckFrame(transfer: id, offset: 42, window: 1 << 20))),
        .transfer(.detach(transfer: id)),
        .transfer(.cancel(transfer: id)),
        .transfer(.transfers(TransfersQueryFrame(id: 3))),
        .transfer(.transfers(TransfersQueryFrame(id: 4, since: 17, forget: [id, UUID()]))),
        .transfer(.link(id: 5, transfer: id)),
    ]

    static let hostFrames: [HostFrame] = [
        .transfer(
            .attached(
                AttachedFrame(
                    id: 1, transfer: id, status: .success, direction: "download", size: 1 << 32, offset: 10,
                    chunkBytes: 256 << 10, window: 4 << 20, expires: Timestamp(secondsSince1970: 1_800_000_000),
                    name: "IMG_0001.HEIC", digest: digest))),
        .transfer(
            .attached(
                AttachedFrame(
                    id: 2, transfer: id, status: .failure, direction: "upload", size: -1, offset: 0, chunkBytes: 0,
                    window: 0, expires: Timestamp(secondsSince1970: 1_800_000_000.5), error: "notFound"))),
        .transfer(.chunk(ChunkFrame(transfer: id, offset: 7, data: ByteBuffer(bytes: Array(0..<200))))),
        .transfer(.ack(AckFrame(transfer: id, offset: 4096, window: 8192))),
        .transfer(.state(TransferStateFrame(transfer: id, state: "running", offset: 5, size: 10))),
        .transfer(
            .state(
                TransferStateFrame(
                    transfer: id, state: "completed", offset: 10, size: 10,
                    result: EncodedValueSet(["Name": "a.jpg", "Size": 10, "Digest": .bytes(digest)])))),
        .transfer(
            .transfers(
                TransfersFrame(
                    id: 9,
                    transfers: [
                        TransferStateFrame(transfer: id, state: "failed", offset: 3, size: -1, error: "digestMismatch"),
                        TransferStateFrame(transfer: UUID(), state: "waiting", offset: 0, size: 5),
                    ], cursor: 12))),
        .transfer(.transfers(TransfersFrame(id: 10, transfers: [], cursor: 0))),
        .transfer(
            .link(
                TransferLinkFrame(
                    id: 11, status: .success, url: "https://192.168.1.20:7340/transfers/\(id)",
                    bearer: "1kKqDQS-733x9s8F_LA8-s5InVj-s_r_8Uwo42Blmww",
                    expires: Timestamp(secondsSince1970: 1_800_000_000)))),
        .transfer(
            .link(
                TransferLinkFrame(
                    id: 12, status: .failure, url: "", bearer: "", expires: Timestamp(secondsSince1970: 0),
                    error: "notFound"))),
    ]

    /// `transferLink` both ways is the contract's map.
    @Test func aTransferLinkIsTheContractsMap() throws {
        let asked = try ValueSet(
            cbor: Array(encoded(ClientFrame.transfer(.link(id: 5, transfer: Self.id))).readableBytesView.dropFirst(4)))
        #expect(asked == ["type": "transferLink", "id": 5, "transfer": .uuid(Self.id)])
        let answer = try ValueSet(cbor: Array(encoded(Self.hostFrames[8]).readableBytesView.dropFirst(4)))
        #expect(
            answer == [
                "type": "transferLink", "id": 11, "status": 0,
                "url": .string("https://192.168.1.20:7340/transfers/\(Self.id)"),
                "bearer": "1kKqDQS-733x9s8F_LA8-s5InVj-s_r_8Uwo42Blmww",
                "expires": .date(Timestamp(secondsSince1970: 1_800_000_000)),
            ])
    }

    /// The wire form is the contract's map: the uuid as tag 37 over 16 bytes, the data as a
    /// byte string, `last` as true, a size of -1 as a negative integer, `expires` as tag 1.
    @Test func theWireFormIsTheContractsMap() throws {
        let chunk = encoded(
            ClientFrame.transfer(
                .chunk(ChunkFrame(transfer: Self.id, offset: 3, data: ByteBuffer(bytes: [9]), last: true))))
        let map = try ValueSet(cbor: Array(chunk.readableBytesView.dropFirst(4)))
        #expect(
            map == [
                "type": "chunk", "transfer": .uuid(Self.id), "offset": 3, "data": .bytes([9]), "last": true,
            ])
        let attached = encoded(Self.hostFrames[1])
        let answer = try ValueSet(cbor: Array(attached.readableBytesView.dropFirst(4)))
        #expect(answer["size"] == .int(-1))
        #expect(answer["expires"] == .date(Timestamp(secondsSince1970: 1_800_000_000.5)))
        #expect(answer["type"] == "attached" && answer["status"] == 1 && answer["error"] == "notFound")
        let transfers = encoded(Self.hostFrames[6])
        let listed = try ValueSet(cbor: Array(transfers.readableBytesView.dropFirst(4)))
        guard case .array(let entries) = listed["transfers"], case .maps(let maps) = entries.storage else {
            Issue.record("transfers is not an array of maps: \(listed)")
            return
        }
        #expect(maps.count == 2 && maps.allSatisfy { $0["type"] == nil }, "entries are transferState maps without type")
    }

    /// A chunk's data is a slice of the bytes the frame was read from: no copy of the file's
    /// bytes on the way in.
    @Test func aChunksDataIsASliceOfTheFrame() throws {
        let payload = [UInt8](repeating: 0x5a, count: 64 << 10)
        var buffer = encoded(
            ClientFrame.transfer(.chunk(ChunkFrame(transfer: Self.id, offset: 0, data: ByteBuffer(bytes: payload)))))
        let frameStart = buffer.withUnsafeReadableBytes { UInt(bitPattern: $0.baseAddress) }
        let frameEnd = frameStart + UInt(buffer.readableBytes)
        guard case .transfer(.chunk(let chunk)) = try FrameDecoder<ClientFrame>().decodeFrame(from: &buffer) else {
            Issue.record("not decoded as a chunk")
            return
        }
        #expect(Array(chunk.data.readableBytesView) == payload)
        let dataStart = chunk.data.withUnsafeReadableBytes { UInt(bitPattern: $0.baseAddress) }
        #expect(dataStart > frameStart && dataStart < frameEnd, "the data points into the frame's bytes")
    }

    /// Bytes sent in chunks (an indefinite-length byte string) are taken, joined.
    @Test func dataSentInChunksIsJoined() throws {
        var body: [UInt8] = [0xa4]
        body += [0x64] + Array("type".utf8) + [0x65] + Array("chunk".utf8)
        body += [0x68] + Array("transfer".utf8) + [0xd8, 0x25, 0x50] + withUnsafeBytes(of: Self.id.uuid) { Array($0) }
        body += [0x66] + Array("offset".utf8) + [0x00]
        body += [0x64] + Array("data".utf8) + [0x5f, 0x42, 1, 2, 0x41, 3, 0xff]
        guard case .transfer(.chunk(let chunk)) = try ClientFrame(body: ByteBuffer(bytes: body)) else {
            Issue.record("not decoded as a chunk")
            return
        }
        #expect(Array(chunk.data.readableBytesView) == [1, 2, 3])
    }

    /// A `chunk` frame's body with `offset` encoded as given and `extra` key-value bytes after.
    static func chunk(offset: [UInt8], extra: [UInt8] = []) -> [UInt8] {
        var body: [UInt8] = [extra.isEmpty ? 0xa4 : 0xa5]
        body += [0x64] + Array("type".utf8) + [0x65] + Array("chunk".utf8)
        body += [0x68] + Array("transfer".utf8) + [0xd8, 0x25, 0x50] + withUnsafeBytes(of: id.uuid) { Array($0) }
        body += [0x66] + Array("offset".utf8) + offset
        body += [0x64] + Array("data".utf8) + [0x40]
        return body + extra
    }

    @Test func missingAndMistypedKeysAreNamed() {
        let uuid = Value.uuid(Self.id)
        #expect(
            clientFrameError(["type": "attach", "id": 1])?.message == #"attach: key "transfer" is missing"#)
        #expect(
            clientFrameError(["type": "attach", "id": 1, "transfer": "7f1d9d5e-8a3b-4c59-9e0a-2b6f4c1d8e21"])?.message
                == #"attach: key "transfer" must be a uuid (tag 37 over 16 bytes), not a text string"#)
        #expect(
            clientFrameError(["type": "chunk", "transfer": uuid, "offset": 0, "data": "text"])?.message
                == #"chunk: key "data" must be bytes, not a text string"#)
        #expect(
            clientFrameError(["type": "chunk", "transfer": uuid, "offset": -1, "data": .bytes([])])?.message
                == #"chunk: key "offset" must be an unsigned integer, not an integer"#)
        #expect(
            clientFrameError(["type": "chunk", "transfer": uuid, "offset": 0, "data": .bytes([]), "last": 1])?.message
                == #"chunk: key "last" must be true or false, not an integer"#)
        #expect(
            clientFrameError(["type": "ack", "transfer": uuid, "offset": 0])?.message
                == #"ack: key "window" is missing"#)
        #expect(
            clientFrameError(["type": "transfers", "id": 1, "forget": ["x"]])?.message
                == #"transfers: key "forget"[0] must be a uuid (tag 37 over 16 bytes), not a text string"#)
        // Offsets past any file, a digest that is not a SHA-256, a float for `last`.
        #expect(
            clientFrameError(["type": "ack", "transfer": uuid, "offset": .int(-1), "window": 1])?.code
                == .malformedFrame)
        #expect(
            clientFrameError(bytes: Self.chunk(offset: [0x1b, 0x80, 0, 0, 0, 0, 0, 0, 0]))?.message
                == #"chunk: key "offset" is out of range (9223372036854775808)"#)
        #expect(
            clientFrameError([
                "type": "chunk", "transfer": uuid, "offset": 0, "data": .bytes([]), "digest": .bytes([1]),
            ])?
            .message == #"chunk: key "digest" must be 32 bytes (a SHA-256), not 1"#)
        #expect(
            clientFrameError(
                bytes: Self.chunk(offset: [0x00], extra: [0x64] + Array("last".utf8) + [0xf9, 0x00, 0x15]))?
                .message == #"chunk: key "last" must be true or false, not a float"#)
        #expect(clientFrameError(["type": "transfers", "id": 1, "forget": .array(ValueArray(uuids: []))]) == nil)
        // A uuid tag over 15 bytes is not a uuid.
        var short: [UInt8] = [0xa2]
        short += [0x64] + Array("type".utf8) + [0x66] + Array("detach".utf8)
        short += [0x68] + Array("transfer".utf8) + [0xd8, 0x25, 0x4f] + [UInt8](repeating: 1, count: 15)
        let refused = clientFrameError(bytes: short)
        #expect(refused?.code == .malformedFrame)
        #expect(
            refused?.message.contains(#"detach: key "transfer" must be a uuid"#) == true, "\(refused?.message ?? "")")
    }

    /// What a hostile client can put where a uuid or a list of them goes: a list past the hard
    /// limit, or an array of a million items in place of a uuid, is refused by its head, with
    /// its key named.
    @Test func hostileValuesWhereUUIDsGoAreRefusedByTheirHead() {
        let tooMany = (0...ProtocolLimits.maxFrameArrayItems).map { _ in UUID() }
        #expect(
            clientFrameError(["type": "transfers", "id": 1, "forget": .array(ValueArray(uuids: tooMany))])?.message
                == #"transfers: key "forget" has more than 1024 items, the hard limit"#)
        // `transfer` as an array of a million empty strings (one byte each).
        var body: [UInt8] = [0xa3]
        body += [0x64] + Array("type".utf8) + [0x66] + Array("attach".utf8)
        body += [0x62] + Array("id".utf8) + [0x01]
        body += [0x68] + Array("transfer".utf8) + [0x9a, 0x00, 0x0f, 0x42, 0x40]
        body += [UInt8](repeating: 0x60, count: 1_000_000)
        #expect(
            clientFrameError(bytes: body)?.message
                == #"attach: key "transfer" must be a uuid (tag 37 over 16 bytes), not an array"#)
    }
}
