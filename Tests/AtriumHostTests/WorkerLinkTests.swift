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
/// through the channel once it does not, and never out of order. One test at a time: two tests
/// check what happens to descriptor numbers a link let go of.
@Suite(.serialized)
struct WorkerLinkTests {
    /// The worker's end of the pipe toward it, which a test may close before the end.
    final class WorkerEnd: @unchecked Sendable {
        private(set) var descriptor: Int32
        /// The number of the write end the channel owns (closed by SwiftNIO, not by the test).
        let channelsEnd: Int32
        init(_ descriptor: Int32, channelsEnd: Int32) {
            self.descriptor = descriptor
            self.channelsEnd = channelsEnd
        }
        func close() {
            if descriptor >= 0 { Glibc.close(descriptor) }
            descriptor = -1
        }
    }

    /// Runs `body` with a link on a pipe toward the worker and one back, as the host holds them
    /// (the link writing to a copy of the first's write end, as in the host), and the read end
    /// of the first (blocking), as a worker holds it; closes every end and the loop after,
    /// whether `body` throws or not.
    private static func withLink(_ body: (WorkerLink, WorkerEnd) async throws -> Void) async throws {
        var towardWorker: [Int32] = [-1, -1]
        var towardHost: [Int32] = [-1, -1]
        try #require(atrium_make_pipe(&towardWorker) == 0)
        try #require(atrium_make_pipe(&towardHost) == 0)
        let worker = WorkerEnd(towardWorker[0], channelsEnd: towardWorker[1])
        defer {
            worker.close()
            close(towardHost[1])
        }
        let group = MultiThreadedEventLoopGroup(numberOfThreads: 1)
        var failure: (any Error)?
        do {
            let copy = fcntl(towardWorker[1], F_DUPFD_CLOEXEC, 3)
            try #require(copy >= 0)
            // The channel owns the host's ends from here, and the link the copy; both close
            // theirs when the channel closes (with the loop at the latest).
            let channel = try await NIOPipeBootstrap(group: group)
                .takingOwnershipOfDescriptors(input: towardHost[0], output: towardWorker[1]).get()
            try await body(WorkerLink(channel, descriptor: copy), worker)
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

    @Test func framesArriveInOrderWhetherThePipeTakesThemOrTheChannelHoldsThem() async throws {
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
            let frames = try await Task.detached { try Self.readFrames(worker.descriptor, count: sent) }.value
            #expect(frames.compactMap(Self.id) == Array(0..<next))
            // Once the channel has written all it held, the link writes directly again, behind it.
            let last = next
            try await loop.submit { link.send(.answered(id: last)) }.get()
            let after = try await Task.detached { try Self.readFrames(worker.descriptor, count: 1) }.value
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
            let frames = try await Task.detached { try Self.readFrames(worker.descriptor, count: 8) }.value
            #expect(frames.compactMap(Self.id) == Array(0..<8))
        }
    }

    /// Which file `descriptor` is open on (device and inode), or nil when it is not open.
    private static func identity(_ descriptor: Int32) -> [UInt64]? {
        var status = stat()
        guard fstat(descriptor, &status) == 0 else { return nil }
        return [UInt64(status.st_dev), UInt64(status.st_ino)]
    }

    @Test func aClosedLinkLetsGoOfItsDescriptorAndWritesNothing() async throws {
        try await Self.withLink { link, worker in
            let number = try await link.channel.eventLoop.submit { link.writtenDescriptor }.get()
            let pipe = try #require(Self.identity(number))
            try await link.channel.close()
            try await link.channel.eventLoop.submit {}.get()
            // The link closed its copy with the channel, and writes to no number from here: the
            // number may be any other descriptor's by now (another test's, running meanwhile).
            #expect(try await link.channel.eventLoop.submit { link.writtenDescriptor }.get() == -1)
            #expect(Self.identity(number) != pipe, "the link kept its copy of the pipe open")
            try await link.channel.eventLoop.submit { link.send(.answered(id: 1)) }.get()
            try await link.channel.eventLoop.submit {}.get()
            // And the worker's end sees its pipe end, with nothing before it.
            let frames = try await Task.detached { try Self.readFrames(worker.descriptor, count: 1) }.value
            #expect(frames.isEmpty)
        }
    }

    @Test func aWorkerThatClosesItsReadingEndHasTheLinkClosed() async throws {
        try await Self.withLink { link, worker in
            // A worker that closes the pipe it reads but not the one it writes (a plugin can):
            // SwiftNIO sees the pipe's error and closes the channel's write end, and goes on
            // reading, the channel still active. The link's next write fails on its own copy of
            // the write end, and closes the whole link, which the host handles as the worker's
            // end.
            let number = try await link.channel.eventLoop.submit { link.writtenDescriptor }.get()
            let pipe = try #require(Self.identity(number))
            // The same pipe: SwiftNIO may close its end as soon as the worker's is closed.
            let channelsEnd = try #require(Self.identity(worker.channelsEnd))
            #expect(channelsEnd == pipe)
            worker.close()
            // The loop has seen the pipe's error once SwiftNIO has closed its write end
            // (bounded: 5 s).
            let deadline = ContinuousClock.now + .seconds(5)
            while Self.identity(worker.channelsEnd) == channelsEnd, ContinuousClock.now < deadline {
                try await Task.sleep(for: .milliseconds(5))
            }
            #expect(Self.identity(worker.channelsEnd) != channelsEnd, "SwiftNIO kept its write end open")
            #expect(link.channel.isActive, "SwiftNIO closed the whole channel itself")
            // What the link writes to is still the pipe, whatever SwiftNIO closed.
            let written = try await link.channel.eventLoop.submit { link.writtenDescriptor }.get()
            #expect(Self.identity(written) == pipe, "the link writes to a number that is no longer its pipe")
            // The number SwiftNIO closed is free, and most often (unless another test running
            // meanwhile took it) taken here by a probe pipe: the link's write must not reach it.
            var probe: [Int32] = [-1, -1]
            try #require(atrium_make_pipe(&probe) == 0)
            let placed = fcntl(probe[1], F_DUPFD_CLOEXEC, worker.channelsEnd)
            defer {
                close(probe[0])
                close(probe[1])
                if placed >= 0 { close(placed) }
            }
            try await link.channel.eventLoop.submit { link.send(.answered(id: 1)) }.get()
            if placed == worker.channelsEnd {
                try await link.channel.eventLoop.submit {}.get()
                var waiting = pollfd(fd: probe[0], events: Int16(POLLIN), revents: 0)
                #expect(poll(&waiting, 1, 0) == 0, "the frame went to the number SwiftNIO had closed")
            }
            let closed = try await withThrowingTaskGroup(of: Bool.self) { group in
                group.addTask {
                    try await link.channel.closeFuture.get()
                    return true
                }
                group.addTask {
                    try await Task.sleep(for: .seconds(10))
                    return false
                }
                defer { group.cancelAll() }
                return try await group.next() ?? false
            }
            #expect(closed, "the link stayed open after its write failed")
        }
    }
}
