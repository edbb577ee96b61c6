import ArgumentParser
import AtriumClient
import Foundation

/// `atrium link`: a URL and a bearer that reach a transfer over HTTPS, and a curl command that
/// fetches it with the host's key pinned.
struct Link: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Print an HTTPS link to a transfer, for curl, a browser or a phone's downloader.",
        discussion: """
            Asks the host for a URL and a bearer that reach the transfer over HTTPS until the \
            link expires (a day by default): whoever holds the bearer may fetch it, so hand it \
            only to what should. Prints the URL, the bearer, when it expires, and a curl \
            command that pins the host's public key (the identity this client trusts for the \
            host), so that no certificate authority is involved and no warning is clicked \
            through. The curl command resumes (-C -) when run again.

            ID is a transfer this client started (atrium transfers lists them; its first \
            characters are enough), or a transfer's whole uuid.

            Examples:
              atrium link 3f2a
              atrium link 3f2a 192.168.1.20
            """)

    @Argument(help: ArgumentHelp("The transfer's id, or its first characters.", valueName: "id"))
    var id: String

    @OptionGroup var options: HostOptions

    func run() async throws {
        let (transfer, host, found) = try TransferCommand.named(id, in: ClientTransferStore(), options: options)
        let connection = try await options.connect(to: host, clientId: HostOptions.stableClientId)
        defer { Task { await connection.close() } }
        let link = try await reachable { try await connection.transferLink(transfer, timeout: options.duration) }
        guard link.status == .success else {
            printError("no link to \(transfer): \(link.error ?? "\(link.status)")")
            throw Exit.notSuccess
        }
        print("url: \(link.url)")
        print("bearer: \(link.bearer)")
        print("expires: \(ISO8601DateFormatter().string(from: link.expires.date))")
        guard let pin = Self.pin(connection.hostIdentity) else {
            print("(over plain TCP the host's key is not known here: connect with TLS for a curl command that pins it)")
            return
        }
        let curl = "curl --fail --insecure --pinnedpubkey 'sha256//\(pin)' -H 'Authorization: Bearer \(link.bearer)'"
        print("")
        if let found, found.direction == "upload" {
            // An upload (tus 1.0): what the host holds, then the file from the start.
            print(
                "\(curl) \\\n  -H 'Tus-Resumable: 1.0.0' -I '\(link.url)'     # Upload-Offset: the bytes the host holds"
            )
            print("\(curl) \\\n  -H 'Tus-Resumable: 1.0.0' -H 'Content-Type: application/offset+octet-stream' \\")
            print("  -H 'Upload-Offset: 0' -X PATCH -T \(Self.quoted(found.path)) '\(link.url)'")
            print("")
            print("(after a cut, send the rest of the file from the Upload-Offset the first command shows)")
        } else {
            let name = found.map { URL(fileURLWithPath: $0.path).lastPathComponent } ?? transfer.uuidString.lowercased()
            print("\(curl) \\\n  -C - -o \(Self.quoted(name)) '\(link.url)'")
            if found == nil { print("\n(for a download; an upload takes tus PATCH requests: docs/TRANSFERS.md)") }
        }
        print("")
        print("(--insecure skips certificate authorities, which the host's own certificate has none of;")
        print(" --pinnedpubkey refuses any key but this host's.)")
    }

    /// `text` in single quotes for a shell.
    static func quoted(_ text: String) -> String { "'" + text.replacingOccurrences(of: "'", with: "'\\''") + "'" }

    /// curl's pin of a public key (base64 of the SHA-256 of its SubjectPublicKeyInfo) from the
    /// host's identity (the same hash in hex).
    static func pin(_ identity: String?) -> String? {
        guard let identity, identity.count == 64 else { return nil }
        var bytes: [UInt8] = []
        var index = identity.startIndex
        while index < identity.endIndex {
            let next = identity.index(index, offsetBy: 2)
            guard let byte = UInt8(identity[index..<next], radix: 16) else { return nil }
            bytes.append(byte)
            index = next
        }
        return Data(bytes).base64EncodedString()
    }
}
