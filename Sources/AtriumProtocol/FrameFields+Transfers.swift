@_spi(CBOR) import AtriumValues
import Foundation
import NIOCore

// Readers for the kinds transfer frames carry beyond the other frames': a uuid (tag 37), a
// date (tag 1), a signed integer, an offset, and bytes (a slice of the frame for a chunk's
// data). Each takes any well-formed encoding of its kind and says which key is wrong, as the
// readers of FrameFields.swift do. Each looks at the value's head before it decodes anything,
// so a value of another kind (an array of millions of items, say) costs nothing to refuse.
extension FrameFields {
    /// The value at `range` decoded: only called once its head says it is small (a tag over a
    /// string or a number, or a byte string, bounded by the frame).
    private func decoded(_ range: Range<Int>, _ key: StaticString, _ expected: String, _ head: CBORReader.Head)
        throws(FrameError) -> Value
    {
        do throws(ValueSetError) {
            return try Value(cbor: UnsafeRawBufferPointer(rebasing: raw[range]), root: "\(key)")
        } catch {
            throw mistyped(key, expected, head)
        }
    }

    private static let uuidKind = "a uuid (tag 37 over 16 bytes)"

    /// The uuid at `range`, whose head is `head`.
    private func uuid(at range: Range<Int>, head: CBORReader.Head, _ key: StaticString) throws(FrameError) -> UUID {
        guard head.major == 6, head.argument == 37,
            case .uuid(let uuid) = try decoded(range, key, Self.uuidKind, head)
        else { throw mistyped(key, Self.uuidKind, head) }
        return uuid
    }

    func optionalUUID(_ key: StaticString) throws(FrameError) -> UUID? {
        guard let range = range(key), let (head, _) = head(key) else { return nil }
        return try uuid(at: range, head: head, key)
    }

    func uuid(_ key: StaticString) throws(FrameError) -> UUID {
        guard let value = try optionalUUID(key) else { throw missing(key) }
        return value
    }

    /// An integer that may be negative (a size of -1), within Int64.
    func signedInt(_ key: StaticString) throws(FrameError) -> Int64 {
        guard let (head, _) = head(key) else { throw missing(key) }
        guard head.major == 0 || head.major == 1 else { throw mistyped(key, "an integer", head) }
        guard head.argument <= UInt64(Int64.max) else {
            throw FrameError(.malformedFrame, "\(name): key \"\(key)\" is out of range")
        }
        return head.major == 0 ? Int64(head.argument) : -1 - Int64(head.argument)
    }

    /// An offset, a window or a count of bytes: an unsigned integer no larger than Int64.max
    /// (no file has more bytes), so that whatever adds to it cannot overflow a signed count.
    func optionalOffset(_ key: StaticString) throws(FrameError) -> UInt64? {
        guard let value = try optionalUInt(key) else { return nil }
        guard value <= UInt64(Int64.max) else {
            throw FrameError(.malformedFrame, "\(name): key \"\(key)\" is out of range (\(value))")
        }
        return value
    }

    func offset(_ key: StaticString) throws(FrameError) -> UInt64 {
        guard let value = try optionalOffset(key) else { throw missing(key) }
        return value
    }

    func date(_ key: StaticString) throws(FrameError) -> Timestamp {
        guard let range = range(key), let (head, _) = head(key) else { throw missing(key) }
        guard head.major == 6, head.argument == 1,
            case .date(let date) = try decoded(range, key, "a date (tag 1)", head)
        else { throw mistyped(key, "a date (tag 1)", head) }
        return date
    }

    /// A SHA-256: 32 bytes.
    func optionalDigest(_ key: StaticString) throws(FrameError) -> [UInt8]? {
        guard let range = range(key), let (head, _) = head(key) else { return nil }
        guard head.major == 2, case .bytes(let bytes) = try decoded(range, key, "bytes", head) else {
            throw mistyped(key, "bytes", head)
        }
        guard bytes.count == 32 else {
            throw FrameError(
                .malformedFrame, "\(name): key \"\(key)\" must be 32 bytes (a SHA-256), not \(bytes.count)")
        }
        return bytes
    }

    /// Bytes as a slice of the frame (a chunk's data travels on as it was read); bytes sent in
    /// chunks (an indefinite-length string) are joined into a buffer of their own, as are bytes
    /// much smaller than their frame (a slice keeps the whole read buffer alive).
    func bytesSlice(_ key: StaticString) throws(FrameError) -> ByteBuffer {
        guard let range = range(key), let (head, reader) = head(key) else { throw missing(key) }
        guard head.major == 2 else { throw mistyped(key, "bytes", head) }
        guard head.isIndefinite else {
            let start = reader.offset
            let slice = body.getSlice(at: body.readerIndex + start, length: range.upperBound - start)!
            if body.readableBytes > 2 * slice.readableBytes + 4096 { return ByteBuffer(bytes: slice.readableBytesView) }
            return slice
        }
        guard case .bytes(let joined) = try decoded(range, key, "bytes", head) else {
            throw mistyped(key, "bytes", head)
        }
        return ByteBuffer(bytes: joined)
    }

    func optionalUUIDArray(_ key: StaticString) throws(FrameError) -> [UUID]? {
        try optionalLimitedArray(key, "an array of uuids") { (reader, position) throws(FrameError) in
            let start = reader.offset
            var probe = CBORReader(raw, offset: start)
            guard let head = try? probe.readHead(),
                (try? reader.skipItem(maxDepth: ProtocolLimits.maxFrameNesting)) != nil
            else {
                throw FrameError(.malformedFrame, "\(name): key \"\(key)\"[\(position)] is not well-formed")
            }
            guard head.major == 6, head.argument == 37,
                case .uuid(let uuid) = try? Value(cbor: UnsafeRawBufferPointer(rebasing: raw[start..<reader.offset]))
            else {
                throw FrameError(
                    .malformedFrame,
                    "\(name): key \"\(key)\"[\(position)] must be \(Self.uuidKind), not \(head.kindDescription)")
            }
            return uuid
        }
    }
}
