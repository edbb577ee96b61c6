import AtriumValues
import Foundation

/// A launch as a client (or a plugin) asked for it.
struct LaunchRequestInfo: Sendable {
    var uri: String
    var package: String?
    var fallbackUri: String?
    var preferredPackages: [String]
    var data: [UInt8]?
}

/// The answer to a launch: a status and, when it is not success, why.
struct LaunchOutcome: Sendable {
    var status: RemoteLaunchUriStatus
    var error: String?
}

extension HostCore {
    /// The scheme of `uri` (RFC 3986: what comes before the first ':'), lowercased, when it has
    /// a valid one.
    static func scheme(of uri: String) -> String? {
        guard let colon = uri.firstIndex(of: ":") else { return nil }
        let scheme = String(uri[..<colon])
        return Manifest.isScheme(scheme) ? scheme.lowercased() : nil
    }

    /// Launches a URI: finds the package that handles its scheme and hands it the launch.
    /// Blocks while the handler runs: call it off the event loop.
    func launch(_ request: LaunchRequestInfo, clientId: String, clientDescription: String, isRemote: Bool)
        -> LaunchOutcome
    {
        if let data = request.data, data.count > configuration.launchDataLimit {
            return LaunchOutcome(
                status: .valueSetTooLarge,
                error: "the launch data is \(data.count) bytes, over the limit of \(configuration.launchDataLimit)"
            )
        }
        if let data = request.data {
            do {
                _ = try ValueSet(cbor: data, root: "data")
            } catch {
                return LaunchOutcome(status: .unknown, error: "the launch data is not a ValueSet: \(error)")
            }
        }
        let outcome = resolveAndLaunch(request.uri, request, clientId: clientId, isRemote: isRemote)
        if outcome.status == .protocolUnavailable, let fallback = request.fallbackUri {
            guard let scheme = Self.scheme(of: fallback), scheme == "http" || scheme == "https" else {
                return LaunchOutcome(
                    status: .protocolUnavailable,
                    error: "\(outcome.error ?? ""); the fallback \(fallback) is not an http or https URI")
            }
            return resolveAndLaunch(fallback, request, clientId: clientId, isRemote: isRemote)
        }
        logger.info(
            "launch \(request.uri) from \(clientDescription): \(outcome.status)",
            metadata: outcome.error.map { ["reason": "\($0)"] } ?? [:]
        )
        return outcome
    }

    private func resolveAndLaunch(_ uri: String, _ request: LaunchRequestInfo, clientId: String, isRemote: Bool)
        -> LaunchOutcome
    {
        guard let scheme = Self.scheme(of: uri) else {
            return LaunchOutcome(status: .protocolUnavailable, error: "\"\(uri)\" is not a URI with a valid scheme")
        }
        let handlers = packages.filter { $0.manifest.schemes.contains(scheme) }
        let chosen: LoadedPackage
        if let target = request.package {
            guard let package = handlers.first(where: { $0.manifest.package == target }) else {
                let why = package(target) == nil ? "is not installed" : "does not handle the scheme \(scheme)"
                return LaunchOutcome(status: .appUnavailable, error: "package \"\(target)\" \(why)")
            }
            chosen = package
        } else if let preferred = request.preferredPackages.lazy.compactMap({ name in
            handlers.first { $0.manifest.package == name }
        }).first {
            chosen = preferred
        } else if let first = handlers.first {
            chosen = first
        } else {
            return LaunchOutcome(status: .protocolUnavailable, error: "no package handles the scheme \(scheme)")
        }
        if let exec = chosen.manifest.launch {
            logger.info("launch \(uri): running the program of package \(chosen.manifest.package)")
            var logger = self.logger
            logger[metadataKey: "package"] = "\(chosen.manifest.package)"
            return exec.run(uri: uri, logger: logger)
        }
        guard let plugin = chosen.plugin else {
            return LaunchOutcome(
                status: .appUnavailable,
                error:
                    "package \"\(chosen.manifest.package)\" is not available: \(chosen.loadError ?? "it has no plugin")"
            )
        }
        let status = plugin.launch(uri: uri, data: request.data, clientId: clientId, isRemote: isRemote)
        return LaunchOutcome(
            status: status,
            error: status == .success ? nil : "package \"\(chosen.manifest.package)\" answered \(status)")
    }
}
