import AtriumTransfers
import AtriumValues
import CAtriumPlugin
import Dispatch
import Foundation
import Logging
import NIOCore
import Synchronization

/// A plugin library loaded into the host's process: its descriptor, its instance and the
/// host table it was given. The C ABI meets the seam here: calls from the host arrive as
/// ``ServiceBackend`` calls and go to the descriptor's callbacks; the plugin's calls into
/// its table arrive through ``HostTable`` and go to the host's side of the seam.
///
/// Thread rules: every callback into the plugin goes through ``BackendQueues`` (a serial
/// queue of the plugin's own), never a network thread. Requests of a plugin that may be
/// called concurrently (ATRIUM_PLUGIN_CONCURRENT, or `concurrent` in its manifest) go
/// through a concurrent queue; and `request` of a plugin that promises never to block
/// (ATRIUM_PLUGIN_NONBLOCKING as well) is called where the request arrived.
/// The stored properties never change after `create`, so the object may be shared freely.
final class InProcessPlugin: ServiceBackend, @unchecked Sendable {
    let package: String
    /// The manifest's `config`, as JSON text, for `create`.
    let config: String
    /// The host's copy of the plugin's descriptor (PluginLibrary.open): this object owns it.
    let descriptor: UnsafePointer<atrium_plugin>
    let queues: BackendQueues
    let table: UnsafeMutablePointer<atrium_host_api>
    let logger: Logger
    private(set) var instance: UnsafeMutableRawPointer?
    /// Whether `request` may be called on the network thread (the plugin promised, with
    /// ATRIUM_PLUGIN_CONCURRENT and ATRIUM_PLUGIN_NONBLOCKING, that it never blocks there).
    let requestsInline: Bool
    /// Marks each plugin's queue with its instance, so that a call can tell it is already on it.
    static let queueKey = DispatchSpecificKey<ObjectIdentifier>()
    /// The host, for the table's functions. Set before `create` and never changed.
    unowned let host: any BackendHost

    /// How many exist, loaded or retired by a reload and not yet freed (`host.status`).
    static let live = Atomic<Int>(0)

    /// In a worker process too, a nonblocking `request` is called where the request arrived:
    /// on the thread that reads the host's socket, from which the worker's host refuses the
    /// calls that would wait for the host's reply (see ``WorkerHost``).
    init(
        package: String, config: String, concurrent: Bool, descriptor: UnsafePointer<atrium_plugin>,
        host: any BackendHost, logger: Logger
    ) {
        Self.live.wrappingAdd(1, ordering: .relaxed)
        self.package = package
        self.config = config
        self.descriptor = descriptor
        self.host = host
        var logger = logger
        logger[metadataKey: "package"] = .string(package)
        self.logger = logger
        let flags = descriptor.pointee.flags
        requestsInline =
            flags & UInt64(ATRIUM_PLUGIN_CONCURRENT) != 0
            && flags & UInt64(ATRIUM_PLUGIN_NONBLOCKING) != 0
        queues = BackendQueues(
            package: package, concurrent: concurrent || flags & UInt64(ATRIUM_PLUGIN_CONCURRENT) != 0)
        table = UnsafeMutablePointer<atrium_host_api>.allocate(capacity: 1)
        table.initialize(to: HostTable.make())
        table.pointee.host_data = nil
        queues.queue.setSpecific(key: Self.queueKey, value: ObjectIdentifier(self))
    }

    /// Calls the plugin's `create` with the manifest's config, on its queue.
    func create() throws(PluginLoadError) {
        table.pointee.host_data = Unmanaged.passUnretained(self).toOpaque()
        let create = descriptor.pointee.create!
        let config = self.config
        let (status, created) = queues.queue.sync { () -> (Int32, UnsafeMutableRawPointer?) in
            var created: UnsafeMutableRawPointer?
            let status = config.withCString { create(table, $0, &created) }
            return (status, created)
        }
        guard status == ATRIUM_OK else {
            throw PluginLoadError(reason: "the plugin's create() returned \(status)")
        }
        instance = created
    }

