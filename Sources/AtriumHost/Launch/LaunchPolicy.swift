public import Foundation

/// What the host lets clients launch, and how it picks among several handlers.
///
/// Remote clients (TCP) may launch the schemes that manifests declare, except the local-only
/// ones (``localOnlySchemes``), plus what ``allowed`` adds, minus what ``denied`` removes.
/// Local clients (the Unix socket) and plugins are not limited by the allowlist.
public struct LaunchPolicy: Sendable, Hashable {
    /// Schemes remote clients may launch besides the declared ones (also local-only ones).
    public var allowed: Set<String>
    /// Schemes remote clients may never launch, declared or not.
    public var denied: Set<String>
    /// The package to use for a scheme that several packages declare, when the client did
    /// not target or prefer one.
    public var defaults: [String: String]
    /// The longest URI accepted, in characters.
    public var maxURILength: Int
    /// Whether schemes no manifest declares go to the desktop's default handler
    /// (`x-scheme-handler/<scheme>` in mimeapps.list, as `xdg-mime query default` finds it).
    public var systemHandlers: Bool

    /// Schemes that reach into the machine itself: denied to remote clients unless allowed.
    public static let localOnlySchemes: Set<String> = [
        "file", "javascript", "vbscript", "data", "about", "blob", "filesystem", "view-source", "jar", "resource",
    ]

    public init(
        allowed: Set<String> = [],
        denied: Set<String> = [],
        defaults: [String: String] = [:],
        maxURILength: Int = 8192,
        systemHandlers: Bool = false
    ) {
        self.allowed = Set(allowed.map { $0.lowercased() })
        self.denied = Set(denied.map { $0.lowercased() })
        self.defaults = Dictionary(defaults.map { ($0.key.lowercased(), $0.value) }, uniquingKeysWith: { $1 })
        self.maxURILength = maxURILength
        self.systemHandlers = systemHandlers
    }

    /// Why a remote client may not launch `scheme`, or nil when it may.
    func refusal(of scheme: String, declared: Bool) -> String? {
        if denied.contains(scheme) { return "the scheme \(scheme) is denied by the host's launch policy" }
        if allowed.contains(scheme) { return nil }
        if Self.localOnlySchemes.contains(scheme) {
            return
                "the scheme \(scheme) is local-only; remote clients may launch it only if the host's policy allows it"
        }
        return declared
            ? nil
            : "no package declares the scheme \(scheme), and the host's policy does not allow remote clients the desktop's handler for it"
    }

    /// Reads a policy file: `{"allow": [...], "deny": [...], "defaults": {"scheme": "package"},
    /// "maxUriLength": n, "systemHandlers": bool}`; every key is optional.
    public static func load(_ file: URL) throws -> LaunchPolicy {
        struct File: Decodable {
            var allow: [String]?
            var deny: [String]?
            var defaults: [String: String]?
            var maxUriLength: Int?
            var systemHandlers: Bool?
        }
        let data = try Data(contentsOf: file)
        let parsed = try JSONDecoder().decode(File.self, from: data)
        return LaunchPolicy(
            allowed: Set(parsed.allow ?? []), denied: Set(parsed.deny ?? []), defaults: parsed.defaults ?? [:],
            maxURILength: parsed.maxUriLength ?? 8192, systemHandlers: parsed.systemHandlers ?? false
        )
    }

    /// This policy with `other`'s additions (command-line flags on top of a file).
    public func merging(allowed: [String], denied: [String], defaults: [String: String]) -> LaunchPolicy {
        var merged = self
        merged.allowed.formUnion(allowed.map { $0.lowercased() })
        merged.denied.formUnion(denied.map { $0.lowercased() })
        for (scheme, package) in defaults { merged.defaults[scheme.lowercased()] = package }
        return merged
    }
}
