import AtriumClient
import Foundation
import Testing

/// `TransferMemory.keepFreedMemory()` sets glibc's malloc to keep freed chunks, unless the
/// environment has a setting of its own (which takes precedence) or malloc is not glibc's.
struct TransferMemoryTests {
    /// Whether malloc is AddressSanitizer's (its runtime is loaded), where nothing is set.
    static var sanitized: Bool { dlsym(dlopen(nil, RTLD_LAZY), "__asan_init") != nil }

    @Test func freedMemoryIsKeptUnlessTheEnvironmentSetsItsOwn() {
        for variable in ["MALLOC_TRIM_THRESHOLD_", "MALLOC_MMAP_THRESHOLD_"] {
            setenv(variable, "131072", 1)
            #expect(!TransferMemory.keepFreedMemory(), "\(variable) in the environment takes precedence")
            unsetenv(variable)
        }
        let tunables = getenv("GLIBC_TUNABLES").map { String(cString: $0) }
        setenv("GLIBC_TUNABLES", "glibc.malloc.trim_threshold=131072", 1)
        #expect(!TransferMemory.keepFreedMemory(), "GLIBC_TUNABLES takes precedence")
        if let tunables { setenv("GLIBC_TUNABLES", tunables, 1) } else { unsetenv("GLIBC_TUNABLES") }
        // Set when nothing in the environment says otherwise, on glibc's own malloc.
        #expect(TransferMemory.keepFreedMemory() == !Self.sanitized)
        #expect(TransferMemory.keepFreedMemory(upTo: -1) == !Self.sanitized, "a negative amount keeps nothing")
        TransferMemory.keepFreedMemory()
    }
}
