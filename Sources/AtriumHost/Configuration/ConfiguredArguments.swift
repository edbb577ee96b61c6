import AtriumProtocol
import Foundation

/// One option of a command, as its `--help` knows it.
public struct OptionSpec: Sendable, Equatable {
    /// The long name, without `--`.
    public var name: String
    public var isFlag: Bool
    public var isRepeating: Bool
    /// The default as `--help` shows it, if it has one.
    public var defaultValue: String?

    public init(name: String, isFlag: Bool, isRepeating: Bool, defaultValue: String?) {
        self.name = name
        self.isFlag = isFlag
        self.isRepeating = isRepeating
        self.defaultValue = defaultValue
    }

    /// The environment variable that sets it: `ATRIUM_` and the name in capitals, `-` as `_`.
    public var environmentName: String { "ATRIUM_" + name.uppercased().replacingOccurrences(of: "-", with: "_") }
}

/// Where an option's value came from, most important first.
public enum OptionOrigin: Sendable, Equatable, CustomStringConvertible {
    case commandLine
    case environment(String)
    case file(path: String, line: Int)
    case defaultValue

    public var description: String {
        switch self {
        case .commandLine: "command line"
        case .environment(let name): "environment \(name)"
        case .file(let path, let line): "\(path), line \(line)"
        case .defaultValue: "default"
        }
    }
}

/// A mistake in the configuration, with where it is.
public struct ConfigurationError: Error, Sendable, CustomStringConvertible {
    public var description: String
    public init(_ description: String) { self.description = description }
}

/// A command's arguments with the configuration file and the `ATRIUM_*` environment
/// variables folded in: each option takes its value from the command line, else from the
/// environment, else from the file, else its default. What comes from the environment or
/// the file is added to the arguments, as the command line would give it, so it is parsed and
/// checked by the same code.
public struct ConfiguredArguments: Sendable {
    /// What the command parses.
    public var arguments: [String]
    /// The configuration file read, if any.
    public var file: String?
    /// Each option that has a value: its values (a flag's is `["true"]`) and their origin.
    public var values: [String: (values: [String], origin: OptionOrigin)]
    /// Variables named `ATRIUM_*` that name no option (ignored: they may be meant for another
    /// program, such as the client's).
    public var unusedEnvironment: [String]

    /// The option that names the configuration file (and `ATRIUM_CONFIG`).
    public static let configOption = "config"

    /// Folds in the file and environment.
    ///
    /// - Parameters:
    ///   - commandLine: the arguments after the program's name.
    ///   - options: what the configuration file may set: every option of the command.
    ///   - accepted: the options of the (sub)command the command line runs, which the values
    ///     from the file and environment are given to (a subcommand takes only its own).
    ///   - standardFiles: where the file is looked for when none is named: the first that
    ///     exists is read.
    public static func make(
        commandLine: [String], environment: [String: String], options: [OptionSpec], accepted: [OptionSpec],
        standardFiles: [String]
    ) throws(ConfigurationError) -> ConfiguredArguments {
        let given = commandLineValues(commandLine, options: options)
        var values: [String: (values: [String], origin: OptionOrigin)] = given.mapValues { ($0, .commandLine) }

        // The file: named on the command line, else in the environment, else the first of
        // the standard places that exists.
        var path: String?
        var named = false
        if let name = given[configOption]?.last {
            (path, named) = (name, true)
        } else if let name = environment[
            OptionSpec(name: configOption, isFlag: false, isRepeating: false, defaultValue: nil).environmentName]
        {
            (path, named) = (name, true)
        } else {
            path = standardFiles.first { FileManager.default.fileExists(atPath: $0) }
        }
        if path == "off" || path == "" { path = nil }
        var file: ConfigFile?
        if let path {
            guard FileManager.default.fileExists(atPath: path) else {
                throw ConfigurationError(
                    "the configuration file \(path) does not exist" + (named ? " (--config off reads none)" : ""))
            }
            let text: String
            do {
                text = try String(contentsOfFile: path, encoding: .utf8)
            } catch {
                throw ConfigurationError(
                    "the configuration file \(path) cannot be read: \(Self.reason(error))"
                        + (named ? " (--config off reads none)" : ""))
            }
            do {
                file = try ConfigFile(parsing: text, path: path)
            } catch {
                throw ConfigurationError(error.description)
            }
        }

        let byName = Dictionary(options.map { ($0.name, $0) }, uniquingKeysWith: { first, _ in first })
        for entry in file?.entries ?? [] {
            guard let option = byName[entry.key], entry.key != configOption else {
                let problem =
                    entry.key == configOption
                    ? "the configuration file cannot name another" : "no such option\(suggestion(entry.key, options))"
                throw ConfigurationError(
                    ConfigFile.Error(path: file!.path, line: entry.line, key: entry.key, reason: problem).description)
            }
            if values[option.name] == nil {
                do {
                    values[option.name] = (
                        try strings(entry.value, for: option), .file(path: file!.path, line: entry.line)
                    )
                } catch {
                    throw ConfigurationError(
                        ConfigFile.Error(path: file!.path, line: entry.line, key: entry.key, reason: error.description)
                            .description)
                }
            }
        }
        var unused: [String] = []
        let byVariable = Dictionary(options.map { ($0.environmentName, $0) }, uniquingKeysWith: { first, _ in first })
        for (variable, text) in environment.sorted(by: { $0.key < $1.key }) where variable.hasPrefix("ATRIUM_") {
            guard let option = byVariable[variable] else {
                unused.append(variable)
                continue
            }
            guard option.name != configOption, given[option.name] == nil else { continue }
            do {
                values[option.name] = (try strings(environment: text, for: option), .environment(variable))
            } catch {
                throw ConfigurationError("\(variable): \(error.description)")
            }
        }

        // The arguments: the command line's, with what the environment and the file give the
        // command that runs after its options (before a `--`, after which all is positional).
        var added: [String] = []
        let acceptedNames = Set(accepted.map(\.name))
        for option in options where acceptedNames.contains(option.name) {
            guard let (strings, origin) = values[option.name], origin != .commandLine else { continue }
            if option.isFlag {
                if strings == ["true"] { added.append("--\(option.name)") }
            } else {
                added += strings.map { "--\(option.name)=\($0)" }
            }
        }
        var arguments = commandLine
        arguments.insert(contentsOf: added, at: commandLine.firstIndex(of: "--") ?? commandLine.endIndex)
        return ConfiguredArguments(arguments: arguments, file: file?.path, values: values, unusedEnvironment: unused)
    }

