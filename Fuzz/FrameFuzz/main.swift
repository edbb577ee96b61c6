// libFuzzer target: the host's frame decoders, on any bytes a client (or a worker process)
// may send. Every frame they decode is encoded again and must decode to the same frame; every
// message in it is checked as the host checks it. Built and run by Scripts/fuzz.sh.
import AtriumProtocol
import AtriumValues
import FuzzDriver
import NIOCore

@_cdecl("LLVMFuzzerTestOneInput")
func fuzzFrames(_ data: UnsafePointer<UInt8>, _ size: Int) -> CInt {
    var buffer = ByteBuffer(bytes: UnsafeBufferPointer(start: data, count: size))
    fuzzWorkerFrames(buffer)
    let decoder = FrameDecoder<ClientFrame>(maxFrameBytes: 1 << 20)
    while let frame = try? decoder.decodeFrame(from: &buffer) {
        var encoded = ByteBuffer()
        encoded.writeFrame(frame)
        guard let again = try? decoder.decodeFrame(from: &encoded) else {
            fatalError("a decoded frame did not decode after encoding: \(frame)")
        }
        precondition(again.type == frame.type, "the frame type changed in a round trip")
        switch frame {
        case .request(let request):
            _ = try? request.message.validate(maxValues: 65536)
        case .response(let response):
            _ = try? response.message.validate(maxValues: 65536)
        case .launch(let launch):
            _ = try? launch.data?.validate(maxValues: 65536)
        default:
            break
        }
    }
    return 0
}

/// The same bytes as a worker's frames: the host reads them from an untrusted worker process.
func fuzzWorkerFrames(_ bytes: ByteBuffer) {
    var buffer = bytes
    let decoder = FrameDecoder<WorkerFrame>(maxFrameBytes: 1 << 20)
    while let frame = try? decoder.decodeFrame(from: &buffer) {
        var encoded = ByteBuffer()
        encoded.writeFrame(frame)
        guard let again = try? decoder.decodeFrame(from: &encoded) else {
            fatalError("a decoded worker frame did not decode after encoding: \(frame)")
        }
        precondition(again == frame, "a worker frame changed in a round trip: \(frame) became \(again)")
    }
}

runFuzzer { data, size in fuzzFrames(data, size) }
