import CAtriumPlugin

#if canImport(FoundationEssentials)
    public import FoundationEssentials
#else
    public import Foundation
#endif
#if canImport(Glibc)
    import Glibc
#endif

/// Why the host refused to make a transfer (ABI 1.3's `offer_file` or `accept_upload`).
public struct TransferRefusal: Error, Sendable, CustomStringConvertible {
    /// The host's ATRIUM_E_ code.
    public var code: Int32
    public var description: String

    /// Whether the refusal is one of the host's limits (or its disk): answer with status 2,
    /// ResourceLimitsExceeded, as ``response`` does.
    public var isLimit: Bool { code == ATRIUM_E_LIMIT_EXCEEDED }

    /// The answer to give the client.
    public var response: ServiceResponse {
        ServiceResponse(status: isLimit ? .resourceLimitsExceeded : .failure, error: description)
    }

    init(_ code: Int32, _ what: String) {
        self.code = code
        let reason =
            switch code {
            case ATRIUM_E_UNKNOWN_REQUEST: "the request was answered already, or its client went away"
            case ATRIUM_E_INVALID_ARGUMENT: "not a readable regular file, or a size below -1"
            case ATRIUM_E_LIMIT_EXCEEDED: "over the host's limits for transfers, or its disk's free space; later"
            case ATRIUM_E_UNAVAILABLE: "the host cannot keep transfers here (its log says why)"
            default: "code \(code)"
            }
        description = "\(what): \(reason)"
    }
}

extension ServiceRequest {
    /// Offers the file open as `fileDescriptor` to this request's client, as a download that
    /// outlives the connection (CONTRACT section 8): put the returned id in the answer as
    /// `Transfer`. The host takes a duplicate of the descriptor: the service keeps its own and
    /// may close it at once. `name` is what the client may show; it is never a path.
    public func offer(fileDescriptor: Int32, name: String? = nil) throws(TransferRefusal) -> UUID {
        let table = runtime.value.table
        guard table.has(\.offer_file), let offer = table.api.pointee.offer_file else {
            throw TransferRefusal(ATRIUM_E_UNAVAILABLE, "this host has no transfers (ABI 1.3)")
        }
        var out = [UInt8](repeating: 0, count: 16)
        let result = out.withUnsafeMutableBufferPointer { buffer in
            withOptionalCString(name) { offer(table.api, id, fileDescriptor, $0, buffer.baseAddress) }
        }
        guard result == ATRIUM_OK else { throw TransferRefusal(result, "the file cannot be offered") }
        return UUID(bytes: out)
    }

    /// Offers the regular file at `path` (opened here without following a link): its id and
    /// size, for an answer such as `["Transfer": .uuid(id), "Size": .int(size)]`.
    public func offerFile(atPath path: String, name: String? = nil) throws(TransferRefusal) -> (id: UUID, size: Int64) {
        let descriptor = open(path, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC)
        guard descriptor >= 0 else { throw TransferRefusal(ATRIUM_E_INVALID_ARGUMENT, "\(path) cannot be opened") }
        defer { close(descriptor) }
        var status = stat()
        guard fstat(descriptor, &status) == 0, status.st_mode & S_IFMT == S_IFREG else {
            throw TransferRefusal(ATRIUM_E_INVALID_ARGUMENT, "\(path) is not a regular file")
        }
        return (try offer(fileDescriptor: descriptor, name: name), Int64(status.st_size))
    }

    /// Accepts an upload from this request's client: `size` bytes (nil when the client does
    /// not know; then at most `maxSize`, or the host's limits). Put the id in the answer as
    /// `Transfer`; once every byte is in and checked, ``AppService/upload(_:)`` receives the
    /// file. Space for a known size is reserved now: a disk that cannot hold it is refused here.
    public func acceptUpload(size: Int64?, maxSize: Int64? = nil, name: String? = nil) throws(TransferRefusal) -> UUID {
        let table = runtime.value.table
        guard table.has(\.accept_upload), let accept = table.api.pointee.accept_upload else {
            throw TransferRefusal(ATRIUM_E_UNAVAILABLE, "this host has no transfers (ABI 1.3)")
        }
        var out = [UInt8](repeating: 0, count: 16)
        let result = out.withUnsafeMutableBufferPointer { buffer in
            withOptionalCString(name) { accept(table.api, id, size ?? -1, maxSize ?? -1, $0, buffer.baseAddress) }
        }
        guard result == ATRIUM_OK else { throw TransferRefusal(result, "the upload cannot be accepted") }
        return UUID(bytes: out)
    }
}

