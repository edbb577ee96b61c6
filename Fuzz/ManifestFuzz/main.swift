// libFuzzer target: the manifest parser and validator, on any bytes a manifest file may hold.
// Built and run by Scripts/fuzz.sh.
import AtriumHost
import Foundation
import FuzzDriver

@_cdecl("LLVMFuzzerTestOneInput")
func fuzzManifests(_ data: UnsafePointer<UInt8>, _ size: Int) -> CInt {
    let json = Data(bytes: data, count: size)
    _ = try? Manifest(json: json, file: URL(fileURLWithPath: "/fuzz/manifest.json"))
    return 0
}

runFuzzer { data, size in fuzzManifests(data, size) }
