// Measures the ValueSet CBOR codec on the two messages that matter (the Roman ping, and a
// 4 KiB nested message) against two baselines measured in the same run: Foundation's
// JSONSerialization round trip of the same data, and Python's cbor2 (when python3 and cbor2
// are installed). Run it optimised, ideally pinned to one core:
//
//     taskset -c 0 swift run -c release atrium-codec-bench
//
// Figures are nanoseconds per operation, the best of several rounds (the least disturbed by
// other work on the machine), and ratios against the baselines.

import AtriumBench
import AtriumProtocol
import AtriumValues
import Foundation
import NIOCore

AtriumVersion.answerStandardOptions(
    usage: """
        atrium-codec-bench: measures the ValueSet CBOR codec against JSONSerialization and Python's
        cbor2, in nanoseconds per operation. Run it optimised, pinned: taskset -c 0 atrium-codec-bench
        --frames: only the frames around a message (a client's request, a worker's request and answer)
        """, accepting: ["--frames"])

let pingMessage: ValueSet = [
    "Type": "ping",
    "CreationDate": .date(Timestamp(secondsSince1970: 1_763_700_000.123)),
    "TargetId": "2b6a4f0e-9a7c-4c0e-8f3b-5d1e2a7c9b10",
]

/// A nested message of a little over 4 KiB: a catalogue of items with every kind in it.
func catalogue() -> ValueSet {
    var items: [ValueSet] = []
    var set: ValueSet = [:]
    var index = 0
    repeat {
        items.append([
            "Name": .string("item number \(index)"),
            "Price": .double(Double(index) * 1.25 + 0.1),
            "Count": .int(Int64(index * 7)),
            "InStock": .bool(index % 2 == 0),
            "Tags": ["red", "large", "sale"],
            "Added": .date(Timestamp(secondsSince1970: 1_700_000_000 + Double(index))),
            "Id": .uuid(UUID(uuid: (UInt8(index), 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15))),
        ])
        index += 1
        set = [
            "Type": "catalogue",
            "Meta": ["Owner": "store", "Version": 3, "Flags": [true, false]],
            "Items": .array(ValueArray(maps: items)),
        ]
    } while set.cborBytes().count < 4096
    return set
}

/// The same data as Foundation JSON objects: dates as seconds, UUIDs as strings.
func jsonObject(_ value: Value) -> Any {
    switch value {
    case .string(let s): s
    case .int(let i): i
    case .double(let d): d
    case .bool(let b): b
    case .date(let t): t.secondsSince1970
    case .uuid(let u): u.uuidString
    case .bytes(let b): b.map { Int($0) }
    case .array(let a): a.map(jsonObject)
    case .map(let m): Dictionary(uniqueKeysWithValues: m.map { ($0.key, jsonObject($0.value)) })
    }
}

struct Row {
    var name: String
    var bytes: Int
    var decode: Double
    var encode: Double
    var json: Double
    var cbor2: Double?
    var roundTrip: Double { decode + encode }
}

func benchmark(_ name: String, _ message: ValueSet, iterations: Int) throws -> Row {
    let encoded = message.cborBytes()
    let buffer = ByteBuffer(bytes: encoded)
    var output = ByteBuffer()
    output.reserveCapacity(encoded.count * 2)

    let decode = try bestNanoseconds(iterations: iterations) {
        try ValueSet(cbor: buffer).count
    }
    let encode = bestNanoseconds(iterations: iterations) {
        output.clear()
        return output.writeValueSet(message)
    }
    let object = jsonObject(.map(message))
    let json = try bestNanoseconds(iterations: max(iterations / 50, 100), rounds: 5) {
        let data = try JSONSerialization.data(withJSONObject: object)
        return (try JSONSerialization.jsonObject(with: data) as! [String: Any]).count
    }
    return Row(name: name, bytes: encoded.count, decode: decode, encode: encode, json: json, cbor2: nil)
}

