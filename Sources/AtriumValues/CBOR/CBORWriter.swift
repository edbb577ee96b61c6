/// Somewhere CBOR can be written: a `[UInt8]`, or (in AtriumProtocol) a NIO `ByteBuffer`.
///
/// The writer functions are generic over this protocol and `@inlinable`, so each output type
/// gets its own specialised, non-allocating encoder.
public protocol CBOROutput {
    /// Appends one byte.
    mutating func writeCBORByte(_ byte: UInt8)
    /// Appends `bytes`, which are only valid during the call.
    mutating func writeCBORBytes(_ bytes: UnsafeRawBufferPointer)
    /// Writes `value` big-endian.
    mutating func writeCBORInteger<T: FixedWidthInteger>(_ value: T)
}

extension Array: CBOROutput where Element == UInt8 {
    @inlinable
    public mutating func writeCBORByte(_ byte: UInt8) { append(byte) }

    @inlinable
    public mutating func writeCBORBytes(_ bytes: UnsafeRawBufferPointer) { append(contentsOf: bytes) }

    @inlinable
    public mutating func writeCBORInteger<T: FixedWidthInteger>(_ value: T) {
        Swift.withUnsafeBytes(of: value.bigEndian) { append(contentsOf: $0) }
    }
}

extension CBOROutput {
    /// Writes a head in its shortest form.
    @inlinable
    public mutating func writeHead(major: UInt8, argument: UInt64) {
        let high = major << 5
        if argument < 24 {
            writeCBORByte(high | UInt8(truncatingIfNeeded: argument))
        } else if argument <= UInt64(UInt8.max) {
            writeCBORByte(high | 24)
            writeCBORByte(UInt8(truncatingIfNeeded: argument))
        } else if argument <= UInt64(UInt16.max) {
            writeCBORByte(high | 25)
            writeCBORInteger(UInt16(truncatingIfNeeded: argument))
        } else if argument <= UInt64(UInt32.max) {
            writeCBORByte(high | 26)
            writeCBORInteger(UInt32(truncatingIfNeeded: argument))
        } else {
            writeCBORByte(high | 27)
            writeCBORInteger(argument)
        }
    }

    @inlinable
    public mutating func writeInt(_ value: Int64) {
        if value >= 0 {
            writeHead(major: 0, argument: UInt64(value))
        } else {
            writeHead(major: 1, argument: UInt64(bitPattern: ~value))  // -1 - value
        }
    }

    @inlinable
    public mutating func writeUInt(_ value: UInt64) {
        writeHead(major: 0, argument: value)
    }

    @inlinable
    public mutating func writeText(_ text: String) {
        let written: Void? = text.utf8.withContiguousStorageIfAvailable { utf8 in
            writeHead(major: 3, argument: UInt64(utf8.count))
            writeCBORBytes(UnsafeRawBufferPointer(utf8))
        }
        if written == nil {
            let utf8 = Array(text.utf8)
            writeHead(major: 3, argument: UInt64(utf8.count))
            utf8.withUnsafeBytes { writeCBORBytes($0) }
        }
    }

    /// Writes a text string from a literal, without making a `String`.
    @inlinable
    public mutating func writeText(_ text: StaticString) {
        let utf8 = UnsafeRawBufferPointer(start: text.utf8Start, count: text.utf8CodeUnitCount)
        writeHead(major: 3, argument: UInt64(utf8.count))
        writeCBORBytes(utf8)
    }

    @inlinable
    public mutating func writeByteString(_ bytes: UnsafeRawBufferPointer) {
        writeHead(major: 2, argument: UInt64(bytes.count))
        writeCBORBytes(bytes)
    }

    @inlinable
    public mutating func writeBool(_ value: Bool) {
        writeCBORByte(value ? 0xf5 : 0xf4)
    }

    /// Writes a double in the shortest of float16, float32 and float64 that holds it exactly
    /// (RFC 8949 preferred serialisation); every NaN as the half-precision quiet NaN.
    @inlinable
    public mutating func writeDouble(_ value: Double) {
        if value.isNaN {
            writeCBORByte(0xf9)
            writeCBORInteger(UInt16(0x7e00))
            return
        }
        let single = Float(value)
        guard Double(single) == value else {
            writeCBORByte(0xfb)
            writeCBORInteger(value.bitPattern)
            return
        }
        if let half = halfBits(exactly: single) {
            writeCBORByte(0xf9)
            writeCBORInteger(half)
        } else {
            writeCBORByte(0xfa)
            writeCBORInteger(single.bitPattern)
        }
    }
}

/// The IEEE 754 half-precision bits of `value`, when a half holds it exactly.
@inlinable
func halfBits(exactly value: Float) -> UInt16? {
    let sign: UInt16 = value.sign == .minus ? 0x8000 : 0
    if value.isInfinite { return sign | 0x7c00 }
    if value == 0 { return sign }
    let magnitude = value.magnitude
    let exponent = Int(magnitude.exponent)
    if exponent > 15 { return nil }
    if exponent >= -14 {
        let significand = magnitude.significandBitPattern  // 23 bits; a half keeps the top 10
        guard significand & 0x1fff == 0 else { return nil }
        return sign | UInt16(exponent + 15) << 10 | UInt16(significand >> 13)
    }
    // A half subnormal is m * 2^-24 with m in 1...1023.
    let scaled = magnitude * 0x1p24
    guard scaled == scaled.rounded(.towardZero), scaled < 1024 else { return nil }
    return sign | UInt16(scaled)
}

/// The double that the IEEE 754 half-precision `bits` stand for.
func doubleFromHalf(_ bits: UInt16) -> Double {
    let exponent = Int((bits >> 10) & 0x1f)
    let significand = Double(bits & 0x3ff)
    let magnitude: Double
    switch exponent {
    case 0: magnitude = significand * 0x1p-24
    case 31: magnitude = significand == 0 ? .infinity : .nan
    default: magnitude = Double(sign: .plus, exponent: exponent - 25, significand: significand + 1024)
    }
    return bits & 0x8000 != 0 ? -magnitude : magnitude
}
