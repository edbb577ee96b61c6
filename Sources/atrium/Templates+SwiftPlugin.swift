import Foundation

extension Templates {
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
}
