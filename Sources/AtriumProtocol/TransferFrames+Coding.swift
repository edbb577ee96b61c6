import AtriumValues
import Foundation
public import NIOCore

// How transfer frames are written and read (CONTRACT section 8), beside Frames+Coding.swift.

extension CBOROutput {
    mutating func writeKey(_ key: StaticString, uuid: UUID) {
        writeText(key)
        writeUUID(uuid)
    }

    mutating func writeKey(_ key: StaticString, signed value: Int64) {
        writeText(key)
        writeInt(value)
    }

    mutating func writeKey(_ key: StaticString, bytes: [UInt8]) {
        writeText(key)
        bytes.withUnsafeBytes { writeByteString($0) }
    }

    mutating func writeKey(_ key: StaticString, bytes: ByteBuffer) {
        writeText(key)
        bytes.withUnsafeReadableBytes { writeByteString($0) }
    }
}

extension ChunkFrame {
    /// The frame as it goes out, in three parts: its length and keys up to the head of `data`,
    /// `data` itself (never copied: the bytes as they were read from the file), and what follows
    /// (`last`, `digest`; empty for a download's chunk). Written one after the other, they are
    /// the same bytes as ``HostFrame/chunk`` encoded whole.
    public func framedParts(allocator: ByteBufferAllocator) -> (head: ByteBuffer, data: ByteBuffer, tail: ByteBuffer) {
        var size = CBORSizeCounter()
        encodeBody(into: &size)
        var head = allocator.buffer(capacity: 96)
        head.writeInteger(UInt32(truncatingIfNeeded: size.count))
        head.writeFrameHeader("chunk", keys: 4 + count(last, digest != nil))
        head.writeKey("transfer", uuid: transfer)
        head.writeKey("offset", offset)
        head.writeText("data" as StaticString)
        head.writeHead(major: 2, argument: UInt64(data.readableBytes))
        var tail = allocator.buffer(capacity: last || digest != nil ? 48 : 0)
        if last {
            tail.writeText("last" as StaticString)
            tail.writeBool(true)
        }
        if let digest { tail.writeKey("digest", bytes: digest) }
        return (head, data, tail)
    }

    func encodeBody<Output: CBOROutput>(into buffer: inout Output) {
        buffer.writeFrameHeader("chunk", keys: 4 + count(last, digest != nil))
        buffer.writeKey("transfer", uuid: transfer)
        buffer.writeKey("offset", offset)
        buffer.writeKey("data", bytes: data)
        if last {
            buffer.writeText("last" as StaticString)
            buffer.writeBool(true)
        }
        if let digest { buffer.writeKey("digest", bytes: digest) }
    }

    init(_ fields: FrameFields) throws(FrameError) {
        self.init(
            transfer: try fields.uuid("transfer"), offset: try fields.offset("offset"),
            data: try fields.bytesSlice("data"), last: try fields.optionalBool("last") ?? false,
            digest: try fields.optionalDigest("digest"))
    }
}

extension AckFrame {
    func encodeBody<Output: CBOROutput>(into buffer: inout Output) {
        buffer.writeFrameHeader("ack", keys: 4)
        buffer.writeKey("transfer", uuid: transfer)
        buffer.writeKey("offset", offset)
        buffer.writeKey("window", window)
    }

    init(_ fields: FrameFields) throws(FrameError) {
        self.init(
            transfer: try fields.uuid("transfer"), offset: try fields.offset("offset"),
            window: try fields.offset("window"))
    }
}

extension AttachedFrame {
    /// The map's keys, without `type` (a `response`'s `attached`) or with it.
    func encodeFields<Output: CBOROutput>(into buffer: inout Output, asFrame: Bool) {
        let keys = 9 + count(name != nil, digest != nil, error != nil)
        if asFrame {
            buffer.writeFrameHeader("attached", keys: keys + 1)
        } else {
            buffer.writeHead(major: 5, argument: UInt64(keys))
        }
        buffer.writeKey("id", id)
        buffer.writeKey("transfer", uuid: transfer)
        buffer.writeKey("status", status.wireValue)
        buffer.writeKey("direction", direction)
        buffer.writeKey("size", signed: size)
        buffer.writeKey("offset", offset)
        buffer.writeKey("chunkBytes", chunkBytes)
        buffer.writeKey("window", window)
        buffer.writeText("expires" as StaticString)
        buffer.writeDate(expires)
        if let name { buffer.writeKey("name", name) }
        if let digest { buffer.writeKey("digest", bytes: digest) }
        if let error { buffer.writeKey("error", error) }
    }

