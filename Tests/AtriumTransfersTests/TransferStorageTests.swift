import Foundation
import Testing

@testable import AtriumTransfers

/// The journal and the spool on a real file system: records replaced by later lines, a line a
/// crash cut short cut off, what is not a record named, the log compacted, records of the older
/// layout moved into the log; space reserved, bytes at their offsets, a disk without room
/// refused at once.
struct TransferStorageTests {
    static func folder(_ name: String) -> URL {
        let url = FileManager.default.temporaryDirectory.appendingPathComponent("atrium-\(name)-\(UUID())")
        try? FileManager.default.createDirectory(at: url, withIntermediateDirectories: true)
        return url
    }

    let now = Date(timeIntervalSince1970: 1_800_000_000)

    @Test func recordsSurviveAsWrittenAndAreReplacedWhole() throws {
        let folder = Self.folder("journal")
        defer { try? FileManager.default.removeItem(at: folder) }
        let journal = try TransferJournal(folder: folder)
        var record = TransferRecord(
            owner: .token("phone"), direction: .upload, package: "p", service: "s", name: "ü/../x", size: -1,
            maxSize: 1 << 30, now: now)
        try journal.write(record)
        record.offset = 4096
        record.phase = .completed
        record.result = [0xa1, 0x61, 0x61, 0x01]
        record.ended = now + 5
        try journal.write(record)
        let read = try journal.readAll()
        #expect(read.problems.isEmpty)
        #expect(read.records == [record])
        let mode = try FileManager.default.attributesOfItem(atPath: folder.path)[.posixPermissions] as? Int
        #expect(mode == 0o700)
        let logMode = try FileManager.default.attributesOfItem(atPath: journal.logFile.path)[.posixPermissions] as? Int
        #expect(logMode == 0o600)
        // Opened again (a restart): the same.
        #expect(try TransferJournal(folder: folder).readAll().records == [record])
        try journal.remove(record.id)
        #expect(try journal.readAll().records.isEmpty)
        #expect(try TransferJournal(folder: folder).readAll().records.isEmpty)
    }

    @Test func aBatchIsOneAppendAndALastLineACrashCutShortIsCutOff() throws {
        let folder = Self.folder("journal-batch")
        defer { try? FileManager.default.removeItem(at: folder) }
        let journal = try TransferJournal(folder: folder)
        let records = (0..<50).map { index in
            TransferRecord(
                owner: .client("c\(index)"), direction: .download, package: "p", service: "s", size: Int64(index),
                now: now)
        }
        try journal.commit(records.map { ($0.id, $0) })
        let gone = records[7].id
        try journal.commit([(gone, nil), (records[8].id, records[8])])
        let expected = records.filter { $0.id != gone }.sorted { $0.id.description < $1.id.description }
        #expect(try journal.readAll().records == expected)
        // A crash in the middle of a write: half a line at the end.
        let size = journal.size
        let handle = try FileHandle(forWritingTo: journal.logFile)
        try handle.seekToEnd()
        try handle.write(contentsOf: Data("{\"record\":{\"id\":".utf8))
        try handle.close()
        let reopened = try TransferJournal(folder: folder)
        #expect(reopened.size == size, "the cut line is removed")
        let read = try reopened.readAll()
        #expect(read.records == expected)
        #expect(read.problems.isEmpty, "\(read.problems)")
        // The next line starts clean.
        let later = TransferRecord(
            owner: .client("d"), direction: .upload, package: "p", service: "s", size: 1, now: now)
        try reopened.write(later)
        #expect(try TransferJournal(folder: folder).readAll().records.contains(later))
    }

