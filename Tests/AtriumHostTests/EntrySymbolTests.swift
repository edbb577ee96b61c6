import AtriumTesting
import Foundation
import Testing

@testable import AtriumHost

/// A library without an exported `atrium_plugin_entry_v1` is refused with what its symbol
/// tables say: a C++ or Swift definition without C linkage, a hidden one, one of another ABI.
@Suite(.serialized)
struct EntrySymbolTests {
    /// A minimal 64-bit little-endian ELF file with one symbol table (`type`: 2 the full one,
    /// 11 the dynamic one) holding `symbols`: (name, binding, visibility, defined).
    static func elf(type: UInt32 = 2, _ symbols: [(String, UInt8, UInt8, Bool)]) -> [UInt8] {
        var names: [UInt8] = [0]
        var table = [UInt8](repeating: 0, count: 24)  // symbol 0 is empty
        for (name, binding, visibility, defined) in symbols {
            var entry = [UInt8](repeating: 0, count: 24)
            entry.put(UInt64(names.count), at: 0, bytes: 4)
            entry[4] = binding << 4 | 2  // STT_FUNC
            entry[5] = visibility
            entry.put(defined ? 1 : 0, at: 6, bytes: 2)
            table += entry
            names += Array(name.utf8) + [0]
        }
        var file = [UInt8](repeating: 0, count: 64)
        file.replaceSubrange(0..<6, with: [0x7f, 0x45, 0x4c, 0x46, 2, 1])
        let tableAt = file.count
        file += table
        let namesAt = file.count
        file += names
        let sectionsAt = file.count
        file.put(UInt64(sectionsAt), at: 0x28, bytes: 8)
        file.put(64, at: 0x3a, bytes: 2)
        file.put(3, at: 0x3c, bytes: 2)
        var sections = [UInt8](repeating: 0, count: 64 * 3)  // 0: null, 1: symbols, 2: strings
        sections.put(UInt64(type), at: 64 + 4, bytes: 4)
        sections.put(UInt64(tableAt), at: 64 + 24, bytes: 8)
        sections.put(UInt64(table.count), at: 64 + 32, bytes: 8)
        sections.put(2, at: 64 + 40, bytes: 4)
        sections.put(3, at: 128 + 4, bytes: 4)  // SHT_STRTAB
        sections.put(UInt64(namesAt), at: 128 + 24, bytes: 8)
        sections.put(UInt64(names.count), at: 128 + 32, bytes: 8)
        return file + sections
    }

    static func diagnose(_ bytes: [UInt8]) -> EntrySymbol? {
        EntrySymbol.diagnose { offset, count in
            guard offset >= 0, count >= 0, offset <= bytes.count, count <= bytes.count - offset else { return nil }
            return Array(bytes[offset..<(offset + count)])
        }
    }

