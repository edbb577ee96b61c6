/// `bytes` as lowercase hexadecimal text, two digits a byte.
public func hexString(_ bytes: some Sequence<UInt8>) -> String {
    let digits = Array("0123456789abcdef".utf8)
    var text: [UInt8] = []
    for byte in bytes {
        text.append(digits[Int(byte >> 4)])
        text.append(digits[Int(byte & 0x0f)])
    }
    return String(decoding: text, as: UTF8.self)
}

/// `count` random bytes from the system's generator, as lowercase hexadecimal text.
public func randomHex(byteCount count: Int) -> String {
    var generator = SystemRandomNumberGenerator()
    return hexString((0..<count).map { _ in UInt8.random(in: 0...255, using: &generator) })
}
