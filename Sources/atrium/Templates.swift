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

    static func cPlugin(_ names: Names) -> [String: String] {
        let library = "lib\(names.name).so"
        // Every symbol the file defines is prefixed with the name (and is static but the entry
        // point), so that no name clashes with the header's.
        let prefix = "\(names.cName)_service"
        let source = #"""
            /* \#(names.name): an Atrium app service in C.
             *
             *   {"Command": "hello", "Name": "Ada"}  ->  {"Greeting": "Hello, Ada!"}
             *   anything else                        ->  status 1 (Failure), with the reason
             *
             * Messages are read and built through the host table: no CBOR by hand. */
            #include <stdlib.h>
            #include <string.h>

            #include "atrium_plugin.h"

            static int32_t \#(prefix)_create(const atrium_host_api *host, const char *config_json, void **instance) {
                (void)config_json;
                *instance = (void *)host; /* the host table lives until destroy */
                return ATRIUM_OK;
            }

            static void \#(prefix)_fail(const atrium_host_api *host, uint64_t request, const char *reason) {
                host->respond(host, request, ATRIUM_RESPONSE_FAILURE, NULL, 0, reason);
            }

            /* Answers {"Greeting": "Hello, NAME!"}, or a failure with the reason. */
            static void \#(prefix)_hello(const atrium_host_api *host, uint64_t request, const atrium_message *in) {
                const char *name = "world";
                size_t name_length = 5;
                int32_t found = host->message_get_string(host, in, "Name", &name, &name_length);
                if (found == ATRIUM_E_WRONG_KIND) {
                    \#(prefix)_fail(host, request, "Name must be a string");
                    return;
                }
                /* "Hello, " + the name + "!", as long as the name needs. */
                size_t greeting_length = 7 + name_length + 1;
                char *greeting = malloc(greeting_length);
                if (greeting == NULL) {
                    \#(prefix)_fail(host, request, "out of memory");
                    return;
                }
                memcpy(greeting, "Hello, ", 7);
                memcpy(greeting + 7, name, name_length);
                greeting[7 + name_length] = '!';

                atrium_builder *out = host->builder_new(host);
                const uint8_t *answer = NULL;
                size_t answer_length = 0;
                if (out != NULL && host->builder_put_string(host, out, "Greeting", greeting, greeting_length) == ATRIUM_OK &&
                    host->builder_bytes(host, out, &answer, &answer_length) == ATRIUM_OK) {
                    host->respond(host, request, ATRIUM_RESPONSE_SUCCESS, answer, answer_length, NULL);
                } else {
                    \#(prefix)_fail(host, request, "the answer could not be built");
                }
                if (out != NULL) host->builder_free(host, out);
                free(greeting);
            }

            static void \#(prefix)_request(void *instance, uint64_t channel, uint64_t request,
                                       const uint8_t *message, size_t length) {
                (void)channel;
                const atrium_host_api *host = instance;
                atrium_message *in = host->message_parse(host, message, length);
                if (in == NULL) {
                    \#(prefix)_fail(host, request, "not a ValueSet");
                    return;
                }
                const char *command = NULL;
                size_t command_length = 0;
                if (host->message_get_string(host, in, "Command", &command, &command_length) == ATRIUM_OK &&
                    command_length == 5 && memcmp(command, "hello", 5) == 0) {
                    \#(prefix)_hello(host, request, in);
                } else {
                    \#(prefix)_fail(host, request, "unknown command: send Command=hello (and Name=...)");
                }
                host->message_free(host, in);
            }

            static const atrium_plugin \#(prefix)_descriptor = {
                .struct_size = sizeof(atrium_plugin),
                .abi_major = ATRIUM_PLUGIN_ABI_MAJOR,
                .abi_minor = ATRIUM_PLUGIN_ABI_MINOR,
                .name = "\#(names.name)",
                .version = "0.1.0",
                .create = \#(prefix)_create,
                .request = \#(prefix)_request,
            };

            ATRIUM_PLUGIN_EXPORT const atrium_plugin *atrium_plugin_entry_v1(void) { return &\#(prefix)_descriptor; }

            """#
        let makefile = """
            # Builds \(library), the plugin, with nothing but Atrium's C header.
            ATRIUM_INCLUDE ?= \(makeValue(shellQuoted(names.include)))
            CFLAGS ?= -std=gnu11 -O2 -g -Wall -Wextra

            \(library): \(names.name).c
            \t$(CC) $(CFLAGS) -shared -fPIC -I$(ATRIUM_INCLUDE) -o $@ \(names.name).c
            \t@# atriumd loads only a library no one else can write, whatever the umask.
            \tchmod go-w $@

            # Builds, then runs the plugin in atriumd and checks its answer.
            check: \(library)
            \t./test.sh

            clean:
            \trm -f \(library)

            .PHONY: check clean

            """
        let readme = """
            # \(names.name)

            An Atrium app service in C: package `\(names.package)`, service `\(names.service)`.
            It answers `{"Command": "hello", "Name": "Ada"}` with `{"Greeting": "Hello, Ada!"}`.

            ```sh
            make                 # builds \(library) against atrium_plugin.h
            ./test.sh            # checks the manifest, runs the plugin in atriumd, sends it hello
            atriumd --manifests . --plugin-path .     # serves it (local clients only: see \(names.name).json)
            atrium send --local --package \(names.package) --service \(names.service) Command=hello Name=Ada
            ```

            - `\(names.name).c`: the service. Messages are read and built through the host table
              (`message_get_string`, `builder_put_string`, ...): see the header's comments.
            - `\(names.name).json`: the manifest. `"access": "local"` serves local clients only;
              `"paired"` serves paired devices over the network too. `"commands"` declares what
              the service takes: the host refuses a request that does not match, with the
              reason, before the plugin sees it; `atrium describe \(names.package)
              --local` prints it.
            - To install it: copy `\(library)` to the host's plugin folder and `\(names.name).json`
              to its manifests folder (`/etc/atrium/manifests.d`), then reload the host (SIGHUP).

            """
        return [
            "\(names.name).c": source,
            "\(names.name).json": manifest(names, library: library),
            "Makefile": makefile,
            "test.sh": testScript(names, build: "make", library: "./\(library)"),
            "README.md": readme,
            ".gitignore": "\(library)\n",
        ]
    }

    /// What a Swift project's README says of its dependency on Atrium.
    static func pathDependencyNote(_ names: Names) -> String {
        "`Package.swift` depends on Atrium by path (\(names.checkout)), with its `Package.resolved`. SwiftPM names a package depended on by path after its folder, lowercased: that is the `package:` of each `.product`. Moved the checkout? Change both."
    }

    static func swiftPlugin(_ names: Names) -> [String: String] {
        let type = names.typeName
        // The module NotesPlugin holds the class Notes, and its product (libNotesPlugin.so) is
        // named as it is: a product's name must be unique in the whole package graph, and
        // Atrium's dependencies have products of plain names (Logging, Crypto). Names that
        // would still clash are refused first (reserved).
        let module = "\(type)Plugin"
        let library = "lib\(module).so"
        let atrium = swiftLiteral(names.checkoutIdentity)
        let package = #"""
            // swift-tools-version:6.1
            import PackageDescription

            let package = Package(
                name: "\#(type)",
                platforms: [.macOS(.v15)],
                products: [
                    // The plugin: a shared library the manifest names (\#(library)).
                    .library(name: "\#(module)", type: .dynamic, targets: ["\#(module)"])
                ],
                dependencies: [
                    // Atrium by path: SwiftPM names it after its folder, lowercased.
                    .package(path: \#(swiftLiteral(names.checkout)))
                ],
                targets: [
                    .target(
                        name: "\#(module)",
                        dependencies: [
                            .product(name: "AtriumPluginKit", package: \#(atrium)),
                            .product(name: "AtriumValues", package: \#(atrium)),
                        ]
                    ),
                    .testTarget(
                        name: "\#(module)Tests",
                        dependencies: ["\#(module)", .product(name: "AtriumValues", package: \#(atrium))]
                    ),
                ]
            )

            """#
        let source = #"""
            // \#(names.name): an Atrium app service in Swift.
            //
            //   {"Command": "hello", "Name": "Ada"}  ->  {"Greeting": "Hello, Ada!"}
            //   anything else                        ->  status 1 (Failure), with the reason

            import AtriumPluginKit
            import AtriumValues

            final class \#(type): AppService {
                let host: ServiceHost

                init(host: ServiceHost) {
                    self.host = host
                }

                func request(_ request: ServiceRequest) async throws -> ServiceResponse {
                    Self.answer(to: request.message)
                }

                /// The answer to one message: apart from the host, so that tests can call it.
                static func answer(to message: ValueSet) -> ServiceResponse {
                    switch message["Command"]?.string {
                    case "hello":
                        let name = message["Name"]?.string ?? "world"
                        return .success(["Greeting": .string("Hello, \(name)!")])
                    default:
                        return .failure("unknown command: send Command=hello (and Name=...)")
                    }
                }
            }

            @_cdecl("atrium_plugin_entry_v1")
            public func atriumPluginEntry() -> UnsafeRawPointer { exportAppService(\#(type).self) }

            """#
        let test = #"""
            import AtriumValues
            import Testing

            @testable import \#(module)

            @Test func helloIsAnsweredWithAGreeting() {
                let response = \#(type).answer(to: ["Command": "hello", "Name": "Ada"])
                #expect(response.status == .success)
                #expect(response.message["Greeting"]?.string == "Hello, Ada!")
            }

            @Test func anyOtherCommandIsAFailureWithTheReason() {
                let response = \#(type).answer(to: ["Command": "goodbye"])
                #expect(response.status == .failure)
                #expect(response.error?.contains("Command=hello") == true)
            }

            """#
        let readme = """
            # \(names.name)

            An Atrium app service in Swift: package `\(names.package)`, service `\(names.service)`.
            It answers `{"Command": "hello", "Name": "Ada"}` with `{"Greeting": "Hello, Ada!"}`.

            ```sh
            swift build          # builds .build/debug/\(library)
            swift test           # the service's own tests
            ./test.sh            # checks the manifest, runs the plugin in atriumd, sends it hello
            atriumd --manifests . --plugin-path .build/debug     # serves it (local clients only)
            atrium send --local --package \(names.package) --service \(names.service) Command=hello Name=Ada
            ```

            - `Sources/\(module)/\(type).swift`: the service (`AppService`, from AtriumPluginKit).
            - `\(names.name).json`: the manifest. `"access": "local"` serves local clients only;
              `"paired"` serves paired devices over the network too. `"commands"` declares what
              the service takes: the host refuses a request that does not match, with the
              reason, before the plugin sees it; `atrium describe \(names.package)
              --local` prints it.
            - \(pathDependencyNote(names))

            """
        return [
            "Package.swift": package,
            "Sources/\(module)/\(type).swift": source,
            "Tests/\(module)Tests/\(type)Tests.swift": test,
            "\(names.name).json": manifest(names, library: library),
            "test.sh": testScript(names, build: "swift build", library: ".build/debug/\(library)"),
            "README.md": readme,
            ".gitignore": ".build/\n",
        ].merging(pins(of: names.checkout)) { first, _ in first }
    }

    static func swiftClient(_ names: Names) -> [String: String] {
        let package = #"""
            // swift-tools-version:6.1
            import PackageDescription

            let package = Package(
                name: "\#(names.name)",
                platforms: [.macOS(.v15)],
                dependencies: [
                    // Atrium by path: SwiftPM names it after its folder, lowercased.
                    .package(path: \#(swiftLiteral(names.checkout)))
                ],
                targets: [
                    .executableTarget(
                        name: "\#(names.name)",
                        dependencies: [
                            .product(name: "AtriumClient", package: \#(swiftLiteral(names.checkoutIdentity))),
                            .product(name: "AtriumValues", package: \#(swiftLiteral(names.checkoutIdentity))),
                        ]
                    )
                ]
            )

            """#
        let main = #"""
            // \#(names.name): sends {"Command": "hello", "Name": NAME} to \#(names.service) of
            // \#(names.package) and prints the answer.
            //
            //   \#(names.name) [HOST] [NAME]
            //
            // HOST is unix:/path (the host's local socket; the default is where atriumd puts it),
            // or host:port over TLS with this device's identity, once paired (atrium pair HOST).

            import AtriumClient
            import AtriumValues
            import Foundation

            let arguments = CommandLine.arguments.dropFirst()
            let endpoint: AtriumEndpoint
            if let text = arguments.first {
                guard let parsed = AtriumEndpoint(text) else {
                    FileHandle.standardError.write(Data("not a host: \(text) (use unix:/path or host:port)\n".utf8))
                    exit(64)
                }
                endpoint = parsed
            } else {
                endpoint = .defaultLocalSocket
            }
            let name = arguments.dropFirst().first ?? "Ada"

            do {
                // TLS over TCP, with this device's identity and the host's as it was at pairing;
                // the local socket needs neither.
                var tls: ClientTLS?
                if case .tcp = endpoint.address {
                    tls = ClientTLS(
                        identity: try ClientTLS.defaultIdentity(), expectedHostIdentity: try KnownHosts().identity(of: endpoint))
                }
                let connection = try await AtriumConnection.connect(to: endpoint, tls: tls)
                let service = AppServiceConnection(
                    appServiceName: "\#(names.service)", packageId: "\#(names.package)", connection: connection)
                let status = try await service.openRemote()
                guard status == .success else {
                    print("open: \(status)\(service.openError.map { ": \($0)" } ?? "")")
                    exit(1)
                }
                let response = try await service.sendMessage(["Command": "hello", "Name": .string(name)])
                print(response.status, response.message)
                await service.close()
                await connection.close()
                exit(response.status == .success ? 0 : 1)
            } catch {
                print("\(endpoint): \(error)")
                exit(3)
            }

            """#
        let readme = """
            # \(names.name)

            A Swift client of Atrium: sends `{"Command": "hello", "Name": ...}` to the service
            `\(names.service)` of package `\(names.package)` and prints the answer.

            ```sh
            swift build
            swift run \(names.name)                                  # the host's local socket
            swift run \(names.name) unix:/path/to/atriumd.sock Ada
            swift run \(names.name) 192.168.1.20:7340 Ada            # over TLS, once paired: atrium pair 192.168.1.20
            ```

            \(pathDependencyNote(names))

            """
        return [
            "Package.swift": package,
            "Sources/\(names.name)/main.swift": main,
            "README.md": readme,
            ".gitignore": ".build/\n",
        ].merging(pins(of: names.checkout)) { first, _ in first }
    }
}
