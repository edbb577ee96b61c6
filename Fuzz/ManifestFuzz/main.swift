// libFuzzer target: the manifest parser and validator, on any bytes a manifest file may hold.
// Built and run by Scripts/fuzz.sh.
import AtriumHost
import Foundation

@_cdecl("LLVMFuzzerTestOneInput")
func fuzzManifests(_ data: UnsafePointer<UInt8>, _ size: Int) -> CInt {
    let json = Data(bytes: data, count: size)
    _ = try? Manifest(json: json, file: URL(fileURLWithPath: "/fuzz/manifest.json"))
    return 0
}

// libFuzzer's driver runs the target; its own `main` is not used, so that this stays an
// ordinary executable to the package manager.
@_silgen_name("LLVMFuzzerRunDriver")
func runFuzzerDriver(
    _ argc: UnsafeMutablePointer<CInt>,
    _ argv: UnsafeMutablePointer<UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>>,
    _ target: @convention(c) (UnsafePointer<UInt8>, Int) -> CInt
) -> CInt

var argc = CommandLine.argc
var argv = CommandLine.unsafeArgv
exit(runFuzzerDriver(&argc, &argv) { data, size in fuzzManifests(data, size) })
