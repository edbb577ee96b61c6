import AtriumTransfers
import Foundation
import Testing

/// The host's table of transfers, driven without a socket: ownership, the latest attach,
/// the limits per caller and in all, cursors, forgetting, revocation, expiry and retention.
struct TransferTableTests {
    let alice = TransferOwner.identity("a11ce")
    let mallory = TransferOwner.identity("6ad")
    let start = Date(timeIntervalSince1970: 1_800_000_000)

    func record(_ owner: TransferOwner, _ direction: TransferDirection = .download, size: Int64 = 100)
        -> TransferRecord
    {
        TransferRecord(
            owner: owner, direction: direction, package: "atrium.examples.files", service: "atrium.files",
            name: "a.jpg", size: size, now: start)
    }

    func added(_ table: inout TransferTable, _ record: TransferRecord) throws -> TransferRecord {
        try table.add(record).get()
    }

    @Test func anotherCallersTransferIsNotFound() throws {
        var table = TransferTable(limits: TransferLimits())
        let mine = try added(&table, record(alice))
        #expect(table.find(mine.id, owner: alice) != nil)
        #expect(table.find(mine.id, owner: mallory) == nil)
        #expect(table.attach(mine.id, owner: mallory, connection: 9, now: start) == .failure(.notFound))
        #expect(table.cancel(mine.id, owner: mallory, now: start) == nil)
        #expect(table.forget([mine.id], owner: mallory).isEmpty)
        #expect(table.changes(of: mallory, since: nil).records.isEmpty)
        #expect(table.find(mine.id, owner: alice)?.phase == .waiting, "nothing Mallory did touched it")
    }

    @Test func theLatestAttachWinsAndTheEarlierConnectionIsNamed() throws {
        var table = TransferTable(limits: TransferLimits())
        let transfer = try added(&table, record(alice))
        let first = try table.attach(transfer.id, owner: alice, connection: 1, now: start).get()
        #expect(first.displaced == nil && first.record.phase == .running)
        let second = try table.attach(transfer.id, owner: alice, connection: 2, now: start).get()
        #expect(second.displaced == 1)
        #expect(table.connection(of: transfer.id) == 2)
        // The first connection's detach no longer detaches it.
        #expect(table.detach(transfer.id, from: 1) == nil)
        #expect(table.detach(transfer.id, from: 2)?.phase == .waiting)
    }

    @Test func attachmentsAreLimitedPerConnectionAndPerCaller() throws {
        var table = TransferTable(limits: TransferLimits(attachedPerConnection: 2, attachedPerCaller: 3))
        let ids = try (0..<4).map { _ in try added(&table, record(alice)).id }
        #expect((try? table.attach(ids[0], owner: alice, connection: 1, now: start).get()) != nil)
        #expect((try? table.attach(ids[1], owner: alice, connection: 1, now: start).get()) != nil)
        #expect(table.attach(ids[2], owner: alice, connection: 1, now: start) == .failure(.tooManyOnConnection(2)))
        #expect((try? table.attach(ids[2], owner: alice, connection: 2, now: start).get()) != nil)
        #expect(table.attach(ids[3], owner: alice, connection: 3, now: start) == .failure(.tooManyOfCaller(3)))
        // Attaching one already attached elsewhere moves it: not one more.
        #expect((try? table.attach(ids[0], owner: alice, connection: 2, now: start).get())?.displaced == 1)
        let closed = table.connectionClosed(2)
        #expect(Set(closed.map(\.id)) == [ids[0], ids[2]])
        #expect(closed.allSatisfy { $0.phase == .waiting })
    }

    @Test func unfinishedTransfersAndSpoolBytesAreLimitedPerCallerAndInAll() throws {
        var table = TransferTable(
            limits: TransferLimits(unfinishedPerCaller: 2, unfinished: 3, spoolBytesPerCaller: 150, spoolBytes: 250))
        _ = try added(&table, record(alice, .upload, size: 100))
        #expect(table.add(record(alice, .upload, size: 60)) == .failure(.spoolOfCaller(150)))
        let small = try added(&table, record(alice, .upload, size: 50))
        #expect(table.add(record(alice)) == .failure(.tooManyOfCaller(2)))
        _ = try added(&table, record(mallory, .upload, size: 100))
        #expect(table.add(record(mallory, .upload, size: 10)) == .failure(.tooMany(3)))
        // An ended transfer no longer counts.
        _ = table.cancel(small.id, owner: alice, now: start)
        #expect((try? table.add(record(mallory)).get()) != nil)
        // One of unknown size grows within the same limits.
        var growing = TransferTable(limits: TransferLimits(spoolBytesPerCaller: 150))
        let unknown = try added(&growing, record(alice, .upload, size: -1))
        #expect(growing.mayGrow(unknown.id, to: 150) && !growing.mayGrow(unknown.id, to: 151))
    }

