import AtriumProtocol
import AtriumTesting
import Foundation
import Testing

/// The code in README.md and docs/ compiles: every Swift and C block is marked with how it is
/// compiled (`<!-- compiled: KIND -->` on the line before it), and each kind is compiled here
/// (C) or in TemplateTests (Swift, in the projects `atrium new` writes, which depend on Atrium
/// the way a reader's project does). Code for Apple's systems (`swift-apple`: an iOS app's),
/// whose frameworks are not on Linux, is parsed here, not type-checked.
struct DocumentationTests {
    struct Block {
        var file: String
        /// The line of the opening fence.
        var line: Int
        var kind: String?
        var code: String
    }

    static let files = ["README.md"] + documentationFiles()

    static func documentationFiles() -> [String] {
        let folder = Fixtures.repositoryRoot.appendingPathComponent("docs")
        let names = (try? FileManager.default.contentsOfDirectory(atPath: folder.path)) ?? []
        return names.filter { $0.hasSuffix(".md") }.sorted().map { "docs/\($0)" }
    }

    /// Every ```swift and ```c block of `file`, with the kind its marker gives.
    static func blocks(in file: String) throws -> [Block] {
        let text = try String(
            contentsOf: Fixtures.repositoryRoot.appendingPathComponent(file), encoding: .utf8)
        let lines = text.split(separator: "\n", omittingEmptySubsequences: false).map(String.init)
        var blocks: [Block] = []
        var index = 0
        while index < lines.count {
            guard lines[index] == "```swift" || lines[index] == "```c" else {
                index += 1
                continue
            }
            let marker = index > 0 ? lines[index - 1] : ""
            var kind: String?
            if marker.hasPrefix("<!-- compiled: "), marker.hasSuffix(" -->") {
                kind = String(marker.dropFirst("<!-- compiled: ".count).dropLast(" -->".count))
            }
            let end = lines[(index + 1)...].firstIndex(of: "```") ?? lines.count
            blocks.append(
                Block(file: file, line: index + 1, kind: kind, code: lines[(index + 1)..<end].joined(separator: "\n")))
            index = end + 1
        }
        return blocks
    }

    static func blocks(ofKind kind: String) throws -> [Block] {
        try files.flatMap { try blocks(in: $0) }.filter { $0.kind == kind }
    }

    static let kinds: Set = ["swift-client", "swift-plugin", "swift-package", "c-plugin", "c-fragment", "swift-apple"]

