/// Text that came from a peer (a client's id, a frame type, a URI, a key name), made safe
/// for one log line or one error frame: it cannot start a new line, move the cursor, colour
/// the terminal or reorder what follows it, and it cannot make a line longer than `limit`
/// characters.
///
/// Control characters (C0, DEL, C1), line and paragraph separators, bidi controls and other
/// invisible format characters are written as `\u{XXXX}`; what is past `limit` characters is
/// cut, and the cut says how many bytes it left out.
package func untrusted(_ text: String, limit: Int = 200) -> String {
    var result = ""
    var written = 0
    var consumed = 0
    for scalar in text.unicodeScalars {
        if written >= limit {
            return result + "…(\(text.utf8.count - consumed) more bytes)"
        }
        consumed += UTF8.width(scalar)
        if isInvisibleOrControl(scalar) {
            result += "\\u{" + String(scalar.value, radix: 16, uppercase: true) + "}"
        } else {
            result.unicodeScalars.append(scalar)
        }
        written += 1
    }
    return result
}

/// Whether `scalar` is one a log line or a URI must not carry as it is: C0 and C1 controls,
/// DEL, line and paragraph separators, bidi controls (U+202A–U+202E, U+2066–U+2069, marks),
/// and other default-ignorable format characters (zero-width spaces and joiners, U+FEFF).
package func isInvisibleOrControl(_ scalar: Unicode.Scalar) -> Bool {
    let value = scalar.value
    if value < 0x20 || (0x7f...0x9f).contains(value) { return true }
    if value < 0x80 { return false }
    let properties = scalar.properties
    if properties.isBidiControl || properties.isDefaultIgnorableCodePoint { return true }
    switch properties.generalCategory {
    case .lineSeparator, .paragraphSeparator, .format, .control, .surrogate, .privateUse, .unassigned:
        return true
    default:
        return false
    }
}
