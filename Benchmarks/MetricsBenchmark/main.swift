// Measures what `--metrics` adds to one request on the host's request path, in nanoseconds,
// part by part, with the host's own code:
//
// - the byte-counting handler, one more handler each read passes through: a pipeline of 64 of
//   them against a pipeline without, divided by 64 (one handler alone is lost in the noise of
//   the pipeline around it);
// - the clock read when a read arrives, and the answer's recording (a second clock read, the
//   status count and the latency histogram), as `ConnectionHandler` does them;
// - the counting frame encoder against the plain one, encoding the same response frame.
//
// The sum is the cost for a client that waits for each answer (one request per read); a
// pipelining client's requests share a read's handler pass and clock read. Benchmarks/compare.py
// --metrics sets it against what a whole request costs atriumd in CPU time, measured in the
// same run. Run it optimised, pinned:
//
//     swift build -c release && taskset -c 0 .build/release/atrium-metrics-bench [--json]

import AtriumHost
import AtriumProtocol
import AtriumValues
import Foundation
import NIOCore
import NIOEmbedded

AtriumVersion.answerStandardOptions(
    usage: """
        atrium-metrics-bench [--json]: measures what recording metrics adds to a request on the
        host's request path, in nanoseconds. Run it optimised, pinned:
        taskset -c 0 atrium-metrics-bench
        """, accepting: ["--json"])

nonisolated(unsafe) var sink = 0

/// Best nanoseconds per call of `body` over `rounds` rounds of `iterations` calls.
func measure(iterations: Int, rounds: Int = 15, _ body: () throws -> Int) rethrows -> Double {
    for _ in 0..<iterations / 10 { sink &+= try body() }  // warm up
    var best = Double.infinity
    let clock = ContinuousClock()
    for _ in 0..<rounds {
        let start = clock.now
        for _ in 0..<iterations { sink &+= try body() }
        let elapsed = clock.now - start
        let nanoseconds = Double(elapsed.components.seconds) * 1e9 + Double(elapsed.components.attoseconds) / 1e9
        best = min(best, nanoseconds / Double(iterations))
    }
    return best
}

/// The end of a pipeline: takes each read and counts its bytes.
final class Sink: ChannelInboundHandler {
    typealias InboundIn = ByteBuffer
    var bytes = 0

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        bytes &+= unwrapInboundIn(data).readableBytes
    }
}

let host = HostMetrics()
let response = ResponseFrame(
    channel: 1, id: 1, status: .success,
    message: EncodedValueSet(["Type": "echo", "Text": "a message of ordinary length"]))
var read = ByteBuffer()
read.writeFrame(ClientFrame.request(RequestFrame(channel: 1, id: 1, message: response.message)))

// The handler: one pass through 64 byte-counting handlers against none.
let hops = 64
func pipeline(counting: Int) throws -> (EmbeddedChannel, Sink, LoopMetrics) {
    let channel = EmbeddedChannel()
    let loop = host.loopMetrics(on: channel.embeddedEventLoop)
    for _ in 0..<counting {
        try channel.pipeline.syncOperations.addHandler(ByteCountingHandler(loop: loop))
    }
    let sink = Sink()
    try channel.pipeline.syncOperations.addHandler(sink)
    return (channel, sink, loop)
}
let (bare, bareSink, _) = try pipeline(counting: 0)
let (counted, countedSink, countedLoop) = try pipeline(counting: hops)
var bareRead = Double.infinity
var countedRead = Double.infinity
for turn in 0..<10 {
    // The two pipelines take turns, so that noise from the machine lands on both.
    let measureBare = {
        bareRead = min(
            bareRead,
            measure(iterations: 200_000, rounds: 3) {
                bare.pipeline.syncOperations.fireChannelRead(NIOAny(read))
                return bareSink.bytes
            })
    }
    let measureCounted = {
        countedRead = min(
            countedRead,
            measure(iterations: 200_000, rounds: 3) {
                counted.pipeline.syncOperations.fireChannelRead(NIOAny(read))
                return countedSink.bytes
            })
    }
    if turn % 2 == 0 {
        measureBare()
        measureCounted()
    } else {
        measureCounted()
        measureBare()
    }
}
precondition(countedLoop.bytesIn > 0 && countedSink.bytes == bareSink.bytes, "the handlers did not count")
let handler = max(0, countedRead - bareRead) / Double(hops)

// The clock read at a read's arrival and the answer's recording, as ConnectionHandler does them.
let loop = host.loopMetrics(on: EmbeddedEventLoop())
let index = loop.index(of: host.service(package: "Bench.Echo", service: "echo"))
let recordings = 2_000_000
let recording = measure(iterations: recordings) {
    let arrived = NIODeadline.now()
    loop.answered(index, status: .success, since: arrived)
    return index
}
let recorded = loop.handOver().services[index].statuses[AppServiceResponseStatus.success.rawValue]
precondition(recorded == recordings / 10 + recordings * 15, "recorded \(recorded) answers")

// The counting encoder against the plain one.
var out = ByteBuffer()
var plainEncoder = FrameEncoder<HostFrame>()
var countingEncoder = CountingFrameEncoder(loop: loop)
var plainEncoding = Double.infinity
var countingEncoding = Double.infinity
for _ in 0..<10 {
    plainEncoding = min(
        plainEncoding,
        measure(iterations: 300_000, rounds: 3) {
            out.clear()
            plainEncoder.encode(data: .response(response), out: &out)
            return out.writerIndex
        })
    countingEncoding = min(
        countingEncoding,
        measure(iterations: 300_000, rounds: 3) {
            out.clear()
            countingEncoder.encode(data: .response(response), out: &out)
            return out.writerIndex
        })
}
precondition(loop.bytesOut > 0, "the encoder did not count")
let encoder = max(0, countingEncoding - plainEncoding)

let total = handler + recording + encoder
if CommandLine.arguments.contains("--json") {
    print(
        "{\"handlerNanoseconds\": \(handler), \"recordingNanoseconds\": \(recording), "
            + "\"encoderNanoseconds\": \(encoder), \"totalNanoseconds\": \(total)}")
} else {
    func ns(_ value: Double) -> String { String(format: "%.1f ns", value) }
    print("| part | added to a request |")
    print("|---|---|")
    print("| the byte-counting handler (one read) | \(ns(handler)) |")
    print("| clock read at arrival, recording the answer | \(ns(recording)) |")
    print("| the counting encoder (one response) | \(ns(encoder)) |")
    print("| total, one request per read | \(ns(total)) |")
}