    /// docs/ARCHITECTURE.md names, for every frame a client sends, the file of `Connection/`
    /// that handles it, and every source file it names is there (a file moved or renamed
    /// without the guide following it is found here).
    @Test func theArchitectureGuideNamesWhereEachFrameLivesAndItsFilesExist() throws {
        let root = Fixtures.repositoryRoot
        let text = try String(contentsOf: root.appendingPathComponent("docs/ARCHITECTURE.md"), encoding: .utf8)
        let clientFrames = [
            "hello", "ping", "pair", "pairReveal", "admin", "open", "request", "response", "close", "apps", "launch",
            "attach", "chunk", "ack", "detach", "cancelTransfer", "transfers",
        ]
        let table = try #require(text.range(of: "### Where a frame family lives"), "the table of frame families")
        let rows = text[table.upperBound...].split(separator: "\n").prefix { !$0.hasPrefix("What ") }
            .filter { $0.hasPrefix("| `") }
        for frame in clientFrames {
            let row = rows.first { $0.split(separator: "|").first?.contains("`\(frame)`") ?? false }
            let file = row.flatMap { $0.split(separator: "|").dropFirst().first }?
                .trimmingCharacters(in: .whitespaces).trimmingCharacters(in: CharacterSet(charactersIn: "`"))
            #expect(file != nil, "the family table names no file for `\(frame)`")
            guard let file else { continue }
            let path = root.appendingPathComponent("Sources/AtriumHost/Connection/\(file)").path
            #expect(
                FileManager.default.fileExists(atPath: path), "`\(frame)` is handled in \(file), which is not there")
        }
        // Every `….swift` the guide names is a file under Sources/, named by its path from
        // Sources/ or from its module's folder, or by its name alone.
        let sources = root.appendingPathComponent("Sources")
        let all = (FileManager.default.enumerator(atPath: sources.path)?.allObjects as? [String] ?? [])
            .filter { $0.hasSuffix(".swift") }
        let named = try Regex(#"`([A-Za-z0-9_/+]+\.swift)`"#)
        var checked = 0
        for match in text.matches(of: named) {
            guard let name = match.output[1].substring.map(String.init) else { continue }
            checked += 1
            #expect(
                all.contains { $0 == name || $0.hasSuffix("/" + name) },
                "docs/ARCHITECTURE.md names \(name), which is not under Sources/")
        }
        #expect(checked > 40, "found \(checked) files named")
    }

    /// Every "status N (Name)" in the docs gives the number CONTRACT section 4 gives that name
    /// (names that mean one number in every enumeration they are in).
    @Test func statusesInTheDocsHaveTheContractsNumbers() throws {
        let numbers = [
            "AppNotInstalled": 1, "AppServiceUnavailable": 3, "RemoteSystemNotSupportedByApp": 6, "NotAuthorized": 7,
            "Failure": 1, "ResourceLimitsExceeded": 2, "MessageSizeTooLarge": 5, "ValueSetTooLarge": 5,
            "ProtocolUnavailable": 3, "DeniedByLocalSystem": 6, "DeniedByRemoteSystem": 7, "Completed": 0,
            "Canceled": 1,
        ]
        let pattern = try Regex(#"status (\d+) \((\w+)\)"#)
        var checked = 0
        for file in Self.files {
            let text = try String(contentsOf: Fixtures.repositoryRoot.appendingPathComponent(file), encoding: .utf8)
            for match in text.matches(of: pattern) {
                guard let number = match.output[1].substring.flatMap({ Int($0) }),
                    let name = match.output[2].substring.map(String.init), let expected = numbers[name]
                else { continue }
                checked += 1
                #expect(number == expected, "\(file): \"\(match.output[0].substring ?? "")\": \(name) is \(expected)")
            }
        }
        #expect(checked > 10, "found \(checked) statuses to check")
    }

    @Test func everyCodeBlockSaysHowItIsCompiled() throws {
        let all = try Self.files.flatMap { try Self.blocks(in: $0) }
        #expect(all.count >= 8, "the blocks were not found: \(Self.files)")
        for block in all {
            #expect(
                block.kind.map(Self.kinds.contains) == true,
                "\(block.file):\(block.line): a code block without <!-- compiled: KIND --> (one of \(Self.kinds.sorted())) before it"
            )
        }
    }

    static let header = Fixtures.repositoryRoot.appendingPathComponent("Sources/CAtriumPlugin/include").path

    static func compileC(_ source: String, named name: String) async throws -> ProgramOutput {
        let folder = FileManager.default.temporaryDirectory.appendingPathComponent(
            "atrium-doc-\(UUID().uuidString.prefix(8))")
        try FileManager.default.createDirectory(at: folder, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: folder) }
        try source.write(to: folder.appendingPathComponent("\(name).c"), atomically: true, encoding: .utf8)
        // As PLUGINS.md says to build a plugin, with every warning an error; a fragment's
        // variables are there to show a call, so they may go unused.
        return try await runProgram(
            "cc",
            [
                "-std=gnu11", "-Wall", "-Wextra", "-Werror", "-Wno-unused-variable", "-Wno-unused-but-set-variable",
                "-Wno-unused-parameter", "-shared", "-fPIC", "-I", header, "-o", "lib\(name).so", "\(name).c",
            ],
            in: folder)
    }

    @Test func theCPluginsCompile() async throws {
        let plugins = try Self.blocks(ofKind: "c-plugin")
        #expect(!plugins.isEmpty)
        for block in plugins {
            let result = try await Self.compileC(block.code, named: "plugin")
            #expect(result.status == 0, "\(block.file):\(block.line) does not compile:\n\(result.output)")
        }
    }

    @Test func theCodeForApplesSystemsParses() async throws {
        let blocks = try Self.blocks(ofKind: "swift-apple")
        #expect(!blocks.isEmpty)
        let folder = FileManager.default.temporaryDirectory.appendingPathComponent(
            "atrium-doc-\(UUID().uuidString.prefix(8))")
        try FileManager.default.createDirectory(at: folder, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: folder) }
        for (index, block) in blocks.enumerated() {
            let file = folder.appendingPathComponent("apple\(index).swift")
            try block.code.write(to: file, atomically: true, encoding: .utf8)
            let result = try await runProgram("swiftc", ["-parse", file.path])
            #expect(result.status == 0, "\(block.file):\(block.line) does not parse:\n\(result.output)")
        }
    }

    /// The fragments of a file, in order, are one function's body: a later one goes on from an
    /// earlier one (the message `in` and the builder `out` it made).
    @Test func theCFragmentsCompile() async throws {
        let fragments = try Self.blocks(ofKind: "c-fragment")
        #expect(!fragments.isEmpty)
        for file in Set(fragments.map(\.file)).sorted() {
            let body = fragments.filter { $0.file == file }.map(\.code).joined(separator: "\n")
            let source = """
                #include <stdio.h>
                #include "atrium_plugin.h"

                void fragment(const atrium_host_api *host, uint64_t request, const uint8_t *bytes, size_t length) {
                \(body)
                }
                """
            let result = try await Self.compileC(source, named: "fragments")
            #expect(result.status == 0, "the C fragments of \(file) do not compile:\n\(result.output)")
        }
    }

    /// docs/TRANSFERS.md's plugin, built as a reader builds it, takes an upload and offers it
    /// back through a real atriumd.
    @Test func theTransfersGuidesPluginTakesAFileAndOffersItBack() async throws {
        let block = try #require(try Self.blocks(in: "docs/TRANSFERS.md").first { $0.kind == "c-plugin" })
        let folder = FileManager.default.temporaryDirectory.appendingPathComponent("atrium-inbox-\(UUID())")
        try FileManager.default.createDirectory(at: folder, withIntermediateDirectories: true)
        try block.code.write(to: folder.appendingPathComponent("inbox.c"), atomically: true, encoding: .utf8)
        let built = try await runProgram(
            "cc",
            [
                "-std=gnu11", "-Wall", "-Wextra", "-Werror", "-shared", "-fPIC", "-I", Self.header, "-o",
                "libInbox.so", "inbox.c",
            ], in: folder)
        #expect(built.status == 0, "\(built.output)")
        let manifest = """
            { "manifestVersion": 1, "package": "docs.inbox", "library": "\(folder.path)/libInbox.so",
              "services": [{ "name": "inbox", "supportsRemoteSystems": true }] }
            """
        let host = try await TestHost.start(manifests: ["inbox.json": manifest])
        let client = try await connectedClient(host)
        #expect(try await client.open(channel: 1, service: "inbox", package: "docs.inbox") == .success)
        let put = try await client.request(channel: 1, id: 1, ["Command": "put"])
        guard case .uuid(let upload)? = try put.decoded["Transfer"] else {
            throw TransferDownloadTests.TestFailure("\(put.status)")
        }
        let sent = TransferUploadTests.random(300_000)
        let attached = try await TransferDownloadTests.attach(upload, on: client)
        let (_, states) = try await TransferUploadTests.send(
            sent, of: upload, on: client, from: attached, digest: TransferUploadTests.sha256(sent), knownSize: false)
        #expect(states.last?.state == "completed", "\(states)")
        let get = try await client.request(channel: 1, id: 2, ["Command": "get"])
        guard case .uuid(let download)? = try get.decoded["Transfer"] else {
            throw TransferDownloadTests.TestFailure("\(get.status)")
        }
        _ = try await TransferDownloadTests.attach(download, on: client, window: 1 << 20)
        var bytes: [UInt8] = []
        _ = try await TransferDownloadTests.receive(
            download, on: client, from: 0, until: sent.count, window: 1 << 20, into: &bytes)
        #expect(bytes == sent, "the file offered back is the one taken")
        // The plugin keeps its files in /tmp: this one goes.
        if let stored = try states.last?.result?.decode()["Stored"]?.string {
            try? FileManager.default.removeItem(atPath: "/tmp/\(stored)")
        }
        #expect(await host.stop() == 0)
    }
}
