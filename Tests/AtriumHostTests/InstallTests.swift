import AtriumProtocol
import AtriumTesting
import Foundation
import Testing

/// Scripts/install.sh as a person runs it, into a scratch root (`--destdir`) with the build the
/// tests already have: what it puts where, that the installed atriumd runs from there and
/// finds its plugins, and that `--uninstall` takes away exactly what it put.
@Suite(.serialized) struct InstallTests {
    static let repository = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
        .deletingLastPathComponent()

    /// Runs Scripts/install.sh with `arguments` (and the build the tests use); returns its exit
    /// status and output.
    static func install(_ arguments: [String], home: URL? = nil) async throws -> (status: Int32, output: String) {
        var environment: [String: String] = [:]
        if let home {
            environment["HOME"] = home.path
            environment["XDG_DATA_HOME"] = home.appendingPathComponent(".local/share").path
            environment["XDG_CONFIG_HOME"] = home.appendingPathComponent(".config").path
        }
        let result = try await runProgram(
            "/bin/bash",
            [
                repository.appendingPathComponent("Scripts/install.sh").path, "--no-build", "--from",
                TestHost.buildFolder.path,
            ]
                + arguments,
            environment: environment)
        return (result.status, result.output)
    }

    /// Every file under `folder`, as paths relative to it.
    static func files(under folder: URL) -> [String] {
        let enumerator = FileManager.default.enumerator(atPath: folder.path)
        var found: [String] = []
        while let path = enumerator?.nextObject() as? String {
            var isFolder: ObjCBool = false
            let exists = FileManager.default.fileExists(
                atPath: folder.appendingPathComponent(path).path, isDirectory: &isFolder)
            if exists, !isFolder.boolValue { found.append(path) }
        }
        return found.sorted()
    }

    /// Records an issue for each of `expected` that is not among `files`.
    static func expectEvery(_ expected: [String], in files: [String], sourceLocation: SourceLocation = #_sourceLocation)
    {
        for path in expected where !files.contains(path) {
            Issue.record("\(path) is missing: \(files)", sourceLocation: sourceLocation)
        }
    }

    static func scratch(_ name: String) throws -> URL {
        let folder = FileManager.default.temporaryDirectory.appendingPathComponent(
            "atrium-\(name)-\(UUID().uuidString.prefix(8))")
        try FileManager.default.createDirectory(at: folder, withIntermediateDirectories: true)
        return folder
    }

    @Test func aSystemInstallPutsEachThingInItsPlaceAndItsUninstallTakesExactlyThat() async throws {
        let root = try Self.scratch("install-root")
        defer { try? FileManager.default.removeItem(at: root) }
        // Something of someone else's, in a folder the install also uses: it stays.
        try FileManager.default.createDirectory(
            at: root.appendingPathComponent("usr/bin"), withIntermediateDirectories: true)
        try "#!/bin/sh\n".write(
            to: root.appendingPathComponent("usr/bin/other-tool"), atomically: true, encoding: .utf8)

        let installed = try await Self.install(["--prefix", "/usr", "--destdir", root.path])
        #expect(installed.status == 0, "\(installed.output)")
        let files = Self.files(under: root)
        Self.expectEvery(
            [
                "usr/bin/atriumd", "usr/bin/atrium", "usr/include/atrium/atrium_plugin.h",
                "usr/lib/atrium/plugins/libEcho.so", "usr/lib/atrium/plugins/libRomanPing.so",
                "usr/lib/atrium/plugins/libmathdemo.so", "usr/lib/atrium/plugins/libFiles.so",
                "usr/lib/systemd/system/atriumd.service",
                "usr/lib/systemd/system/atriumd.socket", "usr/share/man/man1/atriumd.1", "usr/share/man/man1/atrium.1",
                "usr/share/bash-completion/completions/atrium", "usr/share/zsh/site-functions/_atrium",
                "usr/share/fish/vendor_completions.d/atrium.fish", "etc/atrium/manifests.d/echo.json",
                "etc/atrium/manifests.d/roman-ping.json", "etc/atrium/manifests.d/files.json",
                "etc/atrium/atriumd.conf",
            ], in: files)
        // The units say where the install put atriumd and its configuration.
        let service = try String(
            contentsOf: root.appendingPathComponent("usr/lib/systemd/system/atriumd.service"), encoding: .utf8)
        #expect(
            service.contains("ExecStart=/usr/bin/atriumd --config /etc/atrium/atriumd.conf --state-dir"), "\(service)")
        // The configuration file is one atriumd reads, every option at its default; the
        // manifests folder is the standard one, so it is not named.
        let configuration = root.appendingPathComponent("etc/atrium/atriumd.conf").path
        let printed = try await runProgram(
            root.appendingPathComponent("usr/bin/atriumd").path, ["--config", configuration, "--print-config"])
        #expect(printed.status == 0, "\(printed.output)")
        // Only the state folder is set: the system unit's, for the token commands.
        let fromFile = printed.output.split(separator: "\n").filter { $0.contains("atriumd.conf, line ") }
        #expect(fromFile.count == 1 && fromFile[0].hasPrefix("state-dir = \"/var/lib/atrium\""), "\(printed.output)")
        #expect(try String(contentsOfFile: configuration, encoding: .utf8).contains("\n# manifests = ["))
        let manual = try String(
            contentsOf: root.appendingPathComponent("usr/share/man/man1/atriumd.1"), encoding: .utf8)
        #expect(
            manual.hasPrefix(".TH ATRIUMD 1") && manual.contains(".B --max-connections <max-connections>"),
            "\(manual.prefix(300))")

