import AtriumTesting
import Foundation
import Glibc
import Synchronization
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

/// The watcher alone, on folders of a test's own: where a folder's path leads is followed.
struct ManifestWatcherFollowsPathsTests {
    final class Changes: Sendable {
        let count = Atomic<Int>(0)
        let problems = Mutex<[String]>([])
        var value: Int { count.load(ordering: .sequentiallyConsistent) }

        func start(_ folders: [URL]) throws -> ManifestWatcher {
            try ManifestWatcher.start(
                folders: folders,
                problem: { problem in self.problems.withLock { $0.append(problem) } },
                changed: { self.count.add(1, ordering: .sequentiallyConsistent) }
            ).get()
        }

        /// How many changes were reported once the last event's reload has settled.
        func settled() async throws -> Int {
            try await Task.sleep(for: .milliseconds(400))
            return value
        }

        /// Waits (at most 5 s) until more than `count` changes were reported.
        func more(than count: Int) async -> Bool {
            await eventually(within: .seconds(5)) { value > count }
        }
    }

    func scratch() throws -> URL {
        let folder = FileManager.default.temporaryDirectory.appendingPathComponent("atrium-watch-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: folder, withIntermediateDirectories: false)
        return folder
    }

    func write(_ folder: URL, _ name: String) throws {
        try "{}".write(to: folder.appendingPathComponent(name), atomically: true, encoding: .utf8)
    }

    /// After a move: a change in `aside`, the folder the path no longer leads to, is not
    /// reported; one in `watched`, where it leads now, is.
    func expectWatched(_ watched: URL, notAside aside: URL, _ changes: Changes) async throws {
        let seen = try await changes.settled()
        try write(aside, "old.json")
        try await Task.sleep(for: .milliseconds(600))
        #expect(changes.value == seen)
        try write(watched, "new.json")
        #expect(await changes.more(than: seen))
    }

    @Test func aFolderWhoseParentsAreMadeAfterTheStartIsWatchedOnceItIsThere() async throws {
        let scratch = try scratch()
        defer { try? FileManager.default.removeItem(at: scratch) }
        let folder = scratch.appendingPathComponent("a/b/manifests")
        let changes = Changes()
        let watcher = try changes.start([folder])
        defer { watcher.stop() }
        try FileManager.default.createDirectory(at: folder, withIntermediateDirectories: true)
        #expect(await changes.more(than: 0))
        let seen = try await changes.settled()
        try write(folder, "echo.json")
        #expect(await changes.more(than: seen))
        #expect(changes.problems.withLock { $0 }.isEmpty)
    }

    @Test func aFolderAboveReplacedWholeMovesTheWatchToTheNewPath() async throws {
        let scratch = try scratch()
        defer { try? FileManager.default.removeItem(at: scratch) }
        let app = scratch.appendingPathComponent("app")
        let folder = app.appendingPathComponent("manifests")
        try FileManager.default.createDirectory(at: folder, withIntermediateDirectories: true)
        let changes = Changes()
        let watcher = try changes.start([folder])
        defer { watcher.stop() }
        let staged = scratch.appendingPathComponent("app.new")
        let aside = scratch.appendingPathComponent("app.old")
        try FileManager.default.createDirectory(
            at: staged.appendingPathComponent("manifests"), withIntermediateDirectories: true)
        #expect(rename(app.path, aside.path) == 0)
        #expect(rename(staged.path, app.path) == 0)
        #expect(await changes.more(than: 0))
        try await expectWatched(folder, notAside: aside.appendingPathComponent("manifests"), changes)
    }

    @Test func aSymbolicLinkAboveTheFolderPointedElsewhereMovesTheWatch() async throws {
        // --manifests /srv/app/current/manifests, with current a link to the release running.
        let scratch = try scratch()
        defer { try? FileManager.default.removeItem(at: scratch) }
        let first = scratch.appendingPathComponent("releases/1/manifests")
        let second = scratch.appendingPathComponent("releases/2/manifests")
        try FileManager.default.createDirectory(at: first, withIntermediateDirectories: true)
        try FileManager.default.createDirectory(at: second, withIntermediateDirectories: true)
        let current = scratch.appendingPathComponent("current")
        #expect(symlink(scratch.appendingPathComponent("releases/1").path, current.path) == 0)
        let changes = Changes()
        let watcher = try changes.start([current.appendingPathComponent("manifests")])
        defer { watcher.stop() }
        let next = scratch.appendingPathComponent("current.next")
        #expect(symlink(scratch.appendingPathComponent("releases/2").path, next.path) == 0)
        #expect(rename(next.path, current.path) == 0)
        #expect(await changes.more(than: 0))
        try await expectWatched(second, notAside: first, changes)
    }

    @Test func aFolderThatCannotBeWatchedIsSaidAndTheOthersAreStillWatched() async throws {
        let scratch = try scratch()
        defer { try? FileManager.default.removeItem(at: scratch) }
        let loop = scratch.appendingPathComponent("loop")
        #expect(symlink(loop.path, loop.path) == 0)
        let good = scratch.appendingPathComponent("good")
        try FileManager.default.createDirectory(at: good, withIntermediateDirectories: false)
        let changes = Changes()
        let watcher = try changes.start([loop, good])
        defer { watcher.stop() }
        #expect(changes.problems.withLock { $0 } == ["cannot watch \(loop.path): Too many levels of symbolic links"])
        try write(good, "echo.json")
        #expect(await changes.more(than: 0))
        // Once a folder is there instead, it is watched.
        var seen = try await changes.settled()
        #expect(unlink(loop.path) == 0)
        try FileManager.default.createDirectory(at: loop, withIntermediateDirectories: false)
        #expect(await changes.more(than: seen))
        seen = try await changes.settled()
        try write(loop, "echo.json")
        #expect(await changes.more(than: seen))
    }
}
