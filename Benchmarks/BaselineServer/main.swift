// atrium-baseline: the benchmark baseline, a raw SwiftNIO server with Atrium's framing that
// echoes every request on the event loop (see AtriumBench.BaselineServer).
//
//     atrium-baseline [PORT]       prints "atrium-baseline: listening on tcp 127.0.0.1:PORT"

import AtriumBench
import AtriumProtocol
import Foundation

AtriumVersion.answerStandardOptions(
    usage: """
        atrium-baseline [PORT]: the benchmark baseline, a raw SwiftNIO server with Atrium's framing
        that echoes every request on the event loop, on 127.0.0.1:PORT (0 or none: a free port).
        """)
let port = CommandLine.arguments.count > 1 ? Int(CommandLine.arguments[1]) ?? 0 : 0
let server = try await BaselineServer.start(port: port)
FileHandle.standardOutput.write(
    Data("atrium-baseline: listening on tcp 127.0.0.1:\(server.localAddress?.port ?? 0)\n".utf8))
try await server.closeFuture.get()
