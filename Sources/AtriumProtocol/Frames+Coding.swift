import AtriumValues
public import NIOCore

// MARK: - Writing

extension ByteBuffer {
    /// Writes `frame`'s body in one piece: its size counted first (a pass that only adds), then
    /// written into memory reserved once, instead of a capacity check for every byte.
    /// With `lengthPrefixed`, the frame's 4-byte length goes first, in the same piece.
    mutating func writeSized(_ frame: some FrameBody, lengthPrefixed: Bool = false) {
        var size = CBORSizeCounter()
        frame.encodeBody(into: &size)
        let prefix = lengthPrefixed ? 4 : 0
        writeWithUnsafeMutableBytes(minimumWritableBytes: prefix + size.count) { memory in
            var writer = UnsafeCBORWriter(memory)
            if lengthPrefixed { writer.writeCBORInteger(UInt32(truncatingIfNeeded: size.count)) }
            frame.encodeBody(into: &writer)
            precondition(
                writer.count == prefix + size.count, "a frame wrote \(writer.count - prefix) bytes, not \(size.count)")
            return writer.count
        }
    }
}

/// A frame body written to any ``CBOROutput``: counted, then written (``ByteBuffer/writeSized(_:)``).
protocol FrameBody {
    func encodeBody<Output: CBOROutput>(into buffer: inout Output)
}

/// A ``CBOROutput`` that writes nothing and counts the bytes.
struct CBORSizeCounter: CBOROutput {
    var count = 0

    mutating func writeCBORByte(_ byte: UInt8) { count += 1 }
    mutating func writeCBORBytes(_ bytes: UnsafeRawBufferPointer) { count += bytes.count }
    mutating func writeCBORInteger<T: FixedWidthInteger>(_ value: T) { count += MemoryLayout<T>.size }
}

extension CBOROutput {
    /// Starts a frame map of `count` keys, `type` included, and writes the type.
    mutating func writeFrameHeader(_ type: StaticString, keys count: Int) {
        writeHead(major: 5, argument: UInt64(count))
        writeText("type" as StaticString)
        writeText(type)
    }

    mutating func writeKey(_ key: StaticString, _ value: UInt64) {
        writeText(key)
        writeUInt(value)
    }

    mutating func writeKey(_ key: StaticString, _ value: String) {
        writeText(key)
        writeText(value)
    }

    mutating func writeKey(_ key: StaticString, _ message: EncodedValueSet) {
        writeText(key)
        message.buffer.withUnsafeReadableBytes { writeCBORBytes($0) }
    }

    mutating func writeKey(_ key: StaticString, _ texts: [String]) {
        writeText(key)
        writeHead(major: 4, argument: UInt64(texts.count))
        for text in texts { writeText(text) }
    }
}

/// The number of keys that are present (not variadic: a variadic call makes an array).
func count(_ a: Bool, _ b: Bool = false, _ c: Bool = false, _ d: Bool = false) -> Int {
    (a ? 1 : 0) + (b ? 1 : 0) + (c ? 1 : 0) + (d ? 1 : 0)
}

extension RequestFrame {
    func encodeBody<Output: CBOROutput>(into buffer: inout Output) {
        buffer.writeFrameHeader("request", keys: 4 + count(attach != nil))
        buffer.writeKey("channel", channel)
        buffer.writeKey("id", id)
        buffer.writeKey("message", message)
        if let attach {
            buffer.writeText("attach" as StaticString)
            buffer.writeHead(major: 5, argument: UInt64(count(attach.window != nil)))
            if let window = attach.window { buffer.writeKey("window", window) }
        }
    }

    /// A client's request reads its `attach`; a host's request has none (the key is ignored).
    init(_ fields: FrameFields, fromClient: Bool) throws(FrameError) {
        self.init(
            channel: try fields.uint("channel"), id: try fields.uint("id"), message: try fields.message("message"),
            attach: fromClient
                ? try fields.optionalMap("attach").map { (attach) throws(FrameError) in
                    RequestAttach(window: try attach.optionalOffset("window"))
                } : nil)
    }
}