/// cbor2's loads + dumps round trip of the same bytes, in nanoseconds, or nil without cbor2.
func cbor2RoundTrip(_ messages: [[UInt8]]) -> [Double]? {
    let script = """
        import sys, timeit
        import cbor2
        for hexText in sys.argv[1:]:
            data = bytes.fromhex(hexText)
            best = min(timeit.repeat(lambda: cbor2.dumps(cbor2.loads(data)), number=2000, repeat=7)) / 2000
            print(best * 1e9)
        """
    let process = Process()
    process.executableURL = URL(fileURLWithPath: "/usr/bin/env")
    process.arguments = ["python3", "-c", script] + messages.map { $0.map { String(format: "%02x", $0) }.joined() }
    let pipe = Pipe()
    process.standardOutput = pipe
    process.standardError = FileHandle.nullDevice
    do {
        try process.run()
    } catch {
        return nil
    }
    let output = pipe.fileHandleForReading.readDataToEndOfFile()
    process.waitUntilExit()
    guard process.terminationStatus == 0 else { return nil }
    let figures = String(decoding: output, as: UTF8.self).split(separator: "\n").compactMap { Double($0) }
    return figures.count == messages.count ? figures : nil
}

let messages = [("ping", pingMessage, 1_000_000), ("4 KiB nested", catalogue(), 20_000)]
if CommandLine.arguments.contains("--frames") {
    try frameSection()
    exit(0)
}
var rows = try messages.map { try benchmark($0.0, $0.1, iterations: $0.2) }
if let python = cbor2RoundTrip(messages.map { $0.1.cborBytes() }) {
    for index in rows.indices { rows[index].cbor2 = python[index] }
}

func format(_ nanoseconds: Double) -> String { String(format: "%.0f ns", nanoseconds) }
func ratio(_ x: Double) -> String { String(format: "%.1fx", x) }

print("ValueSet CBOR codec, ns per operation (best of 9 rounds), and speed-up over each baseline")
print(
    "message       | bytes | decode  | encode  | decode+encode | JSONSerialization | vs JSON | cbor2 (Python) | vs cbor2"
)
for row in rows {
    let cbor2 = row.cbor2.map(format) ?? "not installed"
    let versus = row.cbor2.map { ratio($0 / row.roundTrip) } ?? "-"
    print(
        [
            row.name.padding(toLength: 13, withPad: " ", startingAt: 0),
            String(row.bytes).padding(toLength: 5, withPad: " ", startingAt: 0),
            format(row.decode), format(row.encode), format(row.roundTrip), format(row.json),
            ratio(row.json / row.roundTrip), cbor2, versus,
        ].joined(separator: " | ")
    )
}

// What the host does to every message it passes on: check it without building it
// (`ValueSet.validate`), against decoding it, which is what it did before. The 1 MiB message
// of 200,000 small ints is the shape that costs a decoder most per byte; the host refuses it
// at its values budget (65,536 by default), so the budgeted check is timed too.
print("\nChecking a message without decoding it (the host's request path), ns per message")
print(
    "message                 | bytes   | decode      | validate    | decode / validate | validate, 65,536-value budget")
var ints: ValueSet = ["Ints": .array(ValueArray(ints: Array(repeating: 1, count: 200_000)))]
ints["Pad"] = .bytes(Array(repeating: 0, count: (1 << 20) - ints.cborBytes().count - 16))
for (name, message, iterations) in [
    ("ping", pingMessage, 1_000_000), ("4 KiB nested", catalogue(), 20_000), ("1 MiB, 200,000 ints", ints, 20),
] {
    let encoded = message.cborBytes()
    let decode = try bestNanoseconds(iterations: iterations) { try ValueSet(cbor: encoded).count }
    let validate = try encoded.withUnsafeBytes { raw in
        try bestNanoseconds(iterations: iterations) {
            try ValueSet.validate(cbor: raw)
            return 1
        }
    }
    let budgeted = encoded.withUnsafeBytes { raw in
        bestNanoseconds(iterations: iterations) { (try? ValueSet.validate(cbor: raw, maxValues: 65536)) == nil ? 1 : 0 }
    }
    print(
        [
            name.padding(toLength: 23, withPad: " ", startingAt: 0),
            String(encoded.count).padding(toLength: 7, withPad: " ", startingAt: 0),
            format(decode).padding(toLength: 11, withPad: " ", startingAt: 0),
            format(validate).padding(toLength: 11, withPad: " ", startingAt: 0),
            ratio(decode / validate).padding(toLength: 17, withPad: " ", startingAt: 0), format(budgeted),
        ].joined(separator: " | "))
}

