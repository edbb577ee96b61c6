// Roman ping: the reference Swift app service, the receiving side of the Roman test app's
// ping service. Declared by manifests/roman-ping.json as package
// 5085ShawnHenry.RomanTestApp_jsjw7knzsgcce, service com.microsoft.test.cdppingpongservice.
//
//   {Type: "ping", CreationDate, TargetId}  ->  {Type: "pong", CreationDate, TargetId}, echoed unchanged
//   {Type: "LaunchUri", Uri}                 ->  launches Uri, then {Type: "Ok", CreationDate: now}
//   anything else                            ->  {Type: "Ack", CreationDate: now}
//
// It also handles launches of roman-test: URIs (logged, Success).

import AtriumPluginKit
import AtriumValues

final class RomanPing: AppService {
    let host: ServiceHost
    /// A ping is answered at once; a launch awaits the host off this thread.
    let requestsNeverBlock = true

    init(host: ServiceHost) {
        self.host = host
    }

    func request(_ request: ServiceRequest) async throws -> ServiceResponse {
        let message = request.message
        switch message["Type"]?.string {
        case "ping":
            // Both values go back as they came, whatever their kind.
            var pong: ValueSet = ["Type": "pong"]
            pong["CreationDate"] = message["CreationDate"]
            pong["TargetId"] = message["TargetId"]
            return .success(pong)
        case "LaunchUri":
            guard let uri = message["Uri"]?.string else {
                return .failure("a LaunchUri message needs a Uri string")
            }
            // On behalf of the client that asked: the host applies that client's launch policy.
            let status = await request.channel.launch(uri)
            host.log(.info, "launched \(uri): \(status)")
            return ["Type": "Ok", "CreationDate": .date(.now)]
        default:
            return ["Type": "Ack", "CreationDate": .date(.now)]
        }
    }
}

extension RomanPing {
    /// A roman-test: URI launched on this machine: the app is "opened" with it, which here
    /// means the host's log says so.
    func launch(_ launch: LaunchRequest) async -> RemoteLaunchUriStatus {
        host.log(.info, "opened with \(launch.uri)")
        return .success
    }
}

@_cdecl("atrium_plugin_entry_v1")
public func atriumPluginEntry() -> UnsafeRawPointer { exportAppService(RomanPing.self) }
