// libFuzzer target: the checks every launched URI goes through (length, scheme, characters)
// and the escaping of untrusted text for the log. Built and run by Scripts/fuzz.sh.
import AtriumHost
import AtriumProtocol
import FuzzDriver

@_cdecl("LLVMFuzzerTestOneInput")
func fuzzURIs(_ data: UnsafePointer<UInt8>, _ size: Int) -> CInt {
    let uri = String(decoding: UnsafeBufferPointer(start: data, count: size), as: UTF8.self)
    if case .success(let scheme) = Launcher.checkURI(uri, maxLength: 2048) {
        precondition(!scheme.isEmpty && scheme == scheme.lowercased(), "a scheme came back empty or not lowercased")
    }
    let escaped = untrusted(uri, limit: 100)
    precondition(
        !escaped.unicodeScalars.contains { $0.value < 0x20 || $0.value == 0x7f }, "a control character got through")
    return 0
}

runFuzzer { data, size in fuzzURIs(data, size) }
