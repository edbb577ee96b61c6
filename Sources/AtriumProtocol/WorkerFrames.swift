import AtriumValues
package import Foundation
package import NIOCore

/// What the host and a worker process (a package's plugin, run apart from the host) say to
/// each other over their links (a pipe each way): the framing of CONTRACT section 1 (a 4-byte length,
/// then one CBOR map with a `type`), with frames of their own. Not a public protocol: both
/// ends are `atriumd`, so the two always match.
///
/// The host is the `→ worker` side, the worker the `→ host` side. Ids: `channel` is the
/// host's channel id, `id` a request's id (host-made for clients' requests, host-made for
/// the plugin's messages too, as `sent` returns it), `call` a worker-made id that pairs a
/// worker's call with the host's reply.
package enum WorkerFrame: AtriumFrame, FrameBody {
    // → worker
    /// The first frame: what to load and how. The limits are RLIMIT values the worker sets on
    /// itself before it loads anything (0: not set); `user`, whom it becomes before loading.
    /// Answered with `ready`.
    case start(
        package: String, library: String, config: String, concurrent: Bool, memoryBytes: UInt64, openFiles: UInt64,
        cpuSeconds: UInt64, user: String?)
    /// A client opens a channel: answered with `opened`.
    case open(channel: UInt64, service: String, clientId: String, clientName: String?, isRemote: Bool)
    /// A client's request: answered with `respond`.
    case request(channel: UInt64, id: UInt64, message: EncodedValueSet)
    /// A client's answer to one of the plugin's messages.
    case response(channel: UInt64, id: UInt64, status: UInt64, message: EncodedValueSet?)
    /// A channel closed (status, and who closed it: ChannelCloser's numbers).
    case closed(channel: UInt64, status: UInt64, by: UInt64)
    /// A launch of one of the package's schemes: answered with `launched`.
    case launch(call: UInt64, uri: String, data: EncodedValueSet?, clientId: String, isRemote: Bool)
    /// The host answered request `id` itself (timeout, channel closed): the plugin's answer
    /// to it would be refused, and a request not yet handed over is dropped.
    case answered(id: UInt64)
    /// The host's reply to a worker's `send`, `close` or `launchUri`: `error` names the
    /// refusal (a BackendCallError), absent on success; `id` is a sent message's id;
    /// `status`/`reason` a launch's outcome.
    case reply(call: UInt64, error: String?, id: UInt64?, status: UInt64?, reason: String?, transfer: UUID? = nil)
    /// A finished upload for the plugin (CONTRACT section 8): its file's descriptor crossed on
    /// the worker's descriptor socket first, tagged with `delivery`. Answered with `uploadDone`.
    case upload(delivery: UInt64, transfer: UUID, size: Int64, digest: [UInt8], name: String?, service: String)
    /// A transfer the plugin made ended before reaching it.
    case transferEnded(transfer: UUID, why: String)
    /// Stop: the worker destroys the plugin and exits.
    case shutdown

    // → host
    /// The plugin is loaded and created (or `error` says why not, and the worker exits).
    case ready(error: String?)
    case opened(channel: UInt64, status: UInt64)
    case respond(id: UInt64, status: UInt64, message: EncodedValueSet?, error: String?)
    /// The plugin's own message to the client of `channel`; the host replies with `reply`.
    case send(call: UInt64, channel: UInt64, message: EncodedValueSet)
    case close(call: UInt64, channel: UInt64, status: UInt64)
    case launchUri(call: UInt64, uri: String, data: EncodedValueSet?, channel: UInt64?)
    case launched(call: UInt64, status: UInt64, reason: String?)
    /// The plugin offers a file to the caller of request `id`: its descriptor crossed on the
    /// descriptor socket first, tagged with `call`. The host replies with `reply` (`transfer`).
    case offer(call: UInt64, id: UInt64, name: String?)
    /// The plugin accepts an upload from the caller of request `id`; the host replies with
    /// `reply` (`transfer`).
    case accept(call: UInt64, id: UInt64, size: Int64, maxSize: Int64, name: String?)
    /// The plugin's answer to a finished upload.
    case uploadDone(delivery: UInt64, status: UInt64, message: EncodedValueSet?, error: String?)
    /// A frame whose `type` this version does not know.
    case unknown(String)

    package var carriedBytes: Int {
        switch self {
        case .request(_, _, let message), .response(_, _, _, let message?), .send(_, _, let message),
            .uploadDone(_, _, let message?, _):
            message.buffer.readableBytes
        case .launch(_, _, let data?, _, _), .launchUri(_, _, let data?, _): data.buffer.readableBytes
        default: 0
        }
    }

    package var type: String {
        switch self {
        case .start: "start"
        case .open: "open"
        case .request: "request"
        case .response: "response"
        case .closed: "closed"
        case .launch: "launch"
        case .answered: "answered"
        case .reply: "reply"
        case .shutdown: "shutdown"
        case .ready: "ready"
        case .opened: "opened"
        case .respond: "respond"
        case .send: "send"
        case .close: "close"
        case .launchUri: "launchUri"
        case .launched: "launched"
        case .upload: "upload"
        case .transferEnded: "transferEnded"
        case .offer: "offer"
        case .accept: "accept"
        case .uploadDone: "uploadDone"
        case .unknown(let type): type
        }
    }

    package func encode(into buffer: inout ByteBuffer) { buffer.writeSized(self) }

    package func encodeFramed(into buffer: inout ByteBuffer) { buffer.writeSized(self, lengthPrefixed: true) }

    func encodeBody<Output: CBOROutput>(into buffer: inout Output) {
        switch self {
        case .start(let package, let library, let config, let concurrent, let memory, let files, let cpu, let user):
            buffer.writeFrameHeader("start", keys: 8 + count(user != nil))
            if let user { buffer.writeKey("user", user) }
            buffer.writeKey("package", package)
            buffer.writeKey("library", library)
            buffer.writeKey("config", config)
            buffer.writeKey("concurrent", concurrent ? 1 : 0)
            buffer.writeKey("memoryBytes", memory)
            buffer.writeKey("openFiles", files)
            buffer.writeKey("cpuSeconds", cpu)
        case .open(let channel, let service, let clientId, let clientName, let isRemote):
            buffer.writeFrameHeader("open", keys: 5 + count(clientName != nil))
            buffer.writeKey("channel", channel)
            buffer.writeKey("service", service)
            buffer.writeKey("clientId", clientId)
            if let clientName { buffer.writeKey("clientName", clientName) }
            buffer.writeKey("remote", isRemote ? 1 : 0)
        case .request(let channel, let id, let message):
            buffer.writeFrameHeader("request", keys: 4)
            buffer.writeKey("channel", channel)
            buffer.writeKey("id", id)
            buffer.writeKey("message", message)
        case .response(let channel, let id, let status, let message):
            buffer.writeFrameHeader("response", keys: 4 + count(message != nil))
            buffer.writeKey("channel", channel)
            buffer.writeKey("id", id)
            buffer.writeKey("status", status)
            if let message { buffer.writeKey("message", message) }
        case .closed(let channel, let status, let by):
            buffer.writeFrameHeader("closed", keys: 4)
            buffer.writeKey("channel", channel)
            buffer.writeKey("status", status)
            buffer.writeKey("by", by)
        case .launch(let call, let uri, let data, let clientId, let isRemote):
            buffer.writeFrameHeader("launch", keys: 5 + count(data != nil))
            buffer.writeKey("call", call)
            buffer.writeKey("uri", uri)
            if let data { buffer.writeKey("data", data) }
            buffer.writeKey("clientId", clientId)
            buffer.writeKey("remote", isRemote ? 1 : 0)
        case .answered(let id):
            buffer.writeFrameHeader("answered", keys: 2)
            buffer.writeKey("id", id)
        case .reply(let call, let error, let id, let status, let reason, let transfer):
            buffer.writeFrameHeader(
                "reply", keys: 2 + count(error != nil, id != nil, status != nil, reason != nil) + count(transfer != nil)
            )
            if let transfer { buffer.writeKey("transfer", uuid: transfer) }
            buffer.writeKey("call", call)
            if let error { buffer.writeKey("error", error) }
            if let id { buffer.writeKey("id", id) }
            if let status { buffer.writeKey("status", status) }
            if let reason { buffer.writeKey("reason", reason) }
        case .shutdown:
            buffer.writeFrameHeader("shutdown", keys: 1)
        case .ready(let error):
            buffer.writeFrameHeader("ready", keys: 1 + count(error != nil))
            if let error { buffer.writeKey("error", error) }
        case .opened(let channel, let status):
            buffer.writeFrameHeader("opened", keys: 3)
            buffer.writeKey("channel", channel)
            buffer.writeKey("status", status)
        case .respond(let id, let status, let message, let error):
            buffer.writeFrameHeader("respond", keys: 3 + count(message != nil, error != nil))
            buffer.writeKey("id", id)
            buffer.writeKey("status", status)
            if let message { buffer.writeKey("message", message) }
            if let error { buffer.writeKey("error", error) }
        case .send(let call, let channel, let message):
            buffer.writeFrameHeader("send", keys: 4)
            buffer.writeKey("call", call)
            buffer.writeKey("channel", channel)
            buffer.writeKey("message", message)
        case .close(let call, let channel, let status):
            buffer.writeFrameHeader("close", keys: 4)
            buffer.writeKey("call", call)
            buffer.writeKey("channel", channel)
            buffer.writeKey("status", status)
        case .launchUri(let call, let uri, let data, let channel):
            buffer.writeFrameHeader("launchUri", keys: 3 + count(data != nil, channel != nil))
            buffer.writeKey("call", call)
            buffer.writeKey("uri", uri)
            if let data { buffer.writeKey("data", data) }
            if let channel { buffer.writeKey("channel", channel) }
        case .launched(let call, let status, let reason):
            buffer.writeFrameHeader("launched", keys: 3 + count(reason != nil))
            buffer.writeKey("call", call)
            buffer.writeKey("status", status)
            if let reason { buffer.writeKey("reason", reason) }
        case .upload(let delivery, let transfer, let size, let digest, let name, let service):
            // A digest is 32 bytes or absent (read back as none).
            let hasDigest = digest.count == 32
            buffer.writeFrameHeader("upload", keys: 5 + count(name != nil, hasDigest))
            buffer.writeKey("delivery", delivery)
            buffer.writeKey("transfer", uuid: transfer)
            buffer.writeKey("size", signed: size)
            if hasDigest { buffer.writeKey("digest", bytes: digest) }
            if let name { buffer.writeKey("name", name) }
            buffer.writeKey("service", service)
        case .transferEnded(let transfer, let why):
            buffer.writeFrameHeader("transferEnded", keys: 3)
            buffer.writeKey("transfer", uuid: transfer)
            buffer.writeKey("why", why)
        case .offer(let call, let id, let name):
            buffer.writeFrameHeader("offer", keys: 3 + count(name != nil))
            buffer.writeKey("call", call)
            buffer.writeKey("id", id)
            if let name { buffer.writeKey("name", name) }
        case .accept(let call, let id, let size, let maxSize, let name):
            buffer.writeFrameHeader("accept", keys: 5 + count(name != nil))
            buffer.writeKey("call", call)
            buffer.writeKey("id", id)
            buffer.writeKey("size", signed: size)
            buffer.writeKey("maxSize", signed: maxSize)
            if let name { buffer.writeKey("name", name) }
        case .uploadDone(let delivery, let status, let message, let error):
            buffer.writeFrameHeader("uploadDone", keys: 3 + count(message != nil, error != nil))
            buffer.writeKey("delivery", delivery)
            buffer.writeKey("status", status)
            if let message { buffer.writeKey("message", message) }
            if let error { buffer.writeKey("error", error) }
        case .unknown(let type):
            buffer.writeHead(major: 5, argument: 1)
            buffer.writeText("type" as StaticString)
            buffer.writeText(type)
        }
    }

    package init(body: ByteBuffer) throws(FrameError) {
        self = try FrameFields.parse(body) { (f) throws(FrameError) -> WorkerFrame in
            let type = try f.frameType()
            switch type {
            case "start":
                return .start(
                    package: try f.text("package"), library: try f.text("library"), config: try f.text("config"),
                    concurrent: try f.uint("concurrent") != 0, memoryBytes: try f.uint("memoryBytes"),
                    openFiles: try f.uint("openFiles"), cpuSeconds: try f.uint("cpuSeconds"),
                    user: try f.optionalText("user"))
            case "open":
                return .open(
                    channel: try f.uint("channel"), service: try f.text("service"), clientId: try f.text("clientId"),
                    clientName: try f.optionalText("clientName"), isRemote: try f.uint("remote") != 0)
            case "request":
                return .request(channel: try f.uint("channel"), id: try f.uint("id"), message: try f.message("message"))
            case "response":
                return .response(
                    channel: try f.uint("channel"), id: try f.uint("id"), status: try f.uint("status"),
                    message: try f.optionalMessage("message"))
            case "closed":
                return .closed(channel: try f.uint("channel"), status: try f.uint("status"), by: try f.uint("by"))
            case "launch":
                return .launch(
                    call: try f.uint("call"), uri: try f.text("uri"), data: try f.optionalMessage("data"),
                    clientId: try f.text("clientId"), isRemote: try f.uint("remote") != 0)
            case "answered":
                return .answered(id: try f.uint("id"))
            case "reply":
                return .reply(
                    call: try f.uint("call"), error: try f.optionalText("error"), id: try f.optionalUInt("id"),
                    status: try f.optionalUInt("status"), reason: try f.optionalText("reason"),
                    transfer: try f.optionalUUID("transfer"))
            case "shutdown":
                return .shutdown
            case "ready":
                return .ready(error: try f.optionalText("error"))
            case "opened":
                return .opened(channel: try f.uint("channel"), status: try f.uint("status"))
            case "respond":
                return .respond(
                    id: try f.uint("id"), status: try f.uint("status"), message: try f.optionalMessage("message"),
                    error: try f.optionalText("error"))
            case "send":
                return .send(
                    call: try f.uint("call"), channel: try f.uint("channel"), message: try f.message("message"))
            case "close":
                return .close(call: try f.uint("call"), channel: try f.uint("channel"), status: try f.uint("status"))
            case "launchUri":
                return .launchUri(
                    call: try f.uint("call"), uri: try f.text("uri"), data: try f.optionalMessage("data"),
                    channel: try f.optionalUInt("channel"))
            case "launched":
                return .launched(
                    call: try f.uint("call"), status: try f.uint("status"), reason: try f.optionalText("reason"))
            case "upload":
                return .upload(
                    delivery: try f.uint("delivery"), transfer: try f.uuid("transfer"), size: try f.signedInt("size"),
                    digest: try f.optionalDigest("digest") ?? [], name: try f.optionalText("name"),
                    service: try f.text("service"))
            case "transferEnded":
                return .transferEnded(transfer: try f.uuid("transfer"), why: try f.text("why"))
            case "offer":
                return .offer(call: try f.uint("call"), id: try f.uint("id"), name: try f.optionalText("name"))
            case "accept":
                return .accept(
                    call: try f.uint("call"), id: try f.uint("id"), size: try f.signedInt("size"),
                    maxSize: try f.signedInt("maxSize"), name: try f.optionalText("name"))
            case "uploadDone":
                return .uploadDone(
                    delivery: try f.uint("delivery"), status: try f.uint("status"),
                    message: try f.optionalMessage("message"), error: try f.optionalText("error"))
            default:
                return .unknown(type)
            }
        }
    }
}