// What a request to a service that declares its commands costs on top (MANIFEST.md, "What a
// service takes"): the host reads the message's outline (keys and kinds, not what they nest)
// and checks it, after the validation every request gets. Baseline: that validation, in the
// same run. A refused request also costs its error text and one "did you mean".
print("\nChecking a request against its service's declared commands, ns per message")
print("message                 | validate    | outline     | outline + check | (outline + check) / validate")
let interface = ServiceInterface(commands: [
    .init(
        name: "ping",
        fields: [.init(name: "CreationDate", type: .kind(.date)), .init(name: "TargetId", type: .kind(.string))]),
    .init(
        name: "catalogue",
        fields: [.init(name: "Meta", type: .kind(.map)), .init(name: "Items", type: .array(of: .map))]),
])
var typedPing = pingMessage
typedPing["Command"] = "ping"
typedPing.removeValue(forKey: "Type")
var typedCatalogue = catalogue()
typedCatalogue["Command"] = "catalogue"
typedCatalogue.removeValue(forKey: "Type")
var refused = typedPing
refused["TargteId"] = "a misspelled key"
for (name, message, iterations) in [
    ("ping", typedPing, 1_000_000), ("4 KiB nested", typedCatalogue, 20_000), ("ping, refused", refused, 200_000),
] {
    let encoded = message.cborBytes()
    let validate = try encoded.withUnsafeBytes { raw in
        try bestNanoseconds(iterations: iterations) {
            try ValueSet.validate(cbor: raw)
            return 1
        }
    }
    let outline = try encoded.withUnsafeBytes { raw in
        try bestNanoseconds(iterations: iterations) { try ValueSet(outline: raw).count }
    }
    let checked = try encoded.withUnsafeBytes { raw in
        try bestNanoseconds(iterations: iterations) {
            (interface.refusal(of: try ValueSet(outline: raw))?.count ?? 0) + 1
        }
    }
    print(
        [
            name.padding(toLength: 23, withPad: " ", startingAt: 0),
            format(validate).padding(toLength: 11, withPad: " ", startingAt: 0),
            format(outline).padding(toLength: 11, withPad: " ", startingAt: 0),
            format(checked).padding(toLength: 15, withPad: " ", startingAt: 0), ratio(checked / validate),
        ].joined(separator: " | "))
}
try frameSection()
// What reading and writing a frame costs around its message: a client's request (every
// request), and the two frames that carry a request to a worker process and its answer back
// (read on both sides of the link). Baseline: checking the message alone, in the same run.
func frameSection() throws {
    print("\nFrames around the ping message, ns per frame")
    print("frame                   | bytes | decode  | encode  | message check alone | decode / check")
    let pingBytes = EncodedValueSet(pingMessage)
    let frameCases: [(String, any AtriumFrame)] = [
        ("client request", ClientFrame.request(RequestFrame(channel: 1, id: 7, message: pingBytes))),
        ("worker request", WorkerFrame.request(channel: 1 << 40 | 3, id: 1 << 40 | 9, message: pingBytes)),
        ("worker respond", WorkerFrame.respond(id: 1 << 40 | 9, status: 0, message: pingBytes, error: nil)),
    ]
    let check = try pingMessage.cborBytes().withUnsafeBytes { raw in
        try bestNanoseconds(iterations: 1_000_000) {
            try ValueSet.validate(cbor: raw)
            return 1
        }
    }
    for (name, frame) in frameCases {
        var framed = ByteBuffer()
        framed.writeFrame(frame)
        let body = framed.getSlice(at: framed.readerIndex + 4, length: framed.readableBytes - 4)!
        let decode: Double
        if frame is WorkerFrame {
            decode = try bestNanoseconds(iterations: 1_000_000) { try WorkerFrame(body: body).type.utf8.count }
        } else {
            decode = try bestNanoseconds(iterations: 1_000_000) { try ClientFrame(body: body).type.utf8.count }
        }
        var output = ByteBuffer()
        output.reserveCapacity(256)
        let encode = bestNanoseconds(iterations: 1_000_000) {
            output.clear()
            output.writeFrame(frame)
            return output.readableBytes
        }
        print(
            [
                name.padding(toLength: 23, withPad: " ", startingAt: 0),
                String(body.readableBytes).padding(toLength: 5, withPad: " ", startingAt: 0),
                format(decode).padding(toLength: 7, withPad: " ", startingAt: 0),
                format(encode).padding(toLength: 7, withPad: " ", startingAt: 0),
                format(check).padding(toLength: 19, withPad: " ", startingAt: 0), ratio(decode / check),
            ].joined(separator: " | "))
    }
}

if benchmarkSink == 42 { print("") }  // uses the sink
