import Dispatch
import Foundation

#if canImport(Glibc)
    import Glibc
#endif

/// Watches the manifests folders with inotify and calls `changed` once things have settled:
/// an editor that writes a temporary file and renames it, or a package manager that drops
/// several files, makes one reload, not one per event. `changed` runs on a queue of the
/// watcher's own, never on an event loop.
///
/// A folder is watched by its path, not only as the folder it was at start: each folder on
/// the way to it is watched for the next name on the path, so that a folder replaced whole (a
/// new one renamed over it or over a folder above it, a symbolic link on the path pointed
/// elsewhere, a folder removed and made again, one made after the start) is watched again
/// where the path now leads, and reloaded. (What is inside a symbolic link's target is followed
/// along the path's own names only.)
///
/// Sendable: what changes is touched only on its queue.
final class ManifestWatcher: @unchecked Sendable {
    private let source: any DispatchSourceRead
    private let queue = DispatchQueue(label: "atrium.manifests.watch")
    /// How long after the last event the reload runs.
    static let settle = DispatchTimeInterval.milliseconds(300)
    /// What a folder's own watch reports: its files, and the folder itself going away.
    static let folderMask = UInt32(
        IN_CLOSE_WRITE | IN_MOVED_TO | IN_MOVED_FROM | IN_DELETE | IN_CREATE | IN_ATTRIB | IN_DELETE_SELF
            | IN_MOVE_SELF)
    /// What the watch of a folder on the way reports: names made, removed or renamed in it, or
    /// whose modes changed (a folder that could not be watched may now be).
    static let pathMask = UInt32(IN_CREATE | IN_MOVED_TO | IN_DELETE | IN_MOVED_FROM | IN_ATTRIB | IN_ONLYDIR)

    /// Starts watching `folders`, existing or not. `problem` hears of each folder that exists
    /// but cannot be watched (at start on this thread, then on the watcher's queue, each time
    /// that changes); the error is only for inotify itself.
    static func start(
        folders: [URL], problem: @escaping @Sendable (String) -> Void, changed: @escaping @Sendable () -> Void
    ) -> Result<ManifestWatcher, WatchError> {
        let descriptor = inotify_init1(Int32(IN_NONBLOCK | IN_CLOEXEC))
        guard descriptor >= 0 else { return .failure(WatchError(reason: "inotify_init1 failed: errno \(errno)")) }
        let watches = Watches(
            descriptor: descriptor, folders: folders.map(\.path), problem: problem)
        watches.rewatch()
        return .success(
            ManifestWatcher(
                descriptor: descriptor, watches: watches, unwatchable: Set(watches.problems.keys), changed: changed))
    }

    struct WatchError: Error {
        var reason: String
    }

    private let pending = PendingReload()
    private let watches: Watches
    /// The folders that existed at start but could not be watched (each was named to
    /// `problem`).
    let unwatchableAtStart: Set<String>

    /// Watches each path again where it leads now (on SIGHUP: a folder that could not be
    /// watched may be watchable now).
    func rewatch() {
        queue.async { [watches] in watches.rewatch() }
    }

    private init(
        descriptor: Int32, watches: Watches, unwatchable: Set<String>, changed: @escaping @Sendable () -> Void
    ) {
        self.watches = watches
        self.unwatchableAtStart = unwatchable
        source = DispatchSource.makeReadSource(fileDescriptor: descriptor, queue: queue)
        let pending = self.pending
        let queue = self.queue
        source.setEventHandler {
            // Which files changed does not matter (the folder is read again), only whether a
            // watched folder is itself gone, or where its path leads changed.
            var buffer = [UInt8](repeating: 0, count: 4096)
            var relevant = false
            var moved = false
            while true {
                let count = read(descriptor, &buffer, buffer.count)
                guard count > 0 else { break }
                for event in Self.events(in: buffer[..<count]) {
                    let verdict = watches.verdict(event)
                    relevant = relevant || verdict.relevant
                    moved = moved || verdict.moved
                }
            }
            if moved { watches.rewatch() }
            guard relevant else { return }
            pending.item?.cancel()
            let item = DispatchWorkItem(block: changed)
            pending.item = item
            queue.asyncAfter(deadline: .now() + Self.settle, execute: item)
        }
        source.setCancelHandler { close(descriptor) }
        source.resume()
    }

    /// Stops watching; a reload waiting for events to settle does not run.
    func stop() {
        source.cancel()
        queue.sync { pending.item?.cancel() }
    }

    struct Event {
        var watch: Int32
        var mask: UInt32
        var name: String
    }