    @Test func symbolTablesAreRead() {
        #expect(Self.diagnose(Self.elf([("atrium_plugin_entry_v1", 0, 0, true)])) == .hidden)
        #expect(Self.diagnose(Self.elf([("atrium_plugin_entry_v1", 1, 2, true)])) == .hidden)
        // Exported with default visibility: dlsym finds it, nothing to say; undefined: not here.
        #expect(Self.diagnose(Self.elf(type: 11, [("atrium_plugin_entry_v1", 1, 0, true)])) == nil)
        #expect(Self.diagnose(Self.elf([("atrium_plugin_entry_v1", 1, 0, false)])) == nil)
        #expect(
            Self.diagnose(Self.elf([("_Z22atrium_plugin_entry_v1v", 1, 0, true)]))
                == .mangled(symbol: "_Z22atrium_plugin_entry_v1v", language: .cPlusPlus))
        #expect(
            Self.diagnose(Self.elf([("$s5Notes22atrium_plugin_entry_v1SVSgyF", 1, 0, true)]))
                == .mangled(symbol: "$s5Notes22atrium_plugin_entry_v1SVSgyF", language: .swift))
        #expect(
            Self.diagnose(Self.elf(type: 11, [("atrium_plugin_entry_v2", 1, 0, true)]))
                == .otherVersion(symbol: "atrium_plugin_entry_v2"))
        // The very name hidden says most, whatever else is there.
        #expect(
            Self.diagnose(
                Self.elf([("atrium_plugin_entry_v2", 1, 0, true), ("atrium_plugin_entry_v1", 0, 0, true)])) == .hidden)
        #expect(Self.diagnose(Self.elf([("main", 1, 0, true), ("strdup", 1, 0, false)])) == nil)
        // A C++ name wins over another that merely holds the entry point's name.
        #expect(
            Self.diagnose(
                Self.elf([("atrium_plugin_entry_v1_impl", 1, 0, true), ("_Z22atrium_plugin_entry_v1v", 1, 0, true)]))
                == .mangled(symbol: "_Z22atrium_plugin_entry_v1v", language: .cPlusPlus))
        // A symbol's name from the library is escaped before it reaches a log or a client.
        #expect(
            Self.diagnose(Self.elf([("_Z22atrium_plugin_entry_v1\u{1b}[31m", 1, 0, true)]))
                == .mangled(symbol: "_Z22atrium_plugin_entry_v1\\u{1B}[31m", language: .cPlusPlus))
    }

    @Test func brokenFilesSayNothingAndReadNothingOutside() {
        let whole = Self.elf([("atrium_plugin_entry_v1", 0, 0, true)])
        #expect(Self.diagnose([]) == nil)
        #expect(Self.diagnose(Array("not an ELF file at all, but long enough to have a header....... ".utf8)) == nil)
        // Every truncation of a good file, and every byte of its headers set to 0xff.
        for length in 0..<whole.count { _ = Self.diagnose(Array(whole[0..<length])) }
        for index in 0..<min(whole.count, 200) {
            var broken = whole
            broken[index] = 0xff
            _ = Self.diagnose(broken)
        }
        var huge = whole
        huge.put(UInt64.max, at: 0x28, bytes: 8)
        #expect(Self.diagnose(huge) == nil)
        var wide = whole
        wide.put(0xffff, at: 0x3a, bytes: 2)
        #expect(Self.diagnose(wide) == nil)
        // A name without its NUL, running to the end of the table, is not read as a symbol.
        var unended = Self.elf([("atrium_plugin_entry_v1", 0, 0, true)])
        unended.removeLast(64 * 3 + 1)  // the section headers and the last name's NUL
        unended.append(0x41)
        unended += Array(Self.elf([("atrium_plugin_entry_v1", 0, 0, true)]).suffix(64 * 3))
        #expect(Self.diagnose(unended) == nil)
    }

    func buildLibrary(_ compiler: String, source: String, extension suffix: String, extra: [String] = [])
        async throws -> URL
    {
        let folder = FileManager.default.temporaryDirectory.appendingPathComponent("atrium-entry-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: folder, withIntermediateDirectories: true)
        let file = folder.appendingPathComponent("plugin.\(suffix)")
        try source.write(to: file, atomically: true, encoding: .utf8)
        let library = folder.appendingPathComponent("libPlugin.so")
        let (status, output) = try await PluginABITests().compile(
            compiler, ["-shared", "-fPIC", "-ISources/CAtriumPlugin/include", "-o", library.path, file.path] + extra)
        try #require(status == 0, "\(output)")
        return library
    }

    static let descriptor = """
        #include "atrium_plugin.h"
        static int32_t create(const atrium_host_api *h, const char *c, void **i) { (void)h; (void)c; *i = 0; return 0; }
        static const atrium_plugin p = { sizeof(atrium_plugin), 1, 0, "P", "0", 0, create, 0, 0, 0, 0, 0, 0 };
        """

    @Test func theHostSaysWhyItFoundNoEntryPoint() async throws {
        let cPlusPlus = try await buildLibrary(
            "c++",
            source: Self.descriptor + """
                namespace notes { const atrium_plugin *atrium_plugin_entry_v1() { return &p; } }
                """, extension: "cpp")
        let folder = cPlusPlus.deletingLastPathComponent()
        let script = folder.appendingPathComponent("hide.map")
        try "{ local: *; };\n".write(to: script, atomically: true, encoding: .utf8)
        let hidden = try await buildLibrary(
            "cc",
            source: Self.descriptor + """
                ATRIUM_PLUGIN_EXPORT const atrium_plugin *atrium_plugin_entry_v1(void) { return &p; }
                """, extension: "c", extra: ["-Wl,--version-script=\(script.path)"])
        let nextABI = try await buildLibrary(
            "cc",
            source: Self.descriptor + """
                ATRIUM_PLUGIN_VISIBLE const atrium_plugin *atrium_plugin_entry_v2(void) { return &p; }
                """, extension: "c")
        let manifests = [
            "cpp.json": PluginLoadingTests().manifest("atrium.tests.cpp", cPlusPlus),
            "hidden.json": PluginLoadingTests().manifest("atrium.tests.hidden", hidden),
            "next.json": PluginLoadingTests().manifest("atrium.tests.next", nextABI),
        ]
        let check = CommandLineTests()
        let manifestsFolder = try check.folder(manifests)
        defer { try? FileManager.default.removeItem(at: manifestsFolder) }
        let (status, result) = try await check.run(["--check", "--manifests", manifestsFolder.path])
        #expect(status == 1, "\(result)")
        #expect(
            result.contains(
                "libPlugin.so defines atrium_plugin_entry_v1 with C++ linkage (its symbol is _ZN5notes22atrium_plugin_entry_v1Ev)"
            ), "\(result)")
        #expect(
            result.contains("libPlugin.so defines atrium_plugin_entry_v1 but does not export it (its symbol is hidden"),
            "\(result)")
        #expect(
            result.contains(
                "libPlugin.so exports atrium_plugin_entry_v2, not atrium_plugin_entry_v1: it was built for another major version of the plugin ABI"
            ), "\(result)")
    }
}

extension [UInt8] {
    fileprivate mutating func put(_ value: UInt64, at offset: Int, bytes: Int) {
        for index in 0..<bytes { self[offset + index] = UInt8(truncatingIfNeeded: value >> (8 * UInt64(index))) }
    }
}
