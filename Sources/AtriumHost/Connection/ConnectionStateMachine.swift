import AtriumProtocol
import NIOCore

/// One connection's lifecycle and budgets: whether it has said `hello`, the opens a backend
/// has not answered, the requests and launches in flight, and when it may close. Pure state,
/// confined to the connection's event loop (``ConnectionHandler`` owns it): every event comes
/// in as a call and goes out as a decision for the handler to carry out, so the rules can be
/// tested without a network. The connection's channels and requests, which backends reach
/// from their own threads, are in its ``ConnectionSlot``.
struct ConnectionStateMachine {
    enum Phase: Equatable {
        /// Connected, no `hello` yet.
        case greeting
        /// `hello` accepted.
        case active
        /// Closing or closed: nothing the client sends is acted on any more.
        case closed
    }

    struct Budgets {
        var maxChannels: Int
        var maxInFlight: Int
        var maxInFlightBytes: Int
        var maxLaunches: Int
    }

    /// An `open` handed to a backend and not answered yet.
    struct Opening {
        /// The host's id for this attempt: an answer for an attempt that timed out is told
        /// apart from one for a later attempt under the same number.
        var handle: UInt64
        var timeout: Scheduled<Void>?
    }

    let budgets: Budgets
    private(set) var phase = Phase.greeting
    /// The client shut down its sending side: answers still due go out, then it closes.
    private(set) var inputClosed = false
    private(set) var opening: [UInt64: Opening] = [:]
    private(set) var inFlight = 0
    private(set) var inFlightBytes = 0
    private(set) var launchesInFlight = 0

    init(budgets: Budgets) {
        self.budgets = budgets
    }

    // MARK: - Frames

    enum FrameVerdict: Equatable {
        /// Act on the frame.
        case handle
        /// The connection is closing: drop the frame.
        case ignore
        /// Answer with an `error` frame and close.
        case protocolError(FrameError)
    }

    /// Whether a frame of `type` may be acted on now: `hello` first and only once.
    func frameReceived(isHello: Bool, type: String) -> FrameVerdict {
        switch phase {
        case .closed:
            return .ignore
        case .greeting:
            return isHello
                ? .handle : .protocolError(FrameError(.helloRequired, "the first frame must be hello, not \(type)"))
        case .active:
            return isHello
                ? .protocolError(FrameError(.duplicateHello, "hello was already received on this connection")) : .handle
        }
    }

    mutating func helloAccepted() {
        if phase == .greeting { phase = .active }
    }

    // MARK: - Opens

    enum OpenVerdict: Equatable {
        case proceed
        /// The number names an open channel, or one being opened.
        case numberInUse
        /// The connection has `maxChannels` channels open or being opened.
        case tooManyChannels
    }

    /// Whether the client may open channel `number`, given whether that number is open now
    /// and how many channels are.
    func openReceived(_ number: UInt64, isOpen: Bool, openChannels: Int) -> OpenVerdict {
        if isOpen || opening[number] != nil { return .numberInUse }
        if openChannels + opening.count >= budgets.maxChannels { return .tooManyChannels }
        return .proceed
    }

    mutating func openStarted(_ number: UInt64, handle: UInt64, timeout: Scheduled<Void>?) {
        opening[number] = Opening(handle: handle, timeout: timeout)
    }

    /// The backend answered, or the open timed out: true when `handle` is still the attempt
    /// under way for `number` (which then ends), false when it ended already.
    mutating func openEnded(_ number: UInt64, handle: UInt64) -> Bool {
        guard let attempt = opening[number], attempt.handle == handle else { return false }
        opening.removeValue(forKey: number)
        attempt.timeout?.cancel()
        return true
    }

    // MARK: - Requests

    enum RequestVerdict: Equatable {
        case proceed
        case tooManyInFlight
        case tooManyBytes
    }

    /// Whether a request of `bytes` fits the connection's budgets; if it does, it is counted
    /// until ``requestEnded(bytes:)``. One request always fits, however large, when none is
    /// in flight (the message size limit bounds it).
    mutating func requestReceived(bytes: Int) -> RequestVerdict {
        guard inFlight < budgets.maxInFlight else { return .tooManyInFlight }
        guard inFlightBytes + bytes <= budgets.maxInFlightBytes || inFlight == 0 else { return .tooManyBytes }
        inFlight += 1
        inFlightBytes += bytes
        return .proceed
    }

    /// A request counted by ``requestReceived(bytes:)`` was answered, or never delivered.
    mutating func requestEnded(bytes: Int) {
        inFlight -= 1
        inFlightBytes -= bytes
    }

    // MARK: - Launches

    /// Whether the connection may start another launch; if so it is counted until
    /// ``launchEnded()``.
    mutating func launchReceived() -> Bool {
        guard launchesInFlight < budgets.maxLaunches else { return false }
        launchesInFlight += 1
        return true
    }

    mutating func launchEnded() {
        launchesInFlight -= 1
    }

    // MARK: - Closing

    /// Whether something is still owed to the client: an answer to a request, an open or a
    /// launch.
    var owesAnswers: Bool { inFlight > 0 || launchesInFlight > 0 || !opening.isEmpty }

    mutating func inputDidClose() {
        inputClosed = true
    }

    /// After the client half-closed: true once nothing is owed any more, and the connection
    /// should close now (it is then closed).
    mutating func shouldCloseWhenDrained() -> Bool {
        guard inputClosed, phase != .closed, !owesAnswers else { return false }
        phase = .closed
        return true
    }

    enum DeadlineVerdict: Equatable {
        case helloTimeout
        case idleTimeout
        /// Not due yet: look again after this long.
        case rearm(TimeAmount)
        case none
    }

    /// The deadline timer fired `idle` after the last frame: before `hello`, the hello
    /// deadline has passed; after it, the connection is idle only if it owes nothing.
    func deadlinePassed(idle: TimeAmount, idleTimeout: TimeAmount) -> DeadlineVerdict {
        switch phase {
        case .closed: return .none
        case .greeting: return .helloTimeout
        case .active:
            if idle < idleTimeout { return .rearm(idleTimeout - idle) }
            return owesAnswers ? .rearm(idleTimeout) : .idleTimeout
        }
    }

    /// The connection is closing (a protocol error, a timeout, the host): nothing more is
    /// acted on.
    mutating func close() {
        phase = .closed
    }

    /// The connection is gone: the opens still under way stop waiting (their late answers
    /// find no attempt and are told the channel closed).
    mutating func connectionEnded() {
        phase = .closed
        for attempt in opening.values { attempt.timeout?.cancel() }
    }

    var isClosed: Bool { phase == .closed }
}
