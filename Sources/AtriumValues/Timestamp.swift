#if canImport(FoundationEssentials)
    public import FoundationEssentials
#else
    public import Foundation
#endif

/// A `date` value: seconds since 1970-01-01 UTC, held exactly as the wire carries them.
///
/// Foundation's `Date` counts from 2001, so converting some values (fractions of a second
/// near 1970, say) to a `Date` and back changes their last bits. A `Timestamp` keeps the
/// seconds it was given, so a date that passes through Atrium comes out with the same value;
/// use ``date`` when you want a `Date`.
public struct Timestamp: Sendable, Hashable, Comparable, CustomStringConvertible {
    /// Seconds since 1970-01-01 00:00:00 UTC; negative before, fractional where needed.
    public var secondsSince1970: Double

    public init(secondsSince1970: Double) {
        self.secondsSince1970 = secondsSince1970
    }

    /// The timestamp of `date`.
    public init(_ date: Date) {
        secondsSince1970 = date.timeIntervalSince1970
    }

    /// The current time.
    public static var now: Timestamp { Timestamp(Date()) }

    /// This timestamp as a Foundation `Date`.
    public var date: Date { Date(timeIntervalSince1970: secondsSince1970) }

    public static func < (lhs: Timestamp, rhs: Timestamp) -> Bool { lhs.secondsSince1970 < rhs.secondsSince1970 }

    /// Equal as ``Value`` dates are: every NaN equals every NaN.
    public static func == (lhs: Timestamp, rhs: Timestamp) -> Bool {
        sameDouble(lhs.secondsSince1970, rhs.secondsSince1970)
    }

    public func hash(into hasher: inout Hasher) { hashDouble(secondsSince1970, into: &hasher) }

    /// Diagnostic notation: `1(1363896240)` or `1(1363896240.5)`.
    public var description: String { Value.date(self).description }
}
