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

    @Test func onceSetBlocksUpToAMegabyteComeFromTheHeapAndLargerOnesAreMappedOnTheirOwn() {
        let environment = ProcessInfo.processInfo.environment
        let overridden = TransferMemory.environmentSets(
            trim: environment["MALLOC_TRIM_THRESHOLD_"], mmap: environment["MALLOC_MMAP_THRESHOLD_"],
            tunables: environment["GLIBC_TUNABLES"])
        let set = TransferMemory.keepFreedMemory()
        #expect(set == !(Self.sanitized || overridden))
        guard set, TransferMemory.mappedBytes != nil else { return }
        // Other tests allocate meanwhile, in this process: one try in five must show it whole.
        var shown = false
        for _ in 0..<5 where !shown {
            let before = TransferMemory.mappedBytes!
            let heap = malloc(900 << 10)
            let afterHeap = TransferMemory.mappedBytes!
            let mapped = malloc(2 << 20)
            let afterMapped = TransferMemory.mappedBytes!
            free(mapped)
            free(heap)
            shown = afterHeap - before < 900 << 10 && afterMapped - afterHeap >= 2 << 20
        }
        #expect(shown, "900 KiB from a heap, 2 MiB mapped on its own: the threshold is 1 MiB")
    }
}
