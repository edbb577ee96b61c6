import ArgumentParser
import Foundation

/// The projects `atrium new` writes, and where it finds what they build against.
enum Templates {
    struct Names {
        /// As given: the folder, the library, the program.
        var name: String
        /// The name as a C identifier (`my_notes`).
        var cName: String
        /// The name as a Swift type and module (`MyNotes`).
        var typeName: String
        var package: String
        var service: String
        /// The folder holding atrium_plugin.h (C plugins).
        var include = ""
        /// The Atrium checkout Swift projects depend on.
        var checkout = ""
        /// The folder of atriumd and atrium, for the projects' test scripts.
        var bin = Templates.toolFolder.path

        init(name: String, package: String?, service: String?) {
            self.name = name
            cName = name.replacingOccurrences(of: "-", with: "_")
            typeName = name.split(separator: "-").map { $0.prefix(1).uppercased() + $0.dropFirst() }.joined()
            self.package = package ?? "local.\(name)"
            self.service = service ?? name
        }

        /// SwiftPM's name for a package depended on by path: its folder's name, lowercased.
        var checkoutIdentity: String { URL(fileURLWithPath: checkout).lastPathComponent.lowercased() }
    }

    static func checkName(_ name: String) throws {
        guard let first = name.unicodeScalars.first, ("a"..."z").contains(first), name.count <= 40,
            name.unicodeScalars.allSatisfy({ ("a"..."z").contains($0) || ("0"..."9").contains($0) || $0 == "-" }),
            !name.hasSuffix("-"), !name.contains("--")
        else {
            throw ValidationError(
                "'\(name)' is not a name for a project: use lowercase letters, digits and single '-' between them, starting with a letter (at most 40), like notes or my-notes"
            )
        }
    }

    static func checkIdentifier(_ value: String?, _ option: String) throws {
        guard let value else { return }
        func isAlphanumeric(_ scalar: Unicode.Scalar) -> Bool {
            ("a"..."z").contains(scalar) || ("A"..."Z").contains(scalar) || ("0"..."9").contains(scalar)
        }
        guard let first = value.unicodeScalars.first, isAlphanumeric(first), value.count <= 255,
            value.unicodeScalars.allSatisfy({ isAlphanumeric($0) || "._-".unicodeScalars.contains($0) })
        else {
            throw ValidationError(
                "\(option) '\(value)' must start with a letter or digit and hold only letters, digits, '.', '_' and '-'"
            )
        }
    }

    /// Names a Swift project's modules, products and types must not take: Atrium's own targets
    /// and products (in the same package graph), the system's modules, and the SDK's types
    /// the template uses. Compared without case.
    static let reserved: Set<String> = [
        "atrium", "atriumd", "atriumvalues", "atriumprotocol", "atriumpluginkit", "atriumhost", "atriumclient",
        "catriumplugin", "catriumsystem", "catriumffi", "atriumtls", "cavahi", "atriumdiscovery", "atriumbench",
        "atriumtesting", "romanping", "echo", "mathdemo", "ffitypes", "atriumtestservice", "atriumtestcservice",
        "swift", "foundation", "foundationessentials", "foundationnetworking", "dispatch", "glibc", "testing",
        "xctest", "synchronization", "observation", "appservice", "servicehost", "servicerequest",
        "serviceresponse", "servicechannel", "launchrequest", "valueset", "value", "valuearray", "self", "any",
        "type", "protocol", "atrium-codec-bench", "atrium-baseline", "atrium-ffi-bench", "atrium-metrics-bench",
        // The Testing module's types, beside which the generated tests would not read as meant.
        "test", "suite", "tag", "issue", "bug", "comment", "trait", "confirmation", "expectation",
        // Targets of Atrium's dependencies (swift-argument-parser's examples and tools, swift-crypto's).
        "math", "roll", "repeat", "color", "default-as-flag", "generate-manual", "crypto-shasum",
    ]