    init(_ fields: FrameFields) throws(FrameError) {
        self.init(
            id: try fields.uint("id"), transfer: try fields.uuid("transfer"),
            status: AppServiceResponseStatus(rawValue: try fields.int("status")),
            direction: try fields.text("direction"), size: try fields.signedInt("size"),
            offset: try fields.offset("offset"), chunkBytes: try fields.offset("chunkBytes"),
            window: try fields.offset("window"), expires: try fields.date("expires"),
            name: try fields.optionalText("name"), digest: try fields.optionalDigest("digest"),
            error: try fields.optionalText("error"))
    }
}

extension TransferStateFrame {
    /// The map's keys, without `type` (an entry of a `transfers` answer) or with it.
    func encodeFields<Output: CBOROutput>(into buffer: inout Output, asFrame: Bool) {
        let keys = 4 + count(error != nil, result != nil)
        if asFrame {
            buffer.writeFrameHeader("transferState", keys: keys + 1)
        } else {
            buffer.writeHead(major: 5, argument: UInt64(keys))
        }
        buffer.writeKey("transfer", uuid: transfer)
        buffer.writeKey("state", state)
        buffer.writeKey("offset", offset)
        buffer.writeKey("size", signed: size)
        if let error { buffer.writeKey("error", error) }
        if let result { buffer.writeKey("result", result) }
    }

    init(_ fields: FrameFields) throws(FrameError) {
        self.init(
            transfer: try fields.uuid("transfer"), state: try fields.text("state"), offset: try fields.offset("offset"),
            size: try fields.signedInt("size"), error: try fields.optionalText("error"),
            result: try fields.optionalMessage("result"))
    }
}

extension ClientTransferFrame {
    public var type: String {
        switch self {
        case .attach: "attach"
        case .chunk: "chunk"
        case .ack: "ack"
        case .detach: "detach"
        case .cancel: "cancelTransfer"
        case .transfers: "transfers"
        case .link: "transferLink"
        }
    }

    func encodeBody<Output: CBOROutput>(into buffer: inout Output) {
        switch self {
        case .attach(let attach):
            buffer.writeFrameHeader("attach", keys: 3 + count(attach.offset != nil, attach.window != nil))
            buffer.writeKey("id", attach.id)
            buffer.writeKey("transfer", uuid: attach.transfer)
            if let offset = attach.offset { buffer.writeKey("offset", offset) }
            if let window = attach.window { buffer.writeKey("window", window) }
        case .chunk(let chunk):
            chunk.encodeBody(into: &buffer)
        case .ack(let ack):
            ack.encodeBody(into: &buffer)
        case .detach(let transfer):
            buffer.writeFrameHeader("detach", keys: 2)
            buffer.writeKey("transfer", uuid: transfer)
        case .cancel(let transfer):
            buffer.writeFrameHeader("cancelTransfer", keys: 2)
            buffer.writeKey("transfer", uuid: transfer)
        case .transfers(let query):
            buffer.writeFrameHeader("transfers", keys: 2 + count(query.since != nil, !query.forget.isEmpty))
            buffer.writeKey("id", query.id)
            if let since = query.since { buffer.writeKey("since", since) }
            if !query.forget.isEmpty {
                buffer.writeText("forget" as StaticString)
                buffer.writeHead(major: 4, argument: UInt64(query.forget.count))
                for uuid in query.forget { buffer.writeUUID(uuid) }
            }
        case .link(let id, let transfer):
            buffer.writeFrameHeader("transferLink", keys: 3)
            buffer.writeKey("id", id)
            buffer.writeKey("transfer", uuid: transfer)
        }
    }

