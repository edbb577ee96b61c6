import AtriumProtocol
import AtriumValues
import Foundation
import NIOCore
import NIOPosix
import Synchronization
import Testing

@testable import AtriumClient

/// A host that answers from a script (plain TCP on loopback): what the client does with answers
/// a real atriumd never gives, but a faulty or hostile host may.
final class ScriptedHost: Sendable {
    let channel: any Channel
    var port: Int { channel.localAddress?.port ?? 0 }

    private init(channel: any Channel) { self.channel = channel }

    /// Answers each frame a client sends with the frames `answer` gives for it.
    static func start(_ answer: @escaping @Sendable (ClientFrame) -> [HostFrame]) async throws -> ScriptedHost {
        let channel = try await ServerBootstrap(group: MultiThreadedEventLoopGroup.singleton)
            .childChannelInitializer { child in
                child.eventLoop.makeCompletedFuture {
                    let pipeline = child.pipeline.syncOperations
                    try pipeline.addHandler(ByteToMessageHandler(FrameDecoder<ClientFrame>()))
                    try pipeline.addHandler(MessageToByteHandler(FrameEncoder<HostFrame>()))
                    try pipeline.addHandler(Script(answer))
                }
            }
            .bind(host: "127.0.0.1", port: 0).get()
        return ScriptedHost(channel: channel)
    }

    func stop() async { try? await channel.close() }

    final class Script: ChannelInboundHandler, Sendable {
        typealias InboundIn = ClientFrame
        typealias OutboundOut = HostFrame
        let answer: @Sendable (ClientFrame) -> [HostFrame]

        init(_ answer: @escaping @Sendable (ClientFrame) -> [HostFrame]) { self.answer = answer }

        func channelRead(context: ChannelHandlerContext, data: NIOAny) {
            for frame in answer(unwrapInboundIn(data)) { context.write(wrapOutboundOut(frame), promise: nil) }
            context.flush()
        }

        func errorCaught(context: ChannelHandlerContext, error: any Error) { context.close(promise: nil) }
    }
}

struct ScriptedHostTests {
    /// A host that says a download completed (over HTTPS, say) while this client holds only
    /// part of it: the client cannot ever make those bytes whole, so it refuses, says why, and
    /// removes them; nothing reaches the destination.
    @Test func aDownloadCompletedElsewhereWithBytesMissingHereIsRefusedAndItsBytesRemoved() async throws {
        let transfer = UUID()
        let host = try await ScriptedHost.start { frame in
            switch frame {
            case .hello:
                return [.welcome(WelcomeFrame(hostId: "scripted", hostName: "scripted", limits: .default))]
            case .transfer(.attach(let attach)):
                return [
                    .transfer(
                        .attached(
                            AttachedFrame(
                                id: attach.id, transfer: transfer, status: .success, direction: "download", size: 4000,
                                offset: attach.offset ?? 0, chunkBytes: 1000, window: 0,
                                expires: Timestamp(Date().addingTimeInterval(3600))))),
                    .transfer(
                        .chunk(ChunkFrame(transfer: transfer, offset: 0, data: ByteBuffer(repeating: 7, count: 1000)))),
                    .transfer(
                        .state(TransferStateFrame(transfer: transfer, state: "completed", offset: 4000, size: 4000))),
                ]
            default:
                return []
            }
        }
        let folder = FileManager.default.temporaryDirectory.appendingPathComponent("atrium-scripted-\(UUID())")
        defer { try? FileManager.default.removeItem(at: folder) }
        let destination = folder.appendingPathComponent("photo.jpg")
        let connection = try await AtriumConnection.connect(to: AtriumEndpoint("127.0.0.1:\(host.port)")!)
        let operation = DownloadOperation(
            transfer: transfer, destination: destination, connection: connection, partialFolder: folder)
        await #expect {
            try await operation.run()
        } throws: { error in
            let message = (error as? AtriumClientError)?.message ?? "\(error)"
            return message
                == "transfer \(transfer) was completed elsewhere (over HTTPS?) with 1000 of 4000 bytes here; those were removed"
        }
        #expect(!FileManager.default.fileExists(atPath: operation.partialFile.path), "the partial bytes were removed")
        #expect(!FileManager.default.fileExists(atPath: destination.path), "nothing reached the destination")
        await connection.close()
        await host.stop()
    }

    /// A host that sends `attached` in answers whose requests did not ask for one, or sends a
    /// started download past its window before the client takes it up: the client holds
    /// nothing for the first, and at most the window and a megabyte for the second, then drops
    /// it (its operation would attach as usual).
    @Test(arguments: [false, true])
    func aStartedDownloadTheClientDidNotAskForOrThatFloodsIsNotHeld(asked: Bool) async throws {
        let transfer = UUID()
        let window: UInt64 = 64 << 10
        let detached = Mutex(false)
        let host = try await ScriptedHost.start { frame in
            switch frame {
            case .transfer(.detach(let which)):
                if which == transfer { detached.withLock { $0 = true } }
                return []
            case .hello:
                return [.welcome(WelcomeFrame(hostId: "scripted", hostName: "scripted", limits: .default))]
            case .open(let open):
                return [.opened(OpenedFrame(channel: open.channel, status: .success))]
            case .ping(let id):
                return [.pong(id: id)]
            case .request(let request):
                let attached = AttachedFrame(
                    id: request.id, transfer: transfer, status: .success, direction: "download", size: 1 << 30,
                    offset: 0, chunkBytes: window, window: window, expires: Timestamp(Date().addingTimeInterval(3600)))
                return [
                    .response(
                        ResponseFrame(
                            channel: request.channel, id: request.id, status: .success,
                            message: EncodedValueSet(["Transfer": .uuid(transfer)]), attached: attached))
                ]
                    + (0..<40).map { index in
                        .transfer(
                            .chunk(
                                ChunkFrame(
                                    transfer: transfer, offset: UInt64(index) * window,
                                    data: ByteBuffer(repeating: 1, count: Int(window)))))
                    }
            default:
                return []
            }
        }
        let connection = try await AtriumConnection.connect(to: AtriumEndpoint("127.0.0.1:\(host.port)")!)
        let app = AppServiceConnection(appServiceName: "s", packageId: "p", connection: connection)
        #expect(try await app.openRemote() == .success)
        let answer = try await app.sendMessage(["Command": "get"], startingDownload: asked)
        #expect(answer.message["Transfer"] == .uuid(transfer))
        // Frames come in order: once the pong is here, every chunk before it was handled.
        _ = try await connection.ping()
        #expect(
            connection.state.withLock { $0.startedDownloads[transfer] == nil && $0.transfers[transfer] == nil },
            asked ? "2.5 MiB past a window of 64 KiB were held" : "a download no request asked for was started")
        #expect(connection.state.withLock { $0.startingRequests.isEmpty })
        // And the host is told to stop sending it.
        let deadline = ContinuousClock.now + .seconds(5)
        while !detached.withLock({ $0 }), ContinuousClock.now < deadline {
            try await Task.sleep(for: .milliseconds(10))
        }
        #expect(detached.withLock { $0 }, "no detach")
        await connection.close()
        await host.stop()
    }
}
