import AtriumProtocol
import AtriumValues
import Foundation
import NIOCore

/// The operator's commands, taken on the local socket only (`admin` frames): what the host
/// holds, the pairing requests waiting, and the paired devices.
///
/// | command | arguments | result |
/// |---|---|---|
/// | `pairing.list` | none | `requests`: maps of `request`, `deviceName`, `identity`, `address`, `code`, `waitingSeconds` |
/// | `pairing.accept`, `pairing.refuse` | `request` int | `deviceName`, `identity` |
/// | `devices.list` | none | `devices`: maps of `identity`, `name`, `pairedAt`, `lastSeen`, optional `lastAddress` |
/// | `devices.revoke` | `device` text: the identity, or at least its first 8 hex digits | `name`, `identity` |
/// | `host.status` | none | the counts of ``HostCore/statusReport()``: connections, channels, requests, launches, packages |
enum AdminCommands {
    /// Runs `admin`; the answer comes on `eventLoop` (a revocation answers once the device's
    /// connections are cut off).
    static func run(_ admin: AdminFrame, core: HostCore, on eventLoop: any EventLoop) -> EventLoopFuture<
        Result<ValueSet, PairingRefusal>
    > {
        let arguments: ValueSet
        do {
            arguments = try admin.arguments?.decode() ?? [:]
        } catch {
            return eventLoop.makeSucceededFuture(.failure(PairingRefusal("the arguments are not a ValueSet: \(error)")))
        }
        guard admin.command == "devices.revoke" else {
            return eventLoop.makeSucceededFuture(run(admin.command, arguments, core: core))
        }
        guard let identity = arguments["device"]?.string else {
            return eventLoop.makeSucceededFuture(
                .failure(PairingRefusal("devices.revoke needs the device's identity (`device`)")))
        }
        return core.revoke(identity, on: eventLoop).map { outcome in
            outcome.map { device in ["name": .string(device.name), "identity": .string(device.identity)] }
        }
    }

    /// The commands answered at once.
    static func run(_ command: String, _ arguments: ValueSet, core: HostCore) -> Result<ValueSet, PairingRefusal> {
        switch command {
        case "pairing.list":
            let now = Date()
            let requests = core.devices.pending.map { request -> ValueSet in
                [
                    "request": .int(Int64(request.number)), "deviceName": .string(request.deviceName),
                    "identity": .string(request.identity), "address": .string(request.address),
                    "code": .string(request.code),
                    "waitingSeconds": .int(Int64(now.timeIntervalSince(request.requested))),
                ]
            }
            return .success(["requests": .array(ValueArray(maps: requests))])
        case "pairing.accept", "pairing.refuse":
            guard let number = arguments["request"]?.int, number > 0 else {
                return .failure(PairingRefusal("\(command) needs the request's number (`request`)"))
            }
            return core.devices.decide(UInt64(number), accept: command == "pairing.accept").map { request in
                ["deviceName": .string(request.deviceName), "identity": .string(request.identity)]
            }
        case "host.status":
            return .success(core.statusReport())
        case "devices.list":
            let devices = core.devices.devices.map { device -> ValueSet in
                var entry: ValueSet = [
                    "identity": .string(device.identity), "name": .string(device.name),
                    "pairedAt": .date(Timestamp(device.pairedAt)), "lastSeen": .date(Timestamp(device.lastSeen)),
                ]
                if let address = device.lastAddress { entry["lastAddress"] = .string(address) }
                return entry
            }
            return .success(["devices": .array(ValueArray(maps: devices))])
        default:
            return .failure(
                PairingRefusal(
                    "unknown admin command \"\(untrusted(command, limit: 64))\"; known: host.status, pairing.list, pairing.accept, pairing.refuse, devices.list, devices.revoke"
                ))
        }
    }
}