    @Test func aWriteTheDiskCutShortIsCutOffAndNothingIsWrittenAfterItUntilItIs() throws {
        let folder = Self.folder("journal-full")
        defer { try? FileManager.default.removeItem(at: folder) }
        let journal = try TransferJournal(folder: folder)
        var upload = TransferRecord(
            owner: .client("u"), direction: .upload, package: "p", service: "s", size: 9, now: now)
        try journal.write(upload)
        let size = journal.size
        // A batch the disk cuts short: none of it is in the log, and its half is cut off.
        upload.offset = 4
        let other = TransferRecord(
            owner: .client("o"), direction: .download, package: "p", service: "s", size: 1, now: now)
        journal.injectedFailures.store(1, ordering: .relaxed)
        #expect(throws: TransferStorageError.self) { try journal.commit([(upload.id, upload), (other.id, other)]) }
        #expect(try Data(contentsOf: journal.logFile).count == Int(size))
        // A failed write whose half cannot be cut off: no batch is written after it (it would be
        // read after the half line) until the cut succeeds.
        journal.injectedFailures.store(1, ordering: .relaxed)
        journal.injectedCutFailures.store(2, ordering: .relaxed)
        #expect(throws: TransferStorageError.self) { try journal.write(upload) }
        #expect(try Data(contentsOf: journal.logFile).count > Int(size), "the half line is still there")
        #expect(throws: TransferStorageError.self) { try journal.write(other) }
        try journal.write(upload)
        try journal.write(other)
        let read = try TransferJournal(folder: folder).readAll()
        #expect(read.problems.isEmpty, "\(read.problems)")
        #expect(Set(read.records.map(\.id)) == [upload.id, other.id])
        #expect(read.records.first { $0.id == upload.id }?.offset == 4)
    }

    @Test func aLineThatIsNotARecordIsNamedAndTheRestRead() throws {
        let folder = Self.folder("journal-garbled")
        defer { try? FileManager.default.removeItem(at: folder) }
        let journal = try TransferJournal(folder: folder)
        let first = TransferRecord(
            owner: .client("a"), direction: .download, package: "p", service: "s", size: 1, now: now)
        try journal.write(first)
        let handle = try FileHandle(forWritingTo: journal.logFile)
        try handle.seekToEnd()
        try handle.write(contentsOf: Data("not json\n".utf8) + Data(count: 16) + Data("\n".utf8))
        // A line longer than any record: named, and the lines after it still read.
        try handle.write(
            contentsOf: Data(repeating: 0x41, count: TransferJournal.maxRecordBytes + 10) + Data("\n".utf8))
        try handle.close()
        let reopened = try TransferJournal(folder: folder)
        let read = try reopened.readAll()
        #expect(read.records == [first])
        #expect(read.problems.count == 3, "\(read.problems)")
        #expect(read.problems.contains { $0.contains("a record may have") }, "\(read.problems)")
        // Lines after them are read too; the next compaction (the log is now mostly lines that
        // are not records) leaves them out.
        let second = TransferRecord(
            owner: .client("b"), direction: .upload, package: "p", service: "s", size: 2, now: now)
        try reopened.write(second)
        #expect(reopened.size < 4096, "compacted: \(reopened.size) bytes")
        let after = try TransferJournal(folder: folder).readAll()
        #expect(Set(after.records.map(\.id)) == [first.id, second.id])
        #expect(after.problems.isEmpty, "\(after.problems)")
    }

    @Test func theLogIsCompactedToItsLatestLines() throws {
        let folder = Self.folder("journal-compact")
        defer { try? FileManager.default.removeItem(at: folder) }
        let journal = try TransferJournal(folder: folder)
        var kept = TransferRecord(
            owner: .client("k"), direction: .upload, package: "p", service: "s", size: -1, now: now)
        let removed = TransferRecord(
            owner: .client("r"), direction: .upload, package: "p", service: "s", size: 1, now: now)
        try journal.write(removed)
        try journal.remove(removed.id)
        // Many versions of one record, several MiB of lines: the log never grows past the point
        // where it compacts itself (by more than the batch that took it there).
        var appended: Int64 = 0
        var largest: Int64 = 0
        for offset in 0..<20_000 {
            let before = journal.size
            kept.offset = Int64(offset)
            try journal.write(kept)
            appended += max(journal.size - before, 0)
            largest = max(largest, journal.size)
        }
        #expect(appended > 4 << 20, "\(appended) bytes appended")
        #expect(largest <= (1 << 20) + 4096, "the log grew to \(largest) bytes")
        try journal.compact()
        let line = try Data(contentsOf: journal.logFile)
        #expect(line.count == Int(journal.size))
        #expect(line.filter { $0 == 0x0A }.count == 1, "one line: the latest of the one live transfer")
        let read = try TransferJournal(folder: folder).readAll()
        #expect(read.records == [kept])
        #expect(read.problems.isEmpty)
        #expect(!FileManager.default.fileExists(atPath: folder.appendingPathComponent(".transfers.log.new").path))
    }

