public import AtriumDiscovery
import AtriumProtocol
import AtriumTLS
import Foundation
import NIOCore
import NIOPosix

/// A host found on the network (``RemoteSystemWatcher``) or by address
/// (``RemoteSystem/find(hostName:port:tls:timeout:)``), shaped like Rome's `RemoteSystem`.
/// Hand it to ``AtriumConnection/connect(to:clientId:clientName:token:tls:timeout:)``,
/// ``AppServiceConnection/init(appServiceName:packageId:remoteSystem:tls:timeout:)`` or
/// ``RemoteLauncher/launchUri(_:on:options:tls:timeout:)``.
public struct RemoteSystem: Sendable, Hashable, Identifiable {
    /// The host's id (`hostId` in `welcome`, `id` in its DNS-SD record): stable across
    /// restarts and address changes.
    public var id: String
    /// The name it is advertised under (or its `hostName` when found by address).
    public var displayName: String
    /// What kind of machine it is: systemd's chassis names (``MachineKind``).
    public var kind: String
    /// Where it listens, best first (IPv4, then IPv6).
    public var endpoints: [AtriumEndpoint]
    /// Whether it answered on one of its endpoints when last tried.
    public var status: RemoteSystemStatus
    /// Its TLS identity as advertised (nothing proves it until a TLS handshake does).
    public var identity: String?
    /// Whether it advertises an identity this client paired with (`known-hosts.json`): a
    /// connection then expects exactly that identity, which only the real host can prove.
    /// A host whose id this client paired with is held to the identity it proved then.
    public var isPaired: Bool
    /// Whether it takes only TLS, and whether a client must pair before opening services.
    public var requiresTLS: Bool
    public var requiresPairing: Bool
    /// The protocol version it speaks.
    public var protocolVersion: Int
    /// How it was found.
    public var source: Source

    public enum Source: Sendable, Hashable {
        /// DNS-SD, under this instance name.
        case dnssd(instanceName: String)
        /// By address (``RemoteSystem/find(hostName:port:tls:timeout:)``).
        case address(AtriumEndpoint)
    }

    public init(
        id: String, displayName: String, kind: String = MachineKind.unknown, endpoints: [AtriumEndpoint],
        status: RemoteSystemStatus = .discoveringAvailability, identity: String? = nil, isPaired: Bool = false,
        requiresTLS: Bool = true, requiresPairing: Bool = true, protocolVersion: Int = 1, source: Source
    ) {
        self.id = id
        self.displayName = displayName
        self.kind = kind
        self.endpoints = endpoints
        self.status = status
        self.identity = identity
        self.isPaired = isPaired
        self.requiresTLS = requiresTLS
        self.requiresPairing = requiresPairing
        self.protocolVersion = protocolVersion
        self.source = source
    }

    /// Finds the host at `hostName:port` (Rome's `RemoteSystem.FindByHostNameAsync`): connects,
    /// reads its `welcome`, and closes. Over TLS with `tls`, which a host off loopback requires.
    ///
    /// - Throws: ``AtriumClientError`` when it cannot be reached, or does not speak Atrium.
    public static func find(
        hostName: String, port: Int = 7340, tls: ClientTLS? = nil, timeout: Duration = .seconds(5)
    ) async throws -> RemoteSystem {
        guard let endpoint = AtriumEndpoint(hostName.contains(":") ? "[\(hostName)]:\(port)" : "\(hostName):\(port)")
        else {
            throw AtriumClientError(.cannotConnect, "'\(hostName)' is not a host name or address")
        }
        let connection = try await AtriumConnection.connect(to: endpoint, tls: tls, timeout: timeout)
        let welcome = connection.welcome
        await connection.close()
        let identity = connection.hostIdentity ?? welcome.hostIdentity
        let paired = identity.map { (tls?.knownHosts ?? KnownHosts()).isPaired($0) } ?? false
        return RemoteSystem(
            id: welcome.hostId, displayName: welcome.hostName, kind: welcome.kind ?? MachineKind.unknown,
            endpoints: [endpoint], status: .available, identity: identity, isPaired: paired,
            requiresTLS: connection.hostIdentity != nil, requiresPairing: true,
            protocolVersion: Int(clamping: welcome.version), source: .address(endpoint))
    }

