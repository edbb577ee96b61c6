import AtriumTransfers
import Foundation
import Testing

/// The journal and the spool on a real file system: records replaced whole, a write a crash cut
/// short left behind, what is not a record named; space reserved, bytes at their offsets, a
/// disk without room refused at once.
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
        let read = journal.readAll()
        #expect(read.problems.isEmpty)
        #expect(read.records == [record])
        let mode = try FileManager.default.attributesOfItem(atPath: folder.path)[.posixPermissions] as? Int
        #expect(mode == 0o700)
        try journal.remove(record.id)
        #expect(journal.readAll().records.isEmpty)
    }

    @Test func aWriteCutShortAndFilesThatAreNotRecordsLeaveTheRestReadable() throws {
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
        try Data(contentsOf: folder.appendingPathComponent("\(good.id).json"))
            .write(to: folder.appendingPathComponent("\(other).json"))
        let read = journal.readAll()
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
        // A journal whose temporary file is a link: the link goes, the record is written.
        let journal = try TransferJournal(folder: folder.appendingPathComponent("journal"))
        let record = TransferRecord(
            owner: .client("c"), direction: .download, package: "p", service: "s", size: 1, now: now)
        try FileManager.default.createSymbolicLink(
            at: journal.folder.appendingPathComponent(".\(record.id).json.new"), withDestinationURL: outside)
        try journal.write(record)
        #expect(try Data(contentsOf: outside) == Data("keep".utf8))
        #expect(journal.readAll().records == [record])
        // A record that is a link, or a FIFO, is named and skipped, not followed or waited on.
        try FileManager.default.createSymbolicLink(
            at: journal.folder.appendingPathComponent("\(TransferID()).json"), withDestinationURL: outside)
        #expect(mkfifo(journal.folder.appendingPathComponent("\(TransferID()).json").path, 0o600) == 0)
        let read = journal.readAll()
        #expect(read.records == [record])
        #expect(read.problems.count == 2, "\(read.problems)")
    }

    @Test func aRecordLargerThanAnyTheHostWritesIsNotRead() throws {
        let folder = Self.folder("journal-large")
        defer { try? FileManager.default.removeItem(at: folder) }
        let journal = try TransferJournal(folder: folder)
        try Data(count: TransferJournal.maxRecordBytes + 1).write(
            to: folder.appendingPathComponent("\(TransferID()).json"))
        let read = journal.readAll()
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
        let read = journal.readAll()
        #expect(read.problems.isEmpty, "\(read.problems)")
        #expect(read.records.first?.result == record.result)
    }
}
