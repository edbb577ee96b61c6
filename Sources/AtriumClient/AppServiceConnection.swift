import AtriumProtocol
public import AtriumValues
import Synchronization

/// The answer to ``AppServiceConnection/sendMessage(_:timeout:)``, as Windows'
/// `AppServiceResponse`: a status and a message.
public struct AppServiceResponse: Sendable, Hashable {
    public var status: AppServiceResponseStatus
    /// The service's answer; empty when there is none.
    public var message: ValueSet
    /// The host's or the service's reason for a status other than success.
    public var error: String?

    /// The message as your own `Decodable` type.
    public func decode<T: Decodable>(_ type: T.Type) throws -> T {
        try ValueSetDecoder().decode(type, from: message)
    }
}

/// A message the service sent to this client, to be answered with ``respond(_:status:)``.
public struct AppServiceRequest: Sendable {
    public let message: ValueSet
    let channel: UInt64
    let id: UInt64
    let connection: AtriumConnection

    /// Answers the service. Answer each request once.
    public func respond(_ message: ValueSet = [:], status: AppServiceResponseStatus = .success) async throws {
        try await connection.send(
            .response(ResponseFrame(channel: channel, id: id, status: status, message: EncodedValueSet(message)))
        )
    }
}

/// A connection to one app service, shaped like Windows' `AppServiceConnection`: set the
/// service name and package id, ``openRemote(timeout:)``, then ``sendMessage(_:timeout:)``.
/// Messages the service sends arrive on ``requests``; when the service side closes, its
/// status arrives on ``serviceClosed``.
///
/// Any number of these share one ``AtriumConnection``, each as a channel.
public final class AppServiceConnection: Sendable {
    public let appServiceName: String
    public let packageId: String
    public let connection: AtriumConnection
    /// The service's own messages, in order. Ends when the channel closes.
    public let requests: AsyncStream<AppServiceRequest>
    /// The status the service side closed the channel with (at most one).
    public let serviceClosed: AsyncStream<AppServiceClosedStatus>

    private let channelNumber: Mutex<UInt64?> = Mutex(nil)
    private let refusal: Mutex<String?> = Mutex(nil)

    /// Why the last ``openRemote(timeout:)`` did not succeed, in the host's or the service's
    /// words (nil after a success, or from a host that gives no reason).
    public var openError: String? { refusal.withLock { $0 } }
    private let events: AtriumConnection.ChannelEvents
    /// Whether ``connection`` was made for this service alone (closed with it).
    private let ownsConnection: Bool

    public convenience init(appServiceName: String, packageId: String, connection: AtriumConnection) {
        self.init(appServiceName: appServiceName, packageId: packageId, connection: connection, ownsConnection: false)
    }

    init(appServiceName: String, packageId: String, connection: AtriumConnection, ownsConnection: Bool) {
        self.ownsConnection = ownsConnection
        self.appServiceName = appServiceName
        self.packageId = packageId
        self.connection = connection
        let (requests, requestsContinuation) = AsyncStream.makeStream(of: AppServiceRequest.self)
        let (closed, closedContinuation) = AsyncStream.makeStream(of: AppServiceClosedStatus.self)
        self.requests = requests
        self.serviceClosed = closed
        events = AtriumConnection.ChannelEvents(requests: requestsContinuation, closed: closedContinuation)
    }

    /// Opens the channel and returns the host's (or the service's) status; when it is not
    /// success, ``openError`` says why.
    ///
    /// - Throws: ``AtriumClientError`` when no status came (timed out, host went away).
    public func openRemote(timeout: Duration? = nil) async throws -> AppServiceConnectionStatus {
        let number = connection.makeNumber()
        connection.state.withLock { $0.channels[number] = events }
        let frame = try await connection.call(
            .open(OpenFrame(channel: number, service: appServiceName, package: packageId)),
            awaiting: .opened(number),
            timeout: timeout
        )
        guard case .opened(let opened) = frame else {
            throw AtriumClientError(.protocolError, "the host answered open with \(frame.type)")
        }
        refusal.withLock { $0 = opened.status == .success ? nil : opened.error }
        if opened.status == .success {
            channelNumber.withLock { $0 = number }
        } else {
            _ = connection.state.withLock { $0.channels.removeValue(forKey: number) }
        }
        return opened.status
    }

    /// Sends a message and waits for the service's answer.
    ///
    /// With `startingDownload`, a download the service offers in its answer (its `Transfer`)
    /// starts at once, with no round trip of its own: its bytes follow the answer, and the
    /// ``DownloadOperation`` made for it takes them up (run it, or detach the transfer: until
    /// then this connection holds what arrives, at most a window). A host older than this
    /// feature answers as before, and the operation attaches.
    ///
    /// - Throws: ``AtriumClientError``: `channelNotOpen` before a successful open or after
    ///   the channel closed, `timedOut`, `hostWentAway`; `CancellationError` when the task is
    ///   cancelled (the answer, if it still comes, is dropped).
    public func sendMessage(_ message: ValueSet, startingDownload: Bool = false, timeout: Duration? = nil)
        async throws -> AppServiceResponse
    {
        guard let channel = channelNumber.withLock({ $0 }),
            connection.state.withLock({ $0.channels[channel] != nil })
        else {
            // The connection ended (with the host's reason, when it gave one: a revoked
            // pairing, say): that, not the channel, is what the caller needs to hear.
            if channelNumber.withLock({ $0 }) != nil, let ended = connection.state.withLock({ $0.ended }) {
                throw ended
            }
            throw AtriumClientError(
                .channelNotOpen, "the connection to \(packageId)/\(appServiceName) is not open: call openRemote() first"
            )
        }
        let id = connection.makeNumber()
        if startingDownload { connection.state.withLock { _ = $0.startingRequests.insert(.response(channel, id)) } }
        defer {
            if startingDownload { connection.state.withLock { _ = $0.startingRequests.remove(.response(channel, id)) } }
        }
        let frame = try await connection.call(
            .request(
                RequestFrame(
                    channel: channel, id: id, message: EncodedValueSet(message),
                    attach: startingDownload ? RequestAttach(window: DownloadOperation.defaultWindow) : nil)),
            awaiting: .response(channel, id),
            timeout: timeout
        )
        guard case .response(let response) = frame else {
            throw AtriumClientError(.protocolError, "the host answered a request with \(frame.type)")
        }
        let answer: ValueSet
        do {
            answer = try response.message.decode()
        } catch {
            throw AtriumClientError(.protocolError, "the answer is not a valid ValueSet: \(error)")
        }
        return AppServiceResponse(status: response.status, message: answer, error: response.error)
    }

    /// Sends your own `Encodable` value as the message (see ``ValueSetEncoder``).
    public func sendMessage<T: Encodable>(encoding value: T, timeout: Duration? = nil) async throws
        -> AppServiceResponse
    {
        let message: ValueSet
        do {
            message = try ValueSetEncoder().encode(value)
        } catch {
            throw AtriumClientError(.invalidMessage, "the value has no ValueSet form: \(error)")
        }
        return try await sendMessage(message, timeout: timeout)
    }

    /// Closes the channel; the service is told. A connection made for this service alone
    /// (``init(appServiceName:packageId:remoteSystem:tls:timeout:)``) is closed too.
    public func close() async {
        if let channel = channelNumber.withLock({ number -> UInt64? in
            defer { number = nil }
            return number
        }) {
            let events = connection.state.withLock { $0.channels.removeValue(forKey: channel) }
            events?.requests.finish()
            events?.closed.finish()
            try? await connection.send(.close(channel: channel))
        }
        if ownsConnection { await connection.close() }
    }
}
