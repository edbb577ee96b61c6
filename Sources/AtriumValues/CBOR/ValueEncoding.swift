#if canImport(FoundationEssentials)
    public import FoundationEssentials
#else
    public import Foundation
#endif

extension Value {
    /// Writes this value as CBOR: definite lengths, shortest integer and float forms.
    @inlinable
    public func encode<Output: CBOROutput>(into output: inout Output) {
        switch self {
        case .string(let text):
            output.writeText(text)
        case .int(let value):
            output.writeInt(value)
        case .double(let value):
            output.writeDouble(value)
        case .bool(let value):
            output.writeBool(value)
        case .date(let date):
            output.writeDate(date)
        case .uuid(let uuid):
            output.writeUUID(uuid)
        case .bytes(let bytes):
            bytes.withUnsafeBytes { output.writeByteString($0) }
        case .array(let array):
            output.writeHead(major: 4, argument: UInt64(array.count))
            for element in array {
                element.encode(into: &output)
            }
        case .map(let set):
            set.encode(into: &output)
        }
    }

    /// This value as CBOR bytes.
    public func cborBytes() -> [UInt8] {
        var bytes: [UInt8] = []
        bytes.reserveCapacity(encodedSize)
        encode(into: &bytes)
        return bytes
    }
}

extension ValueSet {
    /// Writes this set as a CBOR map, keys in insertion order.
    @inlinable
    public func encode<Output: CBOROutput>(into output: inout Output) {
        output.writeHead(major: 5, argument: UInt64(entries.count))
        for entry in entries {
            output.writeText(entry.key)
            entry.value.encode(into: &output)
        }
    }

}

extension CBOROutput {
    /// Tag 1 over whole seconds as an integer when the time is a whole number of seconds that
    /// fits Int64, else over the shortest exact float.
    @inlinable
    public mutating func writeDate(_ date: Timestamp) {
        writeCBORByte(0xc1)
        let seconds = date.secondsSince1970
        if seconds == seconds.rounded(.towardZero), seconds >= -0x1p63, seconds < 0x1p63 {
            writeInt(Int64(seconds))
        } else {
            writeDouble(seconds)
        }
    }

    /// Tag 37 over the 16 bytes of the UUID.
    @inlinable
    public mutating func writeUUID(_ uuid: UUID) {
        writeCBORByte(0xd8)
        writeCBORByte(37)
        Swift.withUnsafeBytes(of: uuid.uuid) { writeByteString($0) }
    }
}
