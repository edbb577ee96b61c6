import AtriumValues
import CAtriumPlugin
import Dispatch
import Foundation
import Logging
import NIOCore
import Synchronization

/// A loaded plugin: its descriptor, its instance, the host table it was given, and the
/// queue its callbacks run on.
///
/// Thread rules: every callback into the plugin goes through ``queue``, a serial queue of
/// the plugin's own (so a callback that blocks holds up only this plugin), never a network
/// thread. Requests of a plugin that may be called concurrently (ATRIUM_PLUGIN_CONCURRENT, or
/// `concurrent` in its manifest) go through ``requestQueue``, a concurrent one; and `request`
/// of a plugin that promises never to block (ATRIUM_PLUGIN_NONBLOCKING) is called where the
/// request arrived.
/// The stored properties never change after `create`, so the object may be shared freely.
final class PluginInstance: @unchecked Sendable {
    let manifest: Manifest
    let descriptor: UnsafePointer<atrium_plugin>
    let queue: DispatchQueue
    let requestQueue: DispatchQueue
    let table: UnsafeMutablePointer<atrium_host_api>
    let logger: Logger
    private(set) var instance: UnsafeMutableRawPointer?
    /// Whether `request` may be called on the network thread (the plugin promised, with
    /// ATRIUM_PLUGIN_CONCURRENT and ATRIUM_PLUGIN_NONBLOCKING, that it never blocks there).
    let requestsInline: Bool
    /// Marks each plugin's queue with its instance, so that a call can tell it is already on it.
    static let queueKey = DispatchSpecificKey<ObjectIdentifier>()
    /// The host, for the table's functions. Set before `create` and never changed.
    unowned let core: HostCore

    var package: String { manifest.package }

    /// `queue`: one to share (declared functions of one library share its serial queue);
    /// by default the plugin gets its own.
    init(
        manifest: Manifest,
        descriptor: UnsafePointer<atrium_plugin>,
        core: HostCore,
        logger: Logger,
        queue shared: DispatchQueue? = nil
    ) {
        self.manifest = manifest
        self.descriptor = descriptor
        self.core = core
        var logger = logger
        logger[metadataKey: "package"] = .string(manifest.package)
        self.logger = logger
        let flags = descriptor.pointee.flags
        let concurrent = manifest.concurrent || flags & UInt64(ATRIUM_PLUGIN_CONCURRENT) != 0
        requestsInline =
            flags & UInt64(ATRIUM_PLUGIN_CONCURRENT) != 0 && flags & UInt64(ATRIUM_PLUGIN_NONBLOCKING) != 0
        queue = shared ?? DispatchQueue(label: "atrium.plugin.\(manifest.package)")
        requestQueue =
            concurrent
            ? DispatchQueue(label: "atrium.plugin.\(manifest.package).requests", attributes: .concurrent) : queue
        table = UnsafeMutablePointer<atrium_host_api>.allocate(capacity: 1)
        table.initialize(to: HostAPI.makeTable())
        table.pointee.host_data = nil
        if shared == nil { queue.setSpecific(key: Self.queueKey, value: ObjectIdentifier(self)) }
    }

    /// Calls the plugin's `create` with the manifest's config, on its queue.
    func create() throws(PluginLoadError) {
        table.pointee.host_data = Unmanaged.passUnretained(self).toOpaque()
        let create = descriptor.pointee.create!
        let config = manifest.configJSON
        let (status, created) = queue.sync { () -> (Int32, UnsafeMutableRawPointer?) in
            var created: UnsafeMutableRawPointer?
            let status = config.withCString { create(table, $0, &created) }
            return (status, created)
        }
        guard status == ATRIUM_OK else {
            throw PluginLoadError(reason: "the plugin's create() returned \(status)")
        }
        instance = created
    }

    /// Starts a built-in plugin (declared functions) whose instance the host made itself.
    func start(builtIn instance: UnsafeMutableRawPointer) {
        table.pointee.host_data = Unmanaged.passUnretained(self).toOpaque()
        self.instance = instance
    }

    /// The instance for the table's host functions to find.
    static func from(_ api: UnsafePointer<atrium_host_api>?) -> PluginInstance? {
        guard let data = api?.pointee.host_data else { return nil }
        return Unmanaged<PluginInstance>.fromOpaque(data).takeUnretainedValue()
    }

    // MARK: Calls into the plugin, each on the plugin's queue.