extension ResponseFrame {
    func encodeBody<Output: CBOROutput>(into buffer: inout Output) {
        buffer.writeFrameHeader("response", keys: 5 + count(error != nil, attached != nil))
        buffer.writeKey("channel", channel)
        buffer.writeKey("id", id)
        buffer.writeKey("status", status.wireValue)
        buffer.writeKey("message", message)
        if let error { buffer.writeKey("error", error) }
        if let attached {
            buffer.writeText("attached" as StaticString)
            attached.encodeFields(into: &buffer, asFrame: false)
        }
    }

    /// A host's response reads its `attached`; a client's has none (the key is ignored).
    init(_ fields: FrameFields, fromHost: Bool) throws(FrameError) {
        self.init(
            channel: try fields.uint("channel"),
            id: try fields.uint("id"),
            status: AppServiceResponseStatus(rawValue: try fields.int("status")),
            message: try fields.optionalMessage("message") ?? .empty,
            error: try fields.optionalText("error"),
            attached: fromHost
                ? try fields.optionalMap("attached").map { (attached) throws(FrameError) in
                    try AttachedFrame(attached)
                } : nil
        )
    }
}

extension ClientFrame: FrameBody {
    public var type: String {
        switch self {
        case .hello: "hello"
        case .open: "open"
        case .request: "request"
        case .response: "response"
        case .close: "close"
        case .launch: "launch"
        case .apps: "apps"
        case .ping: "ping"
        case .pair: "pair"
        case .pairReveal: "pairReveal"
        case .admin: "admin"
        case .transfer(let frame): frame.type
        case .unknown(let type): type
        }
    }

    public func encode(into buffer: inout ByteBuffer) { buffer.writeSized(self) }

    public func encodeFramed(into buffer: inout ByteBuffer) { buffer.writeSized(self, lengthPrefixed: true) }

    func encodeBody<Output: CBOROutput>(into buffer: inout Output) {
        switch self {
        case .hello(let hello):
            buffer.writeFrameHeader("hello", keys: 3 + count(hello.clientName != nil, hello.token != nil))
            buffer.writeKey("version", hello.version)
            buffer.writeKey("clientId", hello.clientId)
            if let name = hello.clientName { buffer.writeKey("clientName", name) }
            if let token = hello.token { buffer.writeKey("token", token) }
        case .open(let open):
            buffer.writeFrameHeader("open", keys: 4)
            buffer.writeKey("channel", open.channel)
            buffer.writeKey("service", open.service)
            buffer.writeKey("package", open.package)
        case .request(let request):
            request.encodeBody(into: &buffer)
        case .response(let response):
            response.encodeBody(into: &buffer)
        case .close(let channel):
            buffer.writeFrameHeader("close", keys: 2)
            buffer.writeKey("channel", channel)
        case .launch(let launch):
            let optionals = count(
                launch.package != nil, launch.fallbackUri != nil, !launch.preferredPackages.isEmpty, launch.data != nil
            )
            buffer.writeFrameHeader("launch", keys: 3 + optionals)
            buffer.writeKey("id", launch.id)
            buffer.writeKey("uri", launch.uri)
            if let package = launch.package { buffer.writeKey("package", package) }
            if let fallback = launch.fallbackUri { buffer.writeKey("fallbackUri", fallback) }
            if !launch.preferredPackages.isEmpty { buffer.writeKey("preferredPackages", launch.preferredPackages) }
            if let data = launch.data { buffer.writeKey("data", data) }
        case .apps(let id, let package):
            buffer.writeFrameHeader("apps", keys: 2 + count(package != nil))
            buffer.writeKey("id", id)
            if let package { buffer.writeKey("package", package) }
        case .ping(let id):
            buffer.writeFrameHeader("ping", keys: 2)
            buffer.writeKey("id", id)
        case .pair(let pair):
            buffer.writeFrameHeader("pair", keys: 3 + count(pair.commitment != nil))
            buffer.writeKey("id", pair.id)
            buffer.writeKey("deviceName", pair.deviceName)
            if let commitment = pair.commitment { buffer.writeKey("commitment", commitment) }
        case .pairReveal(let id, let nonce):
            buffer.writeFrameHeader("pairReveal", keys: 3)
            buffer.writeKey("id", id)
            buffer.writeKey("nonce", nonce)
        case .admin(let admin):
            buffer.writeFrameHeader("admin", keys: 3 + count(admin.arguments != nil))
            buffer.writeKey("id", admin.id)
            buffer.writeKey("command", admin.command)
            if let arguments = admin.arguments { buffer.writeKey("arguments", arguments) }
        case .transfer(let frame):
            frame.encodeBody(into: &buffer)
        case .unknown(let type):
            buffer.writeHead(major: 5, argument: 1)
            buffer.writeText("type" as StaticString)
            buffer.writeText(type)
        }
    }

