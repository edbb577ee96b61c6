import AtriumValues
import CAtriumPlugin
import Dispatch
import Synchronization

#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

/// Builds the C descriptor for `service` and returns it, for the plugin's exported entry:
///
/// ```swift
/// @_cdecl("atrium_plugin_entry_v1")
/// public func atriumPluginEntry() -> UnsafeRawPointer { exportAppService(MyService.self) }
/// ```
///
/// The descriptor is made once and lives for the life of the process.
public func exportAppService(_ service: any AppService.Type, name: String? = nil, version: String = "1.0.0")
    -> UnsafeRawPointer
{
    exported.withLock { state in
        if let descriptor = state.descriptor { return UnsafeRawPointer(descriptor) }
        state.serviceType = service
        let descriptor = UnsafeMutablePointer<atrium_plugin>.allocate(capacity: 1)
        descriptor.initialize(to: atrium_plugin())
        descriptor.pointee.struct_size = UInt32(MemoryLayout<atrium_plugin>.size)
        descriptor.pointee.abi_major = UInt16(ATRIUM_PLUGIN_ABI_MAJOR)
        descriptor.pointee.abi_minor = UInt16(ATRIUM_PLUGIN_ABI_MINOR)
        descriptor.pointee.name = UnsafePointer(strdup(name ?? String(describing: service)))
        descriptor.pointee.version = UnsafePointer(strdup(version))
        // Swift services are async and guard their own state: the host may call at once.
        // And `request` only decodes the message and starts a task on the plugin's executor,
        // never waiting: the host may call it where the request arrived, saving a hop to the
        // plugin's queue before the hop to its executor.
        descriptor.pointee.flags = UInt64(ATRIUM_PLUGIN_CONCURRENT) | UInt64(ATRIUM_PLUGIN_NONBLOCKING)
        descriptor.pointee.create = pluginCreate
        descriptor.pointee.destroy = pluginDestroy
        descriptor.pointee.open = pluginOpen
        descriptor.pointee.request = pluginRequest
        descriptor.pointee.response = pluginResponse
        descriptor.pointee.closed = pluginClosed
        descriptor.pointee.launch = pluginLaunch
        descriptor.pointee.upload = pluginUpload
        descriptor.pointee.transfer_ended = pluginTransferEnded
        state.descriptor = descriptor
        return UnsafeRawPointer(descriptor)
    }
}

struct ExportedState: @unchecked Sendable {
    var serviceType: (any AppService.Type)?
    var descriptor: UnsafeMutablePointer<atrium_plugin>?
}

let exported = Mutex(ExportedState())

/// Where a plugin's tasks run: a serial queue of its own, never Swift's shared cooperative
/// pool. A service that blocks a thread (a lock, a `sleep`, synchronous I/O) then holds up
/// only itself; on the shared pool, which has a thread per core, two such calls would stop
/// every Swift plugin in the host, and the host's own shutdown with them.
final class PluginExecutor: TaskExecutor, @unchecked Sendable {
    let queue: DispatchQueue
    private static let key = DispatchSpecificKey<ObjectIdentifier>()

    init(label: String) {
        queue = DispatchQueue(label: label)
        queue.setSpecific(key: Self.key, value: ObjectIdentifier(self))
    }

    /// Whether the calling thread is running this executor's queue.
    var isCurrent: Bool { DispatchQueue.getSpecific(key: Self.key) == ObjectIdentifier(self) }

    func enqueue(_ job: consuming ExecutorJob) {
        let job = UnownedJob(job)
        let executor = asUnownedTaskExecutor()
        queue.async { job.runSynchronously(on: executor) }
    }
}

/// The plugin side of one loaded instance: the service, the host's table, and the answers
/// awaited for messages sent to clients.
final class PluginRuntime: Sendable {
    let table: HostTable
    let service: any AppService
    let awaiting = Mutex(Awaiting())
    let executor: PluginExecutor
    /// The service's ``AppService/requestsNeverBlock``: requests start where they arrive.
    let requestsInline: Bool

    /// Runs `body` as a task on the plugin's own executor.
    func run(_ body: @escaping @Sendable () async -> Void) {
        Task(executorPreference: executor) { await body() }
    }

    /// Whether a call into the host that may wait for it (`send`, `close_channel`: in a worker
    /// process they wait for the host's reply) must be made on the plugin's queue: a request
    /// started inline may be on the host's network thread, the one that reads that reply.
    var hostCallsNeedOwnQueue: Bool { requestsInline && !executor.isCurrent }

