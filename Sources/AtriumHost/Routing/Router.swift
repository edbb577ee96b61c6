import AtriumProtocol
import AtriumValues

/// Where a client's `open` goes: the backend of the package that declared the service, if
/// the caller may open it (the service's access, the client's token), or the status that
/// says why not; and the `apps` listing, which tells each caller what it may open. It reads
/// the registry's snapshot of the moment and holds nothing of its own. Thread-safe.
struct Router: Sendable {
    let registry: PackageRegistry

    /// Who opens a channel, as the service's access sees it.
    struct Caller {
        var isRemote: Bool
        /// A local client, a paired device, a client with a token, or any client where
        /// pairing is not required.
        var authorized: Bool
        /// The client's TLS identity, if it has one.
        var identity: String?
        /// The `PACKAGE/SERVICE` entries its token is limited to, if it came with such a token.
        var tokenServices: [String]? = nil
    }

    /// Where an open goes: the backend, and what the service takes, from the same version of
    /// the package.
    struct Route {
        var backend: any ServiceBackend
        /// The service's declared commands, which its requests are checked against.
        var interface: ServiceInterface?
    }

    /// Which backend serves `service` of `package` for this client, or the status that says
    /// why none does (CONTRACT section 4).
    func route(package name: String, service: String, caller: Caller) -> Result<Route, Refusal> {
        guard let package = registry.package(name) else {
            return .failure(Refusal(.appNotInstalled, "no package \"\(name)\" is installed"))
        }
        guard let declared = package.manifest.service(named: service) else {
            if package.backend == nil, let error = package.loadError {
                return .failure(Self.unavailable(name, error))
            }
            return .failure(Refusal(.appServiceUnavailable, "package \"\(name)\" has no service \"\(service)\""))
        }
        guard let backend = package.backend else {
            return .failure(Self.unavailable(name, package.loadError ?? "it has no plugin"))
        }
        let routed = Route(backend: backend, interface: declared.interface)
        guard caller.isRemote else { return .success(routed) }
        if let scope = caller.tokenServices, !scope.contains("\(name)/\(service)") {
            return .failure(
                Refusal(.notAuthorized, "the client's token does not cover \(name)/\(service)"))
        }
        let notPaired = "this device is not paired with the host: pair first (atrium pair HOST)"
        switch declared.access {
        case .local:
            return .failure(
                Refusal(
                    .remoteSystemNotSupportedByApp,
                    "service \"\(service)\" does not accept remote callers (supportsRemoteSystems is false)"
                )
            )
        case .any:
            return .success(routed)
        case .paired:
            guard caller.authorized else { return .failure(Refusal(.notAuthorized, notPaired)) }
            return .success(routed)
        case .devices(let devices):
            guard caller.authorized else { return .failure(Refusal(.notAuthorized, notPaired)) }
            guard let identity = caller.identity, devices.contains(where: { identity.hasPrefix($0) }) else {
                return .failure(
                    Refusal(.notAuthorized, "service \"\(service)\" takes only the devices its manifest names"))
            }
            return .success(routed)
        }
    }

    /// The refusal of a package that is not available: why, except to a remote client, which
    /// is not told about the host's files and libraries.
    static func unavailable(_ name: String, _ why: String) -> Refusal {
        Refusal(
            .appUnavailable, "package \"\(name)\" is not available: \(why)",
            forRemote: "package \"\(name)\" is not available: its plugin is not running (the host's log says why)")
    }

    struct Refusal: Error {
        var status: AppServiceConnectionStatus
        var reason: String
        /// What a remote client is told, when it is less than `reason`.
        var forRemote: String?
        init(_ status: AppServiceConnectionStatus, _ reason: String, forRemote: String? = nil) {
            self.status = status
            self.reason = reason
            self.forRemote = forRemote
        }

        /// What the client is told: all of `reason` when it is local.
        func told(isRemote: Bool) -> String { isRemote ? forRemote ?? reason : reason }
    }

    /// The `apps` listing: every package, its services (to a remote client, those that take
    /// remote callers), its schemes and its state; why it is not ready only to a local client
    /// (a remote one is not told about the host's files). With `package`, that package alone, with what its services take: those
    /// `caller` may open (a service's access, a token's scope), at most
    /// ``maxDescribedBytes`` of them.
    func apps(for caller: Caller, package name: String? = nil) -> [AppInfo] {
        let isLocal = !caller.isRemote
        return registry.packages.compactMap { package in
            if let name, package.manifest.package != name { return nil }
            let health = package.backend?.health
            // A package of launches only (a program, no library) is ready without a backend.
            let launchesOnly = package.backend == nil && package.loadError == nil && package.manifest.launch != nil
            let state = health?.state ?? (launchesOnly ? .ready : .failed)
            let reason = state == .ready ? nil : health?.reason ?? package.loadError
            var described: [String] = []
            if let name {
                var budget = Self.maxDescribedBytes
                for service in package.manifest.services {
                    guard case .success = route(package: name, service: service.name, caller: caller),
                        let interface = package.manifest.describedInterface(of: service)
                    else { continue }
                    // A package of many services and functions would repeat them in each.
                    budget -= interface.encodedSizeBound + service.name.utf8.count
                    guard budget >= 0 else { break }
                    described.append(service.name)
                }
            }
            return AppInfo(
                package: package.manifest.package,
                displayName: package.manifest.displayName,
                // A local client may open every service; a remote one, those that take remote callers.
                services: package.manifest.services.filter { isLocal || $0.supportsRemoteSystems }.map(\.name),
                schemes: package.manifest.schemes,
                state: state.rawValue,
                reason: isLocal ? reason : nil,
                encodedInterfaces: described.isEmpty ? nil : package.interfaces.encoded(described, of: package.manifest)
            )
        }
    }

    /// The most of services' interfaces one `apps` answer carries (the services past it are
    /// left undescribed): far below a frame's limit.
    static let maxDescribedBytes = 1 << 20
}