    public init(body: ByteBuffer) throws(FrameError) {
        self = try FrameFields.parse(body) { (fields) throws(FrameError) -> ClientFrame in
            let type = try fields.frameType()
            switch type {
            case "hello":
                return .hello(
                    HelloFrame(
                        version: try fields.uint("version"),
                        clientId: try fields.text("clientId"),
                        clientName: try fields.optionalText("clientName"),
                        token: try fields.optionalText("token")
                    )
                )
            case "open":
                return .open(
                    OpenFrame(
                        channel: try fields.uint("channel"),
                        service: try fields.text("service"),
                        package: try fields.text("package")
                    )
                )
            case "request":
                return .request(try RequestFrame(fields, fromClient: true))
            case "response":
                return .response(try ResponseFrame(fields, fromHost: false))
            case "close":
                return .close(channel: try fields.uint("channel"))
            case "launch":
                return .launch(
                    LaunchFrame(
                        id: try fields.uint("id"),
                        uri: try fields.text("uri"),
                        package: try fields.optionalText("package"),
                        fallbackUri: try fields.optionalText("fallbackUri"),
                        preferredPackages: try fields.optionalTextArray("preferredPackages") ?? [],
                        data: try fields.optionalMessage("data")
                    )
                )
            case "apps":
                return .apps(id: try fields.uint("id"), package: try fields.optionalText("package"))
            case "ping":
                return .ping(id: try fields.uint("id"))
            case "pair":
                return .pair(
                    PairFrame(
                        id: try fields.uint("id"), deviceName: try fields.text("deviceName"),
                        commitment: try fields.optionalText("commitment")))
            case "pairReveal":
                return .pairReveal(id: try fields.uint("id"), nonce: try fields.text("nonce"))
            case "admin":
                return .admin(
                    AdminFrame(
                        id: try fields.uint("id"), command: try fields.text("command"),
                        arguments: try fields.optionalMessage("arguments")))
            default:
                if let frame = try ClientTransferFrame.decode(type, fields) { return .transfer(frame) }
                return .unknown(type: type)
            }
        }
    }
}

extension HostFrame: FrameBody {
    public var carriedBytes: Int {
        switch self {
        case .response(let response): response.message.buffer.readableBytes
        case .request(let request): request.message.buffer.readableBytes
        case .transfer(let frame): frame.carriedBytes
        default: 0
        }
    }

    public var type: String {
        switch self {
        case .welcome: "welcome"
        case .opened: "opened"
        case .response: "response"
        case .request: "request"
        case .closed: "closed"
        case .launched: "launched"
        case .apps: "apps"
        case .pong: "pong"
        case .paired: "paired"
        case .pairNonce: "pairNonce"
        case .adminResult: "adminResult"
        case .transfer(let frame): frame.type
        case .error: "error"
        case .unknown(let type): type
        }
    }

    public func encode(into buffer: inout ByteBuffer) { buffer.writeSized(self) }

    public func encodeFramed(into buffer: inout ByteBuffer) { buffer.writeSized(self, lengthPrefixed: true) }

