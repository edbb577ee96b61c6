// libFuzzer target: reading a plugin library's symbol tables, which the loader does when a
// library lacks the entry point (EntrySymbol). Every offset and size in the input is
// untrusted; nothing may trap, and nothing is read outside the input. Built and run by
// Scripts/fuzz.sh.
import AtriumHost
import FuzzDriver

@_cdecl("LLVMFuzzerTestOneInput")
func fuzzELF(_ data: UnsafePointer<UInt8>, _ size: Int) -> CInt {
    let bytes = UnsafeBufferPointer(start: data, count: size)
    let found = EntrySymbol.diagnose { offset, count in
        guard offset >= 0, count >= 0, offset <= size, count <= size - offset else { return nil }
        return Array(bytes[offset..<(offset + count)])
    }
    if let found { precondition(!found.reason(file: "lib.so").isEmpty) }
    return 0
}

runFuzzer { data, size in fuzzELF(data, size) }
