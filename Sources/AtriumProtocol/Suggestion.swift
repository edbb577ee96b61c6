/// "Did you mean" for a name that is not one of the names a place takes: an option, a
/// manifest key.
package enum Suggestion {
    /// The name among `names` closest to `name` (by edit distance, ignoring case), when it is
    /// close enough to be a slip: at most 2 edits, or a third of the name's length. Names
    /// longer than 64 characters get none (no one mistypes one), and a candidate whose length
    /// alone puts it too far is not measured: a client's key against a service's fields costs
    /// at most its length times each near candidate's, and a distance stops as soon as it is
    /// past the limit.
    package static func closest(to name: String, among names: some Sequence<String>) -> String? {
        guard name.count <= 64 else { return nil }
        let lowered = Array(name.lowercased())
        let limit = max(2, name.count / 3)
        var best: (name: String, distance: Int)?
        for candidate in names {
            guard abs(candidate.count - lowered.count) <= limit else { continue }
            let bound = min(limit, (best?.distance ?? limit + 1) - 1)
            guard bound >= 0, let found = distance(lowered, Array(candidate.lowercased()), within: bound) else {
                continue
            }
            best = (candidate, found)
        }
        return best?.name
    }

    /// `; did you mean "memoryMB"?` for the name among `names` closest to `name`, or "".
    package static func didYouMean(_ name: String, among names: some Sequence<String>) -> String {
        closest(to: name, among: names).map { "; did you mean \"\($0)\"?" } ?? ""
    }

    /// Levenshtein distance.
    static func distance(_ a: String, _ b: String) -> Int {
        distance(Array(a), Array(b), within: Int.max - 1) ?? Int.max
    }

    /// The Levenshtein distance of `a` and `b` when it is at most `bound`, or nil: it stops at
    /// the first row whose every cell is past the bound.
    static func distance(_ a: [Character], _ b: [Character], within bound: Int) -> Int? {
        guard !a.isEmpty else { return b.count <= bound ? b.count : nil }
        guard !b.isEmpty else { return a.count <= bound ? a.count : nil }
        var previous = Array(0...b.count)
        var row = Array(repeating: 0, count: b.count + 1)
        for i in 1...a.count {
            row[0] = i
            var smallest = i
            for j in 1...b.count {
                row[j] = min(previous[j] + 1, row[j - 1] + 1, previous[j - 1] + (a[i - 1] == b[j - 1] ? 0 : 1))
                smallest = min(smallest, row[j])
            }
            if smallest > bound { return nil }
            swap(&previous, &row)
        }
        return previous[b.count] <= bound ? previous[b.count] : nil
    }
}