    /// Runs `body` as a task that starts on the calling thread, until its first suspension,
    /// when the service never blocks in `request`; otherwise as `run` does.
    func runRequest(_ body: @escaping @Sendable () async -> Void) {
        guard requestsInline else { return run(body) }
        Task.immediate(executorPreference: executor) { await body() }
    }

    struct Awaiting {
        var continuations: [UInt64: CheckedContinuation<ServiceResponse, any Error>] = [:]
        /// Answers that arrived before their sender started waiting.
        var early: [UInt64: ServiceResponse] = [:]
    }

    init(table: HostTable, service: any AppService, executor: PluginExecutor) {
        self.table = table
        self.service = service
        self.executor = executor
        requestsInline = service.requestsNeverBlock
    }

    func send(_ message: ValueSet, on channel: UInt64) async throws -> ServiceResponse {
        let bytes = message.cborBytes()
        let table = self.table
        let call = { @Sendable () -> (Int32, UInt64) in
            var requestId: UInt64 = 0
            let result = bytes.withUnsafeBufferPointer {
                table.api.pointee.send(table.api, channel, $0.baseAddress, $0.count, &requestId)
            }
            return (result, requestId)
        }
        let (result, requestId): (Int32, UInt64)
        if hostCallsNeedOwnQueue {
            // The call itself runs on the plugin's queue. (Moving the task there first is not
            // enough: a continuation resumed before its task has suspended lets the task go on
            // where it was.)
            (result, requestId) = await withCheckedContinuation { continuation in
                executor.queue.async { continuation.resume(returning: call()) }
            }
        } else {
            (result, requestId) = call()
        }
        guard result == ATRIUM_OK else {
            throw ServiceChannelError(code: result, description: "the host refused the message (code \(result))")
        }
        return try await withCheckedThrowingContinuation { continuation in
            let early = awaiting.withLock { awaiting -> ServiceResponse? in
                if let answer = awaiting.early.removeValue(forKey: requestId) { return answer }
                awaiting.continuations[requestId] = continuation
                return nil
            }
            if let early { continuation.resume(returning: early) }
        }
    }

    func deliver(_ response: ServiceResponse, for requestId: UInt64) {
        let continuation = awaiting.withLock { awaiting -> CheckedContinuation<ServiceResponse, any Error>? in
            if let continuation = awaiting.continuations.removeValue(forKey: requestId) { return continuation }
            awaiting.early[requestId] = response
            return nil
        }
        continuation?.resume(returning: response)
    }

    @discardableResult
    func respond(_ request: UInt64, _ response: ServiceResponse) -> Bool {
        let bytes = response.message.cborBytes()
        let status = response.status.int32Value
        let result = bytes.withUnsafeBufferPointer { buffer in
            if let error = response.error {
                return table.api.pointee.respond(table.api, request, status, buffer.baseAddress, buffer.count, error)
            }
            return table.api.pointee.respond(table.api, request, status, buffer.baseAddress, buffer.count, nil)
        }
        if result != ATRIUM_OK && result != ATRIUM_E_UNKNOWN_REQUEST {
            table.log(Int32(ATRIUM_LOG_WARNING), "the host refused the answer to request \(request) (code \(result))")
        }
        return result == ATRIUM_OK
    }
}

/// A `PluginRuntime` that can be stored in `ServiceChannel` values.
struct PluginRuntimeReference: Sendable {
    let value: PluginRuntime
}

func runtime(_ instance: UnsafeMutableRawPointer?) -> PluginRuntime {
    Unmanaged<PluginRuntime>.fromOpaque(instance!).takeUnretainedValue()
}

/// Runs `body` as a task on the plugin's executor and blocks this (host plugin-queue) thread
/// until it returns. Used for the callbacks whose answer the C ABI wants at once; the host
/// never calls them on a network thread or a Swift concurrency thread, and the task does not
/// run on Swift's shared pool either.
func waitFor<T: Sendable>(_ runtime: PluginRuntime, _ body: @escaping @Sendable () async -> T) -> T {
    let semaphore = DispatchSemaphore(value: 0)
    let result = Mutex<T?>(nil)
    runtime.run {
        let value = await body()
        result.withLock { $0 = value }
        semaphore.signal()
    }
    semaphore.wait()
    return result.withLock { $0! }
}

