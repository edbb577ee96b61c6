import Glibc
import Testing

@testable import AtriumHost

/// Reading what inotify hands the watcher: whole events, names without their padding, and
/// nothing read past the bytes given.
struct ManifestWatcherTests {
    static func event(watch: Int32, mask: UInt32, name: String, padTo length: Int) -> [UInt8] {
        func bytes<T>(_ value: T) -> [UInt8] { withUnsafeBytes(of: value) { Array($0) } }
        var name = Array(name.utf8)
        name += Array(repeating: 0, count: length - name.count)
        return bytes(watch) + bytes(mask) + bytes(UInt32(0)) + bytes(UInt32(length)) + name
    }

    @Test func eventsAreReadWholeWithTheirNames() {
        let bytes =
            Self.event(watch: 3, mask: UInt32(IN_CREATE), name: "manifests", padTo: 16)
            + Self.event(watch: 1, mask: UInt32(IN_DELETE_SELF), name: "", padTo: 0)
            + Self.event(watch: 2, mask: UInt32(IN_MOVED_TO), name: "echo.json", padTo: 12)
        let events = ManifestWatcher.events(in: bytes[...])
        #expect(events.map(\.watch) == [3, 1, 2])
        #expect(events.map(\.mask) == [UInt32(IN_CREATE), UInt32(IN_DELETE_SELF), UInt32(IN_MOVED_TO)])
        #expect(events.map(\.name) == ["manifests", "", "echo.json"])
    }

    @Test func aTruncatedEventIsNotReadPastTheEnd() {
        let whole = Self.event(watch: 7, mask: UInt32(IN_CREATE), name: "manifests", padTo: 16)
        // A name cut short is read as far as it goes; a header cut short is no event.
        #expect(ManifestWatcher.events(in: whole.dropLast(10)).map(\.name) == ["manife"])
        #expect(ManifestWatcher.events(in: whole.prefix(15)).isEmpty)
        // A slice that does not start at 0.
        let shifted = ([0xFF] + whole)[1...]
        #expect(ManifestWatcher.events(in: shifted).map(\.watch) == [7])
    }
}