    func encodeBody<Output: CBOROutput>(into buffer: inout Output) {
        switch self {
        case .welcome(let welcome):
            buffer.writeFrameHeader(
                "welcome",
                keys: 6 + count(welcome.hostIdentity != nil) + count(welcome.kind != nil)
                    + count(welcome.responseTimeoutMilliseconds != nil))
            buffer.writeKey("version", welcome.version)
            buffer.writeKey("hostId", welcome.hostId)
            buffer.writeKey("hostName", welcome.hostName)
            buffer.writeKey("platform", welcome.platform)
            if let identity = welcome.hostIdentity { buffer.writeKey("hostIdentity", identity) }
            if let kind = welcome.kind { buffer.writeKey("kind", kind) }
            if let timeout = welcome.responseTimeoutMilliseconds { buffer.writeKey("responseTimeoutMs", timeout) }
            buffer.writeText("limits" as StaticString)
            buffer.writeHead(major: 5, argument: 4 + UInt64(count(welcome.responseTimeoutMilliseconds != nil)))
            buffer.writeKey("maxMessageBytes", UInt64(welcome.limits.maxMessageBytes))
            buffer.writeKey("maxFrameBytes", UInt64(welcome.limits.maxFrameBytes))
            buffer.writeKey("maxChannels", UInt64(welcome.limits.maxChannels))
            buffer.writeKey("maxInFlight", UInt64(welcome.limits.maxInFlight))
            if let timeout = welcome.responseTimeoutMilliseconds {
                // CONTRACT section 2's key, in whole seconds rounded up: a client that waits
                // that long still hears from the host first.
                buffer.writeKey("responseTimeoutSeconds", timeout / 1000 + (timeout % 1000 == 0 ? 0 : 1))
            }
        case .opened(let opened):
            buffer.writeFrameHeader("opened", keys: 3 + count(opened.error != nil))
            buffer.writeKey("channel", opened.channel)
            buffer.writeKey("status", opened.status.wireValue)
            if let error = opened.error { buffer.writeKey("error", error) }
        case .response(let response):
            response.encodeBody(into: &buffer)
        case .request(let request):
            request.encodeBody(into: &buffer)
        case .closed(let closed):
            buffer.writeFrameHeader("closed", keys: 3)
            buffer.writeKey("channel", closed.channel)
            buffer.writeKey("status", closed.status.wireValue)
        case .launched(let launched):
            buffer.writeFrameHeader("launched", keys: 3 + count(launched.error != nil))
            buffer.writeKey("id", launched.id)
            buffer.writeKey("status", launched.status.wireValue)
            if let error = launched.error { buffer.writeKey("error", error) }
        case .apps(let apps):
            buffer.writeFrameHeader("apps", keys: 3)
            buffer.writeKey("id", apps.id)
            buffer.writeText("apps" as StaticString)
            buffer.writeHead(major: 4, argument: UInt64(apps.apps.count))
            for app in apps.apps {
                buffer.writeHead(
                    major: 5,
                    argument: UInt64(
                        4
                            + count(
                                app.state != nil, app.reason != nil,
                                app.encodedInterfaces != nil || !app.interfaces.isEmpty)))
                buffer.writeKey("package", app.package)
                buffer.writeKey("displayName", app.displayName)
                buffer.writeKey("services", app.services)
                buffer.writeKey("schemes", app.schemes)
                if let state = app.state { buffer.writeKey("state", state) }
                if let reason = app.reason { buffer.writeKey("reason", reason) }
                if let encoded = app.encodedInterfaces {
                    encoded.bytes.withUnsafeBytes { buffer.writeCBORBytes($0) }
                } else if !app.interfaces.isEmpty {
                    buffer.writeInterfaces(app.interfaces.sorted { $0.key < $1.key }.map { ($0.key, $0.value) })
                }
            }
        case .pong(let id):
            buffer.writeFrameHeader("pong", keys: 2)
            buffer.writeKey("id", id)
        case .paired(let paired):
            buffer.writeFrameHeader("paired", keys: 3 + count(paired.error != nil))
            buffer.writeKey("id", paired.id)
            buffer.writeKey("status", UInt64(max(paired.status.rawValue, 0)))
            if let error = paired.error { buffer.writeKey("error", error) }
        case .pairNonce(let id, let nonce):
            buffer.writeFrameHeader("pairNonce", keys: 3)
            buffer.writeKey("id", id)
            buffer.writeKey("nonce", nonce)
        case .adminResult(let result):
            buffer.writeFrameHeader("adminResult", keys: 3 + count(result.result != nil, result.error != nil))
            buffer.writeKey("id", result.id)
            buffer.writeKey("status", result.status)
            if let value = result.result { buffer.writeKey("result", value) }
            if let error = result.error { buffer.writeKey("error", error) }
        case .transfer(let frame):
            frame.encodeBody(into: &buffer)
        case .error(let error):
            buffer.writeFrameHeader("error", keys: 3)
            buffer.writeKey("code", error.code.rawValue)
            buffer.writeKey("message", error.message)
        case .unknown(let type):
            buffer.writeHead(major: 5, argument: 1)
            buffer.writeText("type" as StaticString)
            buffer.writeText(type)
        }
    }