        // The installed host runs from where it was put, and finds its plugins there.
        let atriumd = root.appendingPathComponent("usr/bin/atriumd").path
        let check = try await runProgram(
            atriumd, ["--check", "--manifests", root.appendingPathComponent("etc/atrium/manifests.d").path])
        #expect(check.status == 0, "\(check.output)")
        #expect(check.output.contains("4 manifests, 4 would load, 0 would not"), "\(check.output)")
        #expect(check.output.contains("library: \(root.path)/usr/lib/atrium/plugins/libEcho.so"), "\(check.output)")
        let version = try await runProgram(atriumd, ["--version"])
        #expect(version.output == AtriumVersion.current + "\n")

        // A manifest the administrator changed since is kept; everything else goes.
        let edited = root.appendingPathComponent("etc/atrium/manifests.d/echo.json")
        try (String(contentsOf: edited, encoding: .utf8) + "\n").write(to: edited, atomically: true, encoding: .utf8)
        let removed = try await Self.install(["--uninstall", "--prefix", "/usr", "--destdir", root.path])
        #expect(removed.status == 0, "\(removed.output)")
        #expect(removed.output.contains("kept /etc/atrium/manifests.d/echo.json: changed since it was installed"))
        #expect(Self.files(under: root) == ["etc/atrium/manifests.d/echo.json", "usr/bin/other-tool"])
        // The folders it made went with it, those that were there before stayed.
        #expect(!FileManager.default.fileExists(atPath: root.appendingPathComponent("usr/lib").path))
        #expect(FileManager.default.fileExists(atPath: root.appendingPathComponent("usr/bin").path))

