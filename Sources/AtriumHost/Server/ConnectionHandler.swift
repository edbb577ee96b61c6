import AtriumProtocol
import AtriumValues
import CAtriumPlugin
import Dispatch
import Logging
import NIOCore

/// A way to reach a connection from any thread: work is run on its event loop.
struct ConnectionLink: Sendable {
    let id: UInt64
    let handler: NIOLoopBound<ConnectionHandler>

    var eventLoop: any EventLoop { handler.eventLoop }

    /// Runs `body` with the connection's handler on its event loop (at once when already there).
    func run(_ body: @escaping @Sendable (ConnectionHandler) -> Void) {
        let handler = self.handler
        if eventLoop.inEventLoop {
            body(handler.value)
        } else {
            eventLoop.execute { body(handler.value) }
        }
    }
}

/// One client connection: the `hello` handshake, its channels, its requests in flight.
///
/// Everything here runs on the connection's event loop; plugins are only ever called
/// through their own queues (``PluginInstance``), and reach back through ``ConnectionLink``.
final class ConnectionHandler: ChannelInboundHandler {
    typealias InboundIn = ClientFrame
    typealias OutboundOut = HostFrame

    let core: HostCore
    /// Whether the client came through the local Unix socket (else it is remote, over TCP).
    let isLocal: Bool
    let id: UInt64
    private var logger: Logger
    private var context: ChannelHandlerContext?
    private(set) var link: ConnectionLink?

    private var helloReceived = false
    private var clientId = ""
    private var clientName: String?
    /// Open channels: the client's channel number → the host's channel id and its plugin.
    private var channels: [UInt64: (handle: UInt64, plugin: PluginInstance)] = [:]
    /// Channel numbers whose `open` the plugin has not answered yet.
    private var opening: Set<UInt64> = []
    /// Client requests handed to plugins and not answered yet.
    private var inFlight = 0
    private var isClosed = false
    /// Whether frames are being read now: writes then wait for `channelReadComplete` and go
    /// out with one flush (a pipelining client's answers travel together).
    private var inReadBurst = false
    private var flushPending = false

    init(core: HostCore, isLocal: Bool, logger: Logger) {
        self.core = core
        self.isLocal = isLocal
        self.id = core.makeId()
        var logger = logger
        logger[metadataKey: "connection"] = "\(id)"
        self.logger = logger
    }

    var limits: ProtocolLimits { core.configuration.limits }

    func handlerAdded(context: ChannelHandlerContext) {
        self.context = context
        link = ConnectionLink(id: id, handler: NIOLoopBound(self, eventLoop: context.eventLoop))
        if let remote = context.remoteAddress {
            logger[metadataKey: "peer"] = "\(remote)"
        }
    }

    func channelActive(context: ChannelHandlerContext) {
        guard let link, core.connectionOpened(link) else {
            protocolError(FrameError(.shuttingDown, "the host is shutting down"))
            return
        }
        logger.debug("connected", metadata: ["local": "\(isLocal)"])
        context.fireChannelActive()
    }

    func channelInactive(context: ChannelHandlerContext) {
        isClosed = true
        let handles = channels.values.map(\.handle)
        channels.removeAll()
        core.connectionClosed(id, channels: handles)
        logger.debug(
            "disconnected", metadata: ["channels closed": "\(handles.count)", "requests dropped": "\(inFlight)"])
        context.fireChannelInactive()
    }

    func errorCaught(context: ChannelHandlerContext, error: any Error) {
        if let frameError = error as? FrameError {
            protocolError(frameError)
        } else {
            logger.notice("connection error: \(error)")
            context.close(promise: nil)
        }
    }

