import AtriumTransfers
import Testing

/// An upload's rules on one attachment, each refusal provoked: chunks in order, within the
/// window past what is on stable storage, never past the size, acknowledged only once synced.
struct UploadWindowTests {
    @Test func chunksInOrderWithinTheWindowAreWrittenAndAcknowledgedOnceSynced() {
        var upload = UploadWindow(held: 0, size: 10, maxSize: -1, window: 6)
        #expect(upload.chunk(offset: 0, count: 4, last: false) == .write(at: 0))
        #expect(upload.chunk(offset: 4, count: 2, last: false) == .write(at: 4))
        // Six bytes written, none synced: the window is full.
        #expect(upload.written == 6 && upload.held == 0)
        let ack = upload.synced(through: 6)
        #expect(ack.offset == 6 && ack.window == 6)
        #expect(!upload.isComplete)
        #expect(upload.chunk(offset: 6, count: 4, last: true, digest: [1, 2]) == .write(at: 6))
        #expect(!upload.isComplete, "the last bytes are not on stable storage yet")
        _ = upload.synced(through: 10)
        #expect(upload.isComplete && upload.finalSize == 10 && upload.announcedDigest == [1, 2])
    }

    @Test func anAckNeverCountsBytesNotWritten() {
        var upload = UploadWindow(held: 0, size: -1, maxSize: 100, window: 50)
        _ = upload.chunk(offset: 0, count: 10, last: false)
        #expect(upload.synced(through: 40).offset == 10)
        #expect(upload.synced(through: 5).offset == 10, "an ack never moves back")
    }

    @Test func aChunkNotAtTheNextByteIsRefusedAndTheRestIgnoredUntilANewAttach() {
        var upload = UploadWindow(held: 0, size: 100, maxSize: -1, window: 50)
        _ = upload.chunk(offset: 0, count: 10, last: false)
        #expect(upload.chunk(offset: 11, count: 5, last: false) == .refuse(.offsetMismatch))
        #expect(upload.chunk(offset: 10, count: 5, last: false) == .ignore)
        #expect(upload.refused == .offsetMismatch)
        // The new attach goes on from what is on stable storage: the unsynced ten bytes again.
        var resumed = UploadWindow(held: upload.held, size: 100, maxSize: -1, window: 50)
        #expect(resumed.chunk(offset: 10, count: 5, last: false) == .refuse(.offsetMismatch))
        var fromHeld = UploadWindow(held: 0, size: 100, maxSize: -1, window: 50)
        #expect(fromHeld.chunk(offset: 0, count: 10, last: false) == .write(at: 0))
    }

    @Test func bytesPastTheWindowAreRefused() {
        var upload = UploadWindow(held: 20, size: 100, maxSize: -1, window: 8)
        #expect(upload.chunk(offset: 20, count: 8, last: false) == .write(at: 20))
        #expect(upload.chunk(offset: 28, count: 1, last: false) == .refuse(.windowExceeded))
    }

    @Test func moreBytesThanTheSizeOrALastChunkShortOfItFailTheUpload() {
        var over = UploadWindow(held: 0, size: 10, maxSize: -1, window: 64)
        #expect(over.chunk(offset: 0, count: 11, last: false) == .fail(.lengthExceeded))
        var short = UploadWindow(held: 0, size: 10, maxSize: -1, window: 64)
        #expect(short.chunk(offset: 0, count: 9, last: true) == .fail(.lengthExceeded))
        var unknown = UploadWindow(held: 0, size: -1, maxSize: 16, window: 64)
        #expect(unknown.chunk(offset: 0, count: 16, last: false) == .write(at: 0))
        #expect(unknown.chunk(offset: 16, count: 1, last: false) == .fail(.lengthExceeded))
    }

