import Dispatch
import Foundation

#if canImport(Glibc)
    import Glibc
#endif

/// Watches the manifests folders with inotify and calls `changed` once things have settled:
/// an editor that writes a temporary file and renames it, or a package manager that drops
/// several files, makes one reload, not one per event. `changed` runs on a queue of the
/// watcher's own, never on an event loop.
final class ManifestWatcher {
    private let source: any DispatchSourceRead
    private let queue = DispatchQueue(label: "atrium.manifests.watch")
    /// How long after the last event the reload runs.
    static let settle = DispatchTimeInterval.milliseconds(300)

    /// Starts watching `folders`; the reason when inotify cannot watch one of them.
    static func start(folders: [URL], changed: @escaping @Sendable () -> Void) -> Result<ManifestWatcher, WatchError> {
        let descriptor = inotify_init1(Int32(IN_NONBLOCK | IN_CLOEXEC))
        guard descriptor >= 0 else { return .failure(WatchError(reason: "inotify_init1 failed: errno \(errno)")) }
        let mask = UInt32(IN_CLOSE_WRITE | IN_MOVED_TO | IN_MOVED_FROM | IN_DELETE | IN_CREATE | IN_ATTRIB)
        for folder in folders where inotify_add_watch(descriptor, folder.path, mask) < 0 {
            let error = errno
            close(descriptor)
            return .failure(WatchError(reason: "cannot watch \(folder.path): errno \(error)"))
        }
        return .success(ManifestWatcher(descriptor: descriptor, changed: changed))
    }

    struct WatchError: Error {
        var reason: String
    }

    private let pending = PendingReload()

    private init(descriptor: Int32, changed: @escaping @Sendable () -> Void) {
        source = DispatchSource.makeReadSource(fileDescriptor: descriptor, queue: queue)
        let pending = self.pending
        let queue = self.queue
        source.setEventHandler {
            // Drain the events; which files changed does not matter: the folder is read again.
            var buffer = [UInt8](repeating: 0, count: 4096)
            while read(descriptor, &buffer, buffer.count) > 0 {}
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
}

/// The reload waiting for events to settle. Touched only on the watcher's queue.
private final class PendingReload: @unchecked Sendable {
    var item: DispatchWorkItem?
}
