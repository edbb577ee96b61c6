// Measures what a declared-function call costs over calling the same C function directly:
// argument checks, marshalling, ffi_call and building the result, for mathdemo's `add`,
// both measured in the same run. Run it optimised, ideally pinned to one core:
//
//     swift build -c release && taskset -c 0 .build/release/atrium-ffi-bench

import AtriumBench
import AtriumHost
import AtriumProtocol
import AtriumValues
import Foundation

AtriumVersion.answerStandardOptions(
    usage: """
        atrium-ffi-bench: measures a declared-function call (mathdemo's add) against calling the C
        function directly. Run it optimised, pinned: taskset -c 0 atrium-ffi-bench
        """)

let folder = URL(fileURLWithPath: CommandLine.arguments[0]).deletingLastPathComponent()
let library = folder.appendingPathComponent("libmathdemo.so").path
guard let handle = dlopen(library, RTLD_NOW | RTLD_LOCAL), let symbol = dlsym(handle, "mathdemo_add") else {
    fatalError("cannot load \(library): build the package first")
}
let manifest = try Manifest(
    json: Data(
        """
        { "manifestVersion": 1, "package": "bench", "library": "libmathdemo.so",
          "functions": [{ "command": "add", "symbol": "mathdemo_add",
            "params": [{ "name": "a", "type": "int64" }, { "name": "b", "type": "int64" }], "returns": "int64" }] }
        """.utf8
    ),
    file: URL(fileURLWithPath: "bench.json")
)
let functions = try DeclaredFunctions(manifest.functions, handle: handle)
let add = unsafeBitCast(symbol, to: (@convention(c) (Int64, Int64) -> Int64).self)
let message: ValueSet = ["Command": "add", "a": 2, "b": 40]

let direct = bestNanoseconds(iterations: 10_000_000) { add(benchmarkSink & 1, 40) }
let declared = bestNanoseconds(iterations: 1_000_000) {
    (try? functions.call(message))?["Result"]?.int ?? 0
}
print("mathdemo_add, ns per call (best of 9 rounds)")
print(String(format: "direct call through the function pointer: %.1f ns", direct))
print(String(format: "declared-function call (checks, marshalling, ffi_call, result): %.1f ns", declared))
print(String(format: "overhead: %.1f ns per call (goal: under 1000 ns)", declared - direct))