    @Test func offsetsAndCountsAtTheEdgesOfTheirRangeAreRefusedNotTrappedOn() throws {
        var upload = UploadWindow(held: 0, size: 10, maxSize: -1, window: .max)
        #expect(upload.chunk(offset: .max, count: 1, last: false) == .refuse(.offsetMismatch))
        var unknown = UploadWindow(held: 0, size: -1, maxSize: -1, window: .max)
        #expect(unknown.chunk(offset: 0, count: .max, last: false) == .write(at: 0))
        #expect(unknown.chunk(offset: .max, count: 1, last: true) == .refuse(.windowExceeded))
        var download = try #require(DownloadWindow(size: .max, offset: .max - 1, window: .max, maxWindow: .max))
        #expect(download.nextChunk(maxBytes: .max) == (Int64.max - 1)..<Int64.max)
        #expect(download.ack(offset: .max, window: .max) == .complete)
    }

    @Test func anUploadOfUnknownSizeEndsWithItsLastChunk() {
        var upload = UploadWindow(held: 0, size: -1, maxSize: 1 << 20, window: 64)
        _ = upload.chunk(offset: 0, count: 30, last: false)
        #expect(upload.chunk(offset: 30, count: 0, last: true) == .write(at: 30))
        _ = upload.synced(through: 30)
        #expect(upload.isComplete && upload.finalSize == 30)
        #expect(upload.chunk(offset: 30, count: 1, last: false) == .ignore, "nothing after the last chunk")
    }
}

/// A download's rules on one attachment: sent from the client's offset, within its window (and
/// the host's own limit), moved by its acks; an ack that moves back or past what was sent is
/// refused.
struct DownloadWindowTests {
    @Test func chunksFollowTheWindowAndTheAcks() throws {
        var download = try #require(DownloadWindow(size: 10, offset: 2, window: 5, maxWindow: 100))
        #expect(download.nextChunk(maxBytes: 3) == 2..<5)
        #expect(download.nextChunk(maxBytes: 3) == 5..<7)
        #expect(download.nextChunk(maxBytes: 3) == nil, "the window (2 + 5) is full")
        #expect(download.inFlight == 5)
        #expect(download.ack(offset: 7, window: 5) == .moved)
        #expect(download.nextChunk(maxBytes: 8) == 7..<10)
        #expect(download.nextChunk(maxBytes: 8) == nil)
        #expect(download.ack(offset: 10, window: 0) == .complete)
        #expect(download.isComplete)
    }

    @Test func theHostsLimitBoundsAHugeWindow() throws {
        var download = try #require(DownloadWindow(size: 1 << 40, offset: 0, window: 1 << 40, maxWindow: 1 << 20))
        var sent: Int64 = 0
        while let range = download.nextChunk(maxBytes: 256 << 10) { sent += range.count.int64 }
        #expect(sent == 1 << 20, "a client that grants a terabyte and never acks gets a MiB")
    }

    @Test func anAckBackwardsOrPastWhatWasSentIsRefused() throws {
        var back = try #require(DownloadWindow(size: 10, offset: 4, window: 10, maxWindow: 10))
        _ = back.nextChunk(maxBytes: 4)
        #expect(back.ack(offset: 3, window: 4) == .refuse(.offsetMismatch))
        #expect(back.nextChunk(maxBytes: 4) == nil && back.ack(offset: 8, window: 4) == .ignore)
        var past = try #require(DownloadWindow(size: 10, offset: 0, window: 10, maxWindow: 10))
        _ = past.nextChunk(maxBytes: 4)
        #expect(past.ack(offset: 5, window: 4) == .refuse(.offsetMismatch))
    }

    @Test func anOffsetPastTheEndIsNoAttachment() {
        #expect(DownloadWindow(size: 10, offset: 11, window: 1, maxWindow: 1) == nil)
        #expect(DownloadWindow(size: 10, offset: -1, window: 1, maxWindow: 1) == nil)
        #expect(DownloadWindow(size: 10, offset: 10, window: 1, maxWindow: 1)?.isComplete == true)
    }
}

extension Int {
    var int64: Int64 { Int64(self) }
}
