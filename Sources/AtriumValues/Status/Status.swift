/// The status enumerations of Windows App Services and Project Rome, with their Windows
/// numbering (CONTRACT section 4), so that code written for Windows reads right. They live
/// beside the values so that plugins, which see no frames, use the same types as clients and
/// the host.
///
/// Each is a struct over its raw integer rather than an enum: a peer may send a value this
/// version does not know, and that value must survive being received and passed on.

/// The outcome of opening a channel to an app service (`opened` frame).
public struct AppServiceConnectionStatus: StatusCode, CustomStringConvertible {
    public var rawValue: Int
    public init(rawValue: Int) { self.rawValue = rawValue }

    public static let success = Self(rawValue: 0)
    /// No such package.
    public static let appNotInstalled = Self(rawValue: 1)
    /// The package is known but its plugin failed to load or is down.
    public static let appUnavailable = Self(rawValue: 2)
    /// The package has no such service.
    public static let appServiceUnavailable = Self(rawValue: 3)
    public static let unknown = Self(rawValue: 4)
    public static let remoteSystemUnavailable = Self(rawValue: 5)
    /// The service does not accept remote callers.
    public static let remoteSystemNotSupportedByApp = Self(rawValue: 6)
    public static let notAuthorized = Self(rawValue: 7)
    public static let authenticationError = Self(rawValue: 8)
    public static let networkNotAvailable = Self(rawValue: 9)
    public static let disabledByPolicy = Self(rawValue: 10)
    public static let webServiceUnavailable = Self(rawValue: 11)

    static let names = [
        "Success", "AppNotInstalled", "AppUnavailable", "AppServiceUnavailable", "Unknown",
        "RemoteSystemUnavailable", "RemoteSystemNotSupportedByApp", "NotAuthorized", "AuthenticationError",
        "NetworkNotAvailable", "DisabledByPolicy", "WebServiceUnavailable",
    ]

    /// The Windows name and the number: `AppNotInstalled (1)`.
    public var description: String { statusDescription(rawValue, Self.names) }
}

/// The outcome of one request (`response` frame).
public struct AppServiceResponseStatus: StatusCode, CustomStringConvertible {
    public var rawValue: Int
    public init(rawValue: Int) { self.rawValue = rawValue }

    public static let success = Self(rawValue: 0)
    public static let failure = Self(rawValue: 1)
    public static let resourceLimitsExceeded = Self(rawValue: 2)
    public static let unknown = Self(rawValue: 3)
    public static let remoteSystemUnavailable = Self(rawValue: 4)
    public static let messageSizeTooLarge = Self(rawValue: 5)
    public static let appUnavailable = Self(rawValue: 6)
    public static let authenticationError = Self(rawValue: 7)
    public static let networkNotAvailable = Self(rawValue: 8)
    public static let disabledByPolicy = Self(rawValue: 9)
    public static let webServiceUnavailable = Self(rawValue: 10)

    static let names = [
        "Success", "Failure", "ResourceLimitsExceeded", "Unknown", "RemoteSystemUnavailable",
        "MessageSizeTooLarge", "AppUnavailable", "AuthenticationError", "NetworkNotAvailable",
        "DisabledByPolicy", "WebServiceUnavailable",
    ]

    public var description: String { statusDescription(rawValue, Self.names) }
}

/// Why a channel was closed (`closed` frame).
public struct AppServiceClosedStatus: StatusCode, CustomStringConvertible {
    public var rawValue: Int
    public init(rawValue: Int) { self.rawValue = rawValue }

    public static let completed = Self(rawValue: 0)
    public static let canceled = Self(rawValue: 1)
    public static let resourceLimitsExceeded = Self(rawValue: 2)
    public static let unknown = Self(rawValue: 3)

    static let names = ["Completed", "Canceled", "ResourceLimitsExceeded", "Unknown"]

    public var description: String { statusDescription(rawValue, Self.names) }
}

/// The outcome of launching a URI (`launched` frame).
public struct RemoteLaunchUriStatus: StatusCode, CustomStringConvertible {
    public var rawValue: Int
    public init(rawValue: Int) { self.rawValue = rawValue }

    public static let unknown = Self(rawValue: 0)
    public static let success = Self(rawValue: 1)
    public static let appUnavailable = Self(rawValue: 2)
    /// No handler for the scheme.
    public static let protocolUnavailable = Self(rawValue: 3)
    public static let remoteSystemUnavailable = Self(rawValue: 4)
    public static let valueSetTooLarge = Self(rawValue: 5)
    public static let deniedByLocalSystem = Self(rawValue: 6)
    /// The host's policy refused it.
    public static let deniedByRemoteSystem = Self(rawValue: 7)

    static let names = [
        "Unknown", "Success", "AppUnavailable", "ProtocolUnavailable", "RemoteSystemUnavailable",
        "ValueSetTooLarge", "DeniedByLocalSystem", "DeniedByRemoteSystem",
    ]

    public var description: String { statusDescription(rawValue, Self.names) }
}

/// What the four status enumerations share, and the checked conversions for where a status
/// crosses into a fixed-width integer: the C ABI's `int32_t` and the wire's unsigned integer.
/// A status comes from peers the host does not trust (clients, plugins), so none of these
/// conversions can trap: a value that does not fit becomes the enumeration's `unknown`.
public protocol StatusCode: RawRepresentable, Sendable, Hashable where RawValue == Int {
    init(rawValue: Int)
    /// The enumeration's Unknown member, which stands in for a value that cannot cross.
    static var unknown: Self { get }
}

extension StatusCode {
    /// Whether the value can cross every boundary as it is: from 0 to `Int32.max`.
    public var isRepresentable: Bool { rawValue >= 0 && rawValue <= Int(Int32.max) }

    /// The status as the C ABI's `int32_t`; `unknown` when it is negative or too large.
    public var int32Value: Int32 { isRepresentable ? Int32(rawValue) : Int32(Self.unknown.rawValue) }

    /// The status as the wire's unsigned integer; `unknown` when it is negative or too large.
    public var wireValue: UInt64 { isRepresentable ? UInt64(rawValue) : UInt64(Self.unknown.rawValue) }

    /// A status a plugin returned through the C ABI, or `nil` when it is negative (no status is).
    public init?(checking value: Int32) {
        guard value >= 0 else { return nil }
        self.init(rawValue: Int(value))
    }
}

func statusDescription(_ rawValue: Int, _ names: [String]) -> String {
    let name = names.indices.contains(rawValue) ? names[rawValue] : "unrecognised"
    return "\(name) (\(rawValue))"
}