    /// Asks the plugin whether to accept a channel; `completion` gets its status.
    func open(
        channel: UInt64,
        service: String,
        clientId: String,
        clientName: String?,
        isRemote: Bool,
        completion: @escaping @Sendable (AppServiceConnectionStatus) -> Void
    ) {
        queue.async {
            guard self.descriptor.has(\.open), let open = self.descriptor.pointee.open else {
                completion(.success)
                return
            }
            let status = service.withCString { service in
                clientId.withCString { clientId in
                    withOptionalCString(clientName) { clientName in
                        var info = atrium_channel_info(
                            struct_size: UInt32(MemoryLayout<atrium_channel_info>.size),
                            is_remote: isRemote ? 1 : 0,
                            channel: channel,
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

    /// Hands a request to the plugin. The message bytes are read in place, not copied.
    ///
    /// A plugin that has stopped taking its work off its queue (blocked, or slow) gets at most
    /// `maxQueued` requests waiting there; the rest are answered with status 2 at once. A
    /// request that was answered while it waited (by the timeout, or because its channel
    /// closed) is dropped rather than delivered.
    func request(channel: UInt64, request: UInt64, message: ByteBuffer) {
        if requestsInline {
            deliver(channel: channel, request: request, message: message)
            return
        }
        let limit = core.admission.maxQueuedPerService
        guard queued.wrappingAdd(1, ordering: .relaxed).oldValue < limit else {
            queued.wrappingSubtract(1, ordering: .relaxed)
            core.breaches.record(
                "service queue full",
                "package \(package) has \(limit) requests waiting, its limit (--max-queued-per-service)")
            core.answer(
                request, from: self, status: .resourceLimitsExceeded, message: nil,
                error: "the service has \(limit) requests waiting; try again later")
            return
        }
        requestQueue.async {
            self.queued.wrappingSubtract(1, ordering: .relaxed)
            guard self.core.isPending(request) else { return }
            self.deliver(channel: channel, request: request, message: message)
        }
    }

    /// Requests on ``requestQueue`` not yet handed to the plugin.
    private let queued = Atomic<Int>(0)

    private func deliver(channel: UInt64, request: UInt64, message: ByteBuffer) {
        guard descriptor.has(\.request), let callback = descriptor.pointee.request else {
            core.answer(
                request, from: self, status: .failure, message: nil, error: "the service does not take requests")
            return
        }
        message.withUnsafeReadableBytes { bytes in
            callback(instance, channel, request, bytes.baseAddress?.assumingMemoryBound(to: UInt8.self), bytes.count)
        }
    }

    /// Hands the plugin a client's answer to a message the plugin sent.
    func response(channel: UInt64, request: UInt64, status: AppServiceResponseStatus, message: ByteBuffer?) {
        queue.async {
            guard self.descriptor.has(\.response), let callback = self.descriptor.pointee.response else { return }
            let bytes = message ?? ByteBuffer(bytes: [0xa0])
            bytes.withUnsafeReadableBytes { raw in
                callback(
                    self.instance, channel, request, status.int32Value,
                    raw.baseAddress?.assumingMemoryBound(to: UInt8.self), raw.count
                )
            }
        }
    }

    /// Tells the plugin a channel is closed.
    func closed(channel: UInt64, status: AppServiceClosedStatus, by closer: Int32) {
        queue.async {
            guard self.descriptor.has(\.closed), let callback = self.descriptor.pointee.closed else { return }
            callback(self.instance, channel, status.int32Value, closer)
        }
    }

    /// Asks the plugin to handle a launch, waiting up to `timeout` for its answer (call off the
    /// event loop). A plugin that launches its own scheme from inside one of its own serial
    /// callbacks would wait on itself: that is refused at once rather than deadlocking (or, as
    /// `sync` onto the current queue does, trapping). A cycle through other plugins ends
    /// at the timeout.
    func launch(uri: String, data: [UInt8]?, clientId: String, isRemote: Bool, timeout: Duration)
        -> LaunchOutcome
    {
        guard descriptor.has(\.launch), let callback = descriptor.pointee.launch else {
            return LaunchOutcome(status: .protocolUnavailable, error: "package \"\(package)\" does not take launches")
        }
        if DispatchQueue.getSpecific(key: Self.queueKey) == ObjectIdentifier(self) {
            return LaunchOutcome(
                status: .deniedByLocalSystem,
                error:
                    "package \"\(package)\" launched its own scheme from inside one of its callbacks, where it would wait on itself"
            )
        }
        let result = Mutex<Int32?>(nil)
        let done = DispatchSemaphore(value: 0)
        queue.async {
            let status = uri.withCString { uri in
                clientId.withCString { clientId in
                    withOptionalBytes(data) { bytes, count in
                        var info = atrium_launch_info(
                            struct_size: UInt32(MemoryLayout<atrium_launch_info>.size),
                            is_remote: isRemote ? 1 : 0,
                            uri: uri,
                            data: bytes,
                            data_length: count,
                            client_id: clientId
                        )
                        return callback(self.instance, &info)
                    }
                }
            }
            result.withLock { $0 = status }
            done.signal()
        }
        let seconds = Double(timeout.components.seconds) + Double(timeout.components.attoseconds) / 1e18
        guard done.wait(timeout: .now() + seconds) == .success, let status = result.withLock({ $0 }) else {
            return LaunchOutcome(
                status: .unknown,
                error: "package \"\(package)\" did not answer the launch within \(describe(timeout))"
            )
        }
        guard let checked = RemoteLaunchUriStatus(checking: status) else {
            logger.warning("the plugin answered a launch with \(status), which is not a RemoteLaunchUriStatus")
            return LaunchOutcome(
                status: .unknown, error: "package \"\(package)\" answered the launch with an invalid status (\(status))"
            )
        }
        return LaunchOutcome(
            status: checked, error: checked == .success ? nil : "package \"\(package)\" answered \(checked)")
    }

    /// Calls `destroy` once the plugin's queues are idle, after which the plugin is never
    /// called again. Waits at most `timeout`: a plugin stuck in a callback does not hold up
    /// the host's exit (it returns false, and `destroy` is left for the queues to reach).
    @discardableResult
    func destroy(within timeout: Duration) -> Bool {
        let done = DispatchSemaphore(value: 0)
        requestQueue.async(flags: .barrier) {
            self.queue.async {
                self.callDestroy()
                done.signal()
            }
        }
        let seconds = Double(timeout.components.seconds) + Double(timeout.components.attoseconds) / 1e18
        return done.wait(timeout: .now() + seconds) == .success
    }

    private func callDestroy() {
        if descriptor.has(\.destroy), let destroy = descriptor.pointee.destroy {
            destroy(instance)
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
