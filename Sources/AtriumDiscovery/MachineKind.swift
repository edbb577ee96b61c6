import Foundation

/// What kind of machine a host runs on, in systemd's chassis names (`hostnamectl chassis`):
/// desktop, laptop, convertible, server, tablet, handset, watch, embedded, vm, container,
/// or unknown. Rome's RemoteSystemKinds map onto them: Desktop is desktop, Laptop laptop,
/// Phone handset, Tablet tablet, Iot embedded.
public enum MachineKind {
    public static let unknown = "unknown"
    public static let all = [
        "desktop", "laptop", "convertible", "server", "tablet", "handset", "watch", "embedded", "vm", "container",
        unknown,
    ]

    public static func isValid(_ kind: String) -> Bool { all.contains(kind) }

    /// This machine's kind, found the way systemd-hostnamed finds it: `CHASSIS=` in
    /// /etc/machine-info, then a container, then a virtual machine, then the firmware's chassis
    /// type; unknown when nothing says.
    public static func detect(root: String = "") -> String {
        if let chassis = machineInfo(root: root)["CHASSIS"], isValid(chassis) { return chassis }
        if FileManager.default.fileExists(atPath: root + "/run/.containerenv")
            || FileManager.default.fileExists(atPath: root + "/.dockerenv")
            || (read(root + "/proc/1/environ")?.split(separator: "\0").contains { $0.hasPrefix("container=") } ?? false)
        {
            return "container"
        }
        if read(root + "/proc/cpuinfo")?.contains(" hypervisor") == true { return "vm" }
        switch read(root + "/sys/class/dmi/id/chassis_type").flatMap({
            Int($0.trimmingCharacters(in: .whitespacesAndNewlines))
        }) {
        case 3, 4, 6, 7, 13, 15, 16, 24: return "desktop"
        case 8, 9, 10, 14: return "laptop"
        case 11: return "handset"
        case 17, 23, 25, 28, 29: return "server"
        case 30: return "tablet"
        case 31, 32: return "convertible"
        case 33, 34, 35, 36: return "embedded"
        default: return unknown
        }
    }

    /// The machine's pretty hostname (`PRETTY_HOSTNAME=` in /etc/machine-info, which
    /// `hostnamectl set-hostname --pretty` writes), else its hostname.
    public static func prettyHostname(root: String = "") -> String {
        if let pretty = machineInfo(root: root)["PRETTY_HOSTNAME"], !pretty.isEmpty { return pretty }
        return ProcessInfo.processInfo.hostName
    }

    /// /etc/machine-info's assignments (an environment-like file: KEY=value, values maybe
    /// quoted, # comments).
    static func machineInfo(root: String) -> [String: String] {
        guard let text = read(root + "/etc/machine-info") else { return [:] }
        var values: [String: String] = [:]
        for line in text.split(whereSeparator: \.isNewline) {
            let trimmed = line.trimmingCharacters(in: .whitespaces)
            guard !trimmed.hasPrefix("#"), let equals = trimmed.firstIndex(of: "=") else { continue }
            var value = trimmed[trimmed.index(after: equals)...].trimmingCharacters(in: .whitespaces)
            if value.count >= 2, let first = value.first, first == "\"" || first == "'", value.last == first {
                value = String(value.dropFirst().dropLast())
                if first == "\"" {
                    value = value.replacingOccurrences(of: "\\\"", with: "\"").replacingOccurrences(
                        of: "\\\\", with: "\\")
                }
            }
            values[String(trimmed[..<equals])] = value
        }
        return values
    }

    private static func read(_ path: String) -> String? {
        guard let data = FileManager.default.contents(atPath: path) else { return nil }
        return String(decoding: data, as: UTF8.self)
    }
}
