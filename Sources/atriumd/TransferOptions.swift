import ArgumentParser
import AtriumHost
import AtriumTransfers
import Foundation

/// `--transfer-*`: the limits of transfers (CONTRACT section 8), each bounding what one
/// connection or one caller can make the host hold, or all of them together
/// (docs/SECURITY.md, "Transfers").
struct TransferOptions: ParsableArguments {
    private static let defaults = TransferLimits()

    @Option(
        help: ArgumentHelp(
            "Where transfers' journal and partial uploads are kept. Default: STATE-DIR/transfers.", valueName: "dir"))
    var transferDir: String?

    @Option(
        help: ArgumentHelp(
            "The most bytes of one download sent and not yet acknowledged, whatever window its client grants.",
            valueName: "bytes"))
    var transferWindow: Int64 = defaults.windowBytes

    @Option(
        help: ArgumentHelp(
            "The most bytes sent and not yet acknowledged across one connection's transfers.", valueName: "bytes"))
    var transferConnectionWindow: Int64 = defaults.connectionWindowBytes

    @Option(help: "The most transfers one connection may have attached.")
    var transfersPerConnection: Int = defaults.attachedPerConnection

    @Option(help: "The most transfers one caller (a device, a token, a local user) may have attached at once.")
    var transfersAttachedPerCaller: Int = defaults.attachedPerCaller

    @Option(help: "The most unfinished transfers one caller may have (a service's offer beyond is refused).")
    var transfersPerCaller: Int = defaults.unfinishedPerCaller

    @Option(help: "The most unfinished transfers on the host, of all callers.")
    var transfersMax: Int = defaults.unfinished

    @Option(help: ArgumentHelp("The most bytes one caller's unfinished uploads may hold.", valueName: "bytes"))
    var transferSpoolPerCaller: Int64 = defaults.spoolBytesPerCaller

    @Option(help: ArgumentHelp("The most bytes all unfinished uploads may hold.", valueName: "bytes"))
    var transferSpool: Int64 = defaults.spoolBytes

    @Option(
        help: ArgumentHelp(
            "The free space an upload must leave on the disk of the transfers' folder.", valueName: "bytes"))
    var transferFreeSpace: Int64 = defaults.freeSpaceFloorBytes

    @Option(
        help: ArgumentHelp(
            "Seconds an unfinished transfer may make no progress before it expires (its partial bytes are deleted).",
            valueName: "seconds"))
    var transferExpiry: Double = defaults.expiry.secondsValue

    @Option(
        help: ArgumentHelp(
            "Seconds an ended transfer's outcome is kept for its caller (unless it forgets it first).",
            valueName: "seconds"))
    var transferRetention: Double = defaults.retention.secondsValue

    @Option(help: "The most ended transfers' outcomes kept per caller; past it, its oldest go first.")
    var transferOutcomesPerCaller: Int = defaults.keptOutcomesPerCaller

    @Option(
        help: ArgumentHelp(
            "Seconds a transfer's link (atrium link) admits its holder over HTTPS.", valueName: "seconds"))
    var transferLinkLifetime: Double = defaults.linkLifetime.secondsValue

    @Option(help: "The most connections speaking HTTPS to transfers' links at once.")
    var transferHTTPConnections: Int = defaults.httpConnections

    @Option(
        help: ArgumentHelp(
            "Seconds an HTTPS connection may wait for a request, or for its client to read, before it is closed.",
            valueName: "seconds"))
    var transferHTTPTimeout: Double = defaults.httpTimeout.secondsValue

    func validate() throws {
        for (flag, value) in [
            ("--transfer-window", transferWindow), ("--transfer-connection-window", transferConnectionWindow),
            ("--transfers-per-connection", Int64(transfersPerConnection)),
            ("--transfers-attached-per-caller", Int64(transfersAttachedPerCaller)),
            ("--transfers-per-caller", Int64(transfersPerCaller)), ("--transfers-max", Int64(transfersMax)),
            ("--transfer-spool-per-caller", transferSpoolPerCaller), ("--transfer-spool", transferSpool),
            ("--transfer-outcomes-per-caller", Int64(transferOutcomesPerCaller)),
            ("--transfer-http-connections", Int64(transferHTTPConnections)),
        ] where value <= 0 {
            throw ValidationError("\(flag) takes a positive number; got \(value)")
        }
        guard transferFreeSpace >= 0 else {
            throw ValidationError("--transfer-free-space takes 0 or more bytes; got \(transferFreeSpace)")
        }
        for (flag, seconds) in [
            ("--transfer-expiry", transferExpiry), ("--transfer-retention", transferRetention),
            ("--transfer-link-lifetime", transferLinkLifetime), ("--transfer-http-timeout", transferHTTPTimeout),
        ]
        where !(seconds > 0 && seconds <= 10 * 365 * 86400) {
            throw ValidationError("\(flag) takes seconds above 0 (at most ten years); got \(seconds)")
        }
    }

    /// The limits these options set.
    var limits: TransferLimits {
        TransferLimits(
            windowBytes: transferWindow, connectionWindowBytes: transferConnectionWindow,
            attachedPerConnection: transfersPerConnection, attachedPerCaller: transfersAttachedPerCaller,
            unfinishedPerCaller: transfersPerCaller, unfinished: transfersMax,
            spoolBytesPerCaller: transferSpoolPerCaller, spoolBytes: transferSpool,
            freeSpaceFloorBytes: transferFreeSpace, expiry: .milliseconds(Int64(transferExpiry * 1000)),
            retention: .milliseconds(Int64(transferRetention * 1000)),
            keptOutcomesPerCaller: transferOutcomesPerCaller,
            linkLifetime: .milliseconds(Int64(transferLinkLifetime * 1000)), httpConnections: transferHTTPConnections,
            httpTimeout: .milliseconds(Int64(transferHTTPTimeout * 1000)))
    }
}

extension Duration {
    fileprivate var secondsValue: Double {
        Double(components.seconds) + Double(components.attoseconds) / 1e18
    }
}