    @Test func changesAreListedSinceACursorAndForgottenOnlyOnceEnded() throws {
        var table = TransferTable(limits: TransferLimits())
        let a = try added(&table, record(alice))
        let b = try added(&table, record(alice))
        let all = table.changes(of: alice, since: nil)
        #expect(all.records.map(\.id) == [a.id, b.id])
        _ = table.progressed(b.id, offset: 40, now: start + 1)
        let later = table.changes(of: alice, since: all.cursor)
        #expect(later.records.map(\.id) == [b.id] && later.records.first?.offset == 40)
        #expect(table.changes(of: alice, since: later.cursor).records.isEmpty)
        #expect(table.forget([a.id, b.id], owner: alice).isEmpty, "unfinished transfers are not forgotten")
        _ = table.moved(a.id, to: .completed, result: [0xa0], now: start + 2)
        #expect(table.forget([a.id, b.id], owner: alice).map(\.id) == [a.id])
        #expect(table.find(a.id, owner: alice) == nil && table.find(b.id, owner: alice) != nil)
    }

    @Test func anEndedTransferCannotBeAttachedAndKeepsItsOutcome() throws {
        var table = TransferTable(limits: TransferLimits())
        let transfer = try added(&table, record(alice, .upload, size: 5))
        _ = table.moved(transfer.id, to: .failed, error: .digestMismatch, now: start)
        guard case .failure(.ended(let ended)) = table.attach(transfer.id, owner: alice, connection: 1, now: start)
        else {
            Issue.record("an ended transfer was attached")
            return
        }
        #expect(ended.phase == .failed && ended.error == .digestMismatch)
        #expect(table.progressed(transfer.id, offset: 5, now: start) == nil, "nothing moves after the end")
    }

    @Test func aRevokedCallerLosesEveryTransferAtOnce() throws {
        var table = TransferTable(limits: TransferLimits())
        let a = try added(&table, record(alice))
        _ = try table.attach(a.id, owner: alice, connection: 1, now: start).get()
        _ = try added(&table, record(alice, .upload))
        let keep = try added(&table, record(mallory))
        #expect(table.removeAll(of: alice).count == 2)
        #expect(table.connection(of: a.id) == nil)
        #expect(table.count == 1 && table.find(keep.id, owner: mallory) != nil)
    }

    @Test func theSweepExpiresIdleTransfersAndRemovesOldOutcomes() throws {
        let limits = TransferLimits(expiry: .seconds(100), retention: .seconds(1000))
        var table = TransferTable(limits: limits)
        let idle = try added(&table, record(alice))
        let attached = try added(&table, record(alice))
        _ = try table.attach(attached.id, owner: alice, connection: 1, now: start).get()
        let moving = try added(&table, record(alice))
        _ = table.progressed(moving.id, offset: 10, now: start + 90)
        let done = try added(&table, record(alice))
        _ = table.moved(done.id, to: .completed, now: start)

        let first = table.sweep(now: start + 100)
        #expect(Set(first.expired.map(\.id)) == [idle.id, attached.id], "attached or not, no progress expires")
        #expect(first.expiredAttachments == [attached.id: 1], "the attached one's connection is to be told")
        #expect(table.connection(of: attached.id) == nil)
        #expect(table.find(idle.id, owner: alice)?.error == .expired)
        #expect(first.removed.isEmpty)
        let second = table.sweep(now: start + 1100)
        #expect(Set(second.removed.map(\.id)) == [done.id, idle.id, attached.id])
        #expect(second.expired.map(\.id) == [moving.id])
    }

    @Test func aTableMadeFromTheJournalHasNothingAttached() throws {
        var table = TransferTable(limits: TransferLimits())
        let transfer = try added(&table, record(alice))
        let running = try table.attach(transfer.id, owner: alice, connection: 1, now: start).get().record
        var restarted = TransferTable(limits: TransferLimits(), records: [running])
        #expect(restarted.find(transfer.id, owner: alice)?.phase == .waiting)
        #expect(restarted.connection(of: transfer.id) == nil)
        let next = try added(&restarted, record(alice))
        #expect(next.sequence > running.sequence, "change numbers go on from the journal's")
    }

    @Test func aCallerKeepsAtMostItsShareOfOutcomesTheOldestGoingFirst() throws {
        var table = TransferTable(limits: TransferLimits(keptOutcomesPerCaller: 3))
        var ended: [TransferID] = []
        for index in 0..<5 {
            let transfer = try added(&table, record(alice))
            _ = table.moved(transfer.id, to: .completed, now: start + Double(index))
            ended.append(transfer.id)
        }
        let theirs = try added(&table, record(mallory))
        _ = table.moved(theirs.id, to: .completed, now: start)
        #expect(table.takeRemoved().map(\.id) == Array(ended.prefix(2)), "the two oldest outcomes went")
        #expect(table.takeRemoved().isEmpty)
        #expect(Set(table.changes(of: alice, since: nil).records.map(\.id)) == Set(ended.suffix(3)))
        #expect(table.find(theirs.id, owner: mallory) != nil, "another caller's outcomes are its own")
    }

