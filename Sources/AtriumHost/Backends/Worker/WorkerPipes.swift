import AtriumProtocol
import Foundation
import NIOCore

#if canImport(Glibc)
    import Glibc
#endif

/// One link to the host as the worker process holds it: a pipe from the host that a thread of
/// its own reads (blocking in `read`), and a pipe to the host that any thread writes. No event
/// loop: a request costs the worker one `read`, the plugin's call and one `write` (BENCHMARKS.md,
/// "The worker's links as pipes").
///
/// Frames written while the reading thread handles what one `read` brought (a batch) go out
/// together when the batch ends, after the frames written before them: a plugin's answers to a
/// burst of requests cost one write, and the host sees every frame in the order it was written.
///
/// Writing never blocks the reading thread: the host stops reading a worker whose input it has
/// not drained (its own output to the worker over the high-water mark), and a worker blocked
/// in a write would then never drain it. Writes are nonblocking; what the pipe does not take
/// at once goes to a writer thread, which waits for the pipe to take it while the reading
/// thread reads on.
final class WorkerPipes: @unchecked Sendable {
    /// The read end of the pipe from the host.
    let input: Int32
    /// The write end of the pipe to the host.
    let output: Int32
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

    init(input: Int32, output: Int32) {
        self.input = input
        self.output = output
        // Reads block and writes do not, whatever flags the host's pipes came with: the two ends
        // are this worker's alone, so their flags are too.
        let reading = fcntl(input, F_GETFL)
        if reading >= 0, reading & O_NONBLOCK != 0 { _ = fcntl(input, F_SETFL, reading & ~O_NONBLOCK) }
        let writing = fcntl(output, F_GETFL)
        if writing >= 0, writing & O_NONBLOCK == 0 { _ = fcntl(output, F_SETFL, writing | O_NONBLOCK) }
    }

    private func locked<Result>(_ body: () -> Result) -> Result {
        condition.lock()
        defer { condition.unlock() }
        return body()
    }

    /// Whether the calling thread is the one reading this link, where nothing may wait for
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
    /// the pipe has taken it all: for the last thing a worker says before it exits.
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

    /// Writes what `buffer` holds as far as the pipe takes it without waiting; the rest is
    /// the writer thread's. Called with the lock held.
    private func flushLocked() {
        guard !broken, buffer.readableBytes > 0 else {
            if broken { buffer.clear() }
            return
        }
        // Bytes the writer holds go first: later ones wait behind them.
        guard !writerBusy else { return }
        let error = buffer.writeWithoutWaiting(to: output)
        if error == 0 {
            buffer.clear()
        } else if pipeIsFull(error) {
            startWriterIfNeeded()
            condition.broadcast()
        } else {
            broken = true
            buffer.clear()
            condition.broadcast()
        }
    }

    /// The thread that waits for the pipe to take what it did not take at once. Called with
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
                var ready = pollfd(fd: output, events: Int16(POLLOUT), revents: 0)
                _ = poll(&ready, 1, -1)
                let error = taken.writeWithoutWaiting(to: output)
                failed = error != 0 && !pipeIsFull(error)
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
    /// its end of the pipe (nil) or something breaks (the reason).
    func run(maxFrameBytes: Int, _ received: (WorkerFrame) -> Void) -> String? {
        locked { reader = pthread_self() }
        let decoder = FrameDecoder<WorkerFrame>(maxFrameBytes: maxFrameBytes)
        var bytes = ByteBufferAllocator().buffer(capacity: 64 << 10)
        while true {
            var failure: Int32 = 0
            let count = bytes.writeWithUnsafeMutableBytes(minimumWritableBytes: 16 << 10) { space -> Int in
                while true {
                    // Blocks in read: only the host writing to this pipe (or closing it) wakes
                    // the thread. (A thread blocked reading a Unix socket was also woken each
                    // time the host read what this worker wrote, which cost a switch in and out
                    // a request, and made it wait in poll first: one more system call.)
                    let count = read(input, space.baseAddress, space.count)
                    if count >= 0 { return count }
                    if errno != EINTR {
                        failure = errno
                        return 0
                    }
                }
            }
            if failure != 0 { return "reading the host's pipe failed: errno \(failure)" }
            if count == 0 {
                return bytes.readableBytes == 0
                    ? nil : "the host closed its pipe \(bytes.readableBytes) bytes into a frame"
            }
            locked { batching = true }
            defer {
                locked {
                    batching = false
                    flushLocked()
                }
            }
            do {
                while let frame = try decoder.decodeFrame(from: &bytes) { received(frame) }
            } catch {
                return "a frame from the host is not readable: \(error)"
            }
            if locked({ broken }) { return "writing to the host's pipe failed" }
            bytes.discardReadBytes()
        }
    }
}
