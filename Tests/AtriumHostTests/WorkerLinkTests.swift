import AtriumProtocol
import AtriumValues
import CAtriumSystem
import Foundation
import NIOCore
import NIOPosix
import Testing

@testable import AtriumHost

#if canImport(Glibc)
    import Glibc
#endif

/// The host's end of a worker's link: written directly while the pipe takes what it is given,
/// through the channel once it does not, and never out of order.
struct WorkerLinkTests {
    /// Runs `body` with a link on a pipe toward the worker and one back, as the host holds them,
    /// and the read end of the first (blocking), as a worker holds it; closes every end and the
    /// loop after, whether `body` throws or not.
    private static func withLink(_ body: (WorkerLink, Int32) async throws -> Void) async throws {
        var towardWorker: [Int32] = [-1, -1]
        var towardHost: [Int32] = [-1, -1]
        try #require(atrium_make_pipe(&towardWorker) == 0)
        try #require(atrium_make_pipe(&towardHost) == 0)
        defer {
            close(towardWorker[0])
            close(towardHost[1])
        }
        let group = MultiThreadedEventLoopGroup(numberOfThreads: 1)
        var failure: (any Error)?
        do {
            // The channel owns the host's ends from here, and closes them with the loop.
            let channel = try await NIOPipeBootstrap(group: group)
                .takingOwnershipOfDescriptors(input: towardHost[0], output: towardWorker[1]).get()
            try await body(WorkerLink(channel, descriptor: towardWorker[1]), towardWorker[0])
        } catch {
            failure = error
        }
        try await group.shutdownGracefully()
        if let failure { throw failure }
    }

    /// Reads frames from `descriptor` until `count` have come or the pipe ends.
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
            // 4 MiB while nothing reads the other end: more than a pipe holds, so the
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
                    // Halfway (2 MiB), the channel holds what the pipe did not take.
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
            // 2 MiB in one turn of the loop, nothing reading: what the pipe does not take is the
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
            // The two descriptors are free now, and the next pipe made takes them (most often:
            // other tests may make descriptors meanwhile). Nothing sent on the closed link may
            // reach it.
            var pipe: [Int32] = [-1, -1]
            try #require(atrium_make_pipe(&pipe) == 0)
            defer {
                close(pipe[0])
                close(pipe[1])
            }
            try await link.channel.eventLoop.submit { link.send(.answered(id: 1)) }.get()
            try await link.channel.eventLoop.submit {}.get()
            var waiting = pollfd(fd: pipe[0], events: Int16(POLLIN), revents: 0)
            #expect(poll(&waiting, 1, 0) == 0, "the frame reached the pipe made after the link closed")
            // And the worker's end sees its pipe end, with nothing before it.
            let frames = try await Task.detached { try Self.readFrames(worker, count: 1) }.value
            #expect(frames.isEmpty)
        }
    }
}
