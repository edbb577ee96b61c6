// Measures what `--metrics` adds to one request on the host's request path, in nanoseconds,
// part by part, with the host's own code:
//
// - the byte-counting handler, one more handler each read passes through: a pipeline of 64 of
//   them against a pipeline without, divided by 64 (one handler alone is lost in the noise of
//   the pipeline around it);
// - the clock read when a read arrives, and the answer's recording (a second clock read, the
//   status count and the latency histogram), as `ConnectionHandler` does them;
// - writing a frame and counting its bytes against writing it alone, the same response frame.
//
// The sum is the cost for a client that waits for each answer (one request per read); a
// pipelining client's requests share a read's handler pass and clock read. Benchmarks/compare.py
// --metrics sets it against what a whole request costs atriumd in CPU time, measured in the
// same run. Run it optimised, pinned:
//
//     swift build -c release && taskset -c 0 .build/release/atrium-metrics-bench [--json]

import AtriumBench
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
/// The best of `turns` rounds of each of two measurements, which take turns at going first,
/// so that noise from the machine lands on both.
func takingTurns(_ turns: Int, _ first: () -> Double, _ second: () -> Double) -> (Double, Double) {
    var best = (Double.infinity, Double.infinity)
    for turn in 0..<turns {
        if turn % 2 == 0 {
            best.0 = min(best.0, first())
            best.1 = min(best.1, second())
        } else {
            best.1 = min(best.1, second())
            best.0 = min(best.0, first())
        }
    }
    return best
}

let (bare, bareSink, _) = try pipeline(counting: 0)
let (counted, countedSink, countedLoop) = try pipeline(counting: hops)
@MainActor func reading(_ channel: EmbeddedChannel, _ sink: Sink) -> Double {
    bestNanoseconds(iterations: 200_000, rounds: 3) {
        channel.pipeline.syncOperations.fireChannelRead(NIOAny(read))
        return sink.bytes
    }
}
let (bareRead, countedRead) = takingTurns(10, { reading(bare, bareSink) }, { reading(counted, countedSink) })
precondition(countedLoop.bytesIn > 0 && countedSink.bytes == bareSink.bytes, "the handlers did not count")
let handler = max(0, countedRead - bareRead) / Double(hops)

// The clock read at a read's arrival and the answer's recording, as ConnectionHandler does them.
let loop = host.loopMetrics(on: EmbeddedEventLoop())
let index = loop.index(of: host.service(package: "Bench.Echo", service: "echo"))
let recordings = 2_000_000
let recording = bestNanoseconds(iterations: recordings, rounds: 15) {
    let arrived = NIODeadline.now()
    loop.answered(index, status: .success, since: arrived)
    return index
}
let recorded = loop.handOver().services[index].statuses[AppServiceResponseStatus.success.rawValue]
precondition(recorded == recordings / 10 + recordings * 15, "recorded \(recorded) answers")

// Writing a frame and counting its bytes, against writing it alone.
var out = ByteBuffer()
@MainActor func encoding(_ encode: (inout ByteBuffer) -> Void) -> Double {
    bestNanoseconds(iterations: 300_000, rounds: 3) {
        out.clear()
        encode(&out)
        return out.writerIndex
    }
}
let (plainEncoding, countingEncoding) = takingTurns(
    10, { encoding { $0.writeFrame(HostFrame.response(response)) } },
    { encoding { $0.writeFrame(.response(response), countedIn: loop) } })
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
    print("| counting the bytes of a frame written (one response) | \(ns(encoder)) |")
    print("| total, one request per read | \(ns(total)) |")
}
