import Foundation

/// Atrium's release version: what `--version` prints, `host.status` reports and
/// `atrium status` shows. The protocol's own version is `atriumProtocolVersion`; this one
/// moves with every release of the host and tools.
public enum AtriumVersion {
    public static let current = "0.9.0"

    /// For a small tool without an argument parser: answers `--version` (the release) and
    /// `--help` (`usage`) and exits; anything else starting with `-` and not among `options`
    /// (the tool's own) is refused with the usage (exit 64). Returns otherwise.
    public static func answerStandardOptions(usage: String, accepting options: Set<String> = []) {
        for argument in CommandLine.arguments.dropFirst() {
            switch argument {
            case _ where options.contains(argument):
                continue
            case "--version":
                print(current)
                exit(0)
            case "--help", "-h":
                print(usage)
                exit(0)
            case _ where argument.hasPrefix("-"):
                FileHandle.standardError.write(Data("unknown option \(argument)\n\(usage)\n".utf8))
                exit(64)
            default:
                continue
            }
        }
    }
}
