/// What a reload did, for the log and for `atriumd`.
public struct ReloadReport: Sendable, CustomStringConvertible {
    public var added: [String] = []
    public var removed: [String] = []
    public var changed: [String] = []
    /// Packages in worker processes whose manifest did not change but whose library file was
    /// replaced: restarted, so that the new worker loads it.
    public var libraryReplaced: [String] = []
    /// Packages that had failed (their library did not load, or their worker was given up),
    /// their manifest unchanged: started anew, and now serving.
    public var retried: [String] = []
    /// Packages that had failed, were tried again, changed or not, and failed again (the log
    /// says why, in a line of its own).
    public var stillFailed: [String] = []
    public var unchanged = 0
    /// Packages whose new manifest or library was refused: the running version stays, and why.
    public var keptRunning: [(package: String, reason: String)] = []

    public var description: String {
        var parts: [String] = []
        if !added.isEmpty { parts.append("added \(added.joined(separator: ", "))") }
        if !removed.isEmpty { parts.append("removed \(removed.joined(separator: ", "))") }
        if !changed.isEmpty { parts.append("restarted \(changed.joined(separator: ", ")) (changed)") }
        if !libraryReplaced.isEmpty {
            parts.append("restarted \(libraryReplaced.joined(separator: ", ")) (its library was replaced)")
        }
        if !retried.isEmpty { parts.append("retried \(retried.joined(separator: ", ")) (had failed)") }
        if !stillFailed.isEmpty {
            parts.append("tried \(stillFailed.joined(separator: ", ")) again: still not available")
        }
        parts.append("\(unchanged) unchanged")
        for kept in keptRunning { parts.append("kept \(kept.package) as it was: \(kept.reason)") }
        return parts.joined(separator: "; ")
    }
}
