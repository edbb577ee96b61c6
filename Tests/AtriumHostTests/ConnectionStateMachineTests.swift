import AtriumProtocol
import NIOCore
import Testing

@testable import AtriumHost

/// The rules one connection follows, checked on the state machine alone (no network).
struct ConnectionStateMachineTests {
    static let budgets = ConnectionStateMachine.Budgets(
        maxChannels: 2, maxInFlight: 3, maxInFlightBytes: 100, maxLaunches: 1)

    @Test func helloComesFirstAndOnlyOnce() {
        var machine = ConnectionStateMachine(budgets: Self.budgets)
        #expect(
            machine.frameReceived(isHello: false, type: "open")
                == .protocolError(FrameError(.helloRequired, "the first frame must be hello, not open")))
        #expect(machine.frameReceived(isHello: true, type: "hello") == .handle)
        machine.helloAccepted()
        #expect(machine.frameReceived(isHello: false, type: "request") == .handle)
        #expect(
            machine.frameReceived(isHello: true, type: "hello")
                == .protocolError(FrameError(.duplicateHello, "hello was already received on this connection")))
        machine.close()
        #expect(machine.frameReceived(isHello: false, type: "request") == .ignore)
    }

    @Test func channelNumbersAreNotReusedWhileOpenOrOpeningAndAreBounded() {
        var machine = ConnectionStateMachine(budgets: Self.budgets)
        machine.helloAccepted()
        #expect(machine.openReceived(1, isOpen: true, openChannels: 1) == .numberInUse)
        #expect(machine.openReceived(2, isOpen: false, openChannels: 1) == .proceed)
        machine.openStarted(2, handle: 20, timeout: nil)
        #expect(machine.openReceived(2, isOpen: false, openChannels: 1) == .numberInUse)
        // One open and one opening fill the two channels the budget allows.
        #expect(machine.openReceived(3, isOpen: false, openChannels: 1) == .tooManyChannels)
        #expect(machine.owesAnswers)
    }

    @Test func anOpenEndsOnceAndOnlyForItsOwnAttempt() {
        var machine = ConnectionStateMachine(budgets: Self.budgets)
        machine.openStarted(1, handle: 10, timeout: nil)
        // An answer for an earlier attempt under the same number does not end this one.
        do {
            let verdict = machine.openEnded(1, handle: 9)
            #expect(!verdict)
        }
        do {
            let verdict = machine.openEnded(1, handle: 10)
            #expect(verdict)
        }
        // The timeout that fires after the answer finds nothing to end.
        do {
            let verdict = machine.openEnded(1, handle: 10)
            #expect(!verdict)
        }
        #expect(!machine.owesAnswers)
    }

    @Test func requestsAreBoundedInCountAndBytes() {
        var machine = ConnectionStateMachine(budgets: Self.budgets)
        // One request always fits, however large (the frame limit bounds it)...
        do {
            let verdict = machine.requestReceived(bytes: 500)
            #expect(verdict == .proceed)
        }
        // ...but no second one beside it while over the byte budget.
        do {
            let verdict = machine.requestReceived(bytes: 1)
            #expect(verdict == .tooManyBytes)
        }
        machine.requestEnded(bytes: 500)
        #expect(machine.inFlightBytes == 0)
        for _ in 0..<3 {
            let verdict = machine.requestReceived(bytes: 10)
            #expect(verdict == .proceed)
        }
        do {
            let verdict = machine.requestReceived(bytes: 10)
            #expect(verdict == .tooManyInFlight)
        }
        #expect(machine.inFlight == 3 && machine.inFlightBytes == 30)
        for _ in 0..<3 { machine.requestEnded(bytes: 10) }
        #expect(machine.inFlight == 0 && machine.inFlightBytes == 0)
    }

    @Test func launchesAreBoundedPerConnection() {
        var machine = ConnectionStateMachine(budgets: Self.budgets)
        do {
            let verdict = machine.launchReceived()
            #expect(verdict)
        }
        do {
            let verdict = machine.launchReceived()
            #expect(!verdict)
        }
        machine.launchEnded()
        do {
            let verdict = machine.launchReceived()
            #expect(verdict)
        }
    }

    @Test func aHalfClosedConnectionClosesOnceNothingIsOwed() {
        var machine = ConnectionStateMachine(budgets: Self.budgets)
        machine.helloAccepted()
        do {
            let verdict = machine.requestReceived(bytes: 10)
            #expect(verdict == .proceed)
        }
        do {
            let verdict = machine.launchReceived()
            #expect(verdict)
        }
        // Not half-closed: nothing closes, owed or not.
        do {
            let verdict = machine.shouldCloseWhenDrained()
            #expect(!verdict)
        }
        machine.inputDidClose()
        do {
            let verdict = machine.shouldCloseWhenDrained()
            #expect(!verdict, "a request is still owed")
        }
        machine.requestEnded(bytes: 10)
        do {
            let verdict = machine.shouldCloseWhenDrained()
            #expect(!verdict, "a launch is still owed")
        }
        machine.launchEnded()
        do {
            let verdict = machine.shouldCloseWhenDrained()
            #expect(verdict)
        }
        #expect(machine.isClosed)
        // Only once.
        do {
            let verdict = machine.shouldCloseWhenDrained()
            #expect(!verdict)
        }
    }

    @Test func deadlines() {
        var machine = ConnectionStateMachine(budgets: Self.budgets)
        let idle = TimeAmount.seconds(60)
        #expect(machine.deadlinePassed(idle: .seconds(5), idleTimeout: idle) == .helloTimeout)
        machine.helloAccepted()
        #expect(machine.deadlinePassed(idle: .seconds(45), idleTimeout: idle) == .rearm(.seconds(15)))
        #expect(machine.deadlinePassed(idle: .seconds(60), idleTimeout: idle) == .idleTimeout)
        // Someone waiting for an answer is not idle.
        do {
            let verdict = machine.requestReceived(bytes: 1)
            #expect(verdict == .proceed)
        }
        #expect(machine.deadlinePassed(idle: .seconds(90), idleTimeout: idle) == .rearm(idle))
        machine.close()
        #expect(machine.deadlinePassed(idle: .seconds(90), idleTimeout: idle) == .none)
    }
}
