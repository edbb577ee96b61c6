import NIOCore

#if canImport(Glibc)
    import Glibc
#endif

extension ByteBuffer {
    /// Sends what the buffer holds on the stream socket `descriptor` as far as the socket takes
    /// it without waiting, and moves the reader index past what went. Returns 0 when all of it
    /// went, else the errno that stopped it: `EAGAIN` (or `EWOULDBLOCK`) when the socket is
    /// full, anything else when it failed. Never raises SIGPIPE.
    mutating func sendWithoutWaiting(on descriptor: Int32) -> Int32 {
        while readableBytes > 0 {
            let written = withUnsafeReadableBytes {
                Glibc.send(descriptor, $0.baseAddress, $0.count, Int32(MSG_DONTWAIT | MSG_NOSIGNAL))
            }
            if written > 0 {
                moveReaderIndex(forwardBy: written)
            } else if written < 0, errno == EINTR {
                continue
            } else {
                // A stream socket takes at least a byte, or says why not.
                return written < 0 ? errno : EIO
            }
        }
        return 0
    }
}

/// Whether `error`, from ``NIOCore/ByteBuffer/sendWithoutWaiting(on:)``, says the socket is full.
func socketIsFull(_ error: Int32) -> Bool {
    error == EAGAIN || error == EWOULDBLOCK
}