    /// The instance for the table's host functions to find.
    static func from(_ api: UnsafePointer<atrium_host_api>?) -> InProcessPlugin? {
        guard let data = api?.pointee.host_data else { return nil }
        return Unmanaged<InProcessPlugin>.fromOpaque(data).takeUnretainedValue()
    }

    /// Whether the calling thread is running one of this plugin's serial callbacks.
    var isOnOwnQueue: Bool {
        DispatchQueue.getSpecific(key: Self.queueKey) == ObjectIdentifier(self)
    }

    /// Set on the plugin's queue just before `destroy`: calls that reach the queue later (a
    /// reload retired the plugin while they were on their way) are answered by the host and
    /// never reach the destroyed instance.
    private let destroyed = Atomic<Bool>(false)

    private var isDestroyed: Bool { destroyed.load(ordering: .sequentiallyConsistent) }

    /// Requests being delivered inline (on a network thread, outside the queues): `destroy`
    /// waits for them to return, as the queues' drain cannot.
    private let inlineCalls = Atomic<Int>(0)

    /// How many of the plugin's serial callbacks are waiting for a launch they made (at most
    /// one: the queue is serial). While one is, the plugin's queue cannot run a launch
    /// callback, so a launch into the plugin is refused at once: a cycle of plugins
    /// launching each other's schemes ends at its first step back, not at a timeout.
    private let launchesWaitingOnQueue = Atomic<Int>(0)

    /// Runs `body`, a launch the plugin made, noting when it blocks the plugin's own queue.
    func whileLaunching<Result>(_ body: () -> Result) -> Result {
        guard isOnOwnQueue else { return body() }
        launchesWaitingOnQueue.wrappingAdd(1, ordering: .sequentiallyConsistent)
        defer { launchesWaitingOnQueue.wrappingSubtract(1, ordering: .sequentiallyConsistent) }
        return body()
    }

    // MARK: ServiceBackend: calls into the plugin, each on the plugin's queue.

    func open(_ channel: ChannelInfo, completion: @escaping @Sendable (AppServiceConnectionStatus) -> Void) {
        queues.queue.async {
            guard !self.isDestroyed else {
                completion(.appUnavailable)
                return
            }
            guard self.descriptor.has(\.open), let open = self.descriptor.pointee.open else {
                completion(.success)
                return
            }
            let status = channel.service.withCString { service in
                channel.clientId.withCString { clientId in
                    withOptionalCString(channel.clientName) { clientName in
                        var info = atrium_channel_info(
                            struct_size: UInt32(MemoryLayout<atrium_channel_info>.size),
                            is_remote: channel.isRemote ? 1 : 0,
                            channel: channel.id,
                            service: service,
                            client_id: clientId,
                            client_name: clientName
                        )
                        return open(self.instance, &info)
                    }
                }
            }
            guard let checked = AppServiceConnectionStatus(checking: status) else {
                self.logger.warning(
                    "the plugin answered open with \(status), which is not an AppServiceConnectionStatus; refused as Unknown (4)"
                )
                completion(.unknown)
                return
            }
            completion(checked)
        }
    }

    /// The message bytes are read in place, not copied.
    func request(_ request: UInt64, on channel: UInt64, message: ByteBuffer) {
        if requestsInline {
            // Counted before the check of `destroyed`, which `destroy` sets before it waits
            // for the count to fall to zero: a request is delivered before destroy, or not at all.
            inlineCalls.wrappingAdd(1, ordering: .sequentiallyConsistent)
            defer { inlineCalls.wrappingSubtract(1, ordering: .sequentiallyConsistent) }
            deliver(request, on: channel, message: message)
            return
        }
        queues.submit(request, of: self, host: host) { self.deliver(request, on: channel, message: message) }
    }

