// libFuzzer target: the manifest parser and validator, on any bytes a manifest file may hold.
// Built and run by Scripts/fuzz.sh.
import AtriumHost
import Foundation
import FuzzDriver

@_cdecl("LLVMFuzzerTestOneInput")
func fuzzManifests(_ data: UnsafePointer<UInt8>, _ size: Int) -> CInt {
    let json = Data(bytes: data, count: size)
    let report = Manifest.check(json: json, file: URL(fileURLWithPath: "/fuzz/manifest.json"))
    // A manifest is given only when nothing is wrong with it, and what is wrong is bounded.
    if report.manifest != nil, !report.errors.isEmpty { fatalError("a manifest with errors was accepted") }
    if report.manifest == nil, report.errors.isEmpty { fatalError("a manifest was refused without a reason") }
    if report.errors.count > Manifest.maxReported || report.warnings.count > Manifest.maxReported {
        fatalError("more problems reported than the limit")
    }
    return 0
}

runFuzzer { data, size in fuzzManifests(data, size) }
