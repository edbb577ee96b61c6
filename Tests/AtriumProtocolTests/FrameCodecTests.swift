import AtriumProtocol
import AtriumTesting
import AtriumValues
import Foundation
import NIOCore
import NIOEmbedded
import NIOTestUtils
import Testing

/// A frame (length prefix included) whose body is `body` encoded as CBOR.
func frame(_ body: ValueSet) -> ByteBuffer {
    frame(bytes: body.cborBytes())
}

func frame(bytes body: [UInt8]) -> ByteBuffer {
    var buffer = ByteBuffer()
    buffer.writeInteger(UInt32(body.count))
    buffer.writeBytes(body)
    return buffer
}

func encoded(_ frame: some AtriumFrame) -> ByteBuffer {
    var buffer = ByteBuffer()
    buffer.writeFrame(frame)
    return buffer
}

/// The decoding error for `body` as a client frame, or `nil` when it decodes.
func clientFrameError(_ body: ValueSet) -> FrameError? {
    clientFrameError(bytes: body.cborBytes())
}

func clientFrameError(bytes: [UInt8]) -> FrameError? {
    do {
        _ = try ClientFrame(body: ByteBuffer(bytes: bytes))
        return nil
    } catch {
        return error
    }
}

struct FrameCodecTests {
    static let message = EncodedValueSet([
        "Type": "ping", "CreationDate": .date(Timestamp(secondsSince1970: 1_700_000_000.25)), "TargetId": "phone",
    ])

    static let clientFrames: [ClientFrame] =
        [
            .hello(HelloFrame(clientId: "client-1")),
            .hello(HelloFrame(version: 1, clientId: "c", clientName: "Phone", token: "secret")),
            .open(
                OpenFrame(
                    channel: 1, service: "com.microsoft.test.cdppingpongservice",
                    package: "5085ShawnHenry.RomanTestApp_jsjw7knzsgcce")),
            .request(RequestFrame(channel: 1, id: .max, message: message)),
            .response(ResponseFrame(channel: 1, id: 2, status: .success, message: message)),
            .response(ResponseFrame(channel: 1, id: 3, status: .failure, error: "no")),
            .close(channel: 7),
            .launch(LaunchFrame(id: 4, uri: "roman-test://x")),
            .launch(
                LaunchFrame(
                    id: 5, uri: "roman-test://x", package: "p", fallbackUri: "https://example.org",
                    preferredPackages: ["a", "b"], data: message)),
            .apps(id: 6),
            .apps(id: 12, package: "atrium.tests.typed"),
            .ping(id: 0),
            .pair(PairFrame(id: 8, deviceName: "Ana's phone")),
            .pair(PairFrame(id: 11, deviceName: "Ana's phone", commitment: String(repeating: "0f", count: 32))),
            .pairReveal(id: 11, nonce: String(repeating: "a1", count: 32)),
            .admin(AdminFrame(id: 9, command: "pairing.list")),
            .admin(AdminFrame(id: 10, command: "pairing.accept", arguments: EncodedValueSet(["request": 3]))),
            .unknown(type: "future"),
        ] + TransferFrameTests.clientFrames

