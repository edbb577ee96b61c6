// A service that does, on request, every thing a plugin can do wrong or unusually, so that
// the host's tests can check that every request is still answered exactly once and that no
// other client notices. The message's "Action" says what to do:
//
//   "echo"     answer with the message                 "fail"   answer status 1 with a reason
//                                                      (the message's "Reason", if it has one)
//   "throw"    throw an error                         "hang"   never answer
//   "late"     answer after "DelayMs" milliseconds    "twice"  answer, then try to answer again
//   "deferred" answer later through the responder
//   "send"     send {"Hello": "client"} to the client, then answer with the client's reply
//   "ask"      answer at once, then send {"Question": 1} to the client and, once that is
//              answered, {"FirstAnswerStatus": its status}
//   "close"    answer, then close the channel with status "Status"
//   "block"    block the thread for "DelayMs" milliseconds, then answer
//   "flood"    send "Count" messages to the client at once; answer {"Sent": n, "Busy": m} with
//              how many the client answered and how many the host refused as busy
//   "closeNow" close the channel with status "Status" at once, from the request itself
//   "thread"   answer {"Thread": the name of the thread the request runs on}
//   "wait"     answer once a "release" has come, from any client   "release" let every "wait" answer
//   "offer"    offer the file at "Path" (the Swift SDK's offerFile): {"Transfer", "Size"}
//   "accept"   accept an upload of "Size" bytes (absent: unknown) named "Name": {"Transfer"};
//              once finished, it is copied to "Path" and its result is {"Stored": path, "Size", "Digest"}
//
// Opening the service "refuse.<n>" is refused with status n. Closed channels are logged. The manifest's config
// {"greeting": text} comes back in every "echo" answer as "Greeting"; {"requestsNeverBlock": true}
// makes the service say so (actions "block" and "hang" then break that promise).

import AtriumPluginKit
import AtriumValues
import Foundation
import Synchronization

struct Config: Decodable {
    var greeting: String?
    var requestsNeverBlock: Bool?
}

final class TestService: AppService {
    let host: ServiceHost
    let greeting: String?
    let requestsNeverBlock: Bool
    /// Requests waiting for a "release", or nil once one has come.
    let waiting = Mutex<[CheckedContinuation<Void, Never>]?>([])

    init(host: ServiceHost) throws {
        self.host = host
        let config = try host.config(as: Config.self)
        greeting = config.greeting
        requestsNeverBlock = config.requestsNeverBlock ?? false
    }

    func open(_ channel: ServiceChannel) async -> AppServiceConnectionStatus {
        if channel.service.hasPrefix("refuse."), let status = Int(channel.service.dropFirst("refuse.".count)) {
            return AppServiceConnectionStatus(rawValue: status)
        }
        return .success
    }

    /// Launches are logged with what came with them; data {"Status": n} answers status n.
    func launch(_ launch: LaunchRequest) async -> RemoteLaunchUriStatus {
        host.log(
            .info,
            "\(greeting ?? "test") launched \(launch.uri) for \(launch.clientId.isEmpty ? "a plugin" : launch.clientId) remote \(launch.isRemote) data \(launch.data.map { "\($0)" } ?? "none")"
        )
        if let status = launch.data?["Status"]?.int { return RemoteLaunchUriStatus(rawValue: Int(status)) }
        return .success
    }

    func closed(_ channel: ServiceChannel, status: AppServiceClosedStatus) async {
        host.log(.info, "channel \(channel.id) of \(channel.clientId) closed: \(status)")
    }

    /// A finished upload goes to the path its request named (kept as the upload's name).
    func upload(_ upload: FinishedUpload) async throws -> ServiceResponse {
        guard let path = upload.name else { return .failure("no path") }
        let url = URL(fileURLWithPath: path)
        let folder = Glibc.open(url.deletingLastPathComponent().path, O_RDONLY | O_DIRECTORY)
        defer { close(folder) }
        guard folder >= 0, upload.store(inFolder: folder, as: url.lastPathComponent) else {
            return .failure("cannot store \(path): errno \(errno)")
        }
        return .success(["Stored": .string(path), "Size": .int(upload.size), "Digest": .bytes(upload.digest)])
    }

