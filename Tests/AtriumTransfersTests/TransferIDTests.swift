import AtriumTransfers
import Foundation
import Testing

/// Transfer ids are random version 4 UUIDs (RFC 9562), written in lowercase, and read back in
/// any case.
struct TransferIDTests {
    @Test func newIdsAreRandomVersionFourUUIDs() {
        let ids = (0..<2000).map { _ in TransferID() }
        #expect(Set(ids).count == ids.count)
        for id in ids {
            let bytes = id.uuid.uuid
            #expect(bytes.6 >> 4 == 4, "version of \(id)")
            #expect(bytes.8 >> 6 == 0b10, "variant of \(id)")
            #expect(id.description == id.uuid.uuidString.lowercased())
            #expect(TransferID(id.description.uppercased()) == id)
        }
        // Every other bit varies: none is stuck at 0 or 1 across the ids.
        let fixed: Set<Int> = [48, 49, 50, 51, 64, 65]
        for bit in 0..<128 where !fixed.contains(bit) {
            let ones = ids.filter { id in
                withUnsafeBytes(of: id.uuid.uuid) { $0[bit / 8] >> (7 - bit % 8) & 1 == 1 }
            }.count
            #expect(ones > 0 && ones < ids.count, "bit \(bit) is always \(ones == 0 ? 0 : 1)")
        }
    }

    @Test func textThatIsNotAUUIDIsNoId() {
        #expect(TransferID("not-a-uuid") == nil)
        #expect(TransferID("") == nil)
    }
}