    static let hostFrames: [HostFrame] =
        [
            .welcome(WelcomeFrame(hostId: "h", hostName: "box", limits: .default)),
            .welcome(
                WelcomeFrame(
                    hostId: "h", hostName: "box", limits: .default, hostIdentity: String(repeating: "a", count: 64))),
            .paired(PairedFrame(id: 1, status: .paired)),
            .pairNonce(id: 11, nonce: String(repeating: "b2", count: 32)),
            .paired(PairedFrame(id: 2, status: .refused, error: "the host's operator refused the pairing")),
            .adminResult(
                AdminResultFrame(id: 3, status: 0, result: EncodedValueSet(["requests": .array(ValueArray(maps: []))]))),
            .adminResult(AdminResultFrame(id: 4, status: 1, error: "no such request")),
            .opened(OpenedFrame(channel: 1, status: .appNotInstalled)),
            .opened(OpenedFrame(channel: 3, status: .appUnavailable, error: "package \"p\" is not available")),
            .response(ResponseFrame(channel: 1, id: 2, status: .messageSizeTooLarge, error: "too big")),
            .request(RequestFrame(channel: 1, id: 9, message: message)),
            .closed(ClosedFrame(channel: 1, status: .canceled)),
            .launched(LaunchedFrame(id: 3, status: .protocolUnavailable, error: "no handler for scheme x")),
            .launched(LaunchedFrame(id: 4, status: .success)),
            .apps(AppsFrame(id: 5, apps: [AppInfo(package: "p", displayName: "P", services: ["s"], schemes: [])])),
            .apps(
                AppsFrame(
                    id: 6,
                    apps: [
                        AppInfo(package: "p", displayName: "P", services: [], schemes: ["x"], state: "ready"),
                        AppInfo(
                            package: "q", displayName: "Q", services: ["s"], schemes: [], state: "failed",
                            reason: "no library"),
                    ])),
            .welcome(WelcomeFrame(hostId: "h", hostName: "box", limits: .default, responseTimeoutMilliseconds: 30_000)),
            .apps(AppsFrame(id: 6, apps: [])),
            .apps(
                AppsFrame(
                    id: 8,
                    apps: [
                        AppInfo(
                            package: "p", displayName: "P", services: ["s"], schemes: [], state: "ready",
                            interfaces: [
                                "s": ServiceInterface.example(),
                                "t": ServiceInterface(commandKey: "Type", commands: [.init(name: "ping")]),
                            ])
                    ])),
            .pong(id: 7),
            .error(ErrorFrame(code: .unknownType, message: "unknown frame type \"x\"")),
            .opened(OpenedFrame(channel: 2, status: AppServiceConnectionStatus(rawValue: 99))),
        ] + TransferFrameTests.hostFrames

    @Test(arguments: clientFrames)
    func clientFramesRoundTrip(_ frame: ClientFrame) throws {
        var buffer = encoded(frame)
        #expect(try FrameDecoder<ClientFrame>().decodeFrame(from: &buffer) == frame)
        #expect(buffer.readableBytes == 0)
    }

    @Test(arguments: hostFrames)
    func hostFramesRoundTrip(_ frame: HostFrame) throws {
        var buffer = encoded(frame)
        #expect(try FrameDecoder<HostFrame>().decodeFrame(from: &buffer) == frame)
    }

    /// The worker link's transfer frames, as the fuzzer checks every frame: decoded, encoded
    /// and decoded again, the same (an upload without a digest among them: the fuzzer found
    /// one that encoded an empty digest, which no longer decoded).
    static let workerTransferFrames: [WorkerFrame] = [
        .upload(
            delivery: 3, transfer: UUID(), size: 10, digest: [UInt8](repeating: 1, count: 32), name: "a",
            service: "s"),
        .upload(delivery: 4, transfer: UUID(), size: -1, digest: [], name: nil, service: "s"),
        .transferEnded(transfer: UUID(), why: "canceled by its client"),
        .offer(call: 1, id: 2, name: "photo.jpg"),
        .offer(call: 1, id: 2, name: nil),
        .accept(call: 5, id: 6, size: -1, maxSize: 1 << 30, name: "x"),
        .uploadDone(delivery: 3, status: 0, message: EncodedValueSet(["Name": "x"]), error: nil),
        .uploadDone(delivery: 3, status: 1, message: nil, error: "no"),
        .reply(call: 9, error: nil, id: nil, status: nil, reason: nil, transfer: UUID()),
    ]

    @Test(arguments: workerTransferFrames)
    func workerTransferFramesRoundTrip(_ frame: WorkerFrame) throws {
        var buffer = ByteBuffer()
        buffer.writeFrame(frame)
        #expect(try FrameDecoder<WorkerFrame>().decodeFrame(from: &buffer) == frame)
        #expect(buffer.readableBytes == 0)
    }

