import AtriumProtocol
import NIOConcurrencyHelpers
import NIOCore

#if canImport(Glibc)
    import Glibc
#endif

/// One link to the host as the worker process holds it: a blocking socket that a thread of its
/// own reads, and that any thread writes under a lock. No event loop: a request costs the
/// worker one `read`, the plugin's call and one `write` (BENCHMARKS.md, "Worker processes").
///
/// Frames written while the reading thread handles what one `read` brought (a batch) go out
/// together when the batch ends, after the frames written before them: a plugin's answers to a
/// burst of requests cost one write, and the host sees every frame in the order it was written.
final class WorkerSocket: @unchecked Sendable {
    let descriptor: Int32
    private struct Outgoing {
        var buffer = ByteBuffer()
        /// Whether the reading thread is handling a batch (it writes `buffer` when done).
        var batching = false
        /// Whether a write failed: the host is gone, and the reading side ends the worker.
        var broken = false
    }
    private let outgoing = NIOLockedValueBox(Outgoing())
    /// The reading thread, once it runs (never changes after).
    private let reader = NIOLockedValueBox<pthread_t?>(nil)

    init(_ descriptor: Int32) {
        self.descriptor = descriptor
        // The host made the pair; this end blocks, whatever flags it came with.
        let flags = fcntl(descriptor, F_GETFL)
        if flags >= 0, flags & O_NONBLOCK != 0 { _ = fcntl(descriptor, F_SETFL, flags & ~O_NONBLOCK) }
    }

    /// Whether the calling thread is the one reading this socket, where nothing may wait for
    /// the host's reply (it is the thread that would read it).
    var isReadingThread: Bool {
        guard let reader = reader.withLockedValue({ $0 }) else { return false }
        return pthread_equal(reader, pthread_self()) != 0
    }

    /// Sends `frame`: at once, or at the end of the reading thread's batch if one is running.
    func send(_ frame: WorkerFrame) {
        outgoing.withLockedValue { outgoing in
            outgoing.buffer.writeFrame(frame)
            if !outgoing.batching { write(&outgoing) }
        }
    }

    /// Sends `frame` and everything before it at once, batch or not: for the last thing a
    /// worker says before it exits.
    func sendNow(_ frame: WorkerFrame) {
        outgoing.withLockedValue { outgoing in
            outgoing.buffer.writeFrame(frame)
            write(&outgoing)
        }
    }

    private func write(_ outgoing: inout Outgoing) {
        while outgoing.buffer.readableBytes > 0, !outgoing.broken {
            let written = outgoing.buffer.withUnsafeReadableBytes { Glibc.write(descriptor, $0.baseAddress, $0.count) }
            if written > 0 {
                outgoing.buffer.moveReaderIndex(forwardBy: written)
            } else if written < 0, errno == EINTR {
                continue
            } else {
                outgoing.broken = true
            }
        }
        outgoing.buffer.clear()
    }

    /// Reads frames and hands each to `received`, on the calling thread, until the host closes
    /// the socket (nil) or something breaks (the reason).
    func run(maxFrameBytes: Int, _ received: (WorkerFrame) -> Void) -> String? {
        reader.withLockedValue { $0 = pthread_self() }
        let decoder = FrameDecoder<WorkerFrame>(maxFrameBytes: maxFrameBytes)
        var buffer = ByteBufferAllocator().buffer(capacity: 64 << 10)
        while true {
            var failure: Int32 = 0
            let count = buffer.writeWithUnsafeMutableBytes(minimumWritableBytes: 16 << 10) { space -> Int in
                while true {
                    let count = read(descriptor, space.baseAddress, space.count)
                    if count >= 0 { return count }
                    if errno != EINTR {
                        failure = errno
                        return 0
                    }
                }
            }
            if failure != 0 { return "reading the host's socket failed: errno \(failure)" }
            if count == 0 {
                return buffer.readableBytes == 0
                    ? nil : "the host closed the socket \(buffer.readableBytes) bytes into a frame"
            }
            outgoing.withLockedValue { $0.batching = true }
            defer {
                outgoing.withLockedValue { outgoing in
                    outgoing.batching = false
                    write(&outgoing)
                }
            }
            do {
                while let frame = try decoder.decodeFrame(from: &buffer) { received(frame) }
            } catch {
                return "a frame from the host is not readable: \(error)"
            }
            if outgoing.withLockedValue({ $0.broken }) { return "writing to the host's socket failed" }
            buffer.discardReadBytes()
        }
    }
}
