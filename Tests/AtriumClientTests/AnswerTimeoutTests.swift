import AtriumProtocol
import Testing

@testable import AtriumClient

/// How long a client waits by default follows what the host's `welcome` says, within bounds a
/// hostile host cannot push: no answer can be made to wait for ever.
struct AnswerTimeoutTests {
    @Test func theDefaultWaitFollowsTheHostWithinBounds() {
        #expect(AtriumConnection.answerTimeout(hostSays: nil) == .seconds(35))
        #expect(AtriumConnection.answerTimeout(hostSays: .milliseconds(300)) == .milliseconds(5300))
        // A host that says it waits for ever (or for longer than Int64 milliseconds can hold).
        let forever = WelcomeFrame(hostId: "h", hostName: "h", limits: .default, responseTimeoutMilliseconds: .max)
        #expect(forever.hostResponseTimeout == .milliseconds(Int64.max))
        #expect(AtriumConnection.answerTimeout(hostSays: forever.hostResponseTimeout) == .seconds(605))
        let zero = WelcomeFrame(hostId: "h", hostName: "h", limits: .default, responseTimeoutMilliseconds: 0)
        #expect(AtriumConnection.answerTimeout(hostSays: zero.hostResponseTimeout) == .seconds(5))
    }
}
