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
/// A folder is watched by its path, not only as the folder it was at start: one replaced
/// whole (a new folder renamed over it, a symbolic link pointed elsewhere, a folder removed
/// and made again, or one made after the start) is watched again where the path now leads,
/// through a watch on its parent, and reloaded.
final class ManifestWatcher {
    private let source: any DispatchSourceRead
    private let queue = DispatchQueue(label: "atrium.manifests.watch")
    /// How long after the last event the reload runs.
    static let settle = DispatchTimeInterval.milliseconds(300)
    /// What a folder's own watch reports: its files, and the folder itself going away.
    static let folderMask = UInt32(
        IN_CLOSE_WRITE | IN_MOVED_TO | IN_MOVED_FROM | IN_DELETE | IN_CREATE | IN_ATTRIB | IN_DELETE_SELF
            | IN_MOVE_SELF)
    /// What a parent's watch reports: names made, removed or renamed in it.
    static let parentMask = UInt32(IN_CREATE | IN_MOVED_TO | IN_DELETE | IN_MOVED_FROM | IN_ONLYDIR)

    /// Starts watching `folders` (and their parents, for a folder replaced or made later);
    /// the reason when inotify cannot watch a folder that exists.
    static func start(folders: [URL], changed: @escaping @Sendable () -> Void) -> Result<ManifestWatcher, WatchError> {
        let descriptor = inotify_init1(Int32(IN_NONBLOCK | IN_CLOEXEC))
        guard descriptor >= 0 else { return .failure(WatchError(reason: "inotify_init1 failed: errno \(errno)")) }
        let watches = Watches(descriptor: descriptor, folders: folders.map(\.path))
        for folder in watches.folders.indices {
            if let problem = watches.watch(folder) {
                close(descriptor)
                return .failure(WatchError(reason: problem))
            }
        }
        return .success(ManifestWatcher(descriptor: descriptor, watches: watches, changed: changed))
    }

    struct WatchError: Error {
        var reason: String
    }

    private let pending = PendingReload()

    private init(descriptor: Int32, watches: Watches, changed: @escaping @Sendable () -> Void) {
        source = DispatchSource.makeReadSource(fileDescriptor: descriptor, queue: queue)
        let pending = self.pending
        let queue = self.queue
        source.setEventHandler {
            // Which files changed does not matter (the folder is read again), only whether a
            // watched folder is itself gone or back.
            var buffer = [UInt8](repeating: 0, count: 4096)
            var relevant = false
            while true {
                let count = read(descriptor, &buffer, buffer.count)
                guard count > 0 else { break }
                for event in Self.events(in: buffer[..<count]) where watches.handle(event) {
                    relevant = true
                }
            }
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

/// The watches of each folder and of its parent. Touched only on the watcher's queue (and
/// before it starts).
private final class Watches: @unchecked Sendable {
    let descriptor: Int32
    let folders: [String]
    /// Each folder's own watch, or -1 while nothing is at its path.
    var folderWatch: [Int32]
    /// Each folder's parent's watch, or -1 when the parent cannot be watched.
    var parentWatch: [Int32]

    init(descriptor: Int32, folders: [String]) {
        self.descriptor = descriptor
        self.folders = folders
        folderWatch = Array(repeating: -1, count: folders.count)
        parentWatch = Array(repeating: -1, count: folders.count)
    }

    /// Watches folder `index` and its parent; why not, when the folder exists and cannot be
    /// watched. A folder that does not exist is left to its parent's watch.
    func watch(_ index: Int) -> String? {
        let parent = (folders[index] as NSString).deletingLastPathComponent
        // IN_MASK_ADD: one folder may be another's parent, and both watches are then one.
        parentWatch[index] = inotify_add_watch(descriptor, parent, ManifestWatcher.parentMask | UInt32(IN_MASK_ADD))
        return rewatch(index)
    }

    /// Watches whatever folder is at `index`'s path now, and lets go of the one watched before
    /// when that is another.
    @discardableResult
    func rewatch(_ index: Int) -> String? {
        let old = folderWatch[index]
        let new = inotify_add_watch(descriptor, folders[index], ManifestWatcher.folderMask | UInt32(IN_MASK_ADD))
        let error = errno
        let shared =
            parentWatch.contains(old)
            || folderWatch.enumerated().contains { $0.offset != index && $0.element == old }
        if old >= 0, old != new, !shared {
            inotify_rm_watch(descriptor, old)
        }
        folderWatch[index] = new
        guard new < 0, error != ENOENT, error != ENOTDIR else { return nil }
        return "cannot watch \(folders[index]): errno \(error)"
    }

    /// Takes one event; whether a reload should follow.
    func handle(_ event: ManifestWatcher.Event) -> Bool {
        // Events were lost (the kernel's queue overflowed): anything may have changed.
        if event.mask & UInt32(IN_Q_OVERFLOW) != 0 {
            for index in folders.indices { rewatch(index) }
            return true
        }
        var relevant = false
        for index in folders.indices {
            if event.watch >= 0, event.watch == folderWatch[index] {
                relevant = true
                // The folder itself moved away or is gone: watch what is at its path now.
                if event.mask & UInt32(IN_DELETE_SELF | IN_MOVE_SELF | IN_IGNORED) != 0 { rewatch(index) }
            } else if event.watch >= 0, event.watch == parentWatch[index],
                event.name == (folders[index] as NSString).lastPathComponent
            {
                // Its name was made, removed or renamed in its parent.
                relevant = true
                rewatch(index)
            }
        }
        return relevant
    }
}

/// The reload waiting for events to settle. Touched only on the watcher's queue.
private final class PendingReload: @unchecked Sendable {
    var item: DispatchWorkItem?
}
