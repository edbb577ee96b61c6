import AtriumProtocol
import AtriumTransfers
import AtriumValues
import Dispatch
import Foundation
import NIOCore
import Synchronization

// MARK: Frames from the worker

/// What the worker sends, as its links' handlers (``WorkerLinkHandler``) hand it over: its
/// answers become calls on the host's side of the seam, checked as any backend's are, and its
/// own calls get their replies on the link they came on.
extension WorkerProcess {
    /// A frame from the worker, on link `link` (replies go back on it).
    func received(_ frame: WorkerFrame, generation: Int, link: Int) {
        guard state.withLock({ $0.generation == generation }) else { return }
        switch frame {
        case .ready(let error):
            let failure = error.map { "the plugin did not load in its worker process: \(untrusted($0, limit: 300))" }
            let loaded = state.withLock { state -> WorkerSupervisor.Loaded in
                let outcome = state.supervisor.loaded(failure: failure)
                if case .started = outcome {
                    state.startTimer?.cancel()
                    state.startTimer = nil
                }
                return outcome
            }
            guard case .started(let ready) = loaded else {
                violation("a second ready", generation: generation)
                return
            }
            if let error, ready == nil {
                logger.error("the restarted worker could not load the plugin: \(untrusted(error, limit: 300))")
            }
            if error != nil {
                // A worker whose plugin did not load ends by itself; one that stays (the plugin's
                // code ran in it) is ended, so that it cannot go on acting for the package.
                group.next().scheduleTask(in: .seconds(1)) { [self] in
                    kill(generation: generation, reason: "it stayed after its plugin failed to load")
                }
            }
            ready?.signal()
            // Uploads handed to an earlier worker of the package (it died before it answered)
            // are handed to this one.
            if error == nil { core.transfers.deliveriesLost(of: package) }
        case .opened(let channel, let status):
            let completion = state.withLock { state -> (@Sendable (AppServiceConnectionStatus) -> Void)? in
                guard let completion = state.opens.removeValue(forKey: channel) else { return nil }
                if status == 0 {
                    state.openChannels.insert(channel)
                } else {
                    state.channelLinks.removeValue(forKey: channel)
                }
                return completion
            }
            let checked = Int32(exactly: status).flatMap(AppServiceConnectionStatus.init(checking:)) ?? .unknown
            guard let completion else {
                // Accepted after the host stopped waiting (the client was told Unknown): the
                // plugin hears the channel is closed.
                if status == 0 {
                    reply(
                        .closed(
                            channel: channel, status: UInt64(AppServiceClosedStatus.canceled.rawValue),
                            by: UInt64(ChannelCloser.host.rawValue)),
                        generation, link)
                }
                return
            }
            completion(checked)
        case .respond(let id, let status, let message, let error):
            let checked = Int32(exactly: status).flatMap(AppServiceResponseStatus.init(checking:)) ?? .unknown
            let result = core.respond(to: id, from: self, status: checked, message: message?.buffer, error: error)
            if case .success = result, silentTimeouts.load(ordering: .relaxed) != 0 {
                silentTimeouts.store(0, ordering: .relaxed)
            }
        case .send(let call, let channel, let message):
            switch core.send(message.buffer, on: channel, from: self) {
            case .success(let id):
                reply(.reply(call: call, error: nil, id: id, status: nil, reason: nil), generation, link)
            case .failure(let refusal):
                reply(.reply(call: call, error: refusal.name, id: nil, status: nil, reason: nil), generation, link)
            }
        case .close(let call, let channel, let status):
            let checked = Int32(exactly: status).flatMap(AppServiceClosedStatus.init(checking:)) ?? .unknown
            let result = core.closeChannel(channel, from: self, status: checked)
            if case .failure(let refusal) = result {
                reply(.reply(call: call, error: refusal.name, id: nil, status: nil, reason: nil), generation, link)
            } else {
                reply(.reply(call: call, error: nil, id: nil, status: nil, reason: nil), generation, link)
            }
        case .launchUri(let call, let uri, let data, let channel):
            let admitted = state.withLock { state -> Bool in
                guard state.launchesFromWorker < Self.maxLaunchesFromWorker else { return false }
                state.launchesFromWorker += 1
                return true
            }
            guard admitted else {
                core.breaches.record(
                    "worker launches \(package)",
                    "the worker of package \(package) has \(Self.maxLaunchesFromWorker) launches waiting, its limit")
                reply(
                    .reply(
                        call: call, error: nil, id: nil,
                        status: UInt64(RemoteLaunchUriStatus.deniedByRemoteSystem.rawValue),
                        reason: "the plugin has \(Self.maxLaunchesFromWorker) launches waiting, its limit"),
                    generation, link)
                return
            }
            // A launch may take a while: it runs on the launch threads.
            core.launcher.pool.submit { [self] poolState in
                let outcome =
                    poolState == .active
                    ? core.launch(
                        fromBackend: self, channel: channel, uri: uri,
                        data: data.map { Array($0.buffer.readableBytesView) })
                    : LaunchOutcome(status: .remoteSystemUnavailable, error: "the host is shutting down")
                state.withLock { state in
                    if state.generation == generation { state.launchesFromWorker -= 1 }
                }
                reply(
                    .reply(
                        call: call, error: nil, id: nil, status: UInt64(max(outcome.status.rawValue, 0)),
                        reason: outcome.error),
                    generation, link)
            }
        case .offer(let call, let id, let name):
            // The file came first on the descriptor socket, tagged with the call.
            guard let descriptor = state.withLock({ $0.mailbox })?.take(call) else {
                violation("an offer without its file", generation: generation)
                reply(
                    .reply(
                        call: call, error: "file", id: nil, status: nil, reason: "the file did not come with the offer"),
                    generation, link)
                return
            }
            let result = core.offer(descriptor, name: name, for: id, from: self)
            close(descriptor)
            reply(Self.transferReply(call, result), generation, link)
        case .accept(let call, let id, let size, let maxSize, let name):
            let result = core.accept(size: size, maxSize: maxSize, name: name, for: id, from: self)
            reply(Self.transferReply(call, result), generation, link)
        case .uploadDone(let delivery, let status, let message, let error):
            let checked = Int32(exactly: status).flatMap(AppServiceResponseStatus.init(checking:)) ?? .unknown
            _ = core.uploadDone(delivery, from: self, status: checked, message: message?.buffer, error: error)
        case .launched(let call, let status, let reason):
            let completion = state.withLock { $0.launches.removeValue(forKey: call) }
            let checked = Int32(exactly: status).flatMap(RemoteLaunchUriStatus.init(checking:)) ?? .unknown
            completion?(LaunchOutcome(status: checked, error: reason.map { untrusted($0, limit: 300) }))
        default:
            violation("an unexpected \(untrusted(frame.type, limit: 40)) frame", generation: generation)
        }
    }

    /// The reply to an `offer` or an `accept`: the transfer, or the refusal's name and reason.
    static func transferReply(_ call: UInt64, _ result: Result<TransferID, TransferService.OfferRefusal>) -> WorkerFrame
    {
        switch result {
        case .success(let id):
            .reply(call: call, error: nil, id: nil, status: nil, reason: nil, transfer: id.uuid)
        case .failure(let refusal):
            .reply(call: call, error: refusal.name, id: nil, status: nil, reason: refusal.description)
        }
    }

    /// A frame the worker may not send: noted (rate-limited) and ignored.
    private func violation(_ what: String, generation: Int) {
        core.breaches.record(
            "worker protocol \(package)", "the worker of package \(package) sent \(what); ignored",
            metadata: ["package": "\(package)"])
    }

    /// Writes the host's reply to a call, to the worker that made it (not to one started
    /// since), on the link the call came on.
    private func reply(_ frame: WorkerFrame, _ generation: Int, _ link: Int) {
        state.withLock { state -> WorkerLink? in
            guard state.generation == generation, state.links.indices.contains(link) else { return nil }
            return state.links[link]
        }?.send(frame)
    }
}