    /// The events in what one `read` returned (whole events only: the kernel never splits one).
    static func events(in bytes: ArraySlice<UInt8>) -> [Event] {
        var events: [Event] = []
        let header = MemoryLayout<inotify_event>.size
        var offset = bytes.startIndex
        while offset + header <= bytes.endIndex {
            let (watch, mask, length) = bytes.withUnsafeBytes { raw in
                let at = offset - bytes.startIndex
                return (
                    raw.loadUnaligned(fromByteOffset: at, as: Int32.self),
                    raw.loadUnaligned(fromByteOffset: at + 4, as: UInt32.self),
                    Int(raw.loadUnaligned(fromByteOffset: at + 12, as: UInt32.self))
                )
            }
            let nameStart = offset + header
            let nameEnd = min(nameStart + length, bytes.endIndex)
            let nameBytes = bytes[nameStart..<nameEnd].prefix { $0 != 0 }
            events.append(Event(watch: watch, mask: mask, name: String(decoding: nameBytes, as: UTF8.self)))
            offset = nameEnd
        }
        return events
    }
}

/// The watches of each folder and of the folders on the way to it. Touched only on the
/// watcher's queue (and before it starts).
private final class Watches: @unchecked Sendable {
    let descriptor: Int32
    let folders: [String]
    let problem: @Sendable (String) -> Void

    /// A name in a watched folder on the way to a manifests folder: when it changes, where the
    /// path leads may change.
    struct Step: Hashable {
        var watch: Int32
        var name: String
    }

    var steps: Set<Step> = []
    var folderWatches: Set<Int32> = []
    var watches: Set<Int32> = []
    /// Why each folder that exists cannot be watched, as said to `problem`.
    var problems: [String: String] = [:]

    init(descriptor: Int32, folders: [String], problem: @escaping @Sendable (String) -> Void) {
        self.descriptor = descriptor
        self.folders = folders
        self.problem = problem
    }

    /// Watches whatever each path leads to now, and the folders on the way, as far as they
    /// exist; lets go of the watches no longer on any path. (A watch of a folder both on the
    /// way and watched itself is one: IN_MASK_ADD adds to its mask.)
    func rewatch() {
        var steps: Set<Step> = []
        var folderWatches: Set<Int32> = []
        var watches: Set<Int32> = []
        var problems: [String: String] = [:]
        for folder in folders {
            // The path's names as the kernel takes them ("a/../b" goes through a's target when a
            // is a link): ".." is a step like any other, and never an event's name.
            var above = "/"
            for name in folder.split(separator: "/").map(String.init) where name != "." {
                let watch = inotify_add_watch(descriptor, above, ManifestWatcher.pathMask | UInt32(IN_MASK_ADD))
                if watch >= 0 {
                    watches.insert(watch)
                    steps.insert(Step(watch: watch, name: name))
                } else if errno == ENOENT || errno == ENOTDIR {
                    // Missing here is missing further down too.
                    break
                }
                // Otherwise (a folder that may be searched but not read) the walk goes on below.
                above += above.hasSuffix("/") ? name : "/" + name
            }
            let watch = inotify_add_watch(descriptor, folder, ManifestWatcher.folderMask | UInt32(IN_MASK_ADD))
            if watch >= 0 {
                watches.insert(watch)
                folderWatches.insert(watch)
            } else if errno != ENOENT, errno != ENOTDIR {
                problems[folder] = "cannot watch \(folder): \(String(cString: strerror(errno)))"
            }
        }
        for gone in self.watches.subtracting(watches) { inotify_rm_watch(descriptor, gone) }
        for (folder, new) in problems.sorted(by: { $0.key < $1.key }) where self.problems[folder] != new {
            problem(new)
        }
        (self.steps, self.folderWatches, self.watches, self.problems) = (steps, folderWatches, watches, problems)
    }

    /// What one event means: whether a reload should follow, and whether where a path leads
    /// may have changed.
    func verdict(_ event: ManifestWatcher.Event) -> (relevant: Bool, moved: Bool) {
        // Events were lost (the kernel's queue overflowed): anything may have changed.
        if event.mask & UInt32(IN_Q_OVERFLOW) != 0 { return (true, true) }
        var relevant = false
        var moved = false
        if folderWatches.contains(event.watch) {
            relevant = true
            moved = event.mask & UInt32(IN_DELETE_SELF | IN_MOVE_SELF | IN_IGNORED) != 0
        }
        if !event.name.isEmpty, steps.contains(Step(watch: event.watch, name: event.name)) {
            relevant = true
            moved = true
        }
        return (relevant, moved)
    }
}

/// The reload waiting for events to settle. Touched only on the watcher's queue.
private final class PendingReload: @unchecked Sendable {
    var item: DispatchWorkItem?
}
