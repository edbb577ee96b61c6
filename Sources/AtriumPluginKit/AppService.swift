public import AtriumValues

#if canImport(FoundationEssentials)
    public import FoundationEssentials
#else
    public import Foundation
#endif

/// An app service written in Swift: implement this protocol, then export it with one line,
///
/// ```swift
/// @_cdecl("atrium_plugin_entry_v1")
/// public func atriumPluginEntry() -> UnsafeRawPointer { exportAppService(MyService.self) }
/// ```
///
/// and build the target as a dynamic library product. The host creates one instance when it
/// loads the library, then calls it for every channel and request of the package's services.
///
/// Isolation: methods run on an executor of the plugin's own (a serial queue), never on a
/// network thread or Swift's shared cooperative pool. Calls interleave at their suspension
/// points (make the type an `actor`, or protect its state, if that matters). A method that
/// blocks holds up only this plugin, never the host or another plugin. A service whose
/// `request` never blocks may say so (``requestsNeverBlock``) and skip the hop to that
/// executor.
public protocol AppService: AnyObject, Sendable {
    /// Called once, when the host loads the plugin. Throwing fails the load: the package
    /// stays listed and answers `open` with status 2 (AppUnavailable).
    init(host: ServiceHost) throws

    /// A client opens one of the package's services. Return `.success` to accept it, or the
    /// status the client should receive. The default accepts every channel.
    func open(_ channel: ServiceChannel) async -> AppServiceConnectionStatus

    /// A message on an open channel. Return the answer, or throw: the client then receives
    /// status 1 (Failure) with the error's description as the reason.
    func request(_ request: ServiceRequest) async throws -> ServiceResponse

    /// The channel is closed: by the client, because its connection dropped, or because the
    /// host is shutting down. The default does nothing.
    func closed(_ channel: ServiceChannel, status: AppServiceClosedStatus) async

    /// A URI whose scheme the package declares is launched on this machine. The default
    /// answers `.protocolUnavailable`.
    func launch(_ launch: LaunchRequest) async -> RemoteLaunchUriStatus

    /// Whether ``request(_:)`` never blocks a thread: no locks held for long, no synchronous
    /// I/O, no `sleep`, nothing that waits except at an `await`. The default is `false`.
    /// Read once, just after `init(host:)`, so a service may take it from its configuration.
    ///
    /// When it is `true`, each request starts where it arrives, on the host's network thread,
    /// and runs there until its first suspension point (`Task.immediate`); whatever follows an
    /// `await` runs on the plugin's own executor as usual. A request that answers without
    /// suspending then costs no thread hop at all, as a C plugin's nonblocking `request` does
    /// (`ATRIUM_PLUGIN_NONBLOCKING`). The price of a broken promise is high: a request that
    /// blocks while this is `true` holds up every connection on that network thread.
    var requestsNeverBlock: Bool { get }

    /// A finished upload the service accepted (``ServiceRequest/acceptUpload(size:maxSize:name:)``):
    /// keep the file (``FinishedUpload/store(inFolder:as:)``), and return what the client
    /// should find as the transfer's result. Throwing, or a status other than success, fails
    /// the transfer. Called at least once: again after a restart if it did not return. The
    /// default fails every upload.
    func upload(_ upload: FinishedUpload) async throws -> ServiceResponse

    /// A transfer the service made ended before reaching it: canceled by its client, expired,
    /// or removed with its caller's access. The default does nothing.
    func transferEnded(_ transfer: UUID, why: String) async
}

extension AppService {
    public func open(_ channel: ServiceChannel) async -> AppServiceConnectionStatus { .success }
    public func closed(_ channel: ServiceChannel, status: AppServiceClosedStatus) async {}
    public func launch(_ launch: LaunchRequest) async -> RemoteLaunchUriStatus { .protocolUnavailable }
    public var requestsNeverBlock: Bool { false }
    public func upload(_ upload: FinishedUpload) async throws -> ServiceResponse {
        .failure("this service takes no uploads")
    }
    public func transferEnded(_ transfer: UUID, why: String) async {}
}

/// One message from a client, with the channel it came on.
public struct ServiceRequest: Sendable {
    /// The message, already checked to be a valid ValueSet by the host.
    public var message: ValueSet
    /// The channel it arrived on.
    public var channel: ServiceChannel
    /// The host's id for this request.
    public var id: UInt64

    let runtime: PluginRuntimeReference

    /// Answers this request from anywhere, at any time: return ``ServiceResponse/deferred``
    /// from ``AppService/request(_:)`` and keep the responder (Windows' `AppServiceDeferral`).
    public var responder: Responder { Responder(runtime: runtime, request: id) }

    /// The message as your own `Decodable` type (see ``ValueSetDecoder``).
    public func decode<T: Decodable>(_ type: T.Type) throws -> T {
        try ValueSetDecoder().decode(type, from: message)
    }
}

/// The answer to a request: a status and a message.
///
/// A ValueSet literal is a success: `return ["Type": "pong"]`.
public struct ServiceResponse: Sendable, ExpressibleByDictionaryLiteral {
    public var status: AppServiceResponseStatus
    public var message: ValueSet
    /// The reason for a status other than success, sent to the client as `error`.
    public var error: String?

    public init(status: AppServiceResponseStatus = .success, message: ValueSet = [:], error: String? = nil) {
        self.status = status
        self.message = message
        self.error = error
    }

    public init(dictionaryLiteral elements: (String, Value)...) {
        var message = ValueSet()
        for (key, value) in elements { message[key] = value }
        self.init(message: message)
    }

    /// A success carrying `message`.
    public static func success(_ message: ValueSet) -> ServiceResponse { ServiceResponse(message: message) }

    /// A success carrying `value` encoded with ``ValueSetEncoder``.
    public static func success<T: Encodable>(encoding value: T) throws -> ServiceResponse {
        ServiceResponse(message: try ValueSetEncoder().encode(value))
    }

    /// A failure (status 1) with a reason for the client.
    public static func failure(_ reason: String) -> ServiceResponse {
        ServiceResponse(status: .failure, error: reason)
    }

    /// No answer now: the service answers later through ``ServiceRequest/responder``. The
    /// host's response timeout still applies.
    public static var deferred: ServiceResponse {
        var response = ServiceResponse(status: .success)
        response.isDeferred = true
        return response
    }

    var isDeferred = false
}

/// Answers one request, once, from any thread or task.
public struct Responder: Sendable {
    let runtime: PluginRuntimeReference
    let request: UInt64

    /// Sends the answer.
    ///
    /// - Returns: `false` when the host no longer takes an answer for this request: it was
    ///   answered already, the host's timeout answered it, or the client went away.
    @discardableResult
    public func respond(_ response: ServiceResponse) -> Bool {
        runtime.value.respond(request, response)
    }
}

/// A launch handed to the package: a URI whose scheme it declares.
public struct LaunchRequest: Sendable {
    public var uri: String
    /// The data the client sent with the launch, if any.
    public var data: ValueSet?
    /// The client's id, or "" when a plugin launched it.
    public var clientId: String
    /// Whether the launch came from another machine (a TCP client).
    public var isRemote: Bool
}
