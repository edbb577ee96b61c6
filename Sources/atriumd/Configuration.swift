import ArgumentParser
import AtriumHost
import AtriumTLS
import Foundation
import Synchronization

/// `--config`: the configuration file, for atriumd and its subcommands.
struct ConfigOptions: ParsableArguments {
    @Option(
        help: ArgumentHelp(
            "The configuration file (TOML: one 'option = value' a line, named as the long options here; atriumd --print-config writes one), or 'off' for none. Default: $XDG_CONFIG_HOME/atrium/atriumd.conf (~/.config/atrium/atriumd.conf), else /etc/atrium/atriumd.conf: the first that exists. Options on the command line come first, then ATRIUM_* environment variables (ATRIUM_LOG_LEVEL=debug), then the file.",
            valueName: "file"))
    var config: String?

    /// Where the file is looked for when none is named: the user's, then the machine's.
    static func standardFiles(environment: [String: String] = ProcessInfo.processInfo.environment) -> [String] {
        let user = HostConfiguration.userFolder(environment, "XDG_CONFIG_HOME", orInHome: ".config")
        return (user.map { [$0 + "/atrium/atriumd.conf"] } ?? []) + ["/etc/atrium/atriumd.conf"]
    }
}

extension Atriumd {
    /// Options that do something rather than set something: not for the configuration file.
    static let actions: Set<String> = ["check", "no-load", "print-config", "help", "version"]

    /// Folds the configuration file and the environment into the command line, then parses
    /// and runs, as ArgumentParser's own `main` does. An error about an option whose value
    /// came from the file or the environment says where it came from.
    static func main() async {
        // Before any other thread allocates (see MallocArenas): a worker process gets its cap
        // from its environment.
        MallocArenas.limit()
        let commandLine = Array(CommandLine.arguments.dropFirst())
        // A worker process is started by the host with everything it needs; help and the
        // version are given whatever the configuration holds.
        let beforeEnd = commandLine.prefix { $0 != "--" }
        guard !beforeEnd.contains(where: { ["--worker", "--help", "-h", "--version"].contains($0) }),
            beforeEnd.first != "help"
        else { return await runParsed(commandLine, configured: nil) }
        // The host, not its workers: they move no transfer's bytes.
        MallocArenas.keepFreedMemory()
        let (options, accepted) = optionSpecs(for: commandLine)
        let configured: ConfiguredArguments
        do {
            configured = try ConfiguredArguments.make(
                commandLine: commandLine, environment: ProcessInfo.processInfo.environment, options: options,
                accepted: accepted, standardFiles: ConfigOptions.standardFiles())
        } catch {
            FileHandle.standardError.write(Data("Error: \(error.description)\n".utf8))
            Foundation.exit(ExitCode.validationFailure.rawValue)
        }
        configuredElsewhere.withLock { $0 = configured }
        await runParsed(configured.arguments, configured: configured)
    }

    /// The options given anywhere (the command line, the environment or the file), and the
    /// `ATRIUM_*` variables that name none: what `run` needs to know beyond the values.
    static let configuredElsewhere = Mutex<ConfiguredArguments?>(nil)

    /// Whether `option` was given at all, rather than left at its default.
    static func isGiven(_ option: String) -> Bool {
        configuredElsewhere.withLock { $0?.values[option] != nil }
            || CommandLine.arguments.contains { $0 == "--\(option)" || $0.hasPrefix("--\(option)=") }
    }

    static func runParsed(_ arguments: [String], configured: ConfiguredArguments?) async {
        do {
            var command = try parseAsRoot(arguments)
            if let root = command as? Atriumd, root.printConfig, let configured {
                print(printedConfiguration(configured))
                return
            }
            if var command = command as? any AsyncParsableCommand {
                try await command.run()
            } else {
                try command.run()
            }
        } catch {
            guard exitCode(for: error) != .success, let configured else { exit(withError: error) }
            let full = fullMessage(for: error)
            // Where a value that is not on the command line came from goes right under the
            // error: the file and line, or the variable, is what to fix.
            var lines = full.split(separator: "\n", omittingEmptySubsequences: false).map(String.init)
            let origins = configured.values.sorted(by: { $0.key < $1.key }).compactMap { name, value in
                value.origin != .commandLine && mentions(full, option: name)
                    ? "(--\(name) is set by \(value.origin))" : nil
            }
            lines.insert(contentsOf: origins, at: min(1, lines.count))
            let message = lines.joined(separator: "\n")
            FileHandle.standardError.write(Data((message + "\n").utf8))
            Foundation.exit(exitCode(for: error).rawValue)
        }
    }

