import AtriumProtocol
import AtriumValues
import Foundation
import NIOCore
import Synchronization

extension AtriumConnection {
    /// A fresh number for a channel or a request.
    func makeNumber() -> UInt64 {
        state.withLock { state in
            defer { state.nextNumber += 1 }
            return state.nextNumber
        }
    }

    /// Sends `frame` and waits for the frame that `key` names.
    func call(_ frame: ClientFrame, awaiting key: WaitKey, timeout: Duration?) async throws -> HostFrame {
        let timeout = timeout ?? defaultTimeout
        return try await withTaskCancellationHandler {
            try await withCheckedThrowingContinuation { continuation in
                let failure = state.withLock { state -> (any Error)? in
                    if let ended = state.ended { return ended }
                    state.waiters[key] = Waiter(continuation: continuation, timer: nil)
                    return nil
                }
                if let failure {
                    continuation.resume(throwing: failure)
                    return
                }
                if Task.isCancelled {
                    fail(key, CancellationError())
                    return
                }
                // The timer and the write in one hop to the event loop.
                let channel = channel
                channel.eventLoop.execute {
                    // Cancelled, or the connection ended, meanwhile: nothing is sent.
                    guard self.state.withLock({ $0.waiters[key] != nil }) else { return }
                    let timer = channel.eventLoop.scheduleTask(in: .init(timeout)) {
                        self.fail(key, AtriumClientError(.timedOut, self.noAnswer(to: frame, within: timeout)))
                    }
                    self.state.withLock { state in
                        if state.waiters[key] != nil { state.waiters[key]!.timer = timer } else { timer.cancel() }
                    }
                    channel.writeAndFlush(frame).whenFailure { error in
                        self.fail(key, AtriumClientError(.hostWentAway, "could not send \(frame.type): \(error)"))
                    }
                }
            }
        } onCancel: {
            fail(key, CancellationError())
        }
    }

    /// What a call that timed out says: which side did not answer, when the host told how long
    /// it waits for its services.
    func noAnswer(to frame: ClientFrame, within timeout: Duration) -> String {
        let waited = "no answer within \(Self.describe(timeout)) (\(frame.type))"
        let forService: Bool
        switch frame {
        case .open, .request, .launch: forService = true
        default: forService = false
        }
        guard forService, let hostTimeout = hostResponseTimeout else {
            return "no answer from the host within \(Self.describe(timeout)) (\(frame.type))"
        }
        if timeout > hostTimeout {
            return
                "\(waited) from the host, which answers for its services within \(Self.describe(hostTimeout)): the host or the network did not answer, not the service"
        }
        return
            "\(waited): the service may still be working; the host waits \(Self.describe(hostTimeout)) before it answers for the service itself (wait longer than that to hear which)"
    }

    /// How long calls wait by default: 5 s more than the response timeout the host's `welcome`
    /// tells (35 s when it tells none), and at most 10 min 5 s whatever a host says, so that no
    /// host can make a client wait for ever.
    static func answerTimeout(hostSays hostTimeout: Duration?) -> Duration {
        min(hostTimeout ?? .seconds(30), .seconds(600)) + .seconds(5)
    }

    /// A duration in words for a message: `10 s`, `0.5 s`.
    package static func describe(_ duration: Duration) -> String {
        let seconds = Double(duration.components.seconds) + Double(duration.components.attoseconds) / 1e18
        return seconds == seconds.rounded() ? "\(Int(seconds)) s" : "\(seconds) s"
    }

    /// Ends the wait for `key` with `error`, if it is still waiting.
    func fail(_ key: WaitKey, _ error: any Error) {
        let waiter = state.withLock { $0.waiters.removeValue(forKey: key) }
        waiter?.timer?.cancel()
        waiter?.continuation.resume(throwing: error)
    }

    /// Hands an answer to whoever waits for it; false when no one does.
    func deliver(_ frame: HostFrame, to key: WaitKey) -> Bool {
        guard let waiter = state.withLock({ $0.waiters.removeValue(forKey: key) }) else { return false }
        waiter.timer?.cancel()
        waiter.continuation.resume(returning: frame)
        return true
    }