    /// The values the command line gives each option (`--name value`, `--name=value`, a
    /// flag's `--name`), up to a `--`.
    static func commandLineValues(_ arguments: [String], options: [OptionSpec]) -> [String: [String]] {
        let byName = Dictionary(options.map { ($0.name, $0) }, uniquingKeysWith: { first, _ in first })
        var values: [String: [String]] = [:]
        var index = 0
        while index < arguments.count {
            let argument = arguments[index]
            index += 1
            if argument == "--" { break }
            guard argument.hasPrefix("--") else { continue }
            let body = argument.dropFirst(2)
            let name = String(body.prefix { $0 != "=" })
            guard let option = byName[name] else { continue }
            if option.isFlag {
                values[name] = ["true"]
            } else if let equals = body.firstIndex(of: "=") {
                values[name, default: []].append(String(body[body.index(after: equals)...]))
            } else if index < arguments.count {
                values[name, default: []].append(arguments[index])
                index += 1
            }
        }
        return values
    }

    /// A file's value as the option's arguments.
    static func strings(_ value: ConfigFile.Value, for option: OptionSpec) throws(ConfigurationError) -> [String] {
        if option.isFlag {
            guard case .boolean(let flag) = value else {
                throw ConfigurationError("takes true or false; got \(value.kind) (\(value))")
            }
            return flag ? ["true"] : []
        }
        func scalar(_ value: ConfigFile.Value) throws(ConfigurationError) -> String {
            switch value {
            case .string(let text): return text
            case .integer(let number): return String(number)
            case .float(let number): return String(number)
            case .boolean, .array:
                throw ConfigurationError(
                    "takes \(option.isRepeating ? "a list of strings or numbers" : "a string or a number"); got \(value.kind) (\(value))"
                )
            }
        }
        if case .array(let elements) = value {
            guard option.isRepeating else {
                throw ConfigurationError("takes one value, not a list; got \(value)")
            }
            var result: [String] = []
            for element in elements { result.append(try scalar(element)) }
            return result
        }
        return [try scalar(value)]
    }

    /// An environment variable's text as the option's arguments: true or false for a flag
    /// (also 1/0, yes/no, on/off), a list separated by commas for a repeatable option.
    static func strings(environment text: String, for option: OptionSpec) throws(ConfigurationError) -> [String] {
        if option.isFlag {
            switch text.lowercased() {
            case "1", "true", "yes", "on": return ["true"]
            case "0", "false", "no", "off", "": return []
            default: throw ConfigurationError("takes true or false (or 1 or 0); got '\(text)'")
            }
        }
        if option.isRepeating {
            return text.split(separator: ",").map { $0.trimmingCharacters(in: .whitespaces) }.filter { !$0.isEmpty }
        }
        return [text]
    }

    /// "; did you mean 'listen'?" for a name close to an option's, else "".
    static func suggestion(_ name: String, _ options: [OptionSpec]) -> String {
        Suggestion.closest(to: name, among: options.map(\.name)).map { "; did you mean '\($0)'?" } ?? ""
    }

    static func reason(_ error: any Error) -> String {
        (error as NSError).localizedDescription
    }
}