        let again = try await Self.install(["--uninstall", "--prefix", "/usr", "--destdir", root.path])
        #expect(again.status == 1 && again.output.contains("nothing to uninstall"), "\(again.output)")
    }

    @Test func anUpgradeKeepsWhatTheAdministratorChangedAndNothingOfSomeoneElsesIsTaken() async throws {
        let root = try Self.scratch("install-upgrade")
        defer { try? FileManager.default.removeItem(at: root) }
        let arguments = ["--prefix", "/usr", "--destdir", root.path]
        #expect(try await Self.install(arguments).status == 0)
        let manifest = root.appendingPathComponent("etc/atrium/manifests.d/echo.json")
        let edited = try String(contentsOf: manifest, encoding: .utf8) + "\n"
        try edited.write(to: manifest, atomically: true, encoding: .utf8)
        // Installing again (an upgrade) leaves the edited manifest as it is, the new one beside it.
        let upgrade = try await Self.install(arguments)
        #expect(upgrade.status == 0, "\(upgrade.output)")
        #expect(upgrade.output.contains("kept /etc/atrium/manifests.d/echo.json: changed since it was installed"))
        #expect(try String(contentsOf: manifest, encoding: .utf8) == edited)
        #expect(FileManager.default.fileExists(atPath: manifest.path + ".new"))
        // Uninstalling after the upgrade still keeps it, and leaves nothing else behind.
        #expect(try await Self.install(["--uninstall"] + arguments).status == 0)
        #expect(Self.files(under: root) == ["etc/atrium/manifests.d/echo.json"])

        // A file the install did not put there is never overwritten: the install stops before
        // it touches anything, and says which.
        try FileManager.default.createDirectory(
            at: root.appendingPathComponent("usr/bin"), withIntermediateDirectories: true)
        try "theirs".write(to: root.appendingPathComponent("usr/bin/atrium"), atomically: true, encoding: .utf8)
        let clash = try await Self.install(arguments)
        #expect(clash.status == 1 && clash.output.contains("  /usr/bin/atrium\n"), "\(clash.output)")
        #expect(try String(contentsOf: root.appendingPathComponent("usr/bin/atrium"), encoding: .utf8) == "theirs")
        #expect(!FileManager.default.fileExists(atPath: root.appendingPathComponent("usr/bin/atriumd").path))
        // Elsewhere than /etc, the configuration names the manifests folder the install used.
        let elsewhere = try Self.scratch("install-sysconfdir")
        defer { try? FileManager.default.removeItem(at: elsewhere) }
        let opt = try await Self.install([
            "--prefix", "/opt/atrium", "--sysconfdir", "/opt/atrium/etc", "--destdir", elsewhere.path,
        ])
        #expect(opt.status == 0, "\(opt.output)")
        let optConfiguration = try String(
            contentsOf: elsewhere.appendingPathComponent("opt/atrium/etc/atrium/atriumd.conf"), encoding: .utf8)
        #expect(optConfiguration.contains("\nmanifests = [\"/opt/atrium/etc/atrium/manifests.d\"]\n"))
        let optUnit = try String(
            contentsOf: elsewhere.appendingPathComponent("opt/atrium/lib/systemd/system/atriumd.service"),
            encoding: .utf8)
        #expect(optUnit.contains("ExecStart=/opt/atrium/bin/atriumd --config /opt/atrium/etc/atrium/atriumd.conf"))
        // A folder a unit cannot hold as it is.
        let odd = try await Self.install(["--prefix", "/opt/my atrium", "--destdir", root.path])
        #expect(odd.status == 64 && odd.output.contains("has characters a systemd unit cannot hold"), "\(odd.output)")
    }

    @Test func aUserInstallGoesUnderHomeWithUserUnits() async throws {
        let home = try Self.scratch("install-home")
        defer { try? FileManager.default.removeItem(at: home) }
        let installed = try await Self.install(["--user"], home: home)
        #expect(installed.status == 0, "\(installed.output)")
        let files = Self.files(under: home)
        Self.expectEvery(
            [
                ".local/bin/atriumd", ".local/bin/atrium", ".local/lib/atrium/plugins/libEcho.so",
                ".local/share/atrium/manifests/echo.json", ".config/systemd/user/atriumd.service",
                ".config/systemd/user/atriumd.socket", ".local/share/man/man1/atrium.1", ".config/atrium/atriumd.conf",
            ], in: files)
        let unit = try String(
            contentsOf: home.appendingPathComponent(".config/systemd/user/atriumd.service"), encoding: .utf8)
        #expect(
            unit.contains(
                "ExecStart=\(home.path)/.local/bin/atriumd --config \(home.path)/.config/atrium/atriumd.conf\n"),
            "\(unit)")
        // The installed host, run as that user would, reads the manifests the install put in
        // their standard folder without being told.
        let check = try await runProgram(
            home.appendingPathComponent(".local/bin/atriumd").path,
            ["--config", home.appendingPathComponent(".config/atrium/atriumd.conf").path, "--check", "--no-load"],
            environment: ["HOME": home.path, "XDG_DATA_HOME": "", "XDG_CONFIG_HOME": ""])
        #expect(
            check.output.contains("\(home.path)/.local/share/atrium/manifests/echo.json (atrium.examples.echo)"),
            "\(check.output)")
        let removed = try await Self.install(["--uninstall", "--user"], home: home)
        #expect(removed.status == 0, "\(removed.output)")
        #expect(Self.files(under: home).isEmpty, "\(Self.files(under: home))")
    }

    @Test func aWrongOptionSaysWhatToDo() async throws {
        let wrong = try await Self.install(["--prefx", "/usr"])
        #expect(wrong.status == 64 && wrong.output.contains("unknown option --prefx (see --help)"), "\(wrong.output)")
    }
}

/// Scripts/package-deb.sh, from the build the tests have: the package's fields and contents,
/// and that what it installs runs, on the Swift runtime it carries.
@Suite struct PackageTests {
    static var hasDpkg: Bool {
        ["/usr/bin/dpkg-deb", "/usr/bin/patchelf"].allSatisfy { FileManager.default.isExecutableFile(atPath: $0) }
    }

