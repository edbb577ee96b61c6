import AtriumProtocol
import Foundation
import NIOCore

#if canImport(Glibc)
    import Glibc
#endif

/// One link to the host as the worker process holds it: a socket that a thread of its own
/// reads (waiting in `poll`), and that any thread writes. No event loop: a request costs the
/// worker one `poll`, one `read`, the plugin's call and one `write` (BENCHMARKS.md, "Worker
/// processes").
///
/// Frames written while the reading thread handles what one `read` brought (a batch) go out
/// together when the batch ends, after the frames written before them: a plugin's answers to a
/// burst of requests cost one write, and the host sees every frame in the order it was written.
///
/// Writing never blocks the reading thread: the host stops reading a worker whose input it has
/// not drained (its own output to the worker over the high-water mark), and a worker blocked
/// in a write would then never drain it. Writes are nonblocking; what the socket does not take
/// at once goes to a writer thread, which waits for the socket to take it while the reading
/// thread reads on.
final class WorkerSocket: @unchecked Sendable {
    let descriptor: Int32
    /// Guards everything below; the writer thread waits on it.
    private let condition = NSCondition()
    private var buffer = ByteBuffer()
    /// Whether the reading thread is handling a batch (it writes `buffer` when done).
    private var batching = false
    /// Whether the writer thread holds bytes taken from `buffer` (later ones wait behind them).
    private var writerBusy = false
    private var writerStarted = false
    /// Whether a write failed: the host is gone, and the reading side ends the worker.
    private var broken = false
    /// The reading thread, once it runs (never changes after).
    private var reader: pthread_t?

    init(_ descriptor: Int32) {
        self.descriptor = descriptor
        // The host made the pair; reads on this end block, whatever flags it came with (writes
        // say MSG_DONTWAIT themselves).
        let flags = fcntl(descriptor, F_GETFL)
        if flags >= 0, flags & O_NONBLOCK != 0 { _ = fcntl(descriptor, F_SETFL, flags & ~O_NONBLOCK) }
    }

    private func locked<Result>(_ body: () -> Result) -> Result {
        condition.lock()
        defer { condition.unlock() }
        return body()
    }

    /// Whether the calling thread is the one reading this socket, where nothing may wait for
    /// the host's reply (it is the thread that would read it).
    var isReadingThread: Bool {
        guard let reader = locked({ reader }) else { return false }
        return pthread_equal(reader, pthread_self()) != 0
    }

    /// Sends `frame`: at once, or at the end of the reading thread's batch if one is running.
    func send(_ frame: WorkerFrame) {
        locked {
            buffer.writeFrame(frame)
            if !batching { flushLocked() }
        }
    }

    /// Sends `frame` and everything before it, batch or not, and waits (at most 5 seconds) until
    /// the socket has taken it all: for the last thing a worker says before it exits.
    func sendNow(_ frame: WorkerFrame) {
        condition.lock()
        defer { condition.unlock() }
        buffer.writeFrame(frame)
        flushLocked()
        let deadline = Date() + 5
        while !broken, buffer.readableBytes > 0 || writerBusy {
            guard condition.wait(until: deadline) else { return }
        }
    }

    /// Writes what `buffer` holds as far as the socket takes it without waiting; the rest is
    /// the writer thread's. Called with the lock held.
    private func flushLocked() {
        guard !broken, buffer.readableBytes > 0 else {
            if broken { buffer.clear() }
            return
        }
        // Bytes the writer holds go first: later ones wait behind them.
        guard !writerBusy else { return }
        let error = buffer.sendWithoutWaiting(on: descriptor)
        if error == 0 {
            buffer.clear()
        } else if socketIsFull(error) {
            startWriterIfNeeded()
            condition.broadcast()
        } else {
            broken = true
            buffer.clear()
            condition.broadcast()
        }
    }

    /// The thread that waits for the socket to take what it did not take at once. Called with
    /// the lock held.
    private func startWriterIfNeeded() {
        guard !writerStarted else { return }
        writerStarted = true
        let thread = Thread { [self] in writeWhenWritable() }
        thread.stackSize = 256 << 10
        thread.start()
    }

    private func writeWhenWritable() {
        condition.lock()
        while true {
            // Not held back by a batch: what waits here is already late.
            while !broken, buffer.readableBytes == 0 {
                condition.wait()
            }
            if broken {
                condition.unlock()
                return
            }
            var taken = buffer
            buffer = ByteBuffer()
            writerBusy = true
            condition.unlock()
            var failed = false
            while taken.readableBytes > 0, !failed {
                var ready = pollfd(fd: descriptor, events: Int16(POLLOUT), revents: 0)
                _ = poll(&ready, 1, -1)
                let error = taken.sendWithoutWaiting(on: descriptor)
                failed = error != 0 && !socketIsFull(error)
            }
            condition.lock()
            writerBusy = false
            if failed {
                broken = true
                buffer.clear()
            }
            condition.broadcast()
        }
    }

    /// Reads frames and hands each to `received`, on the calling thread, until the host closes
    /// the socket (nil) or something breaks (the reason).
    func run(maxFrameBytes: Int, _ received: (WorkerFrame) -> Void) -> String? {
        locked { reader = pthread_self() }
        let decoder = FrameDecoder<WorkerFrame>(maxFrameBytes: maxFrameBytes)
        var input = ByteBufferAllocator().buffer(capacity: 64 << 10)
        while true {
            var failure: Int32 = 0
            let count = input.writeWithUnsafeMutableBytes(minimumWritableBytes: 16 << 10) { space -> Int in
                while true {
                    // Waits in poll, not in read: a thread asleep in a Unix socket's read is
                    // woken each time the host reads what this worker wrote (the kernel tells
                    // the socket's writers there is room, and a read's wait does not tell
                    // that from data), which cost a context switch in and out per request.
                    // poll sleeps until there is something to read (or the socket ends).
                    var ready = pollfd(fd: descriptor, events: Int16(POLLIN), revents: 0)
                    if poll(&ready, 1, -1) < 0 {
                        if errno == EINTR { continue }
                        failure = errno
                        return 0
                    }
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
                return input.readableBytes == 0
                    ? nil : "the host closed the socket \(input.readableBytes) bytes into a frame"
            }
            locked { batching = true }
            defer {
                locked {
                    batching = false
                    flushLocked()
                }
            }
            do {
                while let frame = try decoder.decodeFrame(from: &input) { received(frame) }
            } catch {
                return "a frame from the host is not readable: \(error)"
            }
            if locked({ broken }) { return "writing to the host's socket failed" }
            input.discardReadBytes()
        }
    }
}
