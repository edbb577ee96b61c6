import NIOCore

#if canImport(Glibc)
    import Glibc
#endif

extension ByteBuffer {
    /// Writes what the buffer holds to `descriptor`, the nonblocking write end of a pipe, as far
    /// as the pipe takes it without waiting, and moves the reader index past what went. Returns 0
    /// when all of it went, else the errno that stopped it: `EAGAIN` (or `EWOULDBLOCK`) when the
    /// pipe is full, anything else when it failed (`EPIPE`: the reading end is closed; the host
    /// (``AtriumServer``) and its workers (``WorkerMain``) ignore SIGPIPE, so that is an error
    /// here, not a signal, unless a worker's plugin sets SIGPIPE back, which ends only its own
    /// worker).
    mutating func writeWithoutWaiting(to descriptor: Int32) -> Int32 {
        while readableBytes > 0 {
            let written = withUnsafeReadableBytes {
                Glibc.write(descriptor, $0.baseAddress, $0.count)
            }
            if written > 0 {
                moveReaderIndex(forwardBy: written)
            } else if written < 0, errno == EINTR {
                continue
            } else {
                // A pipe takes at least a byte, or says why not.
                return written < 0 ? errno : EIO
            }
        }
        return 0
    }
}

/// Whether `error`, from ``NIOCore/ByteBuffer/writeWithoutWaiting(to:)``, says the pipe is full.
func pipeIsFull(_ error: Int32) -> Bool {
    error == EAGAIN || error == EWOULDBLOCK
}
