/// "Did you mean" for a name that is not one of the names a place takes: an option, a
/// manifest key.
package enum Suggestion {
    /// The name among `names` closest to `name` (by edit distance, ignoring case), when it is
    /// close enough to be a slip: at most 2 edits, or a third of the name's length. Names
    /// longer than 64 characters get none (no one mistypes one, and the distance costs their
    /// length times each candidate's).
    package static func closest(to name: String, among names: some Sequence<String>) -> String? {
        guard name.count <= 64 else { return nil }
        let lowered = name.lowercased()
        let scored = names.map { ($0, distance(lowered, $0.lowercased())) }
        guard let best = scored.min(by: { $0.1 < $1.1 }), best.1 <= max(2, name.count / 3) else { return nil }
        return best.0
    }

    /// `; did you mean "memoryMB"?` for the name among `names` closest to `name`, or "".
    package static func didYouMean(_ name: String, among names: some Sequence<String>) -> String {
        closest(to: name, among: names).map { "; did you mean \"\($0)\"?" } ?? ""
    }

    /// Levenshtein distance.
    package static func distance(_ a: String, _ b: String) -> Int {
        let a = Array(a)
        let b = Array(b)
        guard !a.isEmpty else { return b.count }
        guard !b.isEmpty else { return a.count }
        var previous = Array(0...b.count)
        for i in 1...a.count {
            var row = [i] + Array(repeating: 0, count: b.count)
            for j in 1...b.count {
                row[j] = min(previous[j] + 1, row[j - 1] + 1, previous[j - 1] + (a[i - 1] == b[j - 1] ? 0 : 1))
            }
            previous = row
        }
        return previous[b.count]
    }
}
