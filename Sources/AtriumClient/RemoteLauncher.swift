import AtriumProtocol
public import AtriumValues

/// Launches URIs on the host's machine, as Windows' `RemoteLauncher.LaunchUriAsync`: the host
/// hands the URI to the package that registered its scheme.
public struct RemoteLauncher: Sendable {
    /// What Windows calls `RemoteLauncherOptions`, plus the input data.
    public struct Options: Sendable {
        /// The app that should handle the URI; it must declare the scheme.
        public var package: String?
        /// Launched instead (http or https only) when nothing handles the URI.
        public var fallbackUri: String?
        /// Packages to prefer, in order, among those that declare the scheme.
        public var preferredPackages: [String]
        /// Data for the handler.
        public var data: ValueSet?

        public init(
            package: String? = nil, fallbackUri: String? = nil, preferredPackages: [String] = [], data: ValueSet? = nil
        ) {
            self.package = package
            self.fallbackUri = fallbackUri
            self.preferredPackages = preferredPackages
            self.data = data
        }
    }

    /// The host's answer: a status, and its reason when it is not success.
    public struct Result: Sendable, Hashable {
        public var status: RemoteLaunchUriStatus
        public var error: String?
    }

    public let connection: AtriumConnection

    public init(connection: AtriumConnection) {
        self.connection = connection
    }

    /// Asks the host to launch `uri` and returns its status.
    ///
    /// - Throws: ``AtriumClientError`` when no answer came (timed out, host went away).
    public func launchUri(_ uri: String, options: Options = Options(), timeout: Duration? = nil) async throws -> Result
    {
        let id = connection.makeNumber()
        let frame = LaunchFrame(
            id: id, uri: uri, package: options.package, fallbackUri: options.fallbackUri,
            preferredPackages: options.preferredPackages, data: options.data.map { EncodedValueSet($0) }
        )
        guard
            case .launched(let launched) = try await connection.call(
                .launch(frame), awaiting: .launched(id), timeout: timeout)
        else {
            throw AtriumClientError(.protocolError, "the host answered launch with something else")
        }
        return Result(status: launched.status, error: launched.error)
    }
}