    func channelReadComplete(context: ChannelHandlerContext) {
        inReadBurst = false
        if flushPending {
            flushPending = false
            context.flush()
        }
        context.fireChannelReadComplete()
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        inReadBurst = true
        let frame = unwrapInboundIn(data)
        guard helloReceived else {
            guard case .hello(let hello) = frame else {
                protocolError(FrameError(.helloRequired, "the first frame must be hello, not \(frame.type)"))
                return
            }
            handleHello(hello)
            return
        }
        switch frame {
        case .hello:
            protocolError(FrameError(.duplicateHello, "hello was already received on this connection"))
        case .open(let open):
            handleOpen(open)
        case .request(let request):
            handleRequest(request)
        case .response(let response):
            if !core.clientResponded(response, on: id) {
                logger.debug("a response to request \(response.id), which is not waiting for one; ignored")
            }
        case .close(let channel):
            handleClose(channel)
        case .launch(let launch):
            handleLaunch(launch)
        case .apps(let id):
            write(.apps(AppsFrame(id: id, apps: core.apps())))
        case .ping(let id):
            write(.pong(id: id))
        case .unknown(let type):
            logger.info("unknown frame type \"\(type)\"")
            write(.error(ErrorFrame(code: .unknownType, message: "unknown frame type \"\(type)\"")))
        }
    }

    // MARK: - Frames

    private func handleHello(_ hello: HelloFrame) {
        guard hello.version == atriumProtocolVersion else {
            protocolError(
                FrameError(
                    .unsupportedVersion,
                    "protocol version \(hello.version) is not supported; this host speaks version \(atriumProtocolVersion)"
                )
            )
            return
        }
        helloReceived = true
        clientId = hello.clientId
        clientName = hello.clientName
        logger[metadataKey: "client"] = "\(hello.clientId)"
        write(
            .welcome(
                WelcomeFrame(hostId: core.configuration.hostId, hostName: core.configuration.hostName, limits: limits)
            )
        )
    }

    private func handleOpen(_ open: OpenFrame) {
        if channels[open.channel] != nil || opening.contains(open.channel) {
            write(.error(ErrorFrame(code: "channelInUse", message: "channel \(open.channel) is already open")))
            return
        }
        let refuse = { (status: AppServiceConnectionStatus, reason: String) in
            self.logger.info(
                "open \(open.package)/\(open.service) refused: \(reason)", metadata: ["status": "\(status)"])
            self.write(.opened(OpenedFrame(channel: open.channel, status: status)))
        }
        if core.isShuttingDown {
            refuse(.remoteSystemUnavailable, "the host is shutting down")
            return
        }
        if channels.count + opening.count >= limits.maxChannels {
            refuse(.unknown, "the connection already has \(limits.maxChannels) channels, the limit")
            return
        }
        switch core.route(package: open.package, service: open.service, isRemote: !isLocal) {
        case .failure(let refusal):
            refuse(refusal.status, refusal.reason)
        case .success(let plugin):
            let handle = core.makeId()
            opening.insert(open.channel)
            let link = self.link!
            plugin.open(
                channel: handle, service: open.service, clientId: clientId, clientName: clientName, isRemote: !isLocal
            ) {
                status in
                link.run { connection in
                    connection.opened(open, handle: handle, plugin: plugin, status: status)
                }
            }
        }
    }

    /// The plugin answered an `open`.
    private func opened(_ open: OpenFrame, handle: UInt64, plugin: PluginInstance, status: AppServiceConnectionStatus) {
        opening.remove(open.channel)
        guard !isClosed else {
            if status == .success { plugin.closed(channel: handle, status: .canceled, by: ATRIUM_CLOSED_BY_NETWORK) }
            return
        }
        if status == .success {
            channels[open.channel] = (handle, plugin)
            core.addChannel(
                handle,
                HostCore.OpenChannel(
                    connection: link!, clientChannel: open.channel, plugin: plugin, service: open.service)
            )
            logger.debug("opened \(open.package)/\(open.service) as channel \(open.channel)")
        } else {
            logger.info(
                "open \(open.package)/\(open.service) refused by the service", metadata: ["status": "\(status)"])
        }
        write(.opened(OpenedFrame(channel: open.channel, status: status)))
    }