/// A finished upload (``AppService/upload(_:)``): every byte in, on stable storage, its size and
/// SHA-256 checked. The descriptor is open for reading until `upload` returns.
public struct FinishedUpload: Sendable {
    public let transfer: UUID
    public let fileDescriptor: Int32
    public let size: Int64
    public let digest: [UInt8]
    /// The name given to ``ServiceRequest/acceptUpload(size:maxSize:name:)``: display text from
    /// the client, to check before it names a file.
    public let name: String?
    /// The service whose request accepted it.
    public let service: String

    /// Keeps the file in `folder` (open as `folderDescriptor`) under `name`, without copying it
    /// when the folder is on the spool's file system (a link), by copying it otherwise.
    /// Returns false with `errno` set when neither can be done (EEXIST: the name is taken).
    public func store(inFolder folderDescriptor: Int32, as name: String) -> Bool {
        let source = "/proc/self/fd/\(fileDescriptor)"
        if linkat(AT_FDCWD, source, folderDescriptor, name, AT_SYMLINK_FOLLOW) == 0 { return true }
        guard errno == EXDEV || errno == EPERM else { return false }
        let target = openat(folderDescriptor, name, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0o644)
        guard target >= 0 else { return false }
        var buffer = [UInt8](repeating: 0, count: 1 << 20)
        var offset: Int64 = 0
        while offset < size {
            let got = buffer.withUnsafeMutableBytes { pread(fileDescriptor, $0.baseAddress, $0.count, off_t(offset)) }
            if got < 0, errno == EINTR { continue }
            var written = 0
            while got > 0, written < got {
                let count = buffer.withUnsafeBytes { write(target, $0.baseAddress! + written, got - written) }
                if count < 0, errno == EINTR { continue }
                guard count > 0 else { break }
                written += count
            }
            guard got > 0, written == got else {
                let saved = got == 0 ? EIO : errno
                close(target)
                unlinkat(folderDescriptor, name, 0)
                errno = saved
                return false
            }
            offset += Int64(got)
        }
        let synced = fsync(target) == 0
        close(target)
        return synced
    }
}

extension HostTable {
    /// Whether the host's table holds `field` (a newer ABI's function).
    func has<Field>(_ field: KeyPath<atrium_host_api, Field>) -> Bool {
        guard let offset = MemoryLayout<atrium_host_api>.offset(of: field) else { return false }
        return Int(api.pointee.struct_size) >= offset + MemoryLayout<Field>.size
    }
}

extension UUID {
    init(bytes: [UInt8]) {
        self.init(
            uuid: (
                bytes[0], bytes[1], bytes[2], bytes[3], bytes[4], bytes[5], bytes[6], bytes[7], bytes[8], bytes[9],
                bytes[10], bytes[11], bytes[12], bytes[13], bytes[14], bytes[15]
            ))
    }
}

func withOptionalCString<Result>(_ text: String?, _ body: (UnsafePointer<CChar>?) -> Result) -> Result {
    guard let text else { return body(nil) }
    return text.withCString { body($0) }
}

let pluginUpload: @convention(c) (UnsafeMutableRawPointer?, UnsafePointer<atrium_upload_info>?) -> Void = {
    instance, info in
    guard let info else { return }
    let runtime = runtime(instance)
    let table = runtime.table
    let delivery = info.pointee.delivery
    let upload = FinishedUpload(
        transfer: withUnsafeBytes(of: info.pointee.transfer) { UUID(bytes: Array($0)) },
        fileDescriptor: info.pointee.fd, size: info.pointee.size,
        digest: withUnsafeBytes(of: info.pointee.digest) { Array($0) },
        name: info.pointee.name.map { String(cString: $0) },
        service: info.pointee.service.map { String(cString: $0) } ?? "")
    runtime.run {
        let response: ServiceResponse
        do {
            response = try await runtime.service.upload(upload)
        } catch {
            response = .failure(String(describing: error))
        }
        close(upload.fileDescriptor)
        let bytes = response.message.cborBytes()
        _ = bytes.withUnsafeBufferPointer { buffer in
            withOptionalCString(response.error) {
                table.api.pointee.upload_done(
                    table.api, delivery, response.status.int32Value, buffer.baseAddress, buffer.count, $0)
            }
        }
    }
}

let pluginTransferEnded:
    @convention(c) (UnsafeMutableRawPointer?, UnsafePointer<UInt8>?, UnsafePointer<CChar>?) -> Void =
        { instance, transfer, why in
            guard let transfer else { return }
            let runtime = runtime(instance)
            let id = UUID(bytes: Array(UnsafeBufferPointer(start: transfer, count: 16)))
            let reason = why.map { String(cString: $0) } ?? ""
            runtime.run { await runtime.service.transferEnded(id, why: reason) }
        }