    private func deliver(_ request: UInt64, on channel: UInt64, message: ByteBuffer) {
        guard !isDestroyed else {
            host.answer(request, status: .appUnavailable, error: "package \(package) was stopped")
            return
        }
        guard descriptor.has(\.request), let callback = descriptor.pointee.request else {
            host.answer(request, status: .failure, error: "the service does not take requests")
            return
        }
        message.withUnsafeReadableBytes { bytes in
            callback(instance, channel, request, bytes.baseAddress?.assumingMemoryBound(to: UInt8.self), bytes.count)
        }
    }

    func response(to request: UInt64, on channel: UInt64, status: AppServiceResponseStatus, message: ByteBuffer?) {
        queues.queue.async {
            guard !self.isDestroyed, self.descriptor.has(\.response), let callback = self.descriptor.pointee.response
            else { return }
            let bytes = message ?? ByteBuffer(bytes: [0xa0])
            bytes.withUnsafeReadableBytes { raw in
                callback(
                    self.instance, channel, request, status.int32Value,
                    raw.baseAddress?.assumingMemoryBound(to: UInt8.self), raw.count
                )
            }
        }
    }

    /// A finished upload, on the plugin's queue; the plugin owns the descriptor from here.
    func upload(_ delivery: UploadDelivery) -> DeliveryVerdict {
        guard descriptor.has(\.upload), let callback = descriptor.pointee.upload else {
            return .refused("package \(package) takes no uploads (its plugin has no upload callback)")
        }
        queues.queue.async {
            guard !self.isDestroyed else {
                close(delivery.descriptor)
                self.host.deliveryDropped(delivery.delivery)
                return
            }
            withOptionalCString(delivery.name) { name in
                delivery.service.withCString { service in
                    var info = atrium_upload_info()
                    info.struct_size = UInt32(MemoryLayout<atrium_upload_info>.size)
                    info.fd = delivery.descriptor
                    info.delivery = delivery.delivery
                    info.size = delivery.size
                    info.name = name
                    info.service = service
                    withUnsafeMutableBytes(of: &info.transfer) { out in
                        withUnsafeBytes(of: delivery.transfer.uuid.uuid) { out.copyMemory(from: $0) }
                    }
                    withUnsafeMutableBytes(of: &info.digest) { out in
                        if delivery.digest.count == 32 { delivery.digest.withUnsafeBytes { out.copyMemory(from: $0) } }
                    }
                    callback(self.instance, &info)
                }
            }
        }
        return .taken
    }

    func transferEnded(_ transfer: TransferID, why: String) {
        queues.queue.async {
            guard !self.isDestroyed, self.descriptor.has(\.transfer_ended),
                let callback = self.descriptor.pointee.transfer_ended
            else { return }
            var id = transfer.uuid.uuid
            withUnsafeBytes(of: &id) { bytes in
                why.withCString { callback(self.instance, bytes.baseAddress?.assumingMemoryBound(to: UInt8.self), $0) }
            }
        }
    }

    func closed(channel: UInt64, status: AppServiceClosedStatus, by closer: ChannelCloser) {
        queues.queue.async {
            guard !self.isDestroyed, self.descriptor.has(\.closed), let callback = self.descriptor.pointee.closed
            else { return }
            callback(self.instance, channel, status.int32Value, closer.rawValue)
        }
    }

