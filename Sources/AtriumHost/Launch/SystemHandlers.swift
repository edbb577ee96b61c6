import Foundation
import Logging

/// The desktop's default handlers for URI schemes (`x-scheme-handler/<scheme>` in
/// mimeapps.list), found the way `xdg-mime query default` finds them, and run from their
/// desktop entry's `Exec` line. Used only with `--system-handlers`.
enum SystemHandlers {
    /// The mimeapps.list files, most important first (XDG MIME Applications spec).
    static func mimeappsFiles(_ environment: [String: String] = ProcessInfo.processInfo.environment) -> [String] {
        let home = environment["HOME"] ?? NSHomeDirectory()
        let configHome = environment["XDG_CONFIG_HOME"].flatMap { $0.isEmpty ? nil : $0 } ?? home + "/.config"
        let configDirs = (environment["XDG_CONFIG_DIRS"].flatMap { $0.isEmpty ? nil : $0 } ?? "/etc/xdg").split(
            separator: ":")
        let dataHome = environment["XDG_DATA_HOME"].flatMap { $0.isEmpty ? nil : $0 } ?? home + "/.local/share"
        let dataDirs = dataFolders(environment)
        return [configHome + "/mimeapps.list"] + configDirs.map { $0 + "/mimeapps.list" }
            + [dataHome + "/applications/mimeapps.list"] + dataDirs.map { $0 + "/applications/mimeapps.list" }
    }

    static func dataFolders(_ environment: [String: String]) -> [String] {
        (environment["XDG_DATA_DIRS"].flatMap { $0.isEmpty ? nil : $0 } ?? "/usr/local/share:/usr/share")
            .split(separator: ":").map(String.init)
    }

    /// The desktop entry id (`firefox.desktop`) that handles `scheme`, if any.
    static func defaultEntry(for scheme: String, environment: [String: String] = ProcessInfo.processInfo.environment)
        -> String?
    {
        let key = "x-scheme-handler/\(scheme)"
        for file in mimeappsFiles(environment) {
            guard let text = try? String(contentsOfFile: file, encoding: .utf8) else { continue }
            var inDefaults = false
            for rawLine in text.split(separator: "\n") {
                let line = rawLine.trimmingCharacters(in: .whitespaces)
                if line.hasPrefix("[") {
                    inDefaults = line == "[Default Applications]"
                    continue
                }
                guard inDefaults, let equals = line.firstIndex(of: "="),
                    line[..<equals].trimmingCharacters(in: .whitespaces) == key
                else { continue }
                let entries = line[line.index(after: equals)...].split(separator: ";").map {
                    $0.trimmingCharacters(in: .whitespaces)
                }
                if let entry = entries.first(where: { !$0.isEmpty }) { return entry }
            }
        }
        return nil
    }

    /// The command of a desktop entry's `Exec` line, ready for ``ExecLauncher``: field codes
    /// `%u`/`%U`/`%f`/`%F` become `{uri}` (one argument), other codes are dropped.
    static func command(ofEntry entry: String, environment: [String: String] = ProcessInfo.processInfo.environment)
        -> [String]?
    {
        let home = environment["HOME"] ?? NSHomeDirectory()
        let dataHome = environment["XDG_DATA_HOME"].flatMap { $0.isEmpty ? nil : $0 } ?? home + "/.local/share"
        for folder in [dataHome] + dataFolders(environment) {
            guard let text = try? String(contentsOfFile: folder + "/applications/" + entry, encoding: .utf8) else {
                continue
            }
            guard let exec = text.split(separator: "\n").first(where: { $0.hasPrefix("Exec=") }) else { return nil }
            return splitExec(String(exec.dropFirst("Exec=".count))).compactMap { word in
                switch word {
                case "%u", "%U", "%f", "%F": return "{uri}"
                case let code where code.count == 2 && code.hasPrefix("%"): return nil
                default: return word.replacingOccurrences(of: "%%", with: "%")
                }
            }
        }
        return nil
    }

    /// Splits an Exec value into words, honouring double quotes and backslash escapes.
    static func splitExec(_ text: String) -> [String] {
        var words: [String] = []
        var current = ""
        var quoted = false
        var escaped = false
        var started = false
        for character in text {
            if escaped {
                current.append(character)
                escaped = false
            } else if character == "\\" {
                escaped = true
            } else if character == "\"" {
                quoted.toggle()
                started = true
            } else if character == " " && !quoted {
                if started || !current.isEmpty { words.append(current) }
                current = ""
                started = false
            } else {
                current.append(character)
            }
        }
        if started || !current.isEmpty { words.append(current) }
        return words
    }

    /// Runs the default handler of `scheme` for `uri`, without waiting for it.
    static func launch(uri: String, scheme: String, logger: Logger, maxRunning: Int) -> LaunchOutcome {
        guard let entry = defaultEntry(for: scheme) else {
            return LaunchOutcome(
                status: .protocolUnavailable, error: "no package and no desktop handler handles the scheme \(scheme)")
        }
        guard let command = command(ofEntry: entry), !command.isEmpty else {
            return LaunchOutcome(
                status: .appUnavailable, error: "the desktop handler \(entry) for \(scheme) has no usable Exec line")
        }
        logger.info("launch \(uri): the desktop's default handler for \(scheme) is \(entry)")
        return ExecLauncher(command: command).run(uri: uri, logger: logger, maxRunning: maxRunning)
    }
}
