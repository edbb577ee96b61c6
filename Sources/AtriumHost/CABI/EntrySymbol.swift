import AtriumProtocol
import CAtriumPlugin

#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

/// Why a library's entry point was not found, read from its symbol tables: what the loader
/// says when `dlsym` finds no `atrium_plugin_entry_v1`, in place of "not an Atrium plugin".
///
/// The common mistakes leave a trace in the library: an entry point defined in C++ without C
/// linkage has a mangled name; one hidden by `-fvisibility=hidden` or a version script is a
/// local symbol of the full symbol table; one built for another ABI major has another name.
/// A stripped library without the symbol says nothing, and the loader keeps its plain message.
package enum EntrySymbol: Equatable, Sendable {
    /// `atrium_plugin_entry_v1` is defined but not exported (local or hidden).
    case hidden
    /// A definition whose symbol has the entry point's name inside a mangled one.
    case mangled(symbol: String, language: Language)
    /// The entry point of another ABI major (`atrium_plugin_entry_v2`).
    case otherVersion(symbol: String)

    package enum Language: Sendable {
        case cPlusPlus, swift, unknown
    }

    static let name = ATRIUM_PLUGIN_ENTRY_SYMBOL

    /// What `library` defines instead of an exported entry point, or nil when its symbol tables
    /// say nothing (or it is not a 64-bit little-endian ELF file).
    package static func diagnose(library path: String) -> EntrySymbol? {
        // Not blocking on a FIFO put in the library's place; only a regular file is read.
        let descriptor = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK)
        guard descriptor >= 0 else { return nil }
        defer { close(descriptor) }
        var status = stat()
        guard fstat(descriptor, &status) == 0, status.st_mode & S_IFMT == S_IFREG else { return nil }
        let fileSize = Int(status.st_size)
        return diagnose { offset, count in
            // Nothing is allocated for what the file does not hold.
            guard offset >= 0, count >= 0, offset <= fileSize, count <= fileSize - offset else { return nil }
            var bytes = [UInt8](repeating: 0, count: count)
            var done = 0
            while done < count {
                let got = bytes.withUnsafeMutableBytes { buffer in
                    pread(descriptor, buffer.baseAddress! + done, count - done, off_t(offset + done))
                }
                if got < 0 && errno == EINTR { continue }
                guard got > 0 else { return nil }
                done += got
            }
            return bytes
        }
    }

    /// The most a symbol or string table may hold to be read (a plugin's are far smaller).
    static let maxTableBytes = 64 << 20

    /// The diagnosis of an ELF file read through `read(offset, count)`, which returns exactly
    /// `count` bytes or nil. Every offset and size in the file is checked before it is used.
    package static func diagnose(read: (_ offset: Int, _ count: Int) -> [UInt8]?) -> EntrySymbol? {
        guard let header = read(0, 64), header[0..<4] == [0x7f, 0x45, 0x4c, 0x46],
            header[4] == 2,  // ELFCLASS64
            header[5] == 1  // ELFDATA2LSB
        else { return nil }
        let sectionsAt = header.integer(at: 0x28, bytes: 8)
        let entrySize = header.integer(at: 0x3a, bytes: 2)
        let count = header.integer(at: 0x3c, bytes: 2)
        guard entrySize >= 64, entrySize <= 1024, count > 0, sectionsAt > 0, sectionsAt < Int.max / 2,
            let table = read(sectionsAt, entrySize * count)
        else { return nil }
        let sections = (0..<count).map { Array(table[($0 * entrySize)..<($0 * entrySize + 64)]) }
        var found = Findings()
        // The dynamic symbols, then the full table (which a stripped library lacks): the first
        // table of each kind only, so that a file of many headers naming one table is read once.
        for type in [11, 2] {  // SHT_DYNSYM, SHT_SYMTAB
            guard let section = sections.first(where: { $0.integer(at: 4, bytes: 4) == type }) else { continue }
            symbols(in: section, sections: sections, read: read, into: &found)
            if found.hidden { return .hidden }
        }
        return found.best
    }

    /// What the tables showed, at most one of each kind.
    private struct Findings {
        var hidden = false
        var mangled: EntrySymbol?
        var unknownMangled: EntrySymbol?
        var otherVersion: EntrySymbol?

        /// The most telling: the very name hidden, then a C++ or Swift name, then another
        /// mangled one, then another version.
        var best: EntrySymbol? { hidden ? .hidden : mangled ?? unknownMangled ?? otherVersion }
    }

    /// What the symbols of one table say, added to `found`.
    private static func symbols(
        in section: [UInt8], sections: [[UInt8]], read: (Int, Int) -> [UInt8]?, into found: inout Findings
    ) {
        let offset = section.integer(at: 24, bytes: 8)
        let size = section.integer(at: 32, bytes: 8)
        let link = section.integer(at: 40, bytes: 4)
        guard size > 0, size <= maxTableBytes, offset < Int.max / 2, link < sections.count,
            let symbols = read(offset, size)
        else { return }
        let strings = sections[link]
        let stringsSize = strings.integer(at: 32, bytes: 8)
        let stringsOffset = strings.integer(at: 24, bytes: 8)
        guard stringsSize > 0, stringsSize <= maxTableBytes, stringsOffset < Int.max / 2,
            let names = read(stringsOffset, stringsSize)
        else { return }
        let entryBytes = Array(name.utf8)
        var start = 0
        while start + 24 <= symbols.count {
            defer { start += 24 }
            let nameAt = symbols.integer(at: start, bytes: 4)
            let info = symbols[start + 4]
            let visibility = symbols[start + 5] & 3
            let definedIn = symbols.integer(at: start + 6, bytes: 2)
            // Not defined here (SHN_UNDEF), or a file's or a section's name, not a function's.
            guard definedIn != 0, nameAt < names.count, info & 0xf != 3, info & 0xf != 4 else { continue }
            // Names are read up to 4 KiB: a longer one (or one without its NUL) is not a symbol
            // this looks for, and no scan runs on to the end of a crafted table.
            let window = names[nameAt..<min(names.count, nameAt + 4097)]
            guard let end = window.firstIndex(of: 0) else { continue }
            let symbol = names[nameAt..<end]
            guard symbol.contains(entryBytes[0..<(entryBytes.count - 1)]) else { continue }
            let text = untrusted(String(decoding: symbol, as: UTF8.self), limit: 120)
            if symbol.elementsEqual(entryBytes) {
                // Exported, dlsym would have found it: only a local or hidden one is news.
                if info >> 4 == 0 || visibility == 2 || visibility == 1 {
                    found.hidden = true
                    return
                }
            } else if symbol.contains(entryBytes) {
                if text.hasPrefix("_Z") {
                    found.mangled = found.mangled ?? .mangled(symbol: text, language: .cPlusPlus)
                } else if text.hasPrefix("$s") || text.hasPrefix("_$s") {
                    found.mangled = found.mangled ?? .mangled(symbol: text, language: .swift)
                } else {
                    found.unknownMangled = found.unknownMangled ?? .mangled(symbol: text, language: .unknown)
                }
            } else if text.hasPrefix(String(name.dropLast())), text.count < 40, info >> 4 != 0 {
                found.otherVersion = found.otherVersion ?? .otherVersion(symbol: text)
            }
        }
    }

    /// The reason the loader gives, about `file`.
    package func reason(file: String) -> String {
        switch self {
        case .hidden:
            return
                "\(file) defines \(Self.name) but does not export it (its symbol is hidden, as -fvisibility=hidden or a version script makes it): define it with ATRIUM_PLUGIN_EXPORT from atrium_plugin.h"
        case .mangled(let symbol, .cPlusPlus):
            return
                "\(file) defines \(Self.name) with C++ linkage (its symbol is \(symbol)), so the host cannot find it by name: define it outside any namespace, after including atrium_plugin.h (which declares it extern \"C\"), or with ATRIUM_PLUGIN_EXPORT"
        case .mangled(let symbol, .swift):
            return
                "\(file) defines \(Self.name) as a Swift function (its symbol is \(symbol)): give it a C name with @_cdecl(\"\(Self.name)\"), as docs/PLUGINS.md shows"
        case .mangled(let symbol, .unknown):
            return
                "\(file) has no symbol \(Self.name), only \(symbol), a mangled name: the entry point needs C linkage (ATRIUM_PLUGIN_EXPORT from atrium_plugin.h)"
        case .otherVersion(let symbol):
            return
                "\(file) exports \(symbol), not \(Self.name): it was built for another major version of the plugin ABI; this host speaks ABI \(ATRIUM_PLUGIN_ABI_MAJOR).\(ATRIUM_PLUGIN_ABI_MINOR)"
        }
    }
}

extension [UInt8] {
    /// The little-endian unsigned integer of `bytes` bytes at `offset`, or `Int.max` (which
    /// every check refuses) when it does not fit this array or an `Int`.
    fileprivate func integer(at offset: Int, bytes: Int) -> Int {
        guard offset >= 0, offset + bytes <= count else { return Int.max }
        var value: UInt64 = 0
        for index in (0..<bytes).reversed() { value = value << 8 | UInt64(self[offset + index]) }
        return value <= UInt64(Int.max) ? Int(value) : Int.max
    }
}
