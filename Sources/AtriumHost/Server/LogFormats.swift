import CAtriumSystem
import Foundation
public import Logging

#if canImport(Glibc)
    import Glibc
#endif

/// How atriumd writes its log: `text` (one line per event, for a terminal), `json` (one JSON
/// object per line, for log shippers), or `journal` (systemd's native protocol, each metadata
/// key a field of its own: `PACKAGE`, `CLIENT`, `STATUS`, ...). `auto` is `journal` when
/// standard error is the journal's stream (systemd sets `JOURNAL_STREAM`), `text` otherwise.
public enum LogFormat: String, CaseIterable, Sendable {
    case auto, text, json, journal

    /// The format `auto` stands for here.
    public static func detected() -> LogFormat {
        // JOURNAL_STREAM is "device:inode" of the journal's stream; it is ours only if standard
        // error is still that stream (not redirected since).
        guard let stream = ProcessInfo.processInfo.environment["JOURNAL_STREAM"] else { return .text }
        let parts = stream.split(separator: ":").compactMap { UInt64($0) }
        var status = stat()
        guard parts.count == 2, fstat(STDERR_FILENO, &status) == 0 else { return .text }
        return UInt64(status.st_dev) == parts[0] && UInt64(status.st_ino) == parts[1] ? .journal : .text
    }

    /// The journal's socket for native messages.
    public static let journalSocket = "/run/systemd/journal/socket"
}

/// Writes `line` to standard error whole, or as much as it takes: a log line that cannot be
/// written (a closed or broken pipe) is dropped, never a reason to stop.
func writeToStandardError(_ line: String) {
    var bytes = Array(line.utf8)[...]
    while !bytes.isEmpty {
        let written = bytes.withUnsafeBytes { write(STDERR_FILENO, $0.baseAddress, $0.count) }
        if written < 0, errno == EINTR { continue }
        guard written > 0 else { return }
        bytes = bytes.dropFirst(written)
    }
}

/// Metadata as text values, the handler's own under the event's, with the provider's.
private func flatten(
    _ event: LogEvent, handler: Logger.Metadata, provider: Logger.MetadataProvider?
) -> [(String, String)] {
    var merged = handler
    if let provided = provider?.get() { merged.merge(provided) { $1 } }
    if let own = event.metadata { merged.merge(own) { $1 } }
    return merged.sorted { $0.key < $1.key }.map { ($0.key, "\($0.value)") }
}

/// One JSON object per line on standard error: `time` (ISO 8601, UTC, milliseconds),
/// `level`, `label`, `message`, then each metadata key as a text field of its own (a key that
/// would replace one of those four is written with `meta.` before it).
public struct JSONLogHandler: LogHandler {
    public var metadata: Logger.Metadata = [:]
    public var metadataProvider: Logger.MetadataProvider?
    public var logLevel: Logger.Level = .info
    let label: String
    let write: @Sendable (String) -> Void

    public init(label: String, write: @escaping @Sendable (String) -> Void = JSONLogHandler.standardError) {
        self.label = label
        self.write = write
    }

    public static let standardError: @Sendable (String) -> Void = { line in writeToStandardError(line) }

    public subscript(metadataKey key: String) -> Logger.Metadata.Value? {
        get { metadata[key] }
        set { metadata[key] = newValue }
    }

    public func log(event: LogEvent) {
        let reserved: Set<String> = ["time", "level", "label", "message"]
        var object: [String: String] = [
            "time": Self.timestamp(), "level": event.level.rawValue, "label": label,
            "message": event.message.description,
        ]
        for (key, value) in flatten(event, handler: metadata, provider: metadataProvider) {
            object[reserved.contains(key) ? "meta.\(key)" : key] = value
        }
        guard
            let data = try? JSONSerialization.data(
                withJSONObject: object, options: [.sortedKeys, .withoutEscapingSlashes])
        else { return }
        write(String(decoding: data, as: UTF8.self) + "\n")
    }

