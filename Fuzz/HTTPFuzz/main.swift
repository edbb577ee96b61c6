// libFuzzer target: what a client's first bytes and HTTP headers reach before any check of who
// it is: the ClientHello's ALPN (which settings its TLS gets), a Range header against a file's
// size, and the Content-Disposition made of a service's name for a file. Built and run by
// Scripts/fuzz.sh. The first byte chooses which.
import AtriumTLS
import AtriumTransfers
import FuzzDriver

@_cdecl("LLVMFuzzerTestOneInput")
func fuzzHTTP(_ data: UnsafePointer<UInt8>, _ size: Int) -> CInt {
    guard size > 0 else { return 0 }
    let bytes = Array(UnsafeBufferPointer(start: data + 1, count: size - 1))
    switch data[0] % 3 {
    case 0:
        if case .offers(let names) = ClientHello.peek(bytes) {
            precondition(names.allSatisfy { !$0.isEmpty && $0.utf8.count <= 255 }, "an ALPN name out of bounds")
        }
        // Cut anywhere, a ClientHello is never taken for another one.
        if bytes.count > 1, case .offers = ClientHello.peek(bytes.prefix(bytes.count / 2)) {
            precondition(ClientHello.peek(bytes) != .incomplete, "a whole hello became incomplete with more bytes")
        }
    case 1:
        guard bytes.count >= 8 else { return 0 }
        let size = Int64(
            bytes.prefix(8).enumerated().reduce(UInt64(0)) { $0 | UInt64($1.element) << (8 * $1.offset) } >> 8)
        let header = String(decoding: bytes.dropFirst(8), as: UTF8.self)
        if case .part(let range) = HTTPFileHeaders.range(header, size: size) {
            precondition(
                range.lowerBound >= 0 && range.upperBound <= size && !range.isEmpty, "a range outside the file")
        }
    default:
        let name = String(decoding: bytes, as: UTF8.self)
        let value = HTTPFileHeaders.contentDisposition(name: name)
        precondition(
            value.unicodeScalars.allSatisfy { $0.isASCII && $0.value >= 0x20 && $0.value != 0x7F },
            "a header value with a control or non-ASCII character")
    }
    return 0
}

runFuzzer { data, size in fuzzHTTP(data, size) }