    /// A plugin that launches its own scheme from inside one of its own serial callbacks
    /// would wait on itself: that is refused at once rather than deadlocking (or, as `sync`
    /// onto the current queue does, trapping). A cycle through other plugins ends at the
    /// host's timeout.
    func launch(_ launch: LaunchInfo, completion: @escaping @Sendable (LaunchOutcome) -> Void) {
        guard descriptor.has(\.launch), let callback = descriptor.pointee.launch else {
            completion(
                LaunchOutcome(status: .protocolUnavailable, error: "package \"\(package)\" does not take launches"))
            return
        }
        if isOnOwnQueue {
            completion(
                LaunchOutcome(
                    status: .deniedByLocalSystem,
                    error:
                        "package \"\(package)\" launched its own scheme from inside one of its callbacks, where it would wait on itself"
                ))
            return
        }
        if launchesWaitingOnQueue.load(ordering: .sequentiallyConsistent) > 0 {
            completion(
                LaunchOutcome(
                    status: .deniedByLocalSystem,
                    error:
                        "package \"\(package)\" is waiting for a launch it made from one of its callbacks; a launch into it now would wait on itself"
                ))
            return
        }
        queues.queue.async {
            guard !self.isDestroyed else {
                completion(
                    LaunchOutcome(status: .appUnavailable, error: "package \"\(self.package)\" was stopped"))
                return
            }
            let status = launch.uri.withCString { uri in
                launch.clientId.withCString { clientId in
                    withOptionalBytes(launch.data) { bytes, count in
                        var info = atrium_launch_info(
                            struct_size: UInt32(MemoryLayout<atrium_launch_info>.size),
                            is_remote: launch.isRemote ? 1 : 0,
                            uri: uri,
                            data: bytes,
                            data_length: count,
                            client_id: clientId
                        )
                        return callback(self.instance, &info)
                    }
                }
            }
            guard let checked = RemoteLaunchUriStatus(checking: status) else {
                self.logger.warning("the plugin answered a launch with \(status), which is not a RemoteLaunchUriStatus")
                completion(
                    LaunchOutcome(
                        status: .unknown,
                        error: "package \"\(self.package)\" answered the launch with an invalid status (\(status))"))
                return
            }
            completion(
                LaunchOutcome(
                    status: checked,
                    error: checked == .success ? nil : "package \"\(self.package)\" answered \(checked)"))
        }
    }

    /// The host table lives until `destroy` has returned (the ABI's promise); after that, with
    /// the plugin gone, it goes too. A plugin never destroyed (its `create` failed, or it was
    /// still busy when the host stopped waiting) may still hold it: it is then kept.
    deinit {
        Self.live.wrappingSubtract(1, ordering: .relaxed)
        // The host's own copy (PluginLibrary.copy), which nothing but this object reads.
        descriptor.deallocate()
        guard isDestroyed else {
            Self.kept.withLock { $0.append((UnsafeMutableRawPointer(table), instance)) }
            return
        }
        table.deinitialize(count: 1)
        table.deallocate()
    }

    /// The tables (and instances) of plugins never destroyed, kept on purpose for as long as
    /// the process runs: the plugin may still call into its table.
    private static let kept = Mutex<[(table: UnsafeMutableRawPointer, instance: UnsafeMutableRawPointer?)]>([])

    /// Calls `destroy` once the plugin's queues are idle, after which the plugin is never
    /// called again.
    func shutDown(within timeout: Duration) -> Bool {
        queues.drain(within: timeout) {
            guard !self.destroyed.exchange(true, ordering: .sequentiallyConsistent) else { return }
            // Inline requests that passed the check before the flag was set finish first (a
            // nonblocking request returns within microseconds).
            while self.inlineCalls.load(ordering: .sequentiallyConsistent) > 0 { usleep(50) }
            if self.descriptor.has(\.destroy), let destroy = self.descriptor.pointee.destroy {
                destroy(self.instance)
            }
        }
    }
}

func withOptionalCString<Result>(_ text: String?, _ body: (UnsafePointer<CChar>?) -> Result) -> Result {
    guard let text else { return body(nil) }
    return text.withCString { body($0) }
}

func withOptionalBytes<Result>(_ bytes: [UInt8]?, _ body: (UnsafePointer<UInt8>?, Int) -> Result) -> Result {
    guard let bytes else { return body(nil, 0) }
    return bytes.withUnsafeBufferPointer { body($0.baseAddress, $0.count) }
}