    @Test func theWireFormIsTheContractsMap() throws {
        let body = encoded(ClientFrame.request(RequestFrame(channel: 1, id: 2, message: EncodedValueSet(["a": 1]))))
        let bytes = Array(body.readableBytesView)
        #expect(Array(bytes[0..<4]) == [0, 0, 0, UInt8(bytes.count - 4)], "4-byte big-endian length")
        let map = try ValueSet(cbor: Array(bytes[4...]))
        #expect(map == ["type": "request", "channel": 1, "id": 2, "message": ["a": 1]])
    }

    @Test func verifierDripFeedsAndBatches() throws {
        let pairs = Self.clientFrames.map { (encoded($0), [$0]) }
        try ByteToMessageDecoderVerifier.verifyDecoder(inputOutputPairs: pairs) { FrameDecoder<ClientFrame>() }
        let hostPairs = Self.hostFrames.map { (encoded($0), [$0]) }
        try ByteToMessageDecoderVerifier.verifyDecoder(inputOutputPairs: hostPairs) { FrameDecoder<HostFrame>() }
    }

    @Test func oneByteAtATimeThroughAChannel() throws {
        let channel = EmbeddedChannel(handler: ByteToMessageHandler(FrameDecoder<ClientFrame>()))
        var all = ByteBuffer()
        for frame in Self.clientFrames { all.writeFrame(frame) }
        while let byte = all.readSlice(length: 1) {
            try channel.writeInbound(byte)
        }
        for expected in Self.clientFrames {
            #expect(try channel.readInbound(as: ClientFrame.self) == expected)
        }
        #expect(try channel.readInbound(as: ClientFrame.self) == nil)
        #expect(try channel.finish().isClean)
    }

    /// Frames cut from reads of every size hand on the same frames, in order, as the whole
    /// stream read at once; a partial frame is held in a buffer of its own, without the bytes
    /// of the frames already handed on.
    @Test(arguments: [1, 2, 3, 5, 7, 64, 1000])
    func frameInputCutsReadsOfAnySizeIntoTheSameFrames(readSize: Int) throws {
        var stream = ByteBuffer()
        for frame in Self.clientFrames { stream.writeFrame(frame) }
        var input = FrameInput<ClientFrame>(maxFrameBytes: 1 << 20)
        var frames: [ClientFrame] = []
        var rest = stream
        while let read = rest.readSlice(length: min(readSize, rest.readableBytes)), read.readableBytes > 0 {
            try input.read(read) { frames.append($0) }
            #expect(input.heldBytes < 4 + 1000, "at most one frame held")
        }
        #expect(frames == Self.clientFrames)
        #expect(input.heldBytes == 0)
    }

