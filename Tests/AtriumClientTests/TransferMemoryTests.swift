import Foundation
import Testing

@testable import AtriumClient

/// `TransferMemory.keepFreedMemory()` sets glibc's malloc to keep freed chunks and to serve
/// blocks up to 1 MiB from its heaps, unless the environment has a setting of its own (which
/// takes precedence) or malloc is not glibc's. The environment is read, never changed here:
/// other tests start processes meanwhile.
struct TransferMemoryTests {
    /// Whether malloc is AddressSanitizer's (its runtime is loaded), where nothing is set.
    static var sanitized: Bool { dlsym(dlopen(nil, RTLD_LAZY), "__asan_init") != nil }

    @Test func theEnvironmentsOwnSettingsTakePrecedence() {
        #expect(!TransferMemory.environmentSets(trim: nil, mmap: nil, tunables: nil))
        #expect(TransferMemory.environmentSets(trim: "131072", mmap: nil, tunables: nil))
        #expect(TransferMemory.environmentSets(trim: nil, mmap: "131072", tunables: nil))
        #expect(TransferMemory.environmentSets(trim: "", mmap: nil, tunables: nil), "set, even empty")
        #expect(TransferMemory.environmentSets(trim: nil, mmap: nil, tunables: "glibc.malloc.trim_threshold=131072"))
        #expect(
            TransferMemory.environmentSets(
                trim: nil, mmap: nil, tunables: "glibc.malloc.arena_max=2:glibc.malloc.mmap_threshold=4096"))
        #expect(!TransferMemory.environmentSets(trim: nil, mmap: nil, tunables: "glibc.malloc.arena_max=2"))
        #expect(!TransferMemory.environmentSets(trim: nil, mmap: nil, tunables: ""))
    }

    @Test func itIsSetUnlessTheEnvironmentSetsItsOwnOrMallocIsNotGlibcs() {
        let environment = ProcessInfo.processInfo.environment
        let overridden = TransferMemory.environmentSets(
            trim: environment["MALLOC_TRIM_THRESHOLD_"], mmap: environment["MALLOC_MMAP_THRESHOLD_"],
            tunables: environment["GLIBC_TUNABLES"])
        // What it does to malloc is measured, not asserted here: in a process shared with other
        // tests, which block a heap serves depends on what they freed (BENCHMARKS.md, "Freed
        // memory kept for the next chunks", and Benchmarks/client_ab.py).
        #expect(TransferMemory.keepFreedMemory() == !(Self.sanitized || overridden))
        #expect(TransferMemory.keepFreedMemory(upTo: Int.max) == !(Self.sanitized || overridden), "capped, not refused")
        // Back to the default for the rest of this process.
        TransferMemory.keepFreedMemory()
    }
}
