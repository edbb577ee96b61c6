import CAtriumSystem

/// How many malloc arenas the host's threads share.
///
/// glibc gives a thread that allocates while others hold the arenas an arena of its own, up to
/// eight a core. The host's threads come and go (a worker's reaper, Dispatch's threads, the
/// launch threads), and what each leaves in its arena keeps that arena's pages: with glibc's
/// default, RSS grew by 340 B to 800 B with every worker restart while nothing stayed
/// allocated. One arena for every thread holds it much closer to flat (BENCHMARKS.md, "One
/// malloc arena"). Small allocations still come from each thread's cache (tcache) without a
/// lock; larger ones, such as buffers, take the arena's lock, which measured no slower on a
/// 2-core machine. On a host of many cores, or with in-process plugins that allocate from many
/// threads of their own, `MALLOC_ARENA_MAX` (or `GLIBC_TUNABLES=glibc.malloc.arena_max=N`) in
/// atriumd's environment sets another cap, and takes precedence.
public enum MallocArenas {
    /// The cap the host sets when its environment sets none.
    public static let hostDefault = 1

    /// Caps the arenas at `count` unless the environment sets a cap; returns the cap in force
    /// (0: glibc's own). Arenas made before the call stay: call it first thing in `main`,
    /// before a second thread allocates.
    @discardableResult
    public static func limit(to count: Int = hostDefault) -> Int {
        Int(atrium_limit_malloc_arenas(Int32(count)))
    }

    /// The most freed memory the host keeps for reuse, by default.
    public static let hostKept = 16 << 20

    /// The largest block malloc serves from its heap rather than mapping afresh: a transfer's
    /// chunk (256 KiB) and the buffers it is read into.
    static let heapBlocks = 1 << 20

    /// Lets malloc keep up to `bytes` of freed memory at the top of the heap, and serve blocks of
    /// up to 1 MiB from it. With glibc's defaults, each chunk of an upload (256 KiB, freed once
    /// it is written to the spool) was mapped afresh and given back: every page of it faulted in
    /// and zeroed again, a sixth of the host's CPU for an upload (BENCHMARKS.md, "Freed memory
    /// kept in the host"). The host gives what it kept back once transfers' bytes stop moving
    /// (``HostCore/trimMemoryAfterBursts()``). `MALLOC_TRIM_THRESHOLD_`,
    /// `MALLOC_MMAP_THRESHOLD_` or their `GLIBC_TUNABLES` in atriumd's environment take
    /// precedence. Returns whether it was set.
    @discardableResult
    public static func keepFreedMemory(upTo bytes: Int = hostKept) -> Bool {
        atrium_keep_freed_memory(max(bytes, 0), heapBlocks) == 1
    }
}