    private func handleRequest(_ request: RequestFrame) {
        func reply(_ status: AppServiceResponseStatus, _ reason: String) {
            write(.response(ResponseFrame(channel: request.channel, id: request.id, status: status, error: reason)))
        }
        guard let channel = channels[request.channel] else {
            reply(.failure, "channel \(request.channel) is not open")
            return
        }
        if core.isShuttingDown {
            reply(.remoteSystemUnavailable, "the host is shutting down")
            return
        }
        guard inFlight < limits.maxInFlight else {
            reply(.resourceLimitsExceeded, "more than \(limits.maxInFlight) requests in flight on this connection")
            return
        }
        guard request.message.byteCount <= limits.maxMessageBytes else {
            reply(
                .messageSizeTooLarge,
                "the message is \(request.message.byteCount) bytes; the limit is \(limits.maxMessageBytes)"
            )
            return
        }
        do {
            _ = try request.message.decode()
        } catch {
            reply(.failure, error.description)
            return
        }
        inFlight += 1
        let handle = core.addPending(
            HostCore.PendingRequest(
                connection: link!, clientChannel: request.channel, clientRequest: request.id,
                channel: channel.handle, plugin: channel.plugin
            )
        )
        channel.plugin.request(channel: channel.handle, request: handle, message: request.message.buffer)
    }

    /// Sends the answer to a client request (from the plugin, a timeout, or the host).
    func finish(
        _ request: HostCore.PendingRequest, status: AppServiceResponseStatus, message: ByteBuffer?, error: String?
    ) {
        inFlight -= 1
        let body = message.map { EncodedValueSet(uncheckedBytes: $0) } ?? .empty
        write(
            .response(
                ResponseFrame(
                    channel: request.clientChannel, id: request.clientRequest, status: status, message: body,
                    error: error
                )
            )
        )
    }

    private func handleClose(_ clientChannel: UInt64) {
        guard let channel = channels.removeValue(forKey: clientChannel) else {
            logger.debug("close of channel \(clientChannel), which is not open; ignored")
            return
        }
        guard let (_, pending, outgoing) = core.removeChannel(channel.handle) else { return }
        core.settle(pending: pending, outgoing: outgoing, reason: "the channel was closed", outgoingStatus: .failure)
        channel.plugin.closed(channel: channel.handle, status: .completed, by: ATRIUM_CLOSED_BY_CLIENT)
    }

    /// The service (or the host, shutting down) closed a channel: tell the client.
    func channelClosedByService(clientChannel: UInt64, status: AppServiceClosedStatus) {
        channels.removeValue(forKey: clientChannel)
        write(.closed(ClosedFrame(channel: clientChannel, status: status)))
    }

    private func handleLaunch(_ launch: LaunchFrame) {
        let request = LaunchRequestInfo(
            uri: launch.uri, package: launch.package, fallbackUri: launch.fallbackUri,
            preferredPackages: launch.preferredPackages,
            data: launch.data.map { Array($0.buffer.readableBytesView) }
        )
        let core = self.core
        let (clientId, isRemote, link) = (self.clientId, !isLocal, self.link!)
        // A handler may take a while (a program starting): keep it off the event loop.
        DispatchQueue.global().async {
            let outcome = core.launch(
                request, clientId: clientId, clientDescription: "client \(clientId)", isRemote: isRemote)
            link.run { connection in
                connection.write(.launched(LaunchedFrame(id: launch.id, status: outcome.status, error: outcome.error)))
            }
        }
    }

    // MARK: - Writing

    func write(_ frame: HostFrame) {
        guard !isClosed, let context else { return }
        if inReadBurst {
            context.write(wrapOutboundOut(frame), promise: nil)
            flushPending = true
        } else {
            context.writeAndFlush(wrapOutboundOut(frame), promise: nil)
        }
    }

    /// Answers a protocol error with an `error` frame, then closes the connection (all but
    /// `unknownType`, which is not sent through here).
    private func protocolError(_ error: FrameError) {
        logger.notice("protocol error: \(error)")
        guard !isClosed, let context else { return }
        let channel = context.channel
        context.writeAndFlush(wrapOutboundOut(.error(ErrorFrame(error)))).whenComplete { _ in
            channel.close(promise: nil)
        }
        isClosed = true
    }

    func close(promise: EventLoopPromise<Void>?) {
        guard let context else {
            promise?.succeed()
            return
        }
        context.close().whenComplete { _ in promise?.succeed() }
    }
}
