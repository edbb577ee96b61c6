import Foundation

/// Atrium's release version: what `--version` prints, `host.status` reports and
/// `atrium status` shows. The protocol's own version is `atriumProtocolVersion`; this one
/// moves with every release of the host and tools.
public enum AtriumVersion {
    public static let current = "0.9.0"

    /// For a small tool without an argument parser: answers `--version` (the release) and
    /// `--help` (`usage`) and exits; anything else starting with `-` is refused with the
    /// usage (exit 64). Returns otherwise.
    public static func answerStandardOptions(usage: String) {
        for argument in CommandLine.arguments.dropFirst() {
            switch argument {
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
