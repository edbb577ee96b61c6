import AtriumProtocol
import NIOCore

/// A connection's launches (`launch` frames, CONTRACT section 5): the limits per connection
/// and per host, the launch data's size, handing the launch to the launch threads, and its
/// audit line. What is in flight is counted in the connection's ``ConnectionStateMachine``
/// (a half-closed connection stays until its launches are answered).
///
/// On the connection's event loop only; it writes through the handler it is given.
enum ConnectionLaunches {
    static func launch(_ launch: LaunchFrame, on connection: ConnectionHandler) {
        let core = connection.core
        let admission = connection.admission
        core.totals.launches.wrappingAdd(1, ordering: .relaxed)
        // Refused before it reaches a handler (HostCore.launch counts the others).
        let refuse = { (outcome: LaunchOutcome) in
            core.metrics?.launched(scheme: core.launcher.declaredScheme(of: launch.uri), status: outcome.status)
            answer(launch, outcome, on: connection)
        }
        guard connection.machine.launchReceived() else {
            core.breaches.record(
                "launches per connection", level: .notice, "a connection reached --max-launches-per-connection")
            refuse(
                LaunchOutcome(
                    status: .deniedByRemoteSystem,
                    error: "more than \(admission.maxLaunchesPerConnection) launches in flight on this connection"))
            return
        }
        guard core.launcher.takeSlot() else {
            connection.machine.launchEnded()
            core.breaches.record("launches", "the host reached --max-launches")
            refuse(
                LaunchOutcome(
                    status: .deniedByRemoteSystem,
                    error: "the host has \(admission.maxLaunches) launches in flight, its limit"))
            return
        }
        if let data = launch.data, data.byteCount > core.configuration.launchDataLimit {
            connection.machine.launchEnded()
            core.launcher.releaseSlot()
            refuse(
                LaunchOutcome(
                    status: .valueSetTooLarge,
                    error:
                        "the launch data is \(data.byteCount) bytes, over the limit of \(core.configuration.launchDataLimit)"
                ))
            return
        }
        let request = LaunchRequestInfo(
            uri: launch.uri, package: launch.package, fallbackUri: launch.fallbackUri,
            preferredPackages: launch.preferredPackages,
            data: launch.data.map { Array($0.buffer.readableBytesView) }
        )
        guard let link = connection.link else { return }
        let (clientId, isRemote) = (connection.session.clientId, !connection.isLocal)
        // A handler may take a while (a program starting): it runs on the launch threads.
        core.launcher.pool.submit { state in
            let outcome =
                state == .active
                ? core.launcher.launch(
                    request, clientId: clientId, clientDescription: "client \(untrusted(clientId, limit: 64))",
                    isRemote: isRemote)
                : LaunchOutcome(status: .remoteSystemUnavailable, error: "the host is shutting down")
            core.launcher.releaseSlot()
            link.run { connection in
                connection.machine.launchEnded()
                answer(launch, outcome, on: connection)
                connection.closeIfDrained()
            }
        }
    }

    /// Tells the client how its launch went, and writes its audit line.
    private static func answer(_ launch: LaunchFrame, _ outcome: LaunchOutcome, on connection: ConnectionHandler) {
        audit(launch, outcome, on: connection)
        connection.write(
            .launched(
                LaunchedFrame(
                    id: launch.id, status: outcome.status, error: outcome.error.map { untrusted($0, limit: 400) })))
    }

    /// A launch's outcome for the audit log: its scheme and target, not the whole URI (which
    /// may carry what its sender would not want kept).
    private static func audit(_ launch: LaunchFrame, _ outcome: LaunchOutcome, on connection: ConnectionHandler) {
        guard connection.core.audit != nil else { return }
        let scheme = launch.uri.split(separator: ":", maxSplits: 1).first.map(String.init) ?? ""
        var fields = ["scheme": untrusted(scheme, limit: 64), "status": "\(outcome.status)"]
        if let package = launch.package { fields["package"] = untrusted(package, limit: 80) }
        connection.session.audit("launch", fields, on: connection)
    }
}
