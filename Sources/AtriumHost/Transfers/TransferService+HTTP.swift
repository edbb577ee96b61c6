import AtriumProtocol
import AtriumTransfers
import AtriumValues
import Crypto
import Foundation
import NIOCore

// Transfers over HTTPS (CONTRACT section 8): a caller asks for a link (`transferLink`), and
// whoever holds its bearer reaches that one transfer over HTTP until the link expires. The
// same transfer, the same journal and the same outcome as with frames.

extension TransferService {
    /// A new link to `transfer` for its caller `owner`: a URL on `address` (the host's TLS
    /// listener) and a bearer, kept (as its SHA-256) in the transfer's journal record. `answer`
    /// gets the `transferLink` frame (for the client's request `request`) once the record is on
    /// stable storage, so that a link handed out still admits after a restart.
    func link(
        request: UInt64, transfer: UUID, owner: TransferOwner, address: SocketAddress?,
        answer: @escaping @Sendable (TransferLinkFrame) -> Void
    ) {
        let now = Date()
        func refused(_ error: String) -> TransferLinkFrame {
            TransferLinkFrame(id: request, status: .failure, url: "", bearer: "", expires: Timestamp(now), error: error)
        }
        if let unavailable { return answer(refused(unavailable)) }
        guard let address, let base = Self.baseURL(of: address) else {
            return answer(
                refused("this host serves no HTTPS: transfers' links need a TCP listener with TLS (atriumd --listen)"))
        }
        var secret = [UInt8](repeating: 0, count: 32)
        var random = SystemRandomNumberGenerator()
        for index in secret.indices { secret[index] = random.next() }
        let bearer = Self.base64URL(secret)
        let expires = now.addingTimeInterval(limits.linkLifetime.seconds)
        let link = TransferLink(digest: Self.digest(ofBearer: bearer), expires: expires)
        let id = TransferID(transfer)
        let refusal = state.withLock { state -> TransferErrorCode? in
            guard let record = state.table.find(id, owner: owner) else { return .notFound }
            guard let linked = state.table.linked(id, owner: owner, link, now: now) else {
                return record.phase.isEnded ? .ended : .notFound
            }
            unwrittenChange(linked, in: &state)
            return nil
        }
        if let refusal { return answer(refused(refusal.rawValue)) }
        logger.debug("transfer \(id): a link made, until \(expires)")
        let frame = TransferLinkFrame(
            id: request, status: .success, url: "\(base)/transfers/\(id)", bearer: bearer,
            expires: Timestamp(expires))
        // A link whose record could not be written would not admit after a restart: refused.
        let unwritten = refused(TransferErrorCode.insufficientStorage.rawValue)
        afterJournal(of: id) { written in answer(written ? frame : unwritten) }
    }

    /// `https://ADDRESS:PORT`, for a listener's address (an address any host may bind,
    /// `0.0.0.0` or `::`, is named by its loopback address).
    static func baseURL(of address: SocketAddress) -> String? {
        guard let port = address.port, var host = address.ipAddress else { return nil }
        if host == "0.0.0.0" { host = "127.0.0.1" }
        if host == "::" { host = "::1" }
        if let zone = host.firstIndex(of: "%") { host = String(host[..<zone]) }
        return host.contains(":") ? "https://[\(host)]:\(port)" : "https://\(host):\(port)"
    }

    /// The SHA-256 of a bearer as the journal keeps it.
    static func digest(ofBearer bearer: String) -> [UInt8] { Array(SHA256.hash(data: Data(bearer.utf8))) }

    /// Base64 for URLs (RFC 4648 section 5), without padding.
    static func base64URL(_ bytes: [UInt8]) -> String {
        Data(bytes).base64EncodedString().replacingOccurrences(of: "+", with: "-")
            .replacingOccurrences(of: "/", with: "_").replacingOccurrences(of: "=", with: "")
    }

    // MARK: - Serving a link

    /// A download a bearer admits, and the file to read it from.
    struct HTTPDownload {
        var record: TransferRecord
        var file: DownloadFile
    }

    /// Why a request over HTTP gets no transfer: every reason is a 404 to the client (a wrong
    /// bearer must not tell that the transfer exists), and the log says which.
    enum HTTPRefusal: Error, CustomStringConvertible {
        case ended(TransferPhase)
        case notADownload
        case changed(String)
        var description: String {
            switch self {
            case .ended(let phase): "the transfer has ended (\(phase.rawValue))"
            case .notADownload: "the transfer is an upload"
            case .changed(let why): "its file cannot be read: \(why)"
            }
        }
    }

    /// The transfer that `bearer` admits now, as it stands.
    func httpAdmitted(_ transfer: UUID, bearer: String, now: Date = Date()) -> TransferRecord? {
        let digest = Self.digest(ofBearer: bearer)
        return state.withLock { $0.table.admitted(TransferID(transfer), bearerDigest: digest, now: now) }
    }

    /// The download `record` (one a bearer admitted): its file (the one open for the transfer
    /// when it is attached, else opened again, only if unchanged).
    func httpDownload(_ record: TransferRecord) -> Result<HTTPDownload, HTTPRefusal> {
        let id = record.id
        guard record.direction == .download else { return .failure(.notADownload) }
        guard !record.phase.isEnded || record.phase == .completed else { return .failure(.ended(record.phase)) }
        let found = state.withLock { state -> (TransferRecord, DownloadFile?) in
            (state.table.record(id) ?? record, state.files[id])
        }
        switch found {
        case (let record, let open?):
            return .success(HTTPDownload(record: record, file: open))
        case (let record, nil):
            guard let source = record.source else { return .failure(.changed("it has no file")) }
            do {
                return .success(HTTPDownload(record: record, file: try DownloadFile.reopen(source)))
            } catch {
                if !record.phase.isEnded, let (link, state) = self.end(id, phase: .failed, error: .changed) {
                    tell(state, to: link)
                }
                return .failure(.changed("\(error)"))
            }
        }
    }

    /// Bytes `range` of download `id` went out over HTTP: progress (the expiry counts from
    /// it), and, when they reach the end, the download is complete, as an acknowledgement of
    /// every byte completes it over frames. They count from no further than the bytes already
    /// sent, or, when the request `resumes` (a range from a byte to the end, as `curl -C -`
    /// asks), from where the client says it holds. A connection that has it attached is told.
    ///
    /// Returns whether the download may go on being sent: false once the transfer is gone, or
    /// has ended otherwise than completed.
    @discardableResult
    func httpSent(_ id: TransferID, _ range: Range<Int64>, resumes: Bool, now: Date = Date()) -> Bool {
        let (goesOn, told) = state.withLock { state -> (Bool, (link: TransferPeer, state: TransferStateFrame)?) in
            guard let record = state.table.record(id), record.direction == .download else { return (false, nil) }
            state.movedSinceLook = true
            guard !record.phase.isEnded else { return (record.phase == .completed, nil) }
            // An empty file is all sent once a response to it has gone out.
            let reaches = range.upperBound > record.offset || record.size == 0
            guard resumes || range.lowerBound <= record.offset, reaches else { return (true, nil) }
            _ = state.table.progressed(id, offset: range.upperBound, now: now)
            guard range.upperBound == record.size else { return (true, nil) }
            let link = state.attached[id]?.link
            guard let done = endLocked(id, phase: .completed, error: nil, now: now, &state) else { return (true, nil) }
            logger.debug("transfer \(id) completed over HTTPS: \(record.size) bytes sent")
            return (true, link.map { ($0, done.state) })
        }
        if let told { tell(told.state, to: told.link, paced: true) }
        return goesOn
    }
}