    /// Whether `message` names `--option` itself (not a longer option it begins).
    static func mentions(_ message: String, option: String) -> Bool {
        var rest = message[...]
        while let range = rest.range(of: "--\(option)") {
            let next = rest[range.upperBound...].first
            if next == nil || !(next!.isLetter || next!.isNumber || next == "-") { return true }
            rest = rest[range.upperBound...]
        }
        return false
    }

    /// What the configuration file may set (every option --help shows, but the actions), and
    /// what the command that `commandLine` runs takes of them.
    static func optionSpecs(for commandLine: [String]) -> (all: [OptionSpec], accepted: [OptionSpec]) {
        guard let data = _dumpHelp().data(using: .utf8),
            let dump = try? JSONSerialization.jsonObject(with: data) as? [String: Any],
            let root = dump["command"] as? [String: Any]
        else { return ([], []) }
        func specs(_ command: [String: Any]) -> [OptionSpec] {
            (command["arguments"] as? [[String: Any]] ?? []).compactMap { argument in
                guard argument["shouldDisplay"] as? Bool ?? true,
                    let kind = argument["kind"] as? String, kind == "option" || kind == "flag",
                    let preferred = argument["preferredName"] as? [String: Any],
                    preferred["kind"] as? String == "long", let name = preferred["name"] as? String,
                    !actions.contains(name)
                else { return nil }
                return OptionSpec(
                    name: name, isFlag: kind == "flag", isRepeating: argument["isRepeating"] as? Bool ?? false,
                    defaultValue: argument["defaultValue"] as? String)
            }
        }
        let all = specs(root)
        // The subcommand the command line names, if any: its options are what it accepts.
        // Options may come before it (`atriumd --config F token list`): they and their values
        // are passed over.
        var command = root
        var index = 0
        while index < commandLine.count, commandLine[index] != "--" {
            let word = commandLine[index]
            index += 1
            if word.hasPrefix("-") {
                let name = String(word.dropFirst(2).prefix { $0 != "=" })
                let takesValue = (specs(command) + all).contains { $0.name == name && !$0.isFlag }
                if takesValue, !word.contains("=") { index += 1 }
                continue
            }
            guard
                let next = (command["subcommands"] as? [[String: Any]] ?? []).first(where: {
                    $0["commandName"] as? String == word
                })
            else { break }
            command = next
        }
        return (all, specs(command))
    }

    /// The effective configuration, as a configuration file that would give it, with where
    /// each value came from.
    static func printedConfiguration(_ configured: ConfiguredArguments) -> String {
        var lines = [
            "# atriumd's configuration: each option, its value, and where the value came from",
            "# (command line, then ATRIUM_* environment variables, then the file, then the default).",
            "# configuration file: \(configured.file ?? "none")",
        ]
        for variable in configured.unusedEnvironment {
            lines.append("# \(variable) names no option of atriumd's and is not used")
        }
        // Defaults that depend on the machine, which --help can only describe.
        let computed: [String: (values: [String], note: String)] = [
            "manifests": (
                HostConfiguration.standardManifestFolders().map(\.path), "default: those that exist are read"
            ),
            "state-dir": ([TLSIdentity.defaultStateFolder().path], "default"),
            "plugin-path": (
                HostConfiguration.defaultPluginSearchPath().map(\.path),
                "default: atriumd's folder, then its ../lib/atrium/plugins"
            ),
        ]
        for option in optionSpecs(for: []).all where option.name != ConfiguredArguments.configOption {
            let line: String
            if let (values, origin) = configured.values[option.name] {
                line = "\(option.name) = \(rendered(values, option)) # \(origin)"
            } else if let (values, note) = computed[option.name] {
                line = "\(option.name) = \(rendered(values, option)) # \(note)"
            } else if let value = option.defaultValue {
                line = "\(option.name) = \(rendered(option.isRepeating ? [] : [value], option)) # default"
            } else if option.isFlag {
                line = "\(option.name) = false # default"
            } else if option.isRepeating {
                line = "\(option.name) = [] # default"
            } else {
                line = "# \(option.name) is not set"
            }
            lines.append(line)
        }
        return lines.joined(separator: "\n")
    }

    static func rendered(_ values: [String], _ option: OptionSpec) -> String {
        if option.isFlag { return values == ["true"] ? "true" : "false" }
        if option.isRepeating { return "[" + values.map(ConfigFile.written).joined(separator: ", ") + "]" }
        return values.last.map(ConfigFile.written) ?? "\"\""
    }
}
