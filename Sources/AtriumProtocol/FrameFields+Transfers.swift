@_spi(CBOR) import AtriumValues
import Foundation
import NIOCore

// Readers for the kinds transfer frames carry beyond the other frames': a uuid (tag 37), a
// date (tag 1), a signed integer, and bytes (a slice of the frame for a chunk's
// data). Each takes any well-formed encoding of its kind and says which key is wrong, as the
// readers of FrameFields.swift do.
extension FrameFields {
    /// The value under `key` decoded (it was found well-formed when the frame was parsed).
    private func value(_ key: StaticString, _ expected: String) throws(FrameError) -> Value? {
        guard let range = range(key), let (head, _) = head(key) else { return nil }
        do throws(ValueSetError) {
            return try Value(cbor: UnsafeRawBufferPointer(rebasing: raw[range]), root: "\(key)")
        } catch {
            throw mistyped(key, expected, head)
        }
    }

    func optionalUUID(_ key: StaticString) throws(FrameError) -> UUID? {
        guard let value = try value(key, "a uuid (tag 37 over 16 bytes)") else { return nil }
        guard case .uuid(let uuid) = value else { throw mistyped(key, "a uuid (tag 37 over 16 bytes)", head(key)!.0) }
        return uuid
    }

    func uuid(_ key: StaticString) throws(FrameError) -> UUID {
        guard let value = try optionalUUID(key) else { throw missing(key) }
        return value
    }

    /// An integer that may be negative (a size of -1).
    func signedInt(_ key: StaticString) throws(FrameError) -> Int64 {
        guard let value = try value(key, "an integer") else { throw missing(key) }
        guard case .int(let int) = value else { throw mistyped(key, "an integer", head(key)!.0) }
        return int
    }

    func date(_ key: StaticString) throws(FrameError) -> Timestamp {
        guard let value = try value(key, "a date (tag 1)") else { throw missing(key) }
        guard case .date(let date) = value else { throw mistyped(key, "a date (tag 1)", head(key)!.0) }
        return date
    }

    /// Bytes, copied (a digest: 32 of them).
    func optionalByteArray(_ key: StaticString) throws(FrameError) -> [UInt8]? {
        guard let value = try value(key, "bytes") else { return nil }
        guard case .bytes(let bytes) = value else { throw mistyped(key, "bytes", head(key)!.0) }
        return bytes
    }

    /// Bytes as a slice of the frame (a chunk's data travels on as it was read); bytes sent in
    /// chunks (an indefinite-length string) are joined into a buffer of their own.
    func bytesSlice(_ key: StaticString) throws(FrameError) -> ByteBuffer {
        guard let range = range(key), let (head, reader) = head(key) else { throw missing(key) }
        guard head.major == 2 else { throw mistyped(key, "bytes", head) }
        guard head.isIndefinite else {
            let start = reader.offset
            return body.getSlice(at: body.readerIndex + start, length: range.upperBound - start)!
        }
        guard let joined = try optionalByteArray(key) else { throw missing(key) }
        return ByteBuffer(bytes: joined)
    }

    func optionalUUIDArray(_ key: StaticString) throws(FrameError) -> [UUID]? {
        guard let value = try value(key, "an array of uuids") else { return nil }
        switch value {
        case .array(let array):
            if case .empty = array.storage { return [] }
            guard case .uuids(let uuids) = array.storage else {
                throw mistyped(key, "an array of uuids", head(key)!.0)
            }
            guard uuids.count <= ProtocolLimits.maxFrameArrayItems else {
                throw FrameError(
                    .malformedFrame,
                    "\(name): key \"\(key)\" has more than \(ProtocolLimits.maxFrameArrayItems) items, the hard limit")
            }
            return uuids
        default:
            throw mistyped(key, "an array of uuids", head(key)!.0)
        }
    }
}