    /// Sends a frame that has no answer, without waiting for it to be written: a failed write
    /// ends the connection, and the next call hears why.
    func sendNow(_ frame: ClientFrame) throws {
        if let ended = state.withLock({ $0.ended }) { throw ended }
        channel.writeAndFlush(frame, promise: nil)
    }

    /// Sends a frame that has no answer.
    func send(_ frame: ClientFrame) async throws {
        if let ended = state.withLock({ $0.ended }) { throw ended }
        do {
            try await channel.writeAndFlush(frame)
        } catch {
            throw AtriumClientError(.hostWentAway, "could not send \(frame.type): \(error)")
        }
    }

    // MARK: - Events from the handler (on the event loop)

    func received(_ frame: HostFrame) {
        switch frame {
        case .opened(let opened):
            _ = deliver(frame, to: .opened(opened.channel))
        case .response(let response):
            // A download started with its request: its chunks follow at once, so its stream is
            // in place before the next frame is read.
            if let attached = response.attached {
                downloadStarted(attached, answering: .response(response.channel, response.id))
            }
            _ = deliver(frame, to: .response(response.channel, response.id))
        case .pong(let id):
            _ = deliver(frame, to: .pong(id))
        case .apps(let apps):
            _ = deliver(frame, to: .apps(apps.id))
        case .launched(let launched):
            _ = deliver(frame, to: .launched(launched.id))
        case .request(let request):
            let events = state.withLock { $0.channels[request.channel] }
            guard let events else {
                answerRefused(request, "channel \(request.channel) is not open on this client")
                return
            }
            do {
                let message = try request.message.decode()
                events.requests.yield(
                    AppServiceRequest(message: message, channel: request.channel, id: request.id, connection: self))
            } catch {
                answerRefused(request, "\(error)")
            }
        case .closed(let closed):
            let events = state.withLock { $0.channels.removeValue(forKey: closed.channel) }
            events?.closed.yield(closed.status)
            events?.closed.finish()
            events?.requests.finish()
        case .paired(let paired):
            if !deliver(frame, to: .paired(paired.id)) {
                state.withLock { state in
                    if state.unclaimedPaired.count >= 8 { state.unclaimedPaired.removeAll() }
                    state.unclaimedPaired[paired.id] = paired
                }
            }
        case .pairNonce(let id, _):
            _ = deliver(frame, to: .paired(id))
        case .adminResult(let result):
            _ = deliver(frame, to: .admin(result.id))
        case .error(let error):
            let refused = state.withLock { state -> [WaitKey] in
                state.lastError = error
                // The host answers an unpaired device's `apps` with this error (CONTRACT 7).
                guard error.code == .notAuthorized else { return [] }
                return state.waiters.keys.filter { if case .apps = $0 { true } else { false } }
            }
            for key in refused {
                fail(key, AtriumClientError(.notAuthorized, "the host refused: \(error.message)"))
            }
        case .welcome, .unknown:
            break
        case .transfer(let transfer):
            receivedTransfer(transfer)
        }
    }

    private func answerRefused(_ request: RequestFrame, _ reason: String) {
        channel.writeAndFlush(
            ClientFrame.response(
                ResponseFrame(channel: request.channel, id: request.id, status: .failure, error: reason)),
            promise: nil
        )
    }

    func ended() {
        let (waiters, channels, error) = state.withLock { state in
            let reason =
                state.lastError.map {
                    AtriumClientError(.hostWentAway, "the host closed the connection: \($0.code): \($0.message)")
                }
                ?? AtriumClientError(.hostWentAway, "the host closed the connection")
            state.ended = reason
            defer {
                state.waiters.removeAll()
                state.channels.removeAll()
                state.transfers.removeAll()
                state.startedDownloads.removeAll()
                state.startingRequests.removeAll()
            }
            for (_, events) in state.transfers { events.finish() }
            return (state.waiters, state.channels, reason)
        }
        for (_, waiter) in waiters {
            waiter.timer?.cancel()
            waiter.continuation.resume(throwing: error)
        }
        for (_, events) in channels {
            events.closed.yield(.unknown)
            events.closed.finish()
            events.requests.finish()
        }
    }
}
