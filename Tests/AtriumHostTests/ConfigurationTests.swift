import AtriumHost
import Foundation
import Testing

/// The configuration file (a TOML subset), and how it, the environment and the command line
/// make the arguments atriumd parses.
struct ConfigurationTests {
    func parse(_ text: String) throws(ConfigFile.Error) -> [ConfigFile.Entry] {
        try ConfigFile(parsing: text, path: "/etc/atrium/atriumd.conf").entries
    }

    func mistake(_ text: String) -> ConfigFile.Error? {
        do {
            _ = try parse(text)
            return nil
        } catch {
            return error
        }
    }

    @Test func everyKindOfValueWithItsLine() throws {
        let entries = try parse(
            """
            # Atrium\r
            listen = "0.0.0.0:7340"   # on every address\r

            manifests = [
              "/etc/atrium/manifests.d", # the administrator's
              '/srv/atrium\\manifests',
            ]
            advertise-name = "Kitchen \\"PC\\" \\u00e9\\t"
            response-timeout = 1_000
            drain-timeout = 2.5
            idle-timeout = 1e3
            max-channels = +7
            offset = -3
            no-watch = true
            system-handlers = false
            empty = []
            """)
        #expect(
            entries.map(\.key) == [
                "listen", "manifests", "advertise-name", "response-timeout", "drain-timeout", "idle-timeout",
                "max-channels", "offset", "no-watch", "system-handlers", "empty",
            ])
        #expect(entries.map(\.line) == [2, 4, 8, 9, 10, 11, 12, 13, 14, 15, 16])
        #expect(entries[0].value == .string("0.0.0.0:7340"))
        #expect(entries[1].value == .array([.string("/etc/atrium/manifests.d"), .string("/srv/atrium\\manifests")]))
        #expect(entries[2].value == .string("Kitchen \"PC\" é\t"))
        #expect(entries[3].value == .integer(1000))
        #expect(entries[4].value == .float(2.5))
        #expect(entries[5].value == .float(1000))
        #expect(entries[6].value == .integer(7))
        #expect(entries[7].value == .integer(-3))
        #expect(entries[8].value == .boolean(true) && entries[9].value == .boolean(false))
        #expect(entries[10].value == .array([]))
        // A byte order mark before the first key is not part of it.
        #expect(try parse("\u{FEFF}listen = \"x\"").first?.key == "listen")
        // What TOML writes is what it reads.
        let written = entries.map { "\($0.key) = \($0.value)" }.joined(separator: "\n")
        #expect(try parse(written).map(\.value) == entries.map(\.value))
    }

    @Test func everyMistakeNamesItsLineAndKey() {
        let cases: [(String, Int, String?, String)] = [
            ("a = 1\n[host]\nb = 2", 2, nil, "tables ([name]) are not used"),
            ("listen = \"a\"\n\nlisten = \"b\"", 3, "listen", "set twice (first on line 1)"),
            ("listen = 127.0.0.1:7340", 1, "listen", "is not a value: a string is quoted (\"127.0.0.1:7340\")"),
            ("x = 1\nlisten = \"127.0.0.1", 2, "listen", "the string does not end"),
            ("state-dir = \"C:\\data\"", 1, "state-dir", "unknown escape '\\d'"),
            ("host.port = 3", 1, "host", "dotted keys are not used"),
            ("listen = \"a\" \"b\"", 1, "listen", "unexpected '\"b\"' after the value"),
            ("listen =\n", 1, "listen", "no value after '='"),
            ("listen = \"\"\"a\"\"\"", 1, "listen", "multi-line strings are not used"),
            ("limits = {a = 1}", 1, "limits", "inline tables ({...}) are not used"),
            ("\n\nmanifests = [\"a\",\n  \"b\"\n", 5, "manifests", "the list opened on line 3 does not end"),
            ("manifests = [\"a\" \"b\"]", 1, "manifests", "expected ',' or ']' in the list"),
            ("max-channels = 007", 1, "max-channels", "'007' is not a number this option can hold"),
            ("max-channels = 1__0", 1, "max-channels", "'1__0' is not a number this option can hold"),
            ("drain-timeout = inf", 1, "drain-timeout", "'inf' is not a value"),
            ("= 3", 1, nil, "expected an option name"),
            ("listen \"a\"", 1, "listen", "expected '=' after the key"),
            ("name = \"a\u{1}b\"", 1, "name", "a control character in a string"),
            ("name = \"\\u12\"", 1, "name", "\\u takes 4 hex digits"),
            ("name = 'abc", 1, "name", "a closing ' is missing"),
            ("manifests = [[\"a\"]]", 1, "manifests", "a list inside a list is not used"),
            ("manifests = [[[[[[[[[[[[[[[[[[[[[[[[", 1, "manifests", "a list inside a list is not used"),
            ("name = \"\\u+041\"", 1, "name", "\\u takes 4 hex digits"),
            ("max-channels = 99999999999999999999", 1, "max-channels", "is not a number this option can hold"),
            ("a = 1\r\nlisten =\r\nb = 2", 2, "listen", "no value after '='"),
        ]
        for (text, line, key, reason) in cases {
            let error = mistake(text)
            #expect(error?.line == line, "\(text.debugDescription): line \(error?.line ?? 0)")
            #expect(error?.key == key, "\(text.debugDescription): key \(error?.key ?? "none")")
            #expect(error?.reason.contains(reason) == true, "\(text.debugDescription): \(error?.reason ?? "no error")")
            #expect(error?.description.hasPrefix("/etc/atrium/atriumd.conf, line \(line)") == true)
        }
    }

    // The merge, with options as atriumd's --help describes them.
    let options = [
        OptionSpec(name: "config", isFlag: false, isRepeating: false, defaultValue: nil),
        OptionSpec(name: "listen", isFlag: false, isRepeating: false, defaultValue: "127.0.0.1:7340"),
        OptionSpec(name: "manifests", isFlag: false, isRepeating: true, defaultValue: nil),
        OptionSpec(name: "log-level", isFlag: false, isRepeating: false, defaultValue: "info"),
        OptionSpec(name: "no-watch", isFlag: true, isRepeating: false, defaultValue: nil),
        OptionSpec(name: "state-dir", isFlag: false, isRepeating: false, defaultValue: nil),
    ]

    func file(_ text: String) throws -> String {
        let path = FileManager.default.temporaryDirectory.appendingPathComponent("atrium-conf-\(UUID().uuidString)")
            .path
        try text.write(toFile: path, atomically: true, encoding: .utf8)
        return path
    }

    func make(
        _ commandLine: [String], environment: [String: String] = [:], accepted: [String]? = nil,
        standardFiles: [String] = []
    ) throws(ConfigurationError) -> ConfiguredArguments {
        try ConfiguredArguments.make(
            commandLine: commandLine, environment: environment, options: options,
            accepted: accepted.map { names in options.filter { names.contains($0.name) } } ?? options,
            standardFiles: standardFiles)
    }

    @Test func theCommandLineComesFirstThenTheEnvironmentThenTheFile() throws {
        let path = try file(
            """
            listen = "0.0.0.0:1"
            manifests = ["/a", "/b"]
            log-level = "debug"
            no-watch = true
            """)
        defer { try? FileManager.default.removeItem(atPath: path) }
        let configured = try make(
            ["--config", path, "--manifests", "/c", "--listen=127.0.0.1:0"],
            environment: ["ATRIUM_LOG_LEVEL": "trace", "ATRIUM_HOST": "phone", "PATH": "/bin"])
        // A repeatable option given on the command line replaces the file's list.
        #expect(
            configured.arguments == [
                "--config", path, "--manifests", "/c", "--listen=127.0.0.1:0", "--log-level=trace", "--no-watch",
            ])
        #expect(configured.file == path)
        #expect(configured.values["listen"]?.origin == .commandLine)
        #expect(configured.values["manifests"]?.values == ["/c"])
        #expect(configured.values["log-level"]?.origin == .environment("ATRIUM_LOG_LEVEL"))
        #expect(configured.values["no-watch"]?.origin == .file(path: path, line: 4))
        #expect(configured.values["state-dir"] == nil)
        #expect(configured.unusedEnvironment == ["ATRIUM_HOST"])

        // Without the command line's, the file's list is every folder; the environment's is
        // a comma-separated one.
        let fromFile = try make(["--config=\(path)"])
        #expect(fromFile.arguments.filter { $0.hasPrefix("--manifests") } == ["--manifests=/a", "--manifests=/b"])
        let fromEnvironment = try make(
            [], environment: ["ATRIUM_CONFIG": path, "ATRIUM_MANIFESTS": "/x, /y", "ATRIUM_NO_WATCH": "0"])
        #expect(
            fromEnvironment.arguments == [
                "--listen=0.0.0.0:1", "--manifests=/x", "--manifests=/y", "--log-level=debug",
            ])
    }

    @Test func theFileIsTheFirstStandardOneThatExistsOrNoneWhenOff() throws {
        let path = try file("log-level = \"notice\"")
        defer { try? FileManager.default.removeItem(atPath: path) }
        let found = try make([], standardFiles: ["/no/such/atriumd.conf", path])
        #expect(found.file == path && found.arguments == ["--log-level=notice"])
        #expect(try make(["--config", "off"], standardFiles: [path]).arguments == ["--config", "off"])
        #expect(try make([], environment: ["ATRIUM_CONFIG": "off"], standardFiles: [path]).file == nil)
        #expect(try make([], standardFiles: ["/no/such/atriumd.conf"]).file == nil)
        // One that is named must be there.
        #expect(throws: ConfigurationError.self) { try make(["--config", "/no/such/atriumd.conf"]) }
        do {
            _ = try make([], environment: ["ATRIUM_CONFIG": "/no/such/atriumd.conf"])
            Issue.record("a missing file named by ATRIUM_CONFIG is refused")
        } catch {
            #expect(
                error.description
                    == "the configuration file /no/such/atriumd.conf does not exist (--config off reads none)")
        }
    }

    @Test func unknownKeysAndWrongTypesNameTheFileTheLineAndTheKey() throws {
        let cases: [(String, String)] = [
            ("# x\nliste = \"a\"", "line 2, key 'liste': no such option; did you mean 'listen'?"),
            ("colour = \"blue\"", "line 1, key 'colour': no such option"),
            ("no-watch = \"yes\"", "line 1, key 'no-watch': takes true or false; got a string (\"yes\")"),
            ("listen = [\"a\", \"b\"]", "line 1, key 'listen': takes one value, not a list; got [\"a\", \"b\"]"),
            ("listen = true", "line 1, key 'listen': takes a string or a number; got true or false (true)"),
            (
                "manifests = [true]",
                "line 1, key 'manifests': takes a list of strings or numbers; got true or false (true)"
            ),
            ("config = \"/etc/other.conf\"", "line 1, key 'config': the configuration file cannot name another"),
        ]
        for (text, expected) in cases {
            let path = try file(text)
            defer { try? FileManager.default.removeItem(atPath: path) }
            do {
                _ = try make(["--config", path])
                Issue.record("\(text.debugDescription) is refused")
            } catch {
                #expect(error.description == "\(path), \(expected)", "\(error.description)")
            }
        }
        #expect(throws: ConfigurationError.self) { try make([], environment: ["ATRIUM_NO_WATCH": "maybe"]) }
    }

    @Test func aSubcommandIsGivenOnlyTheOptionsItTakes() throws {
        let path = try file("state-dir = \"/var/lib/atrium\"\nlisten = \"0.0.0.0:7340\"")
        defer { try? FileManager.default.removeItem(atPath: path) }
        let configured = try make(["token", "list", "--config", path], accepted: ["config", "state-dir"])
        #expect(configured.arguments == ["token", "list", "--config", path, "--state-dir=/var/lib/atrium"])
        // What follows `--` is the command's own words: the file's options go before it.
        let revoke = try make(
            ["token", "revoke", "--config", path, "--", "-backup"], accepted: ["config", "state-dir"])
        #expect(
            revoke.arguments == ["token", "revoke", "--config", path, "--state-dir=/var/lib/atrium", "--", "-backup"])
    }

    @Test func printedValuesReadBackAsTheSameText() {
        #expect(ConfigFile.written("60") == "60")
        #expect(ConfigFile.written("2.5") == "2.5")
        for text in ["007", "+1", "1e5", "0x1A", "1.", "Kitchen", "", "-0"] {
            #expect(ConfigFile.written(text) == ConfigFile.quoted(text), "\(text)")
        }
    }

    @Test func manifestsFromSeveralFoldersInOrder() throws {
        let base = FileManager.default.temporaryDirectory.appendingPathComponent("atrium-folders-\(UUID().uuidString)")
        defer { try? FileManager.default.removeItem(at: base) }
        let first = base.appendingPathComponent("etc")
        let second = base.appendingPathComponent("share")
        for folder in [first, second] {
            try FileManager.default.createDirectory(at: folder, withIntermediateDirectories: true)
            chmod(folder.path, 0o755)
        }
        func manifest(_ package: String, library: String) -> String {
            #"{"manifestVersion": 1, "package": "\#(package)", "library": "\#(library)", "services": [{"name": "s"}]}"#
        }
        try manifest("a.echo", library: "libEdited.so").write(
            to: first.appendingPathComponent("echo.json"), atomically: true, encoding: .utf8)
        try manifest("a.echo", library: "libEcho.so").write(
            to: second.appendingPathComponent("echo.json"), atomically: true, encoding: .utf8)
        try manifest("a.ping", library: "libPing.so").write(
            to: second.appendingPathComponent("ping.json"), atomically: true, encoding: .utf8)
        try manifest("a.ping", library: "libOther.so").write(
            to: second.appendingPathComponent("zz-other.json"), atomically: true, encoding: .utf8)

        let missing = base.appendingPathComponent("user")
        let directory = try ManifestDirectory.load([first, missing, second], skipMissing: true)
        #expect(directory.folders == [first, second])
        #expect(directory.manifests.map(\.package) == ["a.echo", "a.ping"])
        // The earlier folder's file of the same name takes the later one's place, and says so.
        #expect(directory.manifests.first?.library == "libEdited.so")
        #expect(directory.notes == ["\(second.path)/echo.json is not read: \(first.path)/echo.json takes its place"])
        // A package declared twice under different names is a clash: the first is used.
        #expect(
            directory.problems.map(\.description) == [
                "\(second.path)/zz-other.json:1: package: \"a.ping\" is already declared by \(second.path)/ping.json"
            ])
        // A folder named on purpose must be there.
        #expect(throws: ManifestError.self) { try ManifestDirectory.load([first, missing], skipMissing: false) }
    }

    @Test func theStandardManifestFolders() {
        let user = HostConfiguration.standardManifestFolders(environment: ["HOME": "/home/ada"])
        #expect(
            user.map(\.path) == [
                "/etc/atrium/manifests.d", "/usr/share/atrium/manifests", "/home/ada/.local/share/atrium/manifests",
            ])
        let xdg = HostConfiguration.standardManifestFolders(environment: [
            "HOME": "/home/ada", "XDG_DATA_HOME": "/data",
        ])
        #expect(xdg.last?.path == "/data/atrium/manifests")
        // A relative XDG_DATA_HOME is not used (the XDG specification says so).
        let relative = HostConfiguration.standardManifestFolders(environment: [
            "HOME": "/home/ada", "XDG_DATA_HOME": "d",
        ])
        #expect(relative.last?.path == "/home/ada/.local/share/atrium/manifests")
        // A user with no home (systemd's DynamicUser) has the machine's only.
        #expect(HostConfiguration.standardManifestFolders(environment: ["HOME": "/"]).count == 2)
        #expect(HostConfiguration.standardManifestFolders(environment: [:]).count == 2)
    }
}
