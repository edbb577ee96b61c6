public import Foundation

/// How a download answers over HTTP as a static file does (RFC 9110): its validators, the one
/// range a request may ask for, and its name for the client to save it as. Plain functions of
/// the request's header values, which the host's HTTP handler applies.
public enum HTTPFileHeaders {
    /// What a `Range` header asks of a file of `size` bytes.
    public enum RangeAnswer: Equatable, Sendable {
        /// The whole file (no range, a range not in bytes, several ranges, or one that does
        /// not parse: RFC 9110 lets a server ignore those and answer 200).
        case whole
        /// These bytes (206).
        case part(Range<Int64>)
        /// No byte of the file (416).
        case unsatisfiable
    }

    /// The answer to `Range: value` for a file of `size` bytes: one range of bytes
    /// (`bytes=A-B`, `bytes=A-`, `bytes=-N`).
    public static func range(_ value: String?, size: Int64) -> RangeAnswer {
        guard let value else { return .whole }
        let text = value.trimmingCharacters(in: .whitespaces)
        guard text.lowercased().hasPrefix("bytes="), !text.contains(",") else { return .whole }
        let spec = text.dropFirst("bytes=".count).trimmingCharacters(in: .whitespaces)
        guard let dash = spec.firstIndex(of: "-") else { return .whole }
        let first = String(spec[..<dash]).trimmingCharacters(in: .whitespaces)
        let last = String(spec[spec.index(after: dash)...]).trimmingCharacters(in: .whitespaces)
        func number(_ text: String) -> Int64? {
            guard !text.isEmpty, text.count <= 18, text.allSatisfy({ $0.isASCII && $0.isNumber }) else { return nil }
            return Int64(text)
        }
        if first.isEmpty {
            // The last N bytes.
            guard let count = number(last) else { return .whole }
            guard count > 0, size > 0 else { return .unsatisfiable }
            return .part(max(0, size - count)..<size)
        }
        guard let start = number(first) else { return .whole }
        let end: Int64
        if last.isEmpty {
            end = size - 1
        } else {
            guard let given = number(last), given >= start else { return .whole }
            end = min(given, size - 1)
        }
        guard start < size else { return .unsatisfiable }
        return .part(start..<(end + 1))
    }

    /// Whether `Range: value` asks for the file from a byte to its end (`bytes=A-`), as a
    /// client that holds the bytes before asks (`curl -C -`): not a range that ends at a given
    /// byte, nor the file's last bytes (`bytes=-N`).
    public static func isOpenEnded(_ value: String?) -> Bool {
        guard let value, case .part = range(value, size: Int64.max >> 1) else { return false }
        let spec = value.trimmingCharacters(in: .whitespaces).dropFirst("bytes=".count)
        guard let dash = spec.firstIndex(of: "-") else { return false }
        return !spec[..<dash].trimmingCharacters(in: .whitespaces).isEmpty
            && spec[spec.index(after: dash)...].trimmingCharacters(in: .whitespaces).isEmpty
    }

    /// The strong entity tag of a file as it was offered (its device, inode, size and
    /// modification time): it changes whenever the file does.
    public static func entityTag(of source: DownloadSource) -> String {
        let parts = [source.device, source.inode, UInt64(bitPattern: source.size), UInt64(bitPattern: source.modified)]
        return "\"" + parts.map { String($0, radix: 16) }.joined(separator: "-") + "\""
    }

    /// Whether `If-Range: value` lets a range be answered: the file's entity tag (strongly
    /// equal), or its exact `Last-Modified` date.
    public static func ifRangeHolds(_ value: String?, entityTag: String, lastModified: String) -> Bool {
        guard let value = value?.trimmingCharacters(in: .whitespaces) else { return true }
        if value.hasPrefix("W/") { return false }
        if value.hasPrefix("\"") { return value == entityTag }
        return value == lastModified
    }

    /// An HTTP date (IMF-fixdate, RFC 9110 section 5.6.7) of `nanoseconds` since 1970.
    public static func date(nanoseconds: Int64) -> String {
        date(Date(timeIntervalSince1970: TimeInterval(nanoseconds / 1_000_000_000)))
    }

    public static func date(_ date: Date) -> String {
        var calendar = Calendar(identifier: .gregorian)
        calendar.timeZone = TimeZone(identifier: "UTC")!
        let parts = calendar.dateComponents([.year, .month, .day, .hour, .minute, .second, .weekday], from: date)
        let days = ["Sun", "Mon", "Tue", "Wed", "Thu", "Fri", "Sat"]
        let months = ["Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"]
        func two(_ value: Int?) -> String { String(format: "%02d", value ?? 0) }
        return "\(days[(parts.weekday ?? 1) - 1]), \(two(parts.day)) \(months[(parts.month ?? 1) - 1]) "
            + "\(parts.year ?? 1970) \(two(parts.hour)):\(two(parts.minute)):\(two(parts.second)) GMT"
    }

    /// `Content-Disposition` for a file to save as `name` (RFC 6266): `filename` with the name
    /// in ASCII (other characters, quotes, backslashes and controls as `_`), and `filename*`
    /// with it whole in UTF-8 when it is not plain ASCII.
    public static func contentDisposition(name: String?) -> String {
        guard let name, !name.isEmpty else { return "attachment" }
        let plain = String(
            name.unicodeScalars.map { scalar -> Character in
                scalar.isASCII && scalar.value >= 0x20 && scalar.value != 0x7F && scalar != "\"" && scalar != "\\"
                    ? Character(scalar) : "_"
            })
        guard plain != name else { return "attachment; filename=\"\(plain)\"" }
        let unreserved = Set("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789!#$&+-.^_`|~".utf8)
        let encoded = name.utf8.map {
            unreserved.contains($0) ? String(UnicodeScalar($0)) : String(format: "%%%02X", $0)
        }
        .joined()
        return "attachment; filename=\"\(plain)\"; filename*=UTF-8''\(encoded)"
    }
}
