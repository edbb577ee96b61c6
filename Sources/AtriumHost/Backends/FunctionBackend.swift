import AtriumValues
import Dispatch
import Logging
import NIOCore

/// The app service of a package that declares `functions`: each request is answered by
/// calling the declared function its `Command` names. Calls run on the backend's queues,
/// serial per library unless the manifest says `"concurrent": true` (one library's packages
/// share its queue); the host's timeouts and exactly-once answers apply as to any backend.
final class FunctionBackend: ServiceBackend {
    let package: String
    let functions: DeclaredFunctions
    let queues: BackendQueues
    unowned let host: any BackendHost

    init(package: String, functions: DeclaredFunctions, queues: BackendQueues, host: any BackendHost) {
        self.package = package
        self.functions = functions
        self.queues = queues
        self.host = host
    }

    func open(_ channel: ChannelInfo, completion: @escaping @Sendable (AppServiceConnectionStatus) -> Void) {
        completion(.success)
    }

    func request(_ request: UInt64, on channel: UInt64, message: ByteBuffer) {
        queues.submit(request, of: self, host: host) {
            let (status, answer, error) = self.call(message)
            _ = self.host.respond(
                to: request, from: self, status: status, message: ByteBuffer(bytes: answer.cborBytes()), error: error)
        }
    }

    private func call(_ message: ByteBuffer) -> (AppServiceResponseStatus, ValueSet, String?) {
        do {
            let set = try message.withUnsafeReadableBytes { try ValueSet(cbor: $0) }
            return (.success, try functions.call(set), nil)
        } catch let refusal as DeclaredFunctions.Refusal {
            return (.failure, [:], refusal.description)
        } catch {
            return (.failure, [:], "\(error)")
        }
    }

    /// Declared functions send no messages of their own, so no answers come back.
    func response(to request: UInt64, on channel: UInt64, status: AppServiceResponseStatus, message: ByteBuffer?) {}

    func closed(channel: UInt64, status: AppServiceClosedStatus, by closer: ChannelCloser) {}

    func launch(_ launch: LaunchInfo, completion: @escaping @Sendable (LaunchOutcome) -> Void) {
        completion(
            LaunchOutcome(
                status: .protocolUnavailable,
                error: "package \"\(package)\" declares functions, which take no launches"))
    }

    func shutDown(within timeout: Duration) -> Bool {
        queues.drain(within: timeout) {}
    }
}
