import AtriumTransfers
import NIOCore

// A download's bytes as the connections send them: in buffers of the connection's allocator.

extension DownloadFile {
    /// `range` of the file if the page cache holds all of it and the file is unchanged; nil when
    /// it must be read off the event loop (which also says why a read fails).
    func cachedBuffer(_ range: Range<Int64>, allocator: ByteBufferAllocator) -> ByteBuffer? {
        let count = Int(range.count)
        var buffer = allocator.buffer(capacity: count)
        var read = false
        buffer.writeWithUnsafeMutableBytes(minimumWritableBytes: count) { memory in
            read = readCached(into: memory, count: count, at: range.lowerBound)
            return read ? count : 0
        }
        guard read, isUnchanged else { return nil }
        return buffer
    }

    enum ReadFailure: Error { case changed, unreadable }

    /// Reads `range` of the file, off the event loop: only from a file still as it was offered.
    func buffer(_ range: Range<Int64>, allocator: ByteBufferAllocator) -> Result<ByteBuffer, ReadFailure> {
        guard isUnchanged else { return .failure(.changed) }
        let count = Int(range.count)
        var buffer = allocator.buffer(capacity: count)
        var failed = false
        buffer.writeWithUnsafeMutableBytes(minimumWritableBytes: count) { memory in
            let got = read(into: memory, count: count, at: range.lowerBound)
            failed = got != count
            return got ?? 0
        }
        return failed ? .failure(.unreadable) : .success(buffer)
    }
}
