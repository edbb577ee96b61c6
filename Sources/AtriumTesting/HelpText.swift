/// The `--help` of `command` (words, "" for the program's own) of the built program
/// `executable`, at 80 columns whatever the caller's environment says (`COLUMNS` sets the
/// width swift-argument-parser wraps at).
public func helpAtEightyColumns(
    _ executable: String, _ command: String, environment: [String: String] = [:]
) async throws -> ProgramOutput {
    try await runProgram(
        TestHost.buildFolder.appendingPathComponent(executable).path,
        command.split(separator: " ").map(String.init) + ["--help"],
        environment: environment.merging(["COLUMNS": "80"]) { $1 })
}

/// What is wrong with the layout of a command's `--help`, as printed to a pipe (80 columns):
/// the text before `USAGE:` (overview, discussion, examples), where a line written wider than
/// the terminal is broken in two. A paragraph written as one line wraps cleanly; an example
/// (an indented line) that is too wide leaves its tail at the start of the next line, and a
/// paragraph broken by hand wider than 80 columns leaves short fragments between lines.
/// Returns one description for each such place, empty when it reads well.
public func helpLayoutProblems(_ help: String) -> [String] {
    let head = help.components(separatedBy: "USAGE:")[0]
    let lines = head.split(separator: "\n", omittingEmptySubsequences: false).map(String.init)
    var problems: [String] = []
    for (line, next) in zip(lines, lines.dropFirst()) where !next.isEmpty {
        let indented = line.hasPrefix("  ")
        if indented, !next.hasPrefix("  "), !next.hasSuffix(":") {
            problems.append("an example broken in two: \"\(line)\" / \"\(next)\"")
        } else if !indented, !line.isEmpty, !line.hasSuffix(":"), !next.hasPrefix("  "),
            line.count + 1 + (next.split(separator: " ").first?.count ?? 0) < 80
        {
            // Wrapped prose fills its lines: a line that the next word would have fitted on
            // is what is left of a line written wider than the terminal.
            problems.append("a paragraph broken by hand: \"\(line)\" / \"\(next)\"")
        }
    }
    return problems
}