    @Test func recordsOfTheOlderLayoutMoveIntoTheLog() throws {
        let folder = Self.folder("journal-older")
        defer { try? FileManager.default.removeItem(at: folder) }
        try FileManager.default.createDirectory(at: folder, withIntermediateDirectories: true)
        let older = (0..<3).map { index in
            TransferRecord(
                owner: .client("c\(index)"), direction: .download, package: "p", service: "s", size: 1, now: now)
        }
        for record in older {
            try Self.olderLayout(record).write(to: folder.appendingPathComponent("\(record.id).json"))
        }
        let journal = try TransferJournal(folder: folder)
        let read = try journal.readAll()
        #expect(read.records == older.sorted { $0.id.description < $1.id.description })
        #expect(read.problems.isEmpty, "\(read.problems)")
        #expect(try FileManager.default.contentsOfDirectory(atPath: folder.path) == ["transfers.log"])
        #expect(try TransferJournal(folder: folder).readAll().records.count == 3)
        // A file of the older layout for a transfer the log knows, even as removed (a move that
        // a crash interrupted), is stale: it never brings the transfer back.
        try journal.remove(older[0].id)
        try Self.olderLayout(older[0]).write(to: folder.appendingPathComponent("\(older[0].id).json"))
        #expect(try TransferJournal(folder: folder).readAll().records.count == 2)
        #expect(!FileManager.default.fileExists(atPath: folder.appendingPathComponent("\(older[0].id).json").path))
    }

    @Test func aTransferWhoseOlderFileStaysIsRemovedWithIt() throws {
        let folder = Self.folder("journal-older-kept")
        defer { try? FileManager.default.removeItem(at: folder) }
        try FileManager.default.createDirectory(at: folder, withIntermediateDirectories: true)
        // A record whose older file is readable but whose line would be over the limit (the
        // log's line wraps it): it cannot move into the log, and its file stays.
        var large = TransferRecord(
            owner: .client("c"), direction: .upload, package: "p", service: "s", size: 1, now: now)
        large.phase = .completed
        let limit = TransferJournal.maxRecordBytes
        // The file's size without the result's base64 (3 bytes are 4 characters), then a result
        // whose base64 takes the file to 4 to 8 bytes under the limit: its line, which wraps it
        // in `{"record":…}`, is over it.
        large.result = [1, 2, 3]
        let base = try Self.olderLayout(large).count - 4
        large.result = [UInt8](repeating: 0x41, count: (limit - 4 - base) / 4 * 3)
        let data = try Self.olderLayout(large)
        try #require(data.count < limit && data.count + 11 >= limit, "\(data.count)")
        let file = folder.appendingPathComponent("\(large.id).json")
        try data.write(to: file)
        let journal = try TransferJournal(folder: folder)
        let read = try journal.readAll()
        #expect(read.records == [large], "still read from its file")
        #expect(read.problems.count == 1 && read.problems[0].contains("not moved"), "\(read.problems)")
        #expect(FileManager.default.fileExists(atPath: file.path))
        // Removed (forgotten, say): its file goes with it, and it never comes back.
        try journal.remove(large.id)
        #expect(!FileManager.default.fileExists(atPath: file.path))
        #expect(try TransferJournal(folder: folder).readAll().records.isEmpty)
    }

    @Test func twoHostsNeverKeepTransfersInOneFolder() throws {
        let folder = Self.folder("journal-lock")
        defer { try? FileManager.default.removeItem(at: folder) }
        let held = try TransferJournal.lock(folder)
        #expect(throws: TransferStorageError.self) { _ = try TransferJournal.lock(folder) }
        do {
            _ = try TransferJournal.lock(folder)
        } catch {
            #expect(error.description.contains("another process"), "\(error)")
        }
        close(held)
        let again = try TransferJournal.lock(folder)
        close(again)
    }

