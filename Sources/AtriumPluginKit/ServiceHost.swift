public import AtriumValues
import CAtriumPlugin
import Dispatch

#if canImport(FoundationEssentials)
    import FoundationEssentials
#else
    import Foundation
#endif

/// The host's function table, as the C ABI hands it over. Valid until the plugin is
/// destroyed; its functions may be called from any thread.
struct HostTable: @unchecked Sendable {
    let api: UnsafePointer<atrium_host_api>

    func log(_ level: Int32, _ message: String) {
        api.pointee.log?(api, level, message)
    }
}

/// What the host offers a plugin: its configuration, logging, and launching URIs.
///
/// Safe to use from any thread or task.
public struct ServiceHost: Sendable {
    let table: HostTable

    /// The manifest's `config` object, as JSON text (`{}` when the manifest has none).
    public let configJSON: String

    /// Decodes the manifest's `config` object into your own type.
    ///
    /// - Throws: `DecodingError` when the configuration does not match `T`.
    public func config<T: Decodable>(as type: T.Type) throws -> T {
        try JSONDecoder().decode(type, from: Data(configJSON.utf8))
    }

    /// Log levels, as the host's log knows them.
    public enum LogLevel: Int32, Sendable {
        case trace = 0, debug, info, notice, warning, error
    }

    /// Writes to the host's log, tagged with the package.
    public func log(_ level: LogLevel, _ message: String) {
        table.log(level.rawValue, message)
    }

    /// Launches `uri` through the host's scheme registry. The host cannot tell whom the
    /// service acts for here, so it checks the launch as a remote client's; to launch for the
    /// client of a request, use ``ServiceChannel/launch(_:data:)``, which carries that
    /// client's identity. Runs off the caller's executor, since a launch handler may take a
    /// while.
    public func launch(_ uri: String, data: ValueSet? = nil) async -> RemoteLaunchUriStatus {
        await table.launch(uri, data: data, channel: nil)
    }
}

extension HostTable {
    /// Calls `launch_uri` (or `launch_uri_for`, with a channel) on a thread of its own: a
    /// launch may block for a while, and a blocked thread of Swift's shared pool would hold up
    /// every other task of the process.
    func launch(_ uri: String, data: ValueSet?, channel: UInt64?) async -> RemoteLaunchUriStatus {
        let table = self
        let bytes = data?.cborBytes() ?? []
        return await withCheckedContinuation { continuation in
            launchQueue.async {
                let status = bytes.withUnsafeBufferPointer { buffer -> Int32 in
                    let pointer = bytes.isEmpty ? nil : buffer.baseAddress
                    guard let channel else {
                        return table.api.pointee.launch_uri(table.api, uri, pointer, buffer.count)
                    }
                    guard table.hasLaunchFor, let launchFor = table.api.pointee.launch_uri_for else {
                        return Int32(ATRIUM_LAUNCH_UNKNOWN)
                    }
                    return launchFor(table.api, channel, uri, pointer, buffer.count)
                }
                continuation.resume(returning: RemoteLaunchUriStatus(rawValue: Int(status)))
            }
        }
    }

    /// Whether the host's table has `launch_uri_for` (ABI 1.1).
    var hasLaunchFor: Bool {
        Int(api.pointee.struct_size)
            >= MemoryLayout<atrium_host_api>.offset(of: \atrium_host_api.launch_uri_for)!
            + MemoryLayout<UnsafeRawPointer>.size
    }
}

/// Where a plugin's launches wait for the host: a serial queue of the plugin's own, so
/// that launches never occupy the threads Swift's tasks run on.
let launchQueue = DispatchQueue(label: "atrium.pluginkit.launch")

/// A channel from a client to one of the package's services.
public struct ServiceChannel: Sendable, Hashable {
    /// The host's id for the channel, unique in the host.
    public let id: UInt64
    /// The service the client opened.
    public let service: String
    /// The client's `clientId` and, if it sent one, `clientName`.
    public let clientId: String
    public let clientName: String?
    /// Whether the client is on another machine (TCP) rather than the local socket.
    public let isRemote: Bool

    let runtime: PluginRuntimeReference

    public static func == (lhs: ServiceChannel, rhs: ServiceChannel) -> Bool { lhs.id == rhs.id }
    public func hash(into hasher: inout Hasher) { hasher.combine(id) }

    /// Sends a message to the client and waits for its answer.
    ///
    /// - Throws: ``ServiceChannelError`` when the channel is closed or the message is refused.
    public func send(_ message: ValueSet) async throws -> ServiceResponse {
        try await runtime.value.send(message, on: id)
    }

    /// Launches `uri` on behalf of this channel's client: the host checks it as the client's
    /// own launch would be checked (its identity, whether it is remote, the launch policy).
    public func launch(_ uri: String, data: ValueSet? = nil) async -> RemoteLaunchUriStatus {
        await runtime.value.table.launch(uri, data: data, channel: id)
    }

    /// Closes the channel from the service side; the client is told `status`.
    public func close(status: AppServiceClosedStatus = .completed) {
        let runtime = runtime.value
        let (table, id) = (runtime.table, id)
        let close: @Sendable () -> Void = { _ = table.api.pointee.close_channel(table.api, id, status.int32Value) }
        // Never from the host's network thread, where the host's reply may have to be read.
        if runtime.hostCallsNeedOwnQueue {
            runtime.executor.queue.async(execute: close)
        } else {
            close()
        }
    }
}

/// Why a message could not be sent to a client.
public struct ServiceChannelError: Error, Sendable, CustomStringConvertible {
    /// The host's ATRIUM_E_ code.
    public var code: Int32
    public var description: String
}