    /// The welcome says its response timeout where CONTRACT section 2 puts it (in `limits`,
    /// whole seconds rounded up) beside `responseTimeoutMs`; a host that sends only the
    /// contract's key is read too.
    @Test func theWelcomeSaysItsResponseTimeoutWhereTheContractPutsIt() throws {
        var bytes = ByteBuffer()
        HostFrame.welcome(
            WelcomeFrame(hostId: "h", hostName: "box", limits: .default, responseTimeoutMilliseconds: 2_500)
        )
        .encode(into: &bytes)
        let welcome = try EncodedValueSet(uncheckedBytes: bytes).decode()
        #expect(welcome["responseTimeoutMs"] == .int(2_500))
        #expect(
            welcome["limits"]
                == .map([
                    "maxMessageBytes": .int(1 << 20), "maxFrameBytes": .int(4 << 20), "maxChannels": .int(64),
                    "maxInFlight": .int(256), "responseTimeoutSeconds": .int(3),
                ]))
        // Only the contract's key: read as milliseconds.
        var contract = welcome
        contract["responseTimeoutMs"] = nil
        let read = try HostFrame(body: EncodedValueSet(contract).buffer)
        guard case .welcome(let frame) = read else {
            Issue.record("not a welcome: \(read)")
            return
        }
        #expect(frame.responseTimeoutMilliseconds == 3_000)
    }

    /// A caller that stops taking frames in the middle of a read gets the rest, in order, when
    /// it resumes: none lost, none twice, and a stream that ends meanwhile is truncated only
    /// by a partial frame after the whole ones held.
    @Test func frameInputHoldsTheFramesNotTakenUntilResumed() throws {
        var stream = ByteBuffer()
        for frame in Self.clientFrames { stream.writeFrame(frame) }
        let last = encoded(ClientFrame.close(channel: 9))
        stream.writeImmutableBuffer(last.getSlice(at: 0, length: 5)!)
        var input = FrameInput<ClientFrame>(maxFrameBytes: 1 << 20)
        var frames: [ClientFrame] = []
        try input.read(stream) { frame -> Bool in
            frames.append(frame)
            return frames.count != 2
        }
        #expect(frames == Array(Self.clientFrames.prefix(2)))
        #expect(input.isPaused)
        #expect(
            input.heldBytes == stream.readableBytes
                - Self.clientFrames.prefix(2).map { encoded($0).readableBytes }.reduce(0, +))
        #expect(input.truncation == .truncated(after: 5), "only the partial frame after the whole ones held")
        // Resumed one frame at a time, then all the rest.
        try input.resume { frame -> Bool in
            frames.append(frame)
            return false
        }
        #expect(frames == Array(Self.clientFrames.prefix(3)) && input.isPaused)
        try input.resume { frame -> Bool in
            frames.append(frame)
            return true
        }
        #expect(frames == Self.clientFrames)
        #expect(!input.isPaused && input.heldBytes == 5)
        // The partial frame completed by the next read.
        try input.read(last.getSlice(at: 5, length: last.readableBytes - 5)!) { frames.append($0) }
        #expect(frames.last == .close(channel: 9) && input.heldBytes == 0 && input.truncation == nil)
    }

    /// Bytes that arrive while the frames are held (another read of the same wakeup) join
    /// them unread: nothing is acted on until the reader resumes, then all in order.
    @Test func frameInputHoldsBytesThatArriveWhileItWaitsUnread() throws {
        var stream = ByteBuffer()
        for frame in Self.clientFrames { stream.writeFrame(frame) }
        let half = stream.readableBytes / 2
        var input = FrameInput<ClientFrame>(maxFrameBytes: 1 << 20)
        input.hold(stream.getSlice(at: 0, length: half)!)
        #expect(input.isPaused && input.heldBytes == half)
        input.hold(stream.getSlice(at: half, length: stream.readableBytes - half)!)
        input.hold(ByteBuffer())
        #expect(input.isPaused && input.heldBytes == stream.readableBytes)
        var frames: [ClientFrame] = []
        try input.resume { frame -> Bool in
            frames.append(frame)
            return true
        }
        #expect(frames == Self.clientFrames && !input.isPaused && input.heldBytes == 0)
    }

    @Test func frameInputHoldsTheFirstFrameToItsOwnLimitThenLiftsIt() throws {
        let hello = encoded(ClientFrame.hello(HelloFrame(clientId: String(repeating: "c", count: 40))))
        let big = encoded(ClientFrame.launch(LaunchFrame(id: 1, uri: "x:" + String(repeating: "y", count: 200))))
        var input = FrameInput<ClientFrame>(maxFrameBytes: 1000, maxFirstFrameBytes: 100)
        var frames: [ClientFrame] = []
        // The hello, its length prefix split across two reads, then a frame over the first limit.
        try input.read(hello.getSlice(at: 0, length: 2)!) { frames.append($0) }
        try input.read(hello.getSlice(at: 2, length: hello.readableBytes - 2)!) { frames.append($0) }
        try input.read(big) { frames.append($0) }
        #expect(frames.count == 2)
        // The same frame first is refused by its length alone.
        var first = FrameInput<ClientFrame>(maxFrameBytes: 1000, maxFirstFrameBytes: 100)
        #expect(throws: FrameError.self) { try first.read(big.getSlice(at: 0, length: 4)!) { _ in } }
        first.drop()
        #expect(first.heldBytes == 0)
    }

    @Test func frameInputKeepsWhatFollowsAFrameApartFromIt() throws {
        var read = encoded(ClientFrame.close(channel: 1))
        let next = encoded(ClientFrame.close(channel: 2))
        read.writeImmutableBuffer(next.getSlice(at: 0, length: 6)!)
        var input = FrameInput<ClientFrame>(maxFrameBytes: 1 << 20)
        var frames: [ClientFrame] = []
        try input.read(read) { frames.append($0) }
        #expect(frames == [.close(channel: 1)])
        #expect(input.heldBytes == 6)
        try input.read(next.getSlice(at: 6, length: next.readableBytes - 6)!) { frames.append($0) }
        #expect(frames == [.close(channel: 1), .close(channel: 2)])
        #expect(input.heldBytes == 0)
    }

    @Test func frameInputHandsOnTheFramesBeforeABrokenOneAndThrows() {
        var read = encoded(ClientFrame.close(channel: 1))
        read.writeBytes([0xff, 0xff, 0xff, 0xff, 0xa1])
        var input = FrameInput<ClientFrame>(maxFrameBytes: 1000)
        var frames: [ClientFrame] = []
        #expect(throws: FrameError(.frameTooLarge, "a frame of 4294967295 bytes is over the limit of 1000 bytes")) {
            try input.read(read) { frames.append($0) }
        }
        #expect(frames == [.close(channel: 1)])
        // A body that is not a frame, after a length prefix split across two reads.
        var other = FrameInput<ClientFrame>(maxFrameBytes: 1000)
        let body: [UInt8] = [0x82, 0x01, 0x02]
        let broken = frame(bytes: body)
        #expect(throws: Never.self) { try other.read(broken.getSlice(at: 0, length: 2)!) { _ in } }
        #expect(other.heldBytes == 2)
        #expect(throws: FrameError.self) {
            try other.read(broken.getSlice(at: 2, length: broken.readableBytes - 2)!) { _ in
                Issue.record("not a frame")
            }
        }
    }

    @Test func oversizedLengthIsRefusedBeforeTheBodyArrives() throws {
        let channel = EmbeddedChannel(handler: ByteToMessageHandler(FrameDecoder<ClientFrame>(maxFrameBytes: 1024)))
        var header = ByteBuffer()
        header.writeInteger(UInt32(1025))
        #expect(throws: FrameError(.frameTooLarge, "a frame of 1025 bytes is over the limit of 1024 bytes")) {
            try channel.writeInbound(header)
        }
        _ = try? channel.finish()
    }

    @Test func truncatedFrameWaitsThenFailsAtEndOfStream() throws {
        let channel = EmbeddedChannel(handler: ByteToMessageHandler(FrameDecoder<ClientFrame>()))
        var whole = encoded(ClientFrame.ping(id: 1))
        let part = whole.readSlice(length: whole.readableBytes - 1)!
        try channel.writeInbound(part)
        #expect(try channel.readInbound(as: ClientFrame.self) == nil, "nothing until the frame is whole")
        #expect(throws: FrameError.self) { try channel.finish() }
    }

    @Test func unknownTypesAndKeysAreNotErrors() throws {
        let frame = try ClientFrame(
            body: ByteBuffer(bytes: (["type": "teleport", "where": "mars"] as ValueSet).cborBytes()))
        #expect(frame == .unknown(type: "teleport"))
        let ping = try ClientFrame(
            body: ByteBuffer(bytes: (["type": "ping", "id": 3, "extra": [1, 2]] as ValueSet).cborBytes()))
        #expect(ping == .ping(id: 3))
        // Indefinite-length maps and strings are read too.
        let indefinite = ByteBuffer(
            bytes: [0xbf, 0x64] + Array("type".utf8) + [0x7f, 0x62] + Array("pi".utf8) + [0x62] + Array("ng".utf8) + [
                0xff, 0x62, 0x69, 0x64, 0x05, 0xff,
            ])
        #expect(try ClientFrame(body: indefinite) == .ping(id: 5))
    }

    @Test func missingAndMistypedKeysAreNamed() {
        #expect(
            clientFrameError(["type": "request", "id": 2, "message": .map([:])])?.message
                == #"request: key "channel" is missing"#)
        #expect(
            clientFrameError(["type": "request", "channel": "one", "id": 2, "message": .map([:])])?.message
                == #"request: key "channel" must be an unsigned integer, not a text string"#)
        #expect(
            clientFrameError(["type": "request", "channel": -1, "id": 2, "message": .map([:])])?.message
                == #"request: key "channel" must be an unsigned integer, not an integer"#)
        #expect(
            clientFrameError(["type": "open", "channel": 1, "service": 5, "package": "p"])?.message
                == #"open: key "service" must be text, not an integer"#)
        #expect(
            clientFrameError(["type": "request", "channel": 1, "id": 2, "message": [1]])?.message
                == #"request: key "message" must be a map (a ValueSet), not an array"#)
        #expect(
            clientFrameError(["type": "launch", "id": 1, "uri": "x:", "preferredPackages": [1]])?.message
                == #"launch: key "preferredPackages"[0] must be text, not an integer"#)
        #expect(
            clientFrameError(["type": "apps", "id": 1, "package": 5])?.message
                == #"apps: key "package" must be text, not an integer"#)
        #expect(clientFrameError(["id": 1])?.message == #"frame has no "type" key"#)
        #expect(clientFrameError(["type": 1])?.message == #"frame: key "type" must be text, not an integer"#)
        #expect(clientFrameError(["type": "hello", "clientId": "c"])?.code == .malformedFrame)
    }

    /// A nested map's errors name the path to it; a frame's name its type, on every side.
    @Test func nestedMapsAndWorkerFramesAreNamedInErrors() {
        func error(_ decode: (ByteBuffer) throws(FrameError) -> Void, _ body: ValueSet) -> String? {
            do throws(FrameError) {
                try decode(ByteBuffer(bytes: body.cborBytes()))
                return nil
            } catch {
                return error.message
            }
        }
        let welcome: ValueSet = [
            "type": "welcome", "version": 1, "hostId": "h", "hostName": "n", "platform": "linux",
            "limits": ["maxMessageBytes": "many"],
        ]
        #expect(
            error({ (bytes) throws(FrameError) in _ = try HostFrame(body: bytes) }, welcome)
                == #"welcome.limits: key "maxMessageBytes" must be an unsigned integer, not a text string"#)
        #expect(
            error({ (bytes) throws(FrameError) in _ = try WorkerFrame(body: bytes) }, ["type": "respond", "status": 0])
                == #"respond: key "id" is missing"#)
        #expect(
            error({ (bytes) throws(FrameError) in _ = try WorkerFrame(body: bytes) }, ["type": 7, "id": 1])
                == #"frame: key "type" must be text, not an integer"#)
        // A type sent in chunks names the maps of an array as it does when sent whole.
        let chunkedType: [UInt8] = [0x7f, 0x62] + Array("ap".utf8) + [0x62] + Array("ps".utf8) + [0xff]
        let apps: [UInt8] =
            [0xa3, 0x64] + Array("type".utf8) + chunkedType + [0x62] + Array("id".utf8) + [0x01, 0x64]
            + Array("apps".utf8) + [0x82, 0xa0, 0xa0]
        #expect(clientSideError(apps) == #"apps.apps[0]: key "package" is missing"#)
    }

    func clientSideError(_ body: [UInt8]) -> String? {
        do throws(FrameError) {
            _ = try HostFrame(body: ByteBuffer(bytes: body))
            return nil
        } catch {
            return error.message
        }
    }

    /// Interfaces a client cannot read (a hostile or broken host) leave the app undescribed;
    /// the answer is read all the same.
    @Test func unreadableInterfacesLeaveTheAppUndescribed() throws {
        let app: ValueSet = [
            "package": "p", "displayName": "P", "services": .array(ValueArray(strings: ["s"])),
            "schemes": .array(ValueArray()),
        ]
        for interfaces: Value in [
            .array(ValueArray(maps: [["service": "s"]])),  // no commandKey, no commands
            .array(ValueArray(maps: [["service": "s", "commandKey": "Command", "commands": "x"]])),
            .array(
                ValueArray(maps: [
                    [
                        "service": "s", "commandKey": "Command",
                        "commands": .array(
                            ValueArray(
                                maps: Array(repeating: ["command": "c", "fields": .array(ValueArray())], count: 1025))),
                    ]
                ])),
            "not an array",
        ] {
            var entry = app
            entry["interfaces"] = interfaces
            let body: ValueSet = ["type": "apps", "id": 3, "apps": .array(ValueArray(maps: [entry]))]
            let frame = try HostFrame(body: ByteBuffer(bytes: body.cborBytes()))
            #expect(
                frame
                    == .apps(
                        AppsFrame(id: 3, apps: [AppInfo(package: "p", displayName: "P", services: ["s"], schemes: [])]))
            )
        }
        // A type this client does not know is taken as any.
        var entry = app
        entry["interfaces"] = .array(
            ValueArray(maps: [
                [
                    "service": "s", "commandKey": "Command",
                    "commands": .array(
                        ValueArray(maps: [
                            [
                                "command": "c",
                                "fields": .array(ValueArray(maps: [["name": "N", "type": "decimal128"]])),
                            ]
                        ])),
                ]
            ]))
        let body: ValueSet = ["type": "apps", "id": 4, "apps": .array(ValueArray(maps: [entry]))]
        guard case .apps(let apps) = try HostFrame(body: ByteBuffer(bytes: body.cborBytes())) else {
            Issue.record("not an apps frame")
            return
        }
        #expect(apps.apps.first?.interfaces["s"]?.commands.first?.fields.first?.type == .any)
    }

    @Test func malformedBodiesAreRefused() {
        #expect(clientFrameError(bytes: [])?.message == "empty frame: a frame holds one CBOR map")
        #expect(clientFrameError(bytes: [0x83, 1, 2, 3])?.message == "frame must be a CBOR map, not an array")
        #expect(
            clientFrameError(bytes: [0xa1, 0x01, 0x02])?.message == "frame keys must be text, but key 1 is an integer")
        #expect(
            clientFrameError(bytes: [0xa1, 0x61])?.message.hasPrefix(
                "frame is not well-formed CBOR: unexpected end of input") == true)
        #expect(clientFrameError(bytes: [0xa0, 0xa0])?.message == "frame holds more than one CBOR item")
        #expect(
            clientFrameError(bytes: [0xa1, 0x1c, 0x00])?.message.contains("reserved additional information 28") == true)
        let twice =
            [0xa2, 0x64] + Array("type".utf8) + [0x64] + Array("ping".utf8) + [0x64] + Array("type".utf8) + [0x64]
            + Array("ping".utf8)
        #expect(clientFrameError(bytes: twice)?.message == #"frame has the key "type" twice"#)
        #expect(
            clientFrameError(bytes: [0xa1, 0x64] + Array("type".utf8) + [0x62, 0xc3, 0x28])?.message
                == #"frame: key "type": text string is not valid UTF-8"#)
        let deep =
            [0xa2, 0x64] + Array("type".utf8) + [0x64] + Array("ping".utf8) + [0x61, 0x78]
            + Array(repeating: UInt8(0x81), count: 600) + [0x00]
        #expect(clientFrameError(bytes: deep)?.message == "frame nests deeper than 512 levels, the hard limit")
    }

    /// Keys are found by their bytes when they are plain ASCII, and compared as text otherwise:
    /// a key in chunks, a key that is not ASCII, two keys that are the same text in two spellings.
    @Test func keysAreFoundAndComparedAsText() throws {
        func text(_ string: String) -> [UInt8] { [0x60 + UInt8(string.utf8.count)] + Array(string.utf8) }
        // {"type": "ping", "id": 7, "é": 1}: an unknown key that is not ASCII is passed over.
        let accented = [0xa3] + text("type") + text("ping") + text("id") + [0x07] + text("é") + [0x01]
        #expect(try ClientFrame(body: ByteBuffer(bytes: accented)) == .ping(id: 7))
        // "type" as an indefinite-length text string in two chunks, "ty" and "pe".
        let chunked = [0xa2, 0x7f] + text("ty") + text("pe") + [0xff] + text("ping") + text("id") + [0x07]
        #expect(try ClientFrame(body: ByteBuffer(bytes: chunked)) == .ping(id: 7))
        // A key that is not UTF-8 ("a", then a lone continuation byte) is refused.
        let notUTF8 = [0xa2] + text("type") + text("ping") + [0x62, 0x61, 0x80, 0x01]
        #expect(clientFrameError(bytes: notUTF8)?.message == "frame: text string is not valid UTF-8")
        // "é" precomposed and decomposed are the same key.
        let twice =
            [0xa4] + text("type") + text("ping") + text("id") + [0x07] + text("\u{e9}") + [0x01]
            + text("e\u{301}") + [0x02]
        #expect(clientFrameError(bytes: twice)?.message == #"frame has the key "é" twice"#)
        // Past 16 keys (the set's turn), a repeated key is still found.
        var many: [UInt8] = [0xb8, 20] + text("type") + text("ping") + text("id") + [0x07]
        for index in 0..<17 { many += text("k\(index)") + [0x00] }
        many += text("k3") + [0x00]
        #expect(clientFrameError(bytes: many)?.message == #"frame has the key "k3" twice"#)
    }

    /// A frame that is not well-formed is refused as such, whatever its fields break first.
    @Test func whatAFrameBreaksAsAWholeComesFirst() {
        // An integer key, then the frame ends inside a text string.
        #expect(
            clientFrameError(bytes: [0xa2, 0x01, 0x02, 0x61])?.message.hasPrefix(
                "frame is not well-formed CBOR: unexpected end of input") == true)
        // A key twice, then a break where none may stand.
        let twice: [UInt8] = [0xa3, 0x61, 0x61, 0x01, 0x61, 0x61, 0x02, 0xff]
        #expect(clientFrameError(bytes: twice)?.message.hasPrefix("frame is not well-formed CBOR: a break") == true)
        // Not a map, and more than one item.
        #expect(clientFrameError(bytes: [0x01, 0x02])?.message == "frame holds more than one CBOR item")
        #expect(clientFrameError(bytes: [0xa0, 0x01])?.message == "frame holds more than one CBOR item")
        // 512 levels of containers, the frame's map included, are allowed; 513 are not.
        let ping: [UInt8] =
            [0x64] + Array("type".utf8) + [0x64] + Array("ping".utf8) + [0x62] + Array("id".utf8) + [0x07]
        let limit = [0xa3] + ping + [0x61, 0x78] + Array(repeating: UInt8(0x81), count: 511) + [0x00]
        #expect(clientFrameError(bytes: limit) == nil)
        let deep = [0xa3] + ping + [0x61, 0x78] + Array(repeating: UInt8(0x81), count: 512) + [0x00]
        #expect(clientFrameError(bytes: deep)?.message == "frame nests deeper than 512 levels, the hard limit")
    }

    @Test func aMessageThatIsNotAValueSetStillMakesAFrame() throws {
        // {"type": "request", "channel": 1, "id": 2, "message": {"bad": null}}: a status-1 matter.
        var body: [UInt8] = (["type": "request", "channel": 1, "id": 2] as ValueSet).cborBytes()
        body[0] = 0xa4
        body += [0x67] + Array("message".utf8) + [0xa1, 0x63] + Array("bad".utf8) + [0xf6]
        guard case .request(let request) = try ClientFrame(body: ByteBuffer(bytes: body)) else {
            Issue.record("not a request")
            return
        }
        let error = #expect(throws: ValueSetError.self) { try request.message.decode() }
        #expect(error?.description == "message.bad: null is not a ValueSet kind")
        #expect(error?.code == .notAValueSet)
        #expect(request.message.byteCount == 6)
    }

    @Test func statusesDescribeThemselves() {
        #expect(
            AppServiceConnectionStatus.remoteSystemNotSupportedByApp.description == "RemoteSystemNotSupportedByApp (6)")
        #expect(AppServiceResponseStatus.messageSizeTooLarge.rawValue == 5)
        #expect(AppServiceClosedStatus(rawValue: 3) == .unknown)
        #expect(RemoteLaunchUriStatus.deniedByRemoteSystem.rawValue == 7)
        #expect(RemoteLaunchUriStatus(rawValue: 42).description == "unrecognised (42)")
    }
}