    /// Refuses a Swift project whose names would clash in its package graph or in its code.
    static func checkSwiftNames(_ names: [String]) throws {
        if let clash = names.first(where: { reserved.contains($0.lowercased()) }) {
            throw ValidationError(
                "this name would give the Swift project a module, product or type named \(clash), which Atrium, Swift or the SDK already has: choose another"
            )
        }
    }

    /// `text` as one word for sh: in single quotes.
    static func shellQuoted(_ text: String) -> String {
        "'" + text.replacingOccurrences(of: "'", with: #"'\''"#) + "'"
    }

    /// `text` in a Swift string literal.
    static func swiftLiteral(_ text: String) -> String {
        "\"" + text.replacingOccurrences(of: "\\", with: "\\\\").replacingOccurrences(of: "\"", with: "\\\"") + "\""
    }

    /// `text` as a make variable's value: `$` doubled, `#` escaped.
    static func makeValue(_ text: String) -> String {
        text.replacingOccurrences(of: "$", with: "$$").replacingOccurrences(of: "#", with: ##"\#"##)
    }

    /// The folder of this `atrium` executable (atriumd is installed beside it).
    static var toolFolder: URL {
        URL(fileURLWithPath: "/proc/self/exe").resolvingSymlinksInPath().deletingLastPathComponent()
    }

    /// The checkout this atrium was built from, when it is still where it was built.
    static var builtFrom: URL? {
        // Sources/atrium/Templates.swift: three folders up.
        let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
            .deletingLastPathComponent()
        return isCheckout(root) ? root : nil
    }

    static func isCheckout(_ folder: URL) -> Bool {
        FileManager.default.fileExists(atPath: folder.appendingPathComponent("Package.swift").path)
            && FileManager.default.fileExists(atPath: folder.appendingPathComponent("Sources/AtriumPluginKit").path)
    }

    /// The checkout's Package.resolved, when it has one: a Swift project then builds against the
    /// versions of Atrium's dependencies that Atrium was built and tested with, not the newest
    /// a later release brought.
    static func pins(of checkout: String) -> [String: String] {
        let file = URL(fileURLWithPath: checkout).appendingPathComponent("Package.resolved")
        guard let pins = try? String(contentsOf: file, encoding: .utf8) else { return [:] }
        return ["Package.resolved": pins]
    }

    /// Where atrium_plugin.h is: installed beside this atrium (PREFIX/include/atrium), or in
    /// the checkout it was built from.
    static var headerFolder: URL? {
        let installed = toolFolder.deletingLastPathComponent().appendingPathComponent("include/atrium")
        let candidates =
            [installed] + (builtFrom.map { [$0.appendingPathComponent("Sources/CAtriumPlugin/include")] } ?? [])
        return candidates.first {
            FileManager.default.fileExists(atPath: $0.appendingPathComponent("atrium_plugin.h").path)
        }?.standardizedFileURL
    }

    /// Writes `files` (paths relative to `folder`). Folders are made 0755 and files 0644 (`.sh`
    /// files 0755) whatever the umask: atriumd refuses a manifest, or a folder holding one, that
    /// others could write, and a umask of 002 is common on desktops.
    static func write(_ files: [String: String], to folder: URL) throws {
        let manager = FileManager.default
        func makeFolder(_ url: URL) throws {
            if let mode = (try? manager.attributesOfItem(atPath: url.path))?[.posixPermissions] as? Int {
                // An empty folder given with --output keeps its mode, but not others' write.
                guard url.path == folder.path else { return }
                try manager.setAttributes([.posixPermissions: mode & ~0o022], ofItemAtPath: url.path)
                return
            }
            try manager.createDirectory(at: url, withIntermediateDirectories: true)
            try manager.setAttributes([.posixPermissions: 0o755], ofItemAtPath: url.path)
        }
        try makeFolder(folder)
        for (path, text) in files.sorted(by: { $0.key < $1.key }) {
            // Each folder between, from the top, so that each gets its mode.
            var parent = folder
            for component in path.split(separator: "/").dropLast() {
                parent.appendPathComponent(String(component))
                try makeFolder(parent)
            }
            let file = folder.appendingPathComponent(path)
            try text.write(to: file, atomically: true, encoding: .utf8)
            try manager.setAttributes(
                [.posixPermissions: path.hasSuffix(".sh") ? 0o755 : 0o644], ofItemAtPath: file.path)
        }
    }

    // MARK: - The projects

    static func manifest(_ names: Names, library: String) -> String {
        """
        {
          "manifestVersion": 1,
          "package": "\(names.package)",
          "displayName": "\(names.name)",
          "library": "\(library)",
          "services": [
            {
              "name": "\(names.service)",
              "access": "local",
              "commands": [
                {
                  "command": "hello",
                  "description": "Greets someone.",
                  "fields": [
                    { "name": "Name", "type": "string", "optional": true, "description": "Who to greet (default: world)." }
                  ]
                }
              ]
            }
          ]
        }

        """
    }

    /// test.sh: builds, starts atriumd with the project's manifest on a socket of its own,
    /// sends the service its command and checks the answer. `library` is where the build puts
    /// the plugin, relative to the project.
    static func testScript(_ names: Names, build: String, library: String) -> String {
        let pluginFolder = (library as NSString).deletingLastPathComponent
        return #"""
            #!/bin/sh
            # Builds the plugin, checks its manifest, starts atriumd with it on a local socket of its
            # own, sends the service its command and checks the answer. ATRIUM_BIN names the folder
            # of atriumd and atrium (default: where they were when this project was made, then PATH).
            set -eu
            umask 022
            cd "$(dirname "$0")"
            default_bin=\#(shellQuoted(names.bin))
            bin=${ATRIUM_BIN:-$default_bin}
            atriumd="$bin/atriumd"
            atrium="$bin/atrium"
            [ -x "$atriumd" ] || atriumd=atriumd
            [ -x "$atrium" ] || atrium=atrium

            \#(build)
            # atriumd trusts a manifest and a library only when no one else can write them or their
            # folders (a build under a umask of 002 leaves them group-writable).
            chmod go-w . \#(names.name).json \#(pluginFolder)/ \#(library)
            "$atriumd" --config off --check --manifests . --plugin-path \#(pluginFolder)

            scratch=$(mktemp -d)
            host=
            cleanup() {
                [ -z "$host" ] || kill "$host" 2>/dev/null || true
                wait 2>/dev/null || true
                rm -rf "$scratch"
            }
            trap cleanup EXIT
            trap 'exit 130' INT
            trap 'exit 143' TERM
            trap 'exit 129' HUP
            "$atriumd" --config off --manifests . --plugin-path \#(pluginFolder) --listen off \
                --socket "$scratch/atriumd.sock" --state-dir "$scratch/state" >"$scratch/log" 2>&1 &
            host=$!
            tries=0
            until [ -S "$scratch/atriumd.sock" ]; do
                tries=$((tries + 1))
                if [ "$tries" -gt 600 ] || ! kill -0 "$host" 2>/dev/null; then
                    echo "atriumd did not start; its log:" >&2
                    cat "$scratch/log" >&2
                    exit 1
                fi
                sleep 0.1
            done

            if ! answer=$("$atrium" send "unix:$scratch/atriumd.sock" --package \#(names.package) --service \#(names.service) Command=hello Name=Ada 2>&1); then
                echo "$answer" >&2
                echo "the service did not answer as it should; the host's log:" >&2
                cat "$scratch/log" >&2
                exit 1
            fi
            echo "$answer"
            case "$answer" in
            *"Hello, Ada!"*) echo "ok: \#(names.service) answered" ;;
            *)
                echo "not the answer expected; the host's log:" >&2
                cat "$scratch/log" >&2
                exit 1
                ;;
            esac

            """#
    }

    /// What a Swift project's README says of its dependency on Atrium.
    static func pathDependencyNote(_ names: Names) -> String {
        "`Package.swift` depends on Atrium by path (\(names.checkout)), with its `Package.resolved`. SwiftPM names a package depended on by path after its folder, lowercased: that is the `package:` of each `.product`. Moved the checkout? Change both."
    }
}
