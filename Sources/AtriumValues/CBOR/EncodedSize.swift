/// A ``CBOROutput`` over memory the caller has sized exactly (with `encodedSize`), so that
/// encoding does one capacity check for the whole message instead of one per byte.
///
/// Every write is bounds-checked, so a size that was computed wrong stops the program rather
/// than writing past the end.
public struct UnsafeCBORWriter: CBOROutput {
    @usableFromInline let memory: UnsafeMutableRawBufferPointer
    /// How many bytes have been written.
    @usableFromInline var _count: Int
    public var count: Int { _count }

    @inlinable
    public init(_ memory: UnsafeMutableRawBufferPointer) {
        self.memory = memory
        self._count = 0
    }

    @inlinable
    public mutating func writeCBORByte(_ byte: UInt8) {
        precondition(_count < memory.count, "CBOR encoding overran its computed size")
        memory[_count] = byte
        _count += 1
    }

    @inlinable
    public mutating func writeCBORBytes(_ bytes: UnsafeRawBufferPointer) {
        precondition(bytes.count <= memory.count - _count, "CBOR encoding overran its computed size")
        if let base = bytes.baseAddress, bytes.count > 0 {
            (memory.baseAddress! + _count).copyMemory(from: base, byteCount: bytes.count)
        }
        _count += bytes.count
    }

    @inlinable
    public mutating func writeCBORInteger<T: FixedWidthInteger>(_ value: T) {
        let size = MemoryLayout<T>.size
        precondition(size <= memory.count - _count, "CBOR encoding overran its computed size")
        memory.storeBytes(of: value.bigEndian, toByteOffset: _count, as: T.self)
        _count += size
    }
}

extension Value {
    /// The exact number of bytes ``encode(into:)`` writes for this value.
    @inlinable
    public var encodedSize: Int {
        switch self {
        case .string(let text): return textSize(text)
        case .int(let value): return headSize(value >= 0 ? UInt64(value) : UInt64(bitPattern: ~value))
        case .double(let value): return doubleSize(value)
        case .bool: return 1
        case .date(let date):
            let seconds = date.secondsSince1970
            if seconds == seconds.rounded(.towardZero), seconds >= -0x1p63, seconds < 0x1p63 {
                let whole = Int64(seconds)
                return 1 + headSize(whole >= 0 ? UInt64(whole) : UInt64(bitPattern: ~whole))
            }
            return 1 + doubleSize(seconds)
        case .uuid: return 2 + 1 + 16
        case .bytes(let bytes): return headSize(UInt64(bytes.count)) + bytes.count
        case .array(let array):
            var size = headSize(UInt64(array.count))
            for element in array { size += element.encodedSize }
            return size
        case .map(let set): return set.encodedSize
        }
    }
}

extension ValueSet {
    /// The exact number of bytes ``encode(into:)`` writes for this set.
    @inlinable
    public var encodedSize: Int {
        var size = headSize(UInt64(entries.count))
        for entry in entries {
            size += textSize(entry.key) + entry.value.encodedSize
        }
        return size
    }

    /// Encodes into exactly sized memory: one allocation, no per-byte capacity checks.
    @inlinable
    public func cborBytes() -> [UInt8] {
        let size = encodedSize
        return [UInt8](unsafeUninitializedCapacity: size) { memory, initialized in
            var writer = UnsafeCBORWriter(UnsafeMutableRawBufferPointer(memory))
            encode(into: &writer)
            precondition(writer.count == size, "CBOR encoding wrote \(writer.count) bytes, not \(size)")
            initialized = size
        }
    }
}

/// The size of a head with this argument.
@inlinable
func headSize(_ argument: UInt64) -> Int {
    if argument < 24 { return 1 }
    if argument <= UInt64(UInt8.max) { return 2 }
    if argument <= UInt64(UInt16.max) { return 3 }
    if argument <= UInt64(UInt32.max) { return 5 }
    return 9
}

@inlinable
func textSize(_ text: String) -> Int {
    let count = text.utf8.count
    return headSize(UInt64(count)) + count
}

/// The size ``CBOROutput/writeDouble(_:)`` uses for `value`.
@inlinable
func doubleSize(_ value: Double) -> Int {
    if value.isNaN { return 3 }
    let single = Float(value)
    guard Double(single) == value else { return 9 }
    return halfBits(exactly: single) == nil ? 5 : 3
}