let pluginCreate:
    @convention(c) (
        UnsafePointer<atrium_host_api>?, UnsafePointer<CChar>?, UnsafeMutablePointer<UnsafeMutableRawPointer?>?
    ) -> Int32 = { api, config, instance in
        guard let api, let instance, let type = exported.withLock({ $0.serviceType }) else {
            return ATRIUM_E_INVALID_ARGUMENT
        }
        let table = HostTable(api: api)
        let host = ServiceHost(table: table, configJSON: config.map { String(cString: $0) } ?? "{}")
        do {
            let service = try type.init(host: host)
            let executor = PluginExecutor(label: "atrium.pluginkit.\(String(describing: type))")
            instance.pointee = Unmanaged.passRetained(PluginRuntime(table: table, service: service, executor: executor))
                .toOpaque()
            return ATRIUM_OK
        } catch {
            table.log(Int32(ATRIUM_LOG_ERROR), "could not start: \(error)")
            return ATRIUM_E_INVALID_ARGUMENT
        }
    }

let pluginDestroy: @convention(c) (UnsafeMutableRawPointer?) -> Void = { instance in
    guard let instance else { return }
    Unmanaged<PluginRuntime>.fromOpaque(instance).release()
}

func channel(_ runtime: PluginRuntime, _ info: UnsafePointer<atrium_channel_info>) -> ServiceChannel {
    ServiceChannel(
        id: info.pointee.channel,
        service: String(cString: info.pointee.service),
        clientId: String(cString: info.pointee.client_id),
        clientName: info.pointee.client_name.map { String(cString: $0) },
        isRemote: info.pointee.is_remote != 0,
        runtime: PluginRuntimeReference(value: runtime)
    )
}

/// Channels the service has accepted, so that later callbacks (which carry only the id)
/// can hand the service the same `ServiceChannel`.
let openChannels = Mutex<[UInt64: ServiceChannel]>([:])

let pluginOpen: @convention(c) (UnsafeMutableRawPointer?, UnsafePointer<atrium_channel_info>?) -> Int32 = {
    instance, info in
    guard let info else { return Int32(ATRIUM_OPEN_UNKNOWN) }
    let runtime = runtime(instance)
    let channel = channel(runtime, info)
    let status = waitFor(runtime) { await runtime.service.open(channel) }
    if status == .success {
        openChannels.withLock { $0[channel.id] = channel }
    }
    return status.int32Value
}

let pluginRequest: @convention(c) (UnsafeMutableRawPointer?, UInt64, UInt64, UnsafePointer<UInt8>?, Int) -> Void = {
    instance, channelId, request, bytes, length in
    let runtime = runtime(instance)
    let decoded = Result { () throws(ValueSetError) -> ValueSet in
        try ValueSet(cbor: UnsafeRawBufferPointer(start: bytes, count: length))
    }
    guard let channel = openChannels.withLock({ $0[channelId] }) else {
        runtime.respond(request, .failure("channel \(channelId) is not open"))
        return
    }
    runtime.runRequest {
        do {
            let message = try decoded.get()
            let response = try await runtime.service.request(
                ServiceRequest(
                    message: message, channel: channel, id: request, runtime: PluginRuntimeReference(value: runtime))
            )
            if !response.isDeferred { runtime.respond(request, response) }
        } catch {
            runtime.respond(request, .failure(String(describing: error)))
        }
    }
}

let pluginResponse:
    @convention(c) (UnsafeMutableRawPointer?, UInt64, UInt64, Int32, UnsafePointer<UInt8>?, Int) -> Void = {
        instance, _, request, status, bytes, length in
        let runtime = runtime(instance)
        let message = (try? ValueSet(cbor: UnsafeRawBufferPointer(start: bytes, count: length))) ?? [:]
        runtime.deliver(
            ServiceResponse(status: AppServiceResponseStatus(rawValue: Int(status)), message: message), for: request)
    }

let pluginClosed: @convention(c) (UnsafeMutableRawPointer?, UInt64, Int32, Int32) -> Void = {
    instance, channelId, status, _ in
    let runtime = runtime(instance)
    guard let channel = openChannels.withLock({ $0.removeValue(forKey: channelId) }) else { return }
    runtime.run { await runtime.service.closed(channel, status: AppServiceClosedStatus(rawValue: Int(status))) }
}

let pluginLaunch: @convention(c) (UnsafeMutableRawPointer?, UnsafePointer<atrium_launch_info>?) -> Int32 = {
    instance, info in
    guard let info else { return Int32(ATRIUM_LAUNCH_UNKNOWN) }
    let runtime = runtime(instance)
    let data = info.pointee.data.flatMap {
        try? ValueSet(cbor: UnsafeRawBufferPointer(start: $0, count: info.pointee.data_length))
    }
    let launch = LaunchRequest(
        uri: String(cString: info.pointee.uri),
        data: data,
        clientId: info.pointee.client_id.map { String(cString: $0) } ?? "",
        isRemote: info.pointee.is_remote != 0
    )
    let status = waitFor(runtime) { await runtime.service.launch(launch) }
    return status.int32Value
}