    /// The TLS settings for a connection to this host: `tls`, expecting the identity this
    /// client paired with when it did. A host whose id this client paired with is held to the
    /// identity it proved then, whatever it advertises now; otherwise an advertised identity
    /// this client paired with is expected.
    func connectionTLS(_ tls: ClientTLS?) -> ClientTLS? {
        guard var tls, tls.expectedHostIdentity == nil else { return tls }
        if let pinned = tls.knownHosts.identity(ofHostId: id) {
            tls.expectedHostIdentity = pinned
        } else if isPaired, let identity {
            tls.expectedHostIdentity = identity
        }
        return tls
    }
}

/// Whether a ``RemoteSystem`` answered when last tried, as Rome's `RemoteSystemStatus`.
public enum RemoteSystemStatus: String, Sendable, Hashable {
    /// Not tried yet.
    case discoveringAvailability
    /// It accepted a connection on one of its endpoints.
    case available
    /// None of its endpoints accepted a connection.
    case unavailable
}

extension AtriumConnection {
    /// Connects to a host found by a ``RemoteSystemWatcher`` or by address: tries its endpoints
    /// in order. With `tls`, a host this client paired with must prove the identity it paired
    /// with (wherever its address moved since); any other host is connected to as an
    /// unpaired one.
    ///
    /// - Throws: ``AtriumClientError``: the last endpoint's error when none can be reached.
    public static func connect(
        to system: RemoteSystem, clientId: String? = nil, clientName: String? = nil, token: String? = nil,
        tls: ClientTLS? = nil, timeout: Duration? = nil
    ) async throws -> AtriumConnection {
        guard !system.endpoints.isEmpty else {
            throw AtriumClientError(.cannotConnect, "\(system.displayName) has no address to connect to")
        }
        if tls == nil, system.requiresTLS, !system.endpoints.allSatisfy(\.isLoopback) {
            throw AtriumClientError(
                .cannotConnect,
                "\(system.displayName) takes only TLS: pass tls: ClientTLS(identity: try ClientTLS.defaultIdentity())")
        }
        var lastError: any Error = AtriumClientError(.cannotConnect, "\(system.displayName) could not be reached")
        let settings = system.connectionTLS(tls)
        for endpoint in system.endpoints {
            do {
                return try await connect(
                    to: endpoint, clientId: clientId, clientName: clientName, token: token, tls: settings,
                    timeout: timeout)
            } catch let error as AtriumClientError where error.code == .cannotConnect {
                if (lastError as? AtriumClientError)?.code != .hostIdentityChanged { lastError = error }
            } catch let error as AtriumClientError where error.code == .hostIdentityChanged {
                // Another machine announcing itself under this host's name or id: the next
                // endpoint may be the real one. This error is the one reported if none is.
                lastError = error
            }
        }
        throw lastError
    }
}

extension AppServiceConnection {
    /// A connection to `packageId`'s `appServiceName` on `remoteSystem`, over a connection of
    /// its own (closed with it). Then ``openRemote(timeout:)`` as usual.
    public convenience init(
        appServiceName: String, packageId: String, remoteSystem: RemoteSystem, tls: ClientTLS? = nil,
        timeout: Duration? = nil
    ) async throws {
        let connection = try await AtriumConnection.connect(to: remoteSystem, tls: tls, timeout: timeout)
        self.init(appServiceName: appServiceName, packageId: packageId, connection: connection, ownsConnection: true)
    }
}

extension RemoteLauncher {
    /// Launches `uri` on `system` (Rome's `RemoteLauncher.LaunchUriAsync` with a
    /// `RemoteSystemConnectionRequest`), over a connection of its own.
    public static func launchUri(
        _ uri: String, on system: RemoteSystem, options: Options = Options(), tls: ClientTLS? = nil,
        timeout: Duration? = nil
    ) async throws -> Result {
        let connection = try await AtriumConnection.connect(to: system, tls: tls, timeout: timeout)
        do {
            let result = try await RemoteLauncher(connection: connection).launchUri(
                uri, options: options, timeout: timeout)
            await connection.close()
            return result
        } catch {
            await connection.close()
            throw error
        }
    }
}
