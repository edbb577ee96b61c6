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
        guard !value.isEmpty, value.count <= 255,
            value.unicodeScalars.allSatisfy({
                $0.isASCII && (CharacterSet.alphanumerics.contains($0) || "._-".unicodeScalars.contains($0))
            })
        else {
            throw ValidationError("\(option) '\(value)' may hold only letters, digits, '.', '_' and '-'")
        }
    }

    /// The folder of this `atrium` executable (atriumd is installed beside it).
    static var toolFolder: URL {
        let executable = URL(fileURLWithPath: CommandLine.arguments[0]).resolvingSymlinksInPath()
        let located =
            CommandLine.arguments[0].contains("/")
            ? executable : URL(fileURLWithPath: "/proc/self/exe").resolvingSymlinksInPath()
        return located.deletingLastPathComponent()
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

    /// Writes `files` (paths relative to `folder`); `.sh` files are made executable.
    static func write(_ files: [String: String], to folder: URL) throws {
        for (path, text) in files.sorted(by: { $0.key < $1.key }) {
            let file = folder.appendingPathComponent(path)
            try FileManager.default.createDirectory(
                at: file.deletingLastPathComponent(), withIntermediateDirectories: true)
            try text.write(to: file, atomically: true, encoding: .utf8)
            if path.hasSuffix(".sh") {
                try FileManager.default.setAttributes([.posixPermissions: 0o755], ofItemAtPath: file.path)
            }
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
            { "name": "\(names.service)", "access": "local" }
          ]
        }

        """
    }

    /// test.sh: builds, starts atriumd with the project's manifest on a socket of its own,
    /// sends the service its command and checks the answer.
    static func testScript(_ names: Names, build: String, pluginPath: String) -> String {
        #"""
        #!/bin/sh
        # Builds the plugin, checks its manifest, starts atriumd with it on a local socket of its
        # own, sends the service its command and checks the answer. ATRIUM_BIN names the folder
        # of atriumd and atrium (default: where they were when this project was made, then PATH).
        set -eu
        cd "$(dirname "$0")"
        bin=${ATRIUM_BIN:-\#(names.bin)}
        atriumd="$bin/atriumd"
        atrium="$bin/atrium"
        [ -x "$atriumd" ] || atriumd=atriumd
        [ -x "$atrium" ] || atrium=atrium

        \#(build)
        "$atriumd" --check --manifests . --plugin-path \#(pluginPath)

        scratch=$(mktemp -d)
        host=
        cleanup() {
            [ -z "$host" ] || kill "$host" 2>/dev/null || true
            wait 2>/dev/null || true
            rm -rf "$scratch"
        }
        trap cleanup EXIT
        "$atriumd" --manifests . --plugin-path \#(pluginPath) --listen off --socket "$scratch/atriumd.sock" \
            --state-dir "$scratch/state" >"$scratch/log" 2>&1 &
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

        answer=$("$atrium" send "unix:$scratch/atriumd.sock" --package \#(names.package) --service \#(names.service) Command=hello Name=Ada)
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
        let source = #"""
            /* \#(names.name): an Atrium app service in C.
             *
             *   {"Command": "hello", "Name": "Ada"}  ->  {"Greeting": "Hello, Ada!"}
             *   anything else                        ->  status 1 (Failure), with the reason
             *
             * Messages are read and built through the host table: no CBOR by hand. */
            #include <stdio.h>
            #include <string.h>

            #include "atrium_plugin.h"

            static int32_t \#(names.cName)_create(const atrium_host_api *host, const char *config_json, void **instance) {
                (void)config_json;
                *instance = (void *)host; /* the host table lives until destroy */
                return ATRIUM_OK;
            }

            static void fail(const atrium_host_api *host, uint64_t request, const char *reason) {
                host->respond(host, request, ATRIUM_RESPONSE_FAILURE, NULL, 0, reason);
            }

            static void \#(names.cName)_request(void *instance, uint64_t channel, uint64_t request,
                                       const uint8_t *message, size_t length) {
                (void)channel;
                const atrium_host_api *host = instance;
                atrium_message *in = host->message_parse(host, message, length);
                if (in == NULL) {
                    fail(host, request, "not a ValueSet");
                    return;
                }
                const char *command = NULL;
                size_t command_length = 0;
                if (host->message_get_string(host, in, "Command", &command, &command_length) != ATRIUM_OK ||
                    strcmp(command, "hello") != 0) {
                    fail(host, request, "unknown command: send Command=hello (and Name=...)");
                    host->message_free(host, in);
                    return;
                }
                const char *name = "world";
                size_t name_length = 5;
                host->message_get_string(host, in, "Name", &name, &name_length); /* optional */

                char greeting[256];
                int written = snprintf(greeting, sizeof greeting, "Hello, %.*s!", (int)name_length, name);
                size_t greeting_length = written < 0 ? 0 : (size_t)written;
                if (greeting_length >= sizeof greeting) greeting_length = sizeof greeting - 1;

                atrium_builder *out = host->builder_new(host);
                host->builder_put_string(host, out, "Greeting", greeting, greeting_length);
                const uint8_t *answer;
                size_t answer_length;
                host->builder_bytes(host, out, &answer, &answer_length);
                host->respond(host, request, ATRIUM_RESPONSE_SUCCESS, answer, answer_length, NULL);
                host->builder_free(host, out);
                host->message_free(host, in);
            }

            static const atrium_plugin \#(names.cName)_plugin = {
                .struct_size = sizeof(atrium_plugin),
                .abi_major = ATRIUM_PLUGIN_ABI_MAJOR,
                .abi_minor = ATRIUM_PLUGIN_ABI_MINOR,
                .name = "\#(names.name)",
                .version = "0.1.0",
                .create = \#(names.cName)_create,
                .request = \#(names.cName)_request,
            };

            ATRIUM_PLUGIN_EXPORT const atrium_plugin *atrium_plugin_entry_v1(void) { return &\#(names.cName)_plugin; }

            """#
        let makefile = """
            # Builds \(library), the plugin, with nothing but Atrium's C header.
            ATRIUM_INCLUDE ?= \(names.include)
            CFLAGS ?= -std=gnu11 -O2 -g -Wall -Wextra

            \(library): \(names.name).c
            \t$(CC) $(CFLAGS) -shared -fPIC -I$(ATRIUM_INCLUDE) -o $@ \(names.name).c

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
            atrium send unix:$XDG_RUNTIME_DIR/atrium/atriumd.sock --package \(names.package) --service \(names.service) Command=hello Name=Ada
            ```

            - `\(names.name).c`: the service. Messages are read and built through the host table
              (`message_get_string`, `builder_put_string`, ...): see the header's comments.
            - `\(names.name).json`: the manifest. `"access": "local"` serves local clients only;
              `"paired"` serves paired devices over the network too.
            - To install it: copy `\(library)` to the host's plugin folder and `\(names.name).json`
              to its manifests folder (`/etc/atrium/manifests.d`), then reload the host (SIGHUP).

            """
        return [
            "\(names.name).c": source,
            "\(names.name).json": manifest(names, library: library),
            "Makefile": makefile,
            "test.sh": testScript(names, build: "make", pluginPath: "."),
            "README.md": readme,
            ".gitignore": "\(library)\n",
        ]
    }

    static func swiftPlugin(_ names: Names) -> [String: String] {
        let type = names.typeName
        let library = "lib\(type).so"
        let package = #"""
            // swift-tools-version:6.1
            import PackageDescription

            let package = Package(
                name: "\#(type)",
                platforms: [.macOS(.v15)],
                products: [
                    // The plugin: a shared library the manifest names (\#(library)).
                    .library(name: "\#(type)", type: .dynamic, targets: ["\#(type)"])
                ],
                dependencies: [
                    // Atrium by path: its package is named by the folder's name, lowercased.
                    .package(path: "\#(names.checkout)")
                ],
                targets: [
                    .target(
                        name: "\#(type)",
                        dependencies: [
                            .product(name: "AtriumPluginKit", package: "\#(names.checkoutIdentity)"),
                            .product(name: "AtriumValues", package: "\#(names.checkoutIdentity)"),
                        ]
                    ),
                    .testTarget(
                        name: "\#(type)Tests",
                        dependencies: [
                            "\#(type)", .product(name: "AtriumValues", package: "\#(names.checkoutIdentity)"),
                        ]
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

            @testable import \#(type)

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
            atrium send unix:$XDG_RUNTIME_DIR/atrium/atriumd.sock --package \(names.package) --service \(names.service) Command=hello Name=Ada
            ```

            - `Sources/\(type)/\(type).swift`: the service (`AppService`, from AtriumPluginKit).
            - `\(names.name).json`: the manifest. `"access": "local"` serves local clients only;
              `"paired"` serves paired devices over the network too.
            - `Package.swift` depends on Atrium by path (\(names.checkout)). SwiftPM names a package
              depended on by path after its folder, lowercased: that is the `package:` of each
              `.product`. Moved the checkout? Change both.

            """
        return [
            "Package.swift": package,
            "Sources/\(type)/\(type).swift": source,
            "Tests/\(type)Tests/\(type)Tests.swift": test,
            "\(names.name).json": manifest(names, library: library),
            "test.sh": testScript(names, build: "swift build", pluginPath: ".build/debug"),
            "README.md": readme,
            ".gitignore": ".build/\n",
        ]
    }

    static func swiftClient(_ names: Names) -> [String: String] {
        let package = #"""
            // swift-tools-version:6.1
            import PackageDescription

            let package = Package(
                name: "\#(names.name)",
                platforms: [.macOS(.v15)],
                dependencies: [
                    // Atrium by path: its package is named by the folder's name, lowercased.
                    .package(path: "\#(names.checkout)")
                ],
                targets: [
                    .executableTarget(
                        name: "\#(names.name)",
                        dependencies: [
                            .product(name: "AtriumClient", package: "\#(names.checkoutIdentity)"),
                            .product(name: "AtriumValues", package: "\#(names.checkoutIdentity)"),
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

            `Package.swift` depends on Atrium by path (\(names.checkout)). SwiftPM names a package
            depended on by path after its folder, lowercased: that is the `package:` of each
            `.product`. Moved the checkout? Change both.

            """
        return [
            "Package.swift": package,
            "Sources/\(names.name)/main.swift": main,
            "README.md": readme,
            ".gitignore": ".build/\n",
        ]
    }
}
