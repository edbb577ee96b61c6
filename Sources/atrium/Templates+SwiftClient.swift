import Foundation

extension Templates {
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
