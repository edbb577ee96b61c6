import AtriumProtocol
import AtriumValues
import Foundation

extension ManifestChecker {
    /// `schemes`: each one checked on its own.
    func readSchemes(_ value: JSONValue?) -> [String]? {
        guard let value else { return [] }
        guard case .array(let list) = value else {
            record(fail("schemes", "must be an array of strings"))
            return nil
        }
        var seen: Set<String> = []
        return readEach(list) { (index, item) throws(ManifestError) -> String in
            guard case .string(let scheme) = item else { throw fail("schemes[\(index)]", "must be a string") }
            guard Manifest.isScheme(scheme) else {
                throw fail(
                    "schemes[\(index)]",
                    "\"\(untrusted(scheme, limit: 80))\" is not a URI scheme (RFC 3986: a letter, then letters, digits, +, - or .)"
                )
            }
            let lowered = scheme.lowercased()
            guard seen.insert(lowered).inserted else {
                throw fail("schemes[\(index)]", "\"\(untrusted(scheme, limit: 80))\" is declared twice")
            }
            return lowered
        }
    }

    /// `launch`: a program for a package without a library to hand its schemes' URIs to.
    func readLaunch(_ value: JSONValue?, hasLibrary: Bool?, schemes: [String]?) -> ExecLauncher?? {
        guard let value else { return .some(nil) }
        return section { () throws(ManifestError) -> ExecLauncher? in
            guard case .object(let entry) = value else {
                throw fail("launch", "must be an object like {\"exec\": [\"/usr/bin/xdg-open\", \"{uri}\"]}")
            }
            warnUnknownKeys(entry, at: "launch", known: Self.launchKeys)
            guard case .array(let words)? = entry["exec"], !words.isEmpty else {
                throw fail(
                    "launch.exec",
                    "must be a non-empty array: the program, then its arguments, with {uri} where the URI goes")
            }
            var command: [String] = []
            for (index, word) in words.enumerated() {
                guard case .string(let text) = word, !(index == 0 && text.isEmpty) else {
                    throw fail("launch.exec[\(index)]", index == 0 ? "must be the program's path" : "must be a string")
                }
                command.append(text)
            }
            var wait = false
            if let flag = entry["wait"] {
                guard case .bool(let value) = flag else {
                    throw fail("launch.wait", "must be true or false, not \(flag)")
                }
                wait = value
            }
            var timeout = 10.0
            if let seconds = entry["timeoutSeconds"] {
                guard case .number(let value) = seconds, value > 0, value <= 3600 else {
                    throw fail("launch.timeoutSeconds", "must be a number of seconds above 0 and at most 3600")
                }
                timeout = value
            }
            if hasLibrary == true {
                throw fail(
                    "launch",
                    "a package with a library handles launches in its plugin; launch.exec is for packages without one")
            }
            if schemes?.isEmpty == true { throw fail("launch", "needs schemes to handle") }
            return ExecLauncher(command: command, wait: wait, timeoutSeconds: timeout)
        }
    }
}
