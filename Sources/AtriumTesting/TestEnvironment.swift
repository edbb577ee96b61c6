import Foundation

/// What the tests run under.
public enum TestEnvironment {
    /// Whether the suite runs built with AddressSanitizer (Scripts/test-asan.sh says so with
    /// ATRIUM_SANITIZER=address): resident memory and address-space limits then mean nothing,
    /// and the few tests that measure them are left out.
    public static var addressSanitizer: Bool {
        ProcessInfo.processInfo.environment["ATRIUM_SANITIZER"] == "address"
    }
}