    /// The transfer frame of `type`, or nil when `type` is not one.
    static func decode(_ type: String, _ fields: FrameFields) throws(FrameError) -> ClientTransferFrame? {
        switch type {
        case "attach":
            return .attach(
                AttachFrame(
                    id: try fields.uint("id"), transfer: try fields.uuid("transfer"),
                    offset: try fields.optionalOffset("offset"), window: try fields.optionalOffset("window")))
        case "chunk": return .chunk(try ChunkFrame(fields))
        case "ack": return .ack(try AckFrame(fields))
        case "detach": return .detach(transfer: try fields.uuid("transfer"))
        case "cancelTransfer": return .cancel(transfer: try fields.uuid("transfer"))
        case "transfers":
            return .transfers(
                TransfersQueryFrame(
                    id: try fields.uint("id"), since: try fields.optionalOffset("since"),
                    forget: try fields.optionalUUIDArray("forget") ?? []))
        case "transferLink": return .link(id: try fields.uint("id"), transfer: try fields.uuid("transfer"))
        default: return nil
        }
    }
}

extension HostTransferFrame {
    public var type: String {
        switch self {
        case .attached: "attached"
        case .chunk: "chunk"
        case .ack: "ack"
        case .state: "transferState"
        case .transfers: "transfers"
        case .link: "transferLink"
        }
    }

    /// The bytes of file data the frame carries (a chunk's).
    var carriedBytes: Int {
        if case .chunk(let chunk) = self { return chunk.data.readableBytes }
        return 0
    }

    func encodeBody<Output: CBOROutput>(into buffer: inout Output) {
        switch self {
        case .attached(let attached):
            attached.encodeFields(into: &buffer, asFrame: true)
        case .chunk(let chunk):
            chunk.encodeBody(into: &buffer)
        case .ack(let ack):
            ack.encodeBody(into: &buffer)
        case .state(let state):
            state.encodeFields(into: &buffer, asFrame: true)
        case .transfers(let answer):
            buffer.writeFrameHeader("transfers", keys: 4)
            buffer.writeKey("id", answer.id)
            buffer.writeText("transfers" as StaticString)
            buffer.writeHead(major: 4, argument: UInt64(answer.transfers.count))
            for state in answer.transfers { state.encodeFields(into: &buffer, asFrame: false) }
            buffer.writeKey("cursor", answer.cursor)
        case .link(let link):
            buffer.writeFrameHeader("transferLink", keys: 6 + count(link.error != nil))
            buffer.writeKey("id", link.id)
            buffer.writeKey("status", link.status.wireValue)
            buffer.writeKey("url", link.url)
            buffer.writeKey("bearer", link.bearer)
            buffer.writeText("expires" as StaticString)
            buffer.writeDate(link.expires)
            if let error = link.error { buffer.writeKey("error", error) }
        }
    }

    /// The transfer frame of `type`, or nil when `type` is not one.
    static func decode(_ type: String, _ fields: FrameFields) throws(FrameError) -> HostTransferFrame? {
        switch type {
        case "attached": return .attached(try AttachedFrame(fields))
        case "chunk": return .chunk(try ChunkFrame(fields))
        case "ack": return .ack(try AckFrame(fields))
        case "transferState": return .state(try TransferStateFrame(fields))
        case "transfers":
            return .transfers(
                TransfersFrame(
                    id: try fields.uint("id"),
                    transfers: try fields.arrayOfMaps("transfers").map { (map) throws(FrameError) in
                        try TransferStateFrame(map)
                    },
                    cursor: try fields.uint("cursor")))
        case "transferLink":
            return .link(
                TransferLinkFrame(
                    id: try fields.uint("id"), status: AppServiceResponseStatus(rawValue: try fields.int("status")),
                    url: try fields.text("url"), bearer: try fields.text("bearer"), expires: try fields.date("expires"),
                    error: try fields.optionalText("error")))
        default: return nil
        }
    }
}