    static func timestamp() -> String {
        var now = timespec()
        clock_gettime(CLOCK_REALTIME, &now)
        var seconds = now.tv_sec
        var parts = tm()
        gmtime_r(&seconds, &parts)
        return String(
            format: "%04d-%02d-%02dT%02d:%02d:%02d.%03dZ", parts.tm_year + 1900, parts.tm_mon + 1, parts.tm_mday,
            parts.tm_hour, parts.tm_min, parts.tm_sec, Int32(now.tv_nsec / 1_000_000))
    }
}

/// systemd's journal, spoken natively: each event one datagram to the journal's socket, with
/// `MESSAGE`, `PRIORITY`, `SYSLOG_IDENTIFIER`, `LOGGER` (the label) and each metadata key as a
/// field (upper case, other characters as `_`: `package` is `PACKAGE`), so that
/// `journalctl -u atriumd PACKAGE=atrium.examples.echo` finds a package's lines. An event the
/// journal does not take is written to standard error as text.
public struct JournalLogHandler: LogHandler {
    public var metadata: Logger.Metadata = [:]
    public var metadataProvider: Logger.MetadataProvider?
    public var logLevel: Logger.Level = .info
    let label: String
    let socket: String

    public init(label: String, socket: String = LogFormat.journalSocket) {
        self.label = label
        self.socket = socket
    }

    public subscript(metadataKey key: String) -> Logger.Metadata.Value? {
        get { metadata[key] }
        set { metadata[key] = newValue }
    }

    /// syslog's priorities, as the journal has them.
    static func priority(_ level: Logger.Level) -> Int {
        switch level {
        case .trace, .debug: 7
        case .info: 6
        case .notice: 5
        case .warning: 4
        case .error: 3
        case .critical: 2
        }
    }

    /// A metadata key as a journal field name: upper-case letters, digits and `_`, not
    /// starting with `_` (those are the journal's own) or a digit.
    static func fieldName(_ key: String) -> String {
        var name = String(
            key.uppercased().unicodeScalars.map { scalar -> Character in
                ("A"..."Z").contains(scalar) || ("0"..."9").contains(scalar) ? Character(scalar) : "_"
            })
        while name.hasPrefix("_") { name.removeFirst() }
        if name.isEmpty || name.first!.isNumber { name = "F_" + name }
        return String(name.prefix(64))
    }

    /// One field of the native protocol: `NAME=value`, or, for a value with a newline, the
    /// name, a newline, its length as 64-bit little-endian, the value and a newline.
    static func field(_ name: String, _ value: String) -> [UInt8] {
        guard value.contains("\n") else { return Array("\(name)=\(value)\n".utf8) }
        let bytes = Array(value.utf8)
        return Array("\(name)\n".utf8) + withUnsafeBytes(of: UInt64(bytes.count).littleEndian) { Array($0) } + bytes
            + [0x0A]
    }

    public func log(event: LogEvent) {
        var datagram = Self.field("MESSAGE", event.message.description)
        datagram += Self.field("PRIORITY", String(Self.priority(event.level)))
        datagram += Self.field("SYSLOG_IDENTIFIER", "atriumd")
        datagram += Self.field("LOGGER", label)
        let reserved: Set<String> = ["MESSAGE", "PRIORITY", "SYSLOG_IDENTIFIER", "LOGGER"]
        for (key, value) in flatten(event, handler: metadata, provider: metadataProvider) {
            let name = Self.fieldName(key)
            // A key that would stand for one of the event's own fields is set apart.
            datagram += Self.field(reserved.contains(name) ? "META_" + name : name, value)
        }
        let sent = datagram.withUnsafeBufferPointer { buffer in
            atrium_send_datagram(socket, buffer.baseAddress, buffer.count)
        }
        if sent != 0 {
            writeToStandardError("\(event.level) \(label): \(event.message)\n")
        }
    }
}