    func transferEnded(_ transfer: UUID, why: String) async {
        host.log(.info, "transfer \(transfer) ended: \(why)")
    }

    struct Thrown: Error, CustomStringConvertible {
        var description: String { "the test service threw, as asked" }
    }

    func request(_ request: ServiceRequest) async throws -> ServiceResponse {
        let message = request.message
        let delay = Double(message["DelayMs"]?.int ?? 0) / 1000
        switch message["Action"]?.string {
        case "fail":
            return .failure(message["Reason"]?.string ?? "failed, as asked")
        case "throw":
            throw Thrown()
        case "hang":
            try await Task.sleep(for: .seconds(3600))
            return .failure("woke up")
        case "late":
            try await Task.sleep(for: .seconds(delay))
            return .success(message)
        case "block":
            usleep(UInt32(delay * 1_000_000))
            return .success(message)
        case "twice":
            let responder = request.responder
            let first = responder.respond(.success(message))
            let second = responder.respond(.failure("second answer"))
            host.log(.info, "answered twice: first taken \(first), second taken \(second)")
            return .deferred
        case "deferred":
            let responder = request.responder
            Task {
                try await Task.sleep(for: .seconds(delay))
                responder.respond(.success(["Deferred": true]))
            }
            return .deferred
        case "send":
            let reply = try await request.channel.send(["Hello": "client"])
            return ServiceResponse(
                status: reply.status,
                message: ["ClientSaid": .map(reply.message), "ClientStatus": .int(Int64(reply.status.rawValue))]
            )
        case "ask":
            let channel = request.channel
            Task {
                let reply = try await channel.send(["Question": 1])
                _ = try await channel.send(["FirstAnswerStatus": .int(Int64(reply.status.rawValue))])
            }
            return .success(["Asking": true])
        case "flood":
            let channel = request.channel
            let count = Int(message["Count"]?.int ?? 0)
            let outcomes = await withTaskGroup(of: Bool.self) { group in
                for index in 0..<count {
                    group.addTask { (try? await channel.send(["Flood": .int(Int64(index))])) != nil }
                }
                return await group.reduce(into: [Bool]()) { $0.append($1) }
            }
            let sent = outcomes.filter { $0 }.count
            return .success(["Sent": .int(Int64(sent)), "Busy": .int(Int64(count - sent))])
        case "closeNow":
            request.channel.close(status: AppServiceClosedStatus(rawValue: Int(message["Status"]?.int ?? 0)))
            return .deferred
        case "wait":
            await withCheckedContinuation { continuation in
                let released = waiting.withLock { waiting in
                    waiting?.append(continuation)
                    return waiting == nil
                }
                if released { continuation.resume() }
            }
            return .success(message)
        case "release":
            let released = waiting.withLock { waiting in
                defer { waiting = nil }
                return waiting ?? []
            }
            for continuation in released { continuation.resume() }
            return .success(message)
        case "offer":
            guard let path = message["Path"]?.string else { return .failure("offer needs a Path") }
            do {
                let (id, size) = try request.offerFile(atPath: path, name: (path as NSString).lastPathComponent)
                return .success(["Transfer": .uuid(id), "Size": .int(size)])
            } catch {
                return error.response
            }
        case "accept":
            guard let path = message["Path"]?.string else { return .failure("accept needs a Path") }
            do {
                let id = try request.acceptUpload(size: message["Size"]?.int, name: path)
                return .success(["Transfer": .uuid(id)])
            } catch {
                return error.response
            }
        case "thread":
            let name = (try? String(contentsOfFile: "/proc/thread-self/comm", encoding: .utf8)) ?? ""
            return .success(["Thread": .string(name.trimmingCharacters(in: .whitespacesAndNewlines))])
        case "close":
            let channel = request.channel
            let status = AppServiceClosedStatus(rawValue: Int(message["Status"]?.int ?? 0))
            Task {
                try await Task.sleep(for: .milliseconds(20))
                channel.close(status: status)
            }
            return .success(message)
        default:
            var answer = message
            if let greeting { answer["Greeting"] = .string(greeting) }
            return .success(answer)
        }
    }
}

@_cdecl("atrium_plugin_entry_v1")
public func atriumPluginEntry() -> UnsafeRawPointer { exportAppService(TestService.self) }