    @Test(.disabled(if: !PackageTests.hasDpkg, "dpkg-deb or patchelf is not installed (.ci/run installs patchelf)"))
    func theDebianPackageHoldsWhatItShouldAndItsHostRuns() async throws {
        let scratch = try InstallTests.scratch("package")
        defer { try? FileManager.default.removeItem(at: scratch) }
        let made = try await runProgram(
            "/bin/bash",
            [
                InstallTests.repository.appendingPathComponent("Scripts/package-deb.sh").path, "--from",
                TestHost.buildFolder.path, "--output", scratch.path, "--fast",
            ])
        #expect(made.status == 0, "\(made.output)")
        let package = scratch.appendingPathComponent("atrium_\(AtriumVersion.current)_amd64.deb").path
        let fields = try await runProgram("dpkg-deb", ["-f", package, "Package", "Version", "Depends"])
        #expect(fields.output.contains("Package: atrium\nVersion: \(AtriumVersion.current)\n"), "\(fields.output)")
        #expect(fields.output.contains("libffi8") && fields.output.contains("libavahi-client3"), "\(fields.output)")

        let root = scratch.appendingPathComponent("root")
        let unpacked = try await runProgram("dpkg-deb", ["-x", package, root.path])
        #expect(unpacked.status == 0, "\(unpacked.output)")
        let files = InstallTests.files(under: root)
        InstallTests.expectEvery(
            [
                "usr/bin/atriumd", "usr/bin/atrium", "usr/lib/atrium/plugins/libEcho.so",
                "usr/lib/atrium/swift/libswiftCore.so", "usr/lib/atrium/swift/libFoundation.so",
                "usr/lib/systemd/system/atriumd.service", "usr/lib/systemd/system/atriumd.socket",
                "usr/share/man/man1/atriumd.1", "etc/atrium/manifests.d/echo.json",
            ], in: files)
        // dpkg keeps the list of what it installed: the installer's own record is not packaged.
        #expect(!files.contains { $0.hasPrefix("usr/share/atrium/") }, "\(files)")
        let control = scratch.appendingPathComponent("control")
        _ = try await runProgram("dpkg-deb", ["-e", package, control.path])
        let conffiles = try String(contentsOf: control.appendingPathComponent("conffiles"), encoding: .utf8)
        #expect(conffiles.contains("/etc/atrium/manifests.d/echo.json\n"), "\(conffiles)")
        #expect(conffiles.contains("/etc/atrium/atriumd.conf\n"), "\(conffiles)")

        // The runtime it carries is all the programs need: with it first on the library path,
        // nothing is taken from the toolchain.
        let carried = root.appendingPathComponent("usr/lib/atrium/swift").path
        let atriumd = root.appendingPathComponent("usr/bin/atriumd").path
        let libraries = try await runProgram("ldd", [atriumd], environment: ["LD_LIBRARY_PATH": carried])
        #expect(libraries.status == 0 && !libraries.output.contains("not found"), "\(libraries.output)")
        let runtimeNames = ["libswift", "libFoundation", "lib_FoundationICU", "libdispatch", "libBlocksRuntime"]
        let swiftLibraries = libraries.output.split(separator: "\n").filter { line in
            let name = line.trimmingCharacters(in: .whitespaces)
            return runtimeNames.contains { name.hasPrefix($0) }
        }
        #expect(
            !swiftLibraries.isEmpty && swiftLibraries.allSatisfy { $0.contains(carried) }, "\(libraries.output)")
        let check = try await runProgram(
            atriumd, ["--check", "--manifests", root.appendingPathComponent("etc/atrium/manifests.d").path],
            environment: ["LD_LIBRARY_PATH": carried])
        #expect(check.output.contains("4 manifests, 4 would load, 0 would not"), "\(check.output)")

        // Every program and plugin looks for the Swift runtime only where the package puts it,
        // never in the toolchain it was built with (another Swift may sit there on the machine
        // it is installed on) or a build folder.
        var elfFiles = 0
        for file in files {
            let path = root.appendingPathComponent(file).path
            guard let handle = FileHandle(forReadingAtPath: path) else { continue }
            let magic = try handle.read(upToCount: 4)
            try handle.close()
            guard magic == Data([0x7f, 0x45, 0x4c, 0x46]) else { continue }
            elfFiles += 1
            let dynamic = try await runProgram("readelf", ["-d", path])
            let paths = dynamic.output.split(separator: "\n").filter { $0.contains("RPATH") || $0.contains("RUNPATH") }
                .flatMap { line in
                    (line.split(separator: "[").last?.split(separator: "]").first ?? "").split(separator: ":")
                        .map(String.init)
                }
            #expect(
                paths.allSatisfy { $0 == "$ORIGIN" || $0 == "/usr/lib/atrium/swift" }, "\(file): \(paths)")
        }
        #expect(elfFiles >= 5, "the programs, the plugins and the runtime: \(elfFiles) ELF files")

        // With the toolchain hidden (a mount namespace with an empty /opt/swift), what the package
        // carries runs the host and loads its plugins.
        let hidden = """
            mount -t tmpfs none /opt/swift && export LD_LIBRARY_PATH="$1" && "$2" --version && \
            "$2" --check --manifests "$3"
            """
        let isolated = try await runProgram(
            "/usr/bin/unshare",
            [
                "-m", "/bin/sh", "-c", hidden, "sh", carried, atriumd,
                root.appendingPathComponent("etc/atrium/manifests.d").path,
            ])
        if geteuid() == 0 {
            #expect(isolated.status == 0, "\(isolated.output)")
            #expect(isolated.output.contains(AtriumVersion.current), "\(isolated.output)")
            #expect(isolated.output.contains("4 manifests, 4 would load, 0 would not"), "\(isolated.output)")
        }
    }
}
