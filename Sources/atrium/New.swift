import ArgumentParser
import Foundation

/// `atrium new`: a ready-to-build project outside Atrium's source tree.
struct New: ParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Write a new plugin or client project, ready to build, outside Atrium's source tree.",
        discussion: """
            The project has a README of its own, and a test.sh that builds it, starts atriumd \
            with it on a socket of its own and checks the answer.

            Examples:
              atrium new plugin notes --language c
              atrium new plugin notes --language swift --package com.example.notes
              atrium new client notes-client --package local.notes --service notes
            """,
        subcommands: [Plugin.self, Client.self]
    )

    /// Writes the project and says what it wrote and what to type next.
    static func write(_ files: [String: String], to folder: URL, next: String) throws {
        try Templates.write(files, to: folder)
        print("wrote \(folder.path): \(files.keys.sorted().joined(separator: ", "))")
        print("next: cd \(Templates.shellQuoted(folder.path)) && \(next)")
    }

    /// What every template needs to know.
    struct Options: ParsableArguments {
        @Option(help: ArgumentHelp("The folder to write (default: ./NAME); it must not exist, or be empty."))
        var output: String?

        @Option(
            help: ArgumentHelp(
                "An Atrium source checkout, for Swift projects to depend on (default: the one this atrium was built from).",
                valueName: "path"))
        var atrium: String?

        func folder(for name: String) throws -> URL {
            let folder = URL(fileURLWithPath: output ?? name)
            var isFolder: ObjCBool = false
            if FileManager.default.fileExists(atPath: folder.path, isDirectory: &isFolder) {
                let contents = (try? FileManager.default.contentsOfDirectory(atPath: folder.path)) ?? ["?"]
                guard isFolder.boolValue, contents.isEmpty else {
                    throw ValidationError(
                        "\(folder.path) exists and is not an empty folder: choose another with --output")
                }
            }
            return folder
        }

        /// The Atrium checkout a Swift project depends on, by path.
        func checkout() throws -> URL {
            if let atrium {
                let url = URL(fileURLWithPath: atrium).standardizedFileURL
                guard Templates.isCheckout(url) else {
                    throw ValidationError(
                        "\(url.path) is not an Atrium source checkout (no Package.swift with Sources/AtriumPluginKit)")
                }
                return url
            }
            guard let built = Templates.builtFrom else {
                throw ValidationError(
                    "a Swift project depends on Atrium's sources, and the checkout this atrium was built from is not here: give one with --atrium PATH"
                )
            }
            return built
        }
    }

    struct Plugin: ParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Write a plugin project: a service with one command, its manifest, a test, a README.",
            discussion: """
                NAME (lowercase letters, digits and '-') names the folder, the library and, by \
                default, the service. The service answers {"Command": "hello", "Name": "Ada"} \
                with {"Greeting": "Hello, Ada!"}; anything else gets status 1 with the reason.

                Examples:
                  atrium new plugin notes --language c && cd notes && make && ./test.sh
                  atrium new plugin notes --language swift && cd notes && swift build
                  ./test.sh
                """
        )

        enum Language: String, ExpressibleByArgument, CaseIterable {
            case c, swift
        }

        @Argument(help: "The plugin's name: lowercase letters, digits and '-', starting with a letter.")
        var name: String

        @Option(help: "The language: c (one header, one cc line) or swift (AtriumPluginKit).")
        var language: Language

        @Option(help: ArgumentHelp("The package id (default: local.NAME).", valueName: "id"))
        var package: String?

        @Option(help: ArgumentHelp("The service name (default: NAME).", valueName: "name"))
        var service: String?

        @OptionGroup var options: Options

        func validate() throws {
            try Templates.checkName(name)
            try Templates.checkIdentifier(package, "--package")
            try Templates.checkIdentifier(service, "--service")
            if language == .swift {
                let type = Templates.Names(name: name, package: package, service: service).typeName
                try Templates.checkSwiftNames([type, "\(type)Plugin"])
            }
        }

        func run() throws {
            let folder = try options.folder(for: name)
            var names = Templates.Names(name: name, package: package, service: service)
            let files: [String: String]
            switch language {
            case .c:
                guard let include = Templates.headerFolder else {
                    throw ValidationError(
                        "atrium_plugin.h is not installed beside this atrium (\(Templates.toolFolder.path)/../include/atrium), and the checkout it was built from is not here"
                    )
                }
                names.include = include.path
                files = Templates.cPlugin(names)
            case .swift:
                names.checkout = try options.checkout().path
                files = Templates.swiftPlugin(names)
            }
            try New.write(files, to: folder, next: "\(language == .c ? "make" : "swift build") && ./test.sh")
        }
    }

    struct Client: ParsableCommand {
        static let configuration = CommandConfiguration(
            abstract:
                "Write a Swift client project: a program that sends one message to a service and prints the answer.",
            discussion: """
                Example:
                  atrium new client notes-client --package local.notes --service notes
                  cd notes-client && swift build
                  swift run notes-client unix:/run/user/1000/atrium/atriumd.sock
                """
        )

        @Argument(help: "The program's name: lowercase letters, digits and '-', starting with a letter.")
        var name: String

        @Option(help: ArgumentHelp("The package id of the service it talks to.", valueName: "id"))
        var package: String

        @Option(help: ArgumentHelp("The service it talks to.", valueName: "name"))
        var service: String

        @OptionGroup var options: Options

        func validate() throws {
            try Templates.checkName(name)
            try Templates.checkIdentifier(package, "--package")
            try Templates.checkIdentifier(service, "--service")
            try Templates.checkSwiftNames([name, name.replacingOccurrences(of: "-", with: "_")])
        }

        func run() throws {
            let folder = try options.folder(for: name)
            var names = Templates.Names(name: name, package: package, service: service)
            names.checkout = try options.checkout().path
            try New.write(Templates.swiftClient(names), to: folder, next: "swift build && swift run \(name) HOST")
        }
    }
}
