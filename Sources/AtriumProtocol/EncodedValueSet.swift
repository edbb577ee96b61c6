public import AtriumValues
public import NIOCore

/// A message as it travels: the CBOR bytes of one ValueSet map, held in a `ByteBuffer`
/// slice of the frame it arrived in.
///
/// The host passes requests on without decoding them (a C plugin gets these bytes as they
/// are); ``decode(limits:)`` turns them into a ``ValueSet`` where Swift code wants one. A frame
/// decoder guarantees that the bytes are one well-formed CBOR map; whether that map is a valid
/// ValueSet is for the receiver to check, because the answer to an invalid one is a status,
/// not a protocol error.
public struct EncodedValueSet: Sendable, Hashable, CustomStringConvertible {
    /// The CBOR bytes, readable bytes only.
    public var buffer: ByteBuffer

    /// The encoding of `set`.
    public init(_ set: ValueSet, allocator: ByteBufferAllocator = ByteBufferAllocator()) {
        var buffer = allocator.buffer(capacity: set.encodedSize)
        buffer.writeValueSet(set)
        self.buffer = buffer
    }

    /// Wraps bytes that the caller vouches are one CBOR map (as the frame decoder does).
    public init(uncheckedBytes buffer: ByteBuffer) {
        self.buffer = buffer
    }

    /// The empty map, `a0`.
    public static let empty = EncodedValueSet(uncheckedBytes: ByteBuffer(bytes: [0xa0]))

    /// The number of encoded bytes.
    public var byteCount: Int { buffer.readableBytes }

    /// Decodes and validates the message (CONTRACT section 3), reading the bytes in place.
    ///
    /// - Throws: ``ValueSetError`` naming the offending key and the reason.
    public func decode(limits: DecodingLimits = .default) throws(ValueSetError) -> ValueSet {
        try ValueSet(cbor: buffer, limits: limits)
    }

    /// The message's keys with values of their kinds (``ValueSet/init(outline:)``): for a
    /// message already validated, what checking its keys and kinds needs.
    public func outline() throws(ValueSetError) -> ValueSet {
        let result = buffer.withUnsafeReadableBytes { raw in
            Result { () throws(ValueSetError) in try ValueSet(outline: raw) }
        }
        return try result.get()
    }

    /// Checks that the bytes are a valid ValueSet (CONTRACT section 3) holding at most
    /// `maxValues` values, without decoding them: what the host does with every message it
    /// passes on.
    ///
    /// - Throws: ``ValueSetError`` naming the offending key and the reason (`tooLarge` for a
    ///   message over `maxValues`).
    public func validate(limits: DecodingLimits = .default, maxValues: Int = .max) throws(ValueSetError) {
        let result = buffer.withUnsafeReadableBytes { raw in
            Result { () throws(ValueSetError) in
                try ValueSet.validate(cbor: raw, limits: limits, maxValues: maxValues)
            }
        }
        try result.get()
    }

    /// The decoded message, or a note that it is not a valid ValueSet.
    public var description: String {
        do {
            return try decode().description
        } catch {
            return "<invalid ValueSet, \(buffer.readableBytes) bytes: \(error)>"
        }
    }
}

extension ValueSet {
    /// Decodes a message from the readable bytes of `buffer`, in place, without moving its
    /// reader index. See ``ValueSet/init(cbor:limits:root:)-(UnsafeRawBufferPointer,_,_)``.
    public init(cbor buffer: ByteBuffer, limits: DecodingLimits = .default, root: String = "message")
        throws(ValueSetError)
    {
        let result = buffer.withUnsafeReadableBytes { raw in
            Result { () throws(ValueSetError) -> ValueSet in try ValueSet(cbor: raw, limits: limits, root: root) }
        }
        self = try result.get()
    }
}

extension ByteBuffer {
    /// Appends the CBOR encoding of `set`, sized first so that the bytes are written in one
    /// pass with one capacity check.
    ///
    /// - Returns: the number of bytes written.
    @inlinable
    @discardableResult
    public mutating func writeValueSet(_ set: ValueSet) -> Int {
        let size = set.encodedSize
        return writeWithUnsafeMutableBytes(minimumWritableBytes: size) { memory in
            var writer = UnsafeCBORWriter(memory)
            set.encode(into: &writer)
            precondition(writer.count == size, "CBOR encoding wrote \(writer.count) bytes, not \(size)")
            return size
        }
    }
}

extension ByteBuffer: CBOROutput {
    @inlinable
    public mutating func writeCBORByte(_ byte: UInt8) { writeInteger(byte) }

    @inlinable
    public mutating func writeCBORBytes(_ bytes: UnsafeRawBufferPointer) { writeBytes(bytes) }

    @inlinable
    public mutating func writeCBORInteger<T: FixedWidthInteger>(_ value: T) { writeInteger(value, endianness: .big) }
}
