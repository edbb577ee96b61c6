import AtriumProtocol
import AtriumValues
import Foundation
import NIOCore
import NIOPosix
import Testing

@testable import AtriumHost

#if canImport(Glibc)
    import Glibc
#endif

/// The host's end of a worker's socket: written directly while the socket takes what it is
/// given, through the channel once it does not, and never out of order.
struct WorkerLinkTests {
    /// Runs `body` with a link on one end of a socket pair and the other end (blocking), as a
    /// worker holds it; closes both and the loop after, whether `body` throws or not.
    private static func withLink(_ body: (WorkerLink, Int32) async throws -> Void) async throws {
        var pair: [Int32] = [-1, -1]
        try #require(socketpair(AF_UNIX, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0, &pair) == 0)
        defer { close(pair[1]) }
        let group = MultiThreadedEventLoopGroup(numberOfThreads: 1)
        var failure: (any Error)?
        do {
            // The channel owns the descriptor from here, and closes it with the loop.
            let channel = try await ClientBootstrap(group: group).withConnectedSocket(pair[0]).get()
            try await body(WorkerLink(channel, descriptor: pair[0]), pair[1])
        } catch {
            failure = error
        }
        try await group.shutdownGracefully()
        if let failure { throw failure }
    }

    /// Reads frames from `descriptor` until `count` have come or the socket ends.
    private static func readFrames(_ descriptor: Int32, count: Int) throws -> [WorkerFrame] {
        let decoder = FrameDecoder<WorkerFrame>(maxFrameBytes: 1 << 20)
        var input = ByteBuffer()
        var frames: [WorkerFrame] = []
        while frames.count < count {
            let read = input.writeWithUnsafeMutableBytes(minimumWritableBytes: 64 << 10) {
                Glibc.read(descriptor, $0.baseAddress, $0.count)
            }
            guard read > 0 else { break }
            while let frame = try decoder.decodeFrame(from: &input) { frames.append(frame) }
            input.discardReadBytes()
        }
        return frames
    }

    /// The id a test frame carries.
    private static func id(_ frame: WorkerFrame) -> UInt64? {
        switch frame {
        case .answered(let id), .request(_, let id, _): id
        default: nil
        }
    }

    @Test func framesArriveInOrderWhetherTheSocketTakesThemOrTheChannelHoldsThem() async throws {
        try await Self.withLink { link, worker in
            let loop = link.channel.eventLoop
            // 4 MiB while nothing reads the other end: more than a socket pair holds, so the
            // channel holds the rest. Small and large frames, from the loop in bursts and from
            // another thread between them.
            let big = EncodedValueSet(["Bytes": .bytes(Array(repeating: 5, count: 256 << 10))])
            var next: UInt64 = 0
            for burst in 0..<16 {
                let first = next
                try await loop.submit {
                    for offset in 0..<UInt64(8) {
                        link.send(.answered(id: first + offset))
                    }
                    link.send(.request(channel: 1, id: first + 8, message: big))
                }.get()
                next += 9
                link.send(.answered(id: next))
                next += 1
                if burst == 8 {
                    // Halfway (2 MiB), the channel holds what the socket did not take.
                    #expect(try await loop.submit { !link.channel.isWritable }.get())
                }
            }
            let sent = Int(next)
            let frames = try await Task.detached { try Self.readFrames(worker, count: sent) }.value
            #expect(frames.compactMap(Self.id) == Array(0..<next))
            // Once the channel has written all it held, the link writes directly again, behind it.
            let last = next
            try await loop.submit { link.send(.answered(id: last)) }.get()
            let after = try await Task.detached { try Self.readFrames(worker, count: 1) }.value
            #expect(after.compactMap(Self.id) == [last])
        }
    }

    @Test func aWorkerThatDoesNotReadPutsTheLinkOverItsMarkWithinTheTurn() async throws {
        try await Self.withLink { link, worker in
            let big = EncodedValueSet(["Bytes": .bytes(Array(repeating: 5, count: 256 << 10))])
            // 2 MiB in one turn of the loop, nothing reading: what the socket does not take is the
            // channel's, counted against its high-water mark, before the turn ends. WorkerProcess
            // gives no more work to a link over its mark, so it must be seen as the frames come.
            let (before, after) = try await link.channel.eventLoop.submit {
                let before = link.channel.isWritable
                for id in 0..<UInt64(8) { link.send(.request(channel: 1, id: id, message: big)) }
                return (before, link.channel.isWritable)
            }.get()
            #expect(before)
            #expect(!after)
            let frames = try await Task.detached { try Self.readFrames(worker, count: 8) }.value
            #expect(frames.compactMap(Self.id) == Array(0..<8))
        }
    }

    @Test func aClosedLinkWritesNothingToTheDescriptorItHad() async throws {
        try await Self.withLink { link, worker in
            try await link.channel.close()
            // The descriptor is free now, and the next socket made takes it (most often: other
            // tests may make descriptors meanwhile). Nothing sent on the closed link may reach it.
            var pair: [Int32] = [-1, -1]
            try #require(socketpair(AF_UNIX, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0, &pair) == 0)
            defer {
                close(pair[0])
                close(pair[1])
            }
            try await link.channel.eventLoop.submit { link.send(.answered(id: 1)) }.get()
            try await link.channel.eventLoop.submit {}.get()
            var byte: UInt8 = 0
            for end in pair {
                let peer = end == pair[0] ? pair[1] : pair[0]
                #expect(recv(peer, &byte, 1, Int32(MSG_DONTWAIT)) == -1 && errno == EAGAIN, "the frame reached \(end)")
            }
            // And the worker's end sees its socket end, with nothing before it.
            let frames = try await Task.detached { try Self.readFrames(worker, count: 1) }.value
            #expect(frames.isEmpty)
        }
    }
}