    /// A record as the older layout's file held it.
    static func olderLayout(_ record: TransferRecord) throws -> Data {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys]
        encoder.dateEncodingStrategy = .millisecondsSince1970
        return try encoder.encode(record)
    }

    @Test func olderLayoutFilesCutShortOrNotRecordsLeaveTheRestReadable() throws {
        let folder = Self.folder("journal-bad")
        defer { try? FileManager.default.removeItem(at: folder) }
        let journal = try TransferJournal(folder: folder)
        let good = TransferRecord(
            owner: .localUser(1000), direction: .download, package: "p", service: "s", size: 1, now: now)
        try journal.write(good)
        let cut = folder.appendingPathComponent(".\(TransferID()).json.new")
        try Data("{\"id\":".utf8).write(to: cut)
        try Data("not json".utf8).write(to: folder.appendingPathComponent("\(TransferID()).json"))
        // A record under another transfer's name is not taken for it.
        let other = TransferID()
        let stranger = TransferRecord(
            owner: .localUser(1), direction: .download, package: "p", service: "s", size: 1, now: now)
        try Self.olderLayout(stranger).write(to: folder.appendingPathComponent("\(other).json"))
        let read = try journal.readAll()
        #expect(read.records == [good])
        #expect(read.problems.count == 2, "\(read.problems)")
        #expect(read.problems.contains { $0.contains("not the one its name says") })
        #expect(!FileManager.default.fileExists(atPath: cut.path), "the cut-short write is removed")
    }

    @Test func bytesGoToTheirOffsetsAndTheSpaceIsReserved() throws {
        let folder = Self.folder("spool")
        defer { try? FileManager.default.removeItem(at: folder) }
        let id = TransferID()
        let spool = try SpoolFile.open(id, in: folder, reserve: 1 << 20)
        let attributes = try FileManager.default.attributesOfItem(atPath: spool.url.path)
        #expect((attributes[.size] as? Int) == 1 << 20, "the whole size is taken when the upload is accepted")
        try [UInt8](repeating: 7, count: 10).withUnsafeBytes { try spool.write($0, at: 0) }
        try [UInt8](repeating: 9, count: 5).withUnsafeBytes { try spool.write($0, at: 10) }
        try spool.sync()
        try spool.truncate(to: 15)
        spool.close()
        let bytes = try [UInt8](Data(contentsOf: folder.appendingPathComponent("\(id).part")))
        #expect(bytes == [UInt8](repeating: 7, count: 10) + [UInt8](repeating: 9, count: 5))
        SpoolFile.remove(id, in: folder)
        #expect(!FileManager.default.fileExists(atPath: folder.appendingPathComponent("\(id).part").path))
    }

    @Test func anUploadTheDiskCannotHoldIsRefusedAtOnce() throws {
        let folder = Self.folder("spool-full")
        defer { try? FileManager.default.removeItem(at: folder) }
        let free = try #require(SpoolFile.freeBytes(of: folder))
        // More than the disk has free: refused before a byte is written.
        #expect(throws: SpoolError.self) { _ = try SpoolFile.open(TransferID(), in: folder, reserve: free + (1 << 30)) }
        // Room for the bytes, but not for the floor the host keeps free (one no disk has: the
        // free space moves while the test runs).
        #expect(throws: SpoolError.self) {
            _ = try SpoolFile.open(TransferID(), in: folder, reserve: 4096, floor: Int64.max / 2)
        }
        #expect(try FileManager.default.contentsOfDirectory(atPath: folder.path).isEmpty, "a refused file is not left")
        // A resumed upload's file is never removed by a refusal.
        let id = TransferID()
        let kept = try SpoolFile.open(id, in: folder)
        kept.close()
        #expect(throws: SpoolError.self) { _ = try SpoolFile.open(id, in: folder, reserve: free + (1 << 30)) }
        #expect(FileManager.default.fileExists(atPath: kept.url.path))
    }

    @Test func linksAndFilesThatAreNotRegularAreNeverFollowed() throws {
        let folder = Self.folder("links")
        defer { try? FileManager.default.removeItem(at: folder) }
        let outside = folder.appendingPathComponent("outside")
        try Data("keep".utf8).write(to: outside)
        // A spool file that is a link to a file outside: refused, the file untouched.
        let id = TransferID()
        try FileManager.default.createSymbolicLink(
            at: folder.appendingPathComponent("\(id).part"), withDestinationURL: outside)
        #expect(throws: SpoolError.self) { _ = try SpoolFile.open(id, in: folder, reserve: 1 << 20) }
        #expect(try Data(contentsOf: outside) == Data("keep".utf8))
        // A log that is a link: refused, not followed.
        let linked = folder.appendingPathComponent("linked")
        try FileManager.default.createDirectory(at: linked, withIntermediateDirectories: true)
        try FileManager.default.createSymbolicLink(
            at: linked.appendingPathComponent("transfers.log"), withDestinationURL: outside)
        #expect(throws: TransferStorageError.self) { _ = try TransferJournal(folder: linked) }
        #expect(try Data(contentsOf: outside) == Data("keep".utf8))
        // A log that is a FIFO: refused without waiting on it.
        let piped = folder.appendingPathComponent("piped")
        try FileManager.default.createDirectory(at: piped, withIntermediateDirectories: true)
        #expect(mkfifo(piped.appendingPathComponent("transfers.log").path, 0o600) == 0)
        #expect(throws: TransferStorageError.self) { _ = try TransferJournal(folder: piped) }
        // A compaction whose temporary file is a link: the link goes, the log is compacted.
        let journal = try TransferJournal(folder: folder.appendingPathComponent("journal"))
        let record = TransferRecord(
            owner: .client("c"), direction: .download, package: "p", service: "s", size: 1, now: now)
        try journal.write(record)
        try FileManager.default.createSymbolicLink(
            at: journal.folder.appendingPathComponent(".transfers.log.new"), withDestinationURL: outside)
        try journal.compact()
        #expect(try Data(contentsOf: outside) == Data("keep".utf8))
        #expect(try journal.readAll().records == [record])
        // A file of the older layout that is a link, or a FIFO, is named and skipped, not
        // followed or waited on.
        try FileManager.default.createSymbolicLink(
            at: journal.folder.appendingPathComponent("\(TransferID()).json"), withDestinationURL: outside)
        #expect(mkfifo(journal.folder.appendingPathComponent("\(TransferID()).json").path, 0o600) == 0)
        let read = try journal.readAll()
        #expect(read.records == [record])
        #expect(read.problems.count == 2, "\(read.problems)")
    }

    @Test func aRecordLargerThanAnyTheHostWritesIsNotRead() throws {
        let folder = Self.folder("journal-large")
        defer { try? FileManager.default.removeItem(at: folder) }
        let journal = try TransferJournal(folder: folder)
        try Data(count: TransferJournal.maxRecordBytes + 1).write(
            to: folder.appendingPathComponent("\(TransferID()).json"))
        let read = try journal.readAll()
        #expect(read.records.isEmpty)
        #expect(read.problems.count == 1 && read.problems[0].contains("a record may have"), "\(read.problems)")
    }

    @Test func aResultAsLargeAsAMessageFitsItsRecord() throws {
        let folder = FileManager.default.temporaryDirectory.appendingPathComponent("atrium-journal-\(UUID())")
        let journal = try TransferJournal(folder: folder)
        var record = TransferRecord(
            owner: .client("c"), direction: .upload, package: "p", service: "s", size: 1, now: Date())
        record.phase = .completed
        record.result = [UInt8](repeating: 0x41, count: 1 << 20)
        try journal.write(record)
        let read = try journal.readAll()
        #expect(read.problems.isEmpty, "\(read.problems)")
        #expect(read.records.first?.result == record.result)
    }
}
