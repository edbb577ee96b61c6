import CAtriumSystem

/// Keeps glibc's malloc from giving memory back to the kernel after every chunk of a download.
///
/// A download's chunks (256 KiB each) are made as their bytes arrive and freed once written to
/// the partial file. glibc's malloc maps a block that large afresh, and gives back to the kernel
/// whatever is free at the top of a heap past 128 KiB: so every chunk comes as new pages from
/// the kernel, each faulted in and zeroed, which at hundreds of MiB/s is a quarter of a
/// client's CPU (BENCHMARKS.md, "Freed memory kept for the next chunks"). ``keepFreedMemory(upTo:)``
/// lets malloc keep up to 64 MiB free at the top of each of its heaps (one a thread that
/// allocates, up to glibc's cap) for the next chunks, and serve blocks of up to 1 MiB from them.
/// It is the whole process's setting, so this library never makes it on its own: `atrium get`,
/// `put` and `transfers resume` do, and a program that moves large files may call it first
/// thing. Settings in the environment (`MALLOC_TRIM_THRESHOLD_`, `MALLOC_MMAP_THRESHOLD_`, or
/// `GLIBC_TUNABLES`) take precedence.
public enum TransferMemory {
    /// The most freed memory malloc keeps at the top of each heap by default here.
    public static let defaultKept = 64 << 20

    /// The largest block malloc serves from its heaps: a chunk, and the buffer it is read into.
    static let heapBlocks = 1 << 20

    /// Lets malloc keep up to `bytes` of freed memory for reuse (a negative amount counts as
    /// none); true when set, false when the environment's settings stand or the allocator is not
    /// glibc's (or is a sanitizer's).
    @discardableResult
    public static func keepFreedMemory(upTo bytes: Int = defaultKept) -> Bool {
        atrium_keep_freed_memory(max(bytes, 0), heapBlocks) == 1
    }

    /// Whether these values of `MALLOC_TRIM_THRESHOLD_`, `MALLOC_MMAP_THRESHOLD_` and
    /// `GLIBC_TUNABLES` set what ``keepFreedMemory(upTo:)`` would (then it leaves them).
    static func environmentSets(trim: String?, mmap: String?, tunables: String?) -> Bool {
        atrium_malloc_thresholds_set_by(trim, mmap, tunables) != 0
    }
}