    /// A welcome's response timeout in milliseconds: `responseTimeoutMs`, or CONTRACT section
    /// 2's `limits.responseTimeoutSeconds` from a host that sends only that.
    static func responseTimeout(_ fields: FrameFields, _ limits: FrameFields) throws(FrameError) -> UInt64? {
        if let milliseconds = try fields.optionalUInt("responseTimeoutMs") { return milliseconds }
        guard let seconds = try limits.optionalUInt("responseTimeoutSeconds") else { return nil }
        let (milliseconds, overflow) = seconds.multipliedReportingOverflow(by: 1000)
        return overflow ? .max : milliseconds
    }

    public init(body: ByteBuffer) throws(FrameError) {
        self = try FrameFields.parse(body) { (fields) throws(FrameError) -> HostFrame in
            let type = try fields.frameType()
            switch type {
            case "welcome":
                let limits = try fields.map("limits")
                return .welcome(
                    WelcomeFrame(
                        version: try fields.uint("version"),
                        hostId: try fields.text("hostId"),
                        hostName: try fields.text("hostName"),
                        platform: try fields.text("platform"),
                        limits: ProtocolLimits(
                            maxMessageBytes: try limits.int("maxMessageBytes"),
                            maxFrameBytes: try limits.int("maxFrameBytes"),
                            maxChannels: try limits.int("maxChannels"),
                            maxInFlight: try limits.int("maxInFlight")
                        ),
                        hostIdentity: try fields.optionalText("hostIdentity"),
                        kind: try fields.optionalText("kind"),
                        responseTimeoutMilliseconds: try Self.responseTimeout(fields, limits)
                    )
                )
            case "opened":
                return .opened(
                    OpenedFrame(
                        channel: try fields.uint("channel"),
                        status: AppServiceConnectionStatus(rawValue: try fields.int("status")),
                        error: try fields.optionalText("error")
                    )
                )
            case "response":
                return .response(try ResponseFrame(fields, fromHost: true))
            case "request":
                return .request(try RequestFrame(fields, fromClient: false))
            case "closed":
                return .closed(
                    ClosedFrame(
                        channel: try fields.uint("channel"),
                        status: AppServiceClosedStatus(rawValue: try fields.int("status"))
                    )
                )
            case "launched":
                return .launched(
                    LaunchedFrame(
                        id: try fields.uint("id"),
                        status: RemoteLaunchUriStatus(rawValue: try fields.int("status")),
                        error: try fields.optionalText("error")
                    )
                )
            case "apps":
                var apps: [AppInfo] = []
                for app in try fields.arrayOfMaps("apps") {
                    apps.append(
                        AppInfo(
                            package: try app.text("package"),
                            displayName: try app.text("displayName"),
                            services: try app.textArray("services"),
                            schemes: try app.textArray("schemes"),
                            state: try app.optionalText("state"),
                            reason: try app.optionalText("reason"),
                            // A host's interfaces this client cannot read leave the app
                            // undescribed, not the answer unread.
                            interfaces: (try? app.interfaces()) ?? [:]
                        )
                    )
                }
                return .apps(AppsFrame(id: try fields.uint("id"), apps: apps))
            case "pong":
                return .pong(id: try fields.uint("id"))
            case "paired":
                return .paired(
                    PairedFrame(
                        id: try fields.uint("id"), status: PairingStatus(rawValue: try fields.int("status")),
                        error: try fields.optionalText("error")))
            case "pairNonce":
                return .pairNonce(id: try fields.uint("id"), nonce: try fields.text("nonce"))
            case "adminResult":
                return .adminResult(
                    AdminResultFrame(
                        id: try fields.uint("id"), status: try fields.uint("status"),
                        result: try fields.optionalMessage("result"), error: try fields.optionalText("error")))
            case "error":
                return .error(
                    ErrorFrame(
                        code: ProtocolErrorCode(rawValue: try fields.text("code")),
                        message: try fields.text("message")
                    )
                )
            default:
                if let frame = try HostTransferFrame.decode(type, fields) { return .transfer(frame) }
                return .unknown(type: type)
            }
        }
    }
}
