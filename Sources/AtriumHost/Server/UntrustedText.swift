import AtriumProtocol

/// Why `uri` may not be launched as it is, or nil when its characters are acceptable: a URI
/// (RFC 3986) is printable ASCII, and an IRI (RFC 3987) adds letters of other scripts but
/// never controls, spaces of any kind or bidi formatting characters, which can make a URI
/// display as something other than what it is.
func uriCharacterRefusal(_ uri: String) -> String? {
    for scalar in uri.unicodeScalars {
        if scalar.value != 0x20, scalar.properties.isWhitespace {
            return "the URI holds a space character other than U+0020 (U+\(hex4(scalar.value))); percent-encode it"
        }
        if isInvisibleOrControl(scalar) {
            return "the URI holds a control or invisible formatting character (U+\(hex4(scalar.value)))"
        }
    }
    return nil
}

private func hex4(_ value: UInt32) -> String {
    let digits = String(value, radix: 16, uppercase: true)
    return String(repeating: "0", count: max(0, 4 - digits.count)) + digits
}