    @Test func countsFollowEveryRemoval() throws {
        var table = TransferTable(
            limits: TransferLimits(attachedPerCaller: 1, unfinishedPerCaller: 1, spoolBytesPerCaller: 100))
        let first = try added(&table, record(alice, .upload, size: 100))
        _ = try table.attach(first.id, owner: alice, connection: 1, now: start).get()
        #expect(table.add(record(alice, .upload, size: 1)) == .failure(.tooManyOfCaller(1)))
        #expect(table.removeAll(of: alice).count == 1)
        // Removed with its attachment, its spool bytes and its place among the unfinished.
        let second = try added(&table, record(alice, .upload, size: 100))
        #expect((try? table.attach(second.id, owner: alice, connection: 2, now: start).get()) != nil)
        _ = table.cancel(second.id, owner: alice, now: start)
        let third = try added(&table, record(alice, .upload, size: 100))
        #expect((try? table.attach(third.id, owner: alice, connection: 2, now: start).get()) != nil)
        #expect(table.connectionClosed(2).map(\.id) == [third.id])
        #expect(table.connectionClosed(2).isEmpty)
    }

    @Test func recordsTheHostCouldNotHaveWrittenAreLeftOutNotTrappedOn() throws {
        var huge = record(alice, .upload, size: Int64.max)
        huge.offset = Int64.min
        var negative = record(alice, .upload, size: -1)
        negative.offset = -5
        var late = record(alice)
        late.sequence = UInt64.max
        var shortDigest = record(alice)
        shortDigest.digest = [1, 2, 3]
        let good = record(alice, .upload, size: 10)
        let table = TransferTable(
            limits: TransferLimits(), records: [huge, negative, late, shortDigest, good, good])
        #expect(table.count == 1 && table.find(good.id, owner: alice) != nil)
        #expect(table.rejected.count == 5, "\(table.rejected)")
        #expect(table.rejected.contains { $0.id == good.id && $0.problem.contains("second record") })
        var fresh = TransferTable(limits: TransferLimits(spoolBytesPerCaller: 100))
        _ = try added(&fresh, record(alice, .upload, size: 50))
        #expect(fresh.add(record(alice, .upload, size: 1 << 56)) == .failure(.spoolOfCaller(100)))
        guard case .failure(.invalid) = fresh.add(huge) else {
            Issue.record("a size past any file was taken")
            return
        }
        #expect(!fresh.mayGrow(good.id, to: Int64.max))
    }

    @Test func aCursorKeptFromBeforeNeverHidesALaterChangeEvenWhenEverythingWasForgotten() throws {
        var table = TransferTable(limits: TransferLimits())
        let first = try added(&table, record(alice))
        _ = table.moved(first.id, to: .completed, now: start)
        let cursor = table.changes(of: alice, since: nil).cursor
        #expect(table.forget([first.id], owner: alice).count == 1)
        // Another caller's changes come and go meanwhile.
        let other = TransferOwner.client("bob")
        for _ in 0..<5 { _ = try added(&table, record(other)) }
        let next = try added(&table, record(alice))
        #expect(next.sequence > cursor, "a change after the cursor is numbered after it")
        #expect(table.changes(of: alice, since: cursor).records.map(\.id) == [next.id])
        // And after a restart, from the floor the host kept.
        let restarted = TransferTable(limits: TransferLimits(), records: [], sequenceFloor: table.highWater + 10)
        #expect(restarted.highWater >= table.highWater)
    }

    @Test func attachingIsNotProgressAndDoesNotPutTheExpiryOff() throws {
        var table = TransferTable(limits: TransferLimits(expiry: .seconds(100)))
        let transfer = try added(&table, record(alice))
        _ = try table.attach(transfer.id, owner: alice, connection: 1, now: start + 90).get()
        _ = table.detach(transfer.id, from: 1)
        #expect(table.sweep(now: start + 100).expired.map(\.id) == [transfer.id])
    }

    @Test func anUploadMovesFromRunningToVerifyingToDeliveringOnceAndNeverBack() throws {
        var table = TransferTable(limits: TransferLimits())
        let upload = try added(&table, record(alice, .upload, size: 10))
        _ = try table.attach(upload.id, owner: alice, connection: 1, now: start).get()
        #expect(table.moved(upload.id, to: .verifying, from: [.running], now: start)?.phase == .verifying)
        #expect(table.moved(upload.id, to: .verifying, from: [.running], now: start) == nil, "checked twice")
        #expect(table.moved(upload.id, to: .delivering, from: [.verifying], now: start)?.phase == .delivering)
        #expect(table.moved(upload.id, to: .verifying, from: [.running], now: start) == nil, "moved back")
    }
}
