import AtriumTransfers
import Foundation
import Testing

/// A download over HTTP answers as a static file does (RFC 9110): one range of bytes, the
/// validators, and a name to save it as that no header can be made of more than.
struct HTTPFileHeadersTests {
    @Test(
        arguments: [
            (nil, HTTPFileHeaders.RangeAnswer.whole),
            ("bytes=0-99", .part(0..<100)),
            ("bytes=100-", .part(100..<1000)),
            ("bytes=-10", .part(990..<1000)),
            ("bytes=-5000", .part(0..<1000)),
            ("bytes=900-5000", .part(900..<1000)),
            ("BYTES= 5 - 9 ", .part(5..<10)),
            ("bytes=1000-", .unsatisfiable),
            ("bytes=-0", .unsatisfiable),
            ("bytes=0-1,5-9", .whole),
            ("bytes=9-5", .whole),
            ("items=0-5", .whole),
            ("bytes=abc", .whole),
            ("bytes=+5-9", .whole),
            ("bytes=99999999999999999999-", .whole),
            ("bytes=", .whole),
        ] as [(String?, HTTPFileHeaders.RangeAnswer)])
    func aRangeIsOneRangeOfBytesOrTheWholeFile(header: String?, answer: HTTPFileHeaders.RangeAnswer) {
        #expect(HTTPFileHeaders.range(header, size: 1000) == answer)
    }

    @Test func anEmptyFileHasNoRangeToGive() {
        #expect(HTTPFileHeaders.range("bytes=0-", size: 0) == .unsatisfiable)
        #expect(HTTPFileHeaders.range(nil, size: 0) == .whole)
    }

    @Test func theEntityTagChangesWithTheFileAndIfRangeComparesItStrongly() {
        let source = DownloadSource(path: "/a", device: 1, inode: 2, size: 3, modified: 4)
        var changed = source
        changed.modified = 5
        let tag = HTTPFileHeaders.entityTag(of: source)
        #expect(tag == "\"1-2-3-4\"" && tag != HTTPFileHeaders.entityTag(of: changed))
        let date = HTTPFileHeaders.date(nanoseconds: 1_800_000_000_123_456_789)
        #expect(date == "Fri, 15 Jan 2027 08:00:00 GMT")
        #expect(HTTPFileHeaders.ifRangeHolds(nil, entityTag: tag, lastModified: date))
        #expect(HTTPFileHeaders.ifRangeHolds(tag, entityTag: tag, lastModified: date))
        #expect(!HTTPFileHeaders.ifRangeHolds("W/\(tag)", entityTag: tag, lastModified: date))
        #expect(!HTTPFileHeaders.ifRangeHolds("\"other\"", entityTag: tag, lastModified: date))
        #expect(HTTPFileHeaders.ifRangeHolds(date, entityTag: tag, lastModified: date))
        #expect(!HTTPFileHeaders.ifRangeHolds("Fri, 15 Jan 2027 08:00:01 GMT", entityTag: tag, lastModified: date))
    }

    @Test func aNameBecomesAnAttachmentThatNoHeaderCanBeMadeOfMoreThan() {
        #expect(HTTPFileHeaders.contentDisposition(name: nil) == "attachment")
        #expect(HTTPFileHeaders.contentDisposition(name: "photo.jpg") == "attachment; filename=\"photo.jpg\"")
        #expect(
            HTTPFileHeaders.contentDisposition(name: "a\"b\\c.txt")
                == "attachment; filename=\"a_b_c.txt\"; filename*=UTF-8''a%22b%5Cc.txt")
        #expect(
            HTTPFileHeaders.contentDisposition(name: "x\r\nSet-Cookie: y")
                == "attachment; filename=\"x__Set-Cookie: y\"; filename*=UTF-8''x%0D%0ASet-Cookie%3A%20y")
        #expect(
            HTTPFileHeaders.contentDisposition(name: "日本.png")
                == "attachment; filename=\"__.png\"; filename*=UTF-8''%E6%97%A5%E6%9C%AC.png")
    }
}
