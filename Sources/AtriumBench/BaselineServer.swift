import AtriumProtocol
import AtriumValues
public import NIOCore
import NIOPosix

/// The benchmark's baseline: a raw SwiftNIO server with Atrium's framing and nothing else.
/// It answers `hello` with `welcome`, every `open` with success, and every `request` with its
/// own message, on the event loop: no manifests, no routing, no plugins, no thread hop. The
/// distance between it and `atriumd` running Echo is what Atrium's machinery costs.
public enum BaselineServer {
    /// Binds and returns the listening channel; close it to stop.
    public static func start(
        host: String = "127.0.0.1",
        port: Int = 0,
        group: (any EventLoopGroup)? = nil
    ) async throws -> any Channel {
        try await ServerBootstrap(group: group ?? MultiThreadedEventLoopGroup.singleton)
            .serverChannelOption(.backlog, value: 256)
            .serverChannelOption(.socketOption(.so_reuseaddr), value: 1)
            .childChannelOption(.socketOption(.tcp_nodelay), value: 1)
            .childChannelInitializer { channel in
                channel.eventLoop.makeCompletedFuture {
                    try channel.pipeline.syncOperations.addHandlers([
                        ByteToMessageHandler(FrameDecoder<ClientFrame>()),
                        MessageToByteHandler(FrameEncoder<HostFrame>()),
                        BaselineHandler(),
                    ])
                }
            }
            .bind(host: host, port: port).get()
    }
}

final class BaselineHandler: ChannelInboundHandler {
    typealias InboundIn = ClientFrame
    typealias OutboundOut = HostFrame

    private var needsFlush = false

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        let answer: HostFrame
        switch unwrapInboundIn(data) {
        case .hello:
            answer = .welcome(WelcomeFrame(hostId: "baseline", hostName: "baseline", limits: .default))
        case .open(let open):
            answer = .opened(OpenedFrame(channel: open.channel, status: .success))
        case .request(let request):
            answer = .response(
                ResponseFrame(channel: request.channel, id: request.id, status: .success, message: request.message))
        case .ping(let id):
            answer = .pong(id: id)
        case .apps(let id, _):
            answer = .apps(AppsFrame(id: id, apps: []))
        default:
            return
        }
        context.write(wrapOutboundOut(answer), promise: nil)
        needsFlush = true
    }

    func channelReadComplete(context: ChannelHandlerContext) {
        if needsFlush {
            needsFlush = false
            context.flush()
        }
    }

    func errorCaught(context: ChannelHandlerContext, error: any Error) {
        context.close(promise: nil)
    }
}
