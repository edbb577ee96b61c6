import AtriumProtocol
import AtriumTransfers
import AtriumValues
import CAtriumPlugin
import Foundation
import Logging
import NIOCore

#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

/// The host function table of the C ABI (`atrium_host_api`): a thin adapter from C to the
/// host's side of the seam. Each plugin gets its own copy, whose `host_data` points at its
/// ``InProcessPlugin``; every function finds its way back through that, checks its C
/// arguments, and calls the Swift API with Swift types. All of them may be called from any
/// thread.
enum HostTable {
    /// A fresh table with every function set; `host_data` is left for the instance.
    static func make() -> atrium_host_api {
        var api = atrium_host_api()
        api.struct_size = UInt32(MemoryLayout<atrium_host_api>.size)
        api.abi_major = UInt16(ATRIUM_PLUGIN_ABI_MAJOR)
        api.abi_minor = UInt16(ATRIUM_PLUGIN_ABI_MINOR)
        api.respond = respond
        api.send = send
        api.close_channel = closeChannel
        api.launch_uri = launchURI
        api.log = log
        api.message_parse = messageParse
        api.message_free = messageFree
        api.message_count = messageCount
        api.message_key_at = messageKeyAt
        api.message_kind = messageKind
        api.message_get_string = getString
        api.message_get_int = getInt
        api.message_get_double = getDouble
        api.message_get_bool = getBool
        api.message_get_date = getDate
        api.message_get_uuid = getUUID
        api.message_get_bytes = getBytes
        api.message_get_map = getMap
        api.builder_new = builderNew
        api.builder_free = builderFree
        api.builder_put_string = putString
        api.builder_put_int = putInt
        api.builder_put_double = putDouble
        api.builder_put_bool = putBool
        api.builder_put_date = putDate
        api.builder_put_uuid = putUUID
        api.builder_put_bytes = putBytes
        api.builder_put_map = putMap
        api.builder_bytes = builderBytes
        api.launch_uri_for = launchURIFor
        api.message_get_array = getArray
        api.message_get_message = getMessage
        api.builder_new_array = builderNewArray
        api.builder_put_builder = putBuilder
        api.offer_file = offerFile
        api.accept_upload = acceptUpload
        api.upload_done = uploadDone
        return api
    }

    typealias API = UnsafePointer<atrium_host_api>?

    static let respond:
        @convention(c) (API, UInt64, Int32, UnsafePointer<UInt8>?, Int, UnsafePointer<CChar>?) -> Int32 = {
            api, request, status, bytes, length, error in
            guard let plugin = InProcessPlugin.from(api), status >= 0, length >= 0, bytes != nil || length == 0 else {
                return ATRIUM_E_INVALID_ARGUMENT
            }
            let message = length > 0 ? ByteBuffer(bytes: UnsafeRawBufferPointer(start: bytes, count: length)) : nil
            return plugin.host.respond(
                to: request, from: plugin, status: AppServiceResponseStatus(rawValue: Int(status)),
                message: message, error: error.map { String(cString: $0) }
            ).cStatus
        }

    static let send: @convention(c) (API, UInt64, UnsafePointer<UInt8>?, Int, UnsafeMutablePointer<UInt64>?) -> Int32 =
        {
            api, channel, bytes, length, out in
            guard let plugin = InProcessPlugin.from(api), length >= 0, bytes != nil || length == 0 else {
                return ATRIUM_E_INVALID_ARGUMENT
            }
            let message = ByteBuffer(bytes: UnsafeRawBufferPointer(start: bytes, count: length))
            switch plugin.host.send(message, on: channel, from: plugin) {
            case .success(let id):
                out?.pointee = id
                return ATRIUM_OK
            case .failure(let refusal):
                return refusal.cCode
            }
        }

    static let closeChannel: @convention(c) (API, UInt64, Int32) -> Int32 = { api, channel, status in
        guard let plugin = InProcessPlugin.from(api), status >= 0 else { return ATRIUM_E_INVALID_ARGUMENT }
        return plugin.host.closeChannel(channel, from: plugin, status: AppServiceClosedStatus(rawValue: Int(status)))
            .cStatus
    }

    static let launchURI: @convention(c) (API, UnsafePointer<CChar>?, UnsafePointer<UInt8>?, Int) -> Int32 = {
        api, uri, data, length in
        guard let plugin = InProcessPlugin.from(api), let uri else {
            return Int32(RemoteLaunchUriStatus.unknown.rawValue)
        }
        return launch(plugin, channel: nil, uri, data, length)
    }

    static let launchURIFor: @convention(c) (API, UInt64, UnsafePointer<CChar>?, UnsafePointer<UInt8>?, Int) -> Int32 =
        {
            api, channel, uri, data, length in
            guard let plugin = InProcessPlugin.from(api), let uri else {
                return Int32(RemoteLaunchUriStatus.unknown.rawValue)
            }
            return launch(plugin, channel: channel, uri, data, length)
        }

    static func launch(
        _ plugin: InProcessPlugin, channel: UInt64?, _ uri: UnsafePointer<CChar>, _ data: UnsafePointer<UInt8>?,
        _ length: Int
    ) -> Int32 {
        guard length >= 0, data != nil || length == 0, let text = String(validatingCString: uri) else {
            plugin.logger.warning("launch_uri: the URI is not UTF-8 text, or the data length is invalid")
            return Int32(RemoteLaunchUriStatus.unknown.rawValue)
        }
        let bytes = data.map { Array(UnsafeBufferPointer(start: $0, count: length)) }
        return plugin.whileLaunching {
            plugin.host.launch(fromBackend: plugin, channel: channel, uri: text, data: bytes).status.int32Value
        }
    }

    static let offerFile:
        @convention(c) (API, UInt64, Int32, UnsafePointer<CChar>?, UnsafeMutablePointer<UInt8>?) -> Int32 = {
            api, request, descriptor, name, out in
            guard let plugin = InProcessPlugin.from(api), let out else { return ATRIUM_E_INVALID_ARGUMENT }
            let text = name.flatMap { String(validatingCString: $0) }
            switch plugin.host.offer(descriptor, name: text, for: request, from: plugin) {
            case .success(let id):
                write(id, to: out)
                return ATRIUM_OK
            case .failure(let refusal):
                plugin.logger.notice("offer_file: \(refusal)")
                return refusal.cCode
            }
        }

    static let acceptUpload:
        @convention(c) (API, UInt64, Int64, Int64, UnsafePointer<CChar>?, UnsafeMutablePointer<UInt8>?) -> Int32 = {
            api, request, size, maxSize, name, out in
            guard let plugin = InProcessPlugin.from(api), let out else { return ATRIUM_E_INVALID_ARGUMENT }
            let text = name.flatMap { String(validatingCString: $0) }
            switch plugin.host.accept(size: size, maxSize: maxSize, name: text, for: request, from: plugin) {
            case .success(let id):
                write(id, to: out)
                return ATRIUM_OK
            case .failure(let refusal):
                plugin.logger.notice("accept_upload: \(refusal)")
                return refusal.cCode
            }
        }

    static let uploadDone:
        @convention(c) (API, UInt64, Int32, UnsafePointer<UInt8>?, Int, UnsafePointer<CChar>?) -> Int32 = {
            api, delivery, status, bytes, length, error in
            guard let plugin = InProcessPlugin.from(api), status >= 0, length >= 0, bytes != nil || length == 0 else {
                return ATRIUM_E_INVALID_ARGUMENT
            }
            let message = length > 0 ? ByteBuffer(bytes: UnsafeRawBufferPointer(start: bytes, count: length)) : nil
            return plugin.host.uploadDone(
                delivery, from: plugin, status: AppServiceResponseStatus(rawValue: Int(status)), message: message,
                error: error.map { String(cString: $0) }
            ).cStatus
        }

    /// Writes a transfer's id as the 16 bytes of its UUID.
    static func write(_ id: TransferID, to out: UnsafeMutablePointer<UInt8>) {
        withUnsafeBytes(of: id.uuid.uuid) { bytes in
            for index in 0..<16 { out[index] = bytes[index] }
        }
    }

    static let log: @convention(c) (API, Int32, UnsafePointer<CChar>?) -> Void = { api, level, message in
        guard let plugin = InProcessPlugin.from(api), let message else { return }
        let levels: [Logger.Level] = [.trace, .debug, .info, .notice, .warning, .error]
        let logLevel = levels.indices.contains(Int(level)) ? levels[Int(level)] : .error
        // A plugin may log what a client sent it: escaped and cut like any untrusted text.
        plugin.logger.log(level: logLevel, "\(untrusted(String(cString: message), limit: 4096))")
    }

    // MARK: Reading messages

    static func message(_ pointer: OpaquePointer?) -> ParsedMessage? {
        pointer.map { Unmanaged<ParsedMessage>.fromOpaque(UnsafeRawPointer($0)).takeUnretainedValue() }
    }

    static let messageParse: @convention(c) (API, UnsafePointer<UInt8>?, Int) -> OpaquePointer? = { _, bytes, length in
        guard bytes != nil || length == 0, length >= 0,
            let set = try? ValueSet(cbor: UnsafeRawBufferPointer(start: bytes, count: length))
        else { return nil }
        return OpaquePointer(Unmanaged.passRetained(ParsedMessage(set)).toOpaque())
    }

    static let messageFree: @convention(c) (API, OpaquePointer?) -> Void = { _, pointer in
        guard let pointer else { return }
        Unmanaged<ParsedMessage>.fromOpaque(UnsafeRawPointer(pointer)).release()
    }

    static let messageCount: @convention(c) (API, OpaquePointer?) -> Int = { _, pointer in
        message(pointer)?.count ?? 0
    }

    static let messageKeyAt: @convention(c) (API, OpaquePointer?, Int) -> UnsafePointer<CChar>? = { _, pointer, index in
        message(pointer)?.key(at: index)
    }

    static let messageKind: @convention(c) (API, OpaquePointer?, UnsafePointer<CChar>?) -> Int32 = { _, pointer, key in
        guard let key, let value = message(pointer)?.value(String(cString: key)) else { return ATRIUM_KIND_NONE }
        return value.cKind
    }

    /// Looks `key` up and hands its value to `read`, which returns ATRIUM_OK or WRONG_KIND.
    static func get(
        _ pointer: OpaquePointer?, _ key: UnsafePointer<CChar>?, _ read: (ParsedMessage, String, Value) -> Int32
    ) -> Int32 {
        guard let parsed = message(pointer), let key else { return ATRIUM_E_INVALID_ARGUMENT }
        let name = String(cString: key)
        guard let value = parsed.value(name) else { return ATRIUM_E_NOT_FOUND }
        return read(parsed, name, value)
    }

    static let getString:
        @convention(c) (
            API, OpaquePointer?, UnsafePointer<CChar>?, UnsafeMutablePointer<UnsafePointer<CChar>?>?,
            UnsafeMutablePointer<Int>?
        ) -> Int32 = {
            _, pointer, key, out, length in
            get(pointer, key) { parsed, name, value in
                guard case .string(let text) = value else { return ATRIUM_E_WRONG_KIND }
                out?.pointee = parsed.cString(name, text)
                length?.pointee = text.utf8.count
                return ATRIUM_OK
            }
        }

    /// Reads a scalar under `key` through `extract` (nil for another kind): ATRIUM_OK with
    /// `*out` set, ATRIUM_E_NOT_FOUND or ATRIUM_E_WRONG_KIND.
    static func getScalar<T>(
        _ pointer: OpaquePointer?,
        _ key: UnsafePointer<CChar>?,
        _ out: UnsafeMutablePointer<T>?,
        _ extract: (Value) -> T?
    ) -> Int32 {
        get(pointer, key) { _, _, value in
            guard let scalar = extract(value) else { return ATRIUM_E_WRONG_KIND }
            out?.pointee = scalar
            return ATRIUM_OK
        }
    }

    static let getInt:
        @convention(c) (API, OpaquePointer?, UnsafePointer<CChar>?, UnsafeMutablePointer<Int64>?) -> Int32 = {
            _, pointer, key, out in getScalar(pointer, key, out) { $0.int }
        }

    static let getDouble:
        @convention(c) (API, OpaquePointer?, UnsafePointer<CChar>?, UnsafeMutablePointer<Double>?) -> Int32 = {
            _, pointer, key, out in getScalar(pointer, key, out) { $0.double }
        }

    static let getBool:
        @convention(c) (API, OpaquePointer?, UnsafePointer<CChar>?, UnsafeMutablePointer<Int32>?) -> Int32 = {
            _, pointer, key, out in getScalar(pointer, key, out) { $0.bool.map { $0 ? 1 : 0 } }
        }

    static let getDate:
        @convention(c) (API, OpaquePointer?, UnsafePointer<CChar>?, UnsafeMutablePointer<Double>?) -> Int32 = {
            _, pointer, key, out in getScalar(pointer, key, out) { $0.timestamp?.secondsSince1970 }
        }

    static let getUUID:
        @convention(c) (API, OpaquePointer?, UnsafePointer<CChar>?, UnsafeMutablePointer<UInt8>?) -> Int32 = {
            _, pointer, key, out in
            get(pointer, key) { _, _, value in
                guard case .uuid(let uuid) = value else { return ATRIUM_E_WRONG_KIND }
                if let out {
                    withUnsafeBytes(of: uuid.uuid) {
                        UnsafeMutableRawPointer(out).copyMemory(from: $0.baseAddress!, byteCount: 16)
                    }
                }
                return ATRIUM_OK
            }
        }

    static let getBytes:
        @convention(c) (
            API, OpaquePointer?, UnsafePointer<CChar>?, UnsafeMutablePointer<UnsafePointer<UInt8>?>?,
            UnsafeMutablePointer<Int>?
        ) -> Int32 = {
            _, pointer, key, out, length in
            get(pointer, key) { parsed, name, value in
                guard case .bytes(let bytes) = value else { return ATRIUM_E_WRONG_KIND }
                out?.pointee = parsed.bytes(name, bytes)
                length?.pointee = bytes.count
                return ATRIUM_OK
            }
        }

    static let getMap:
        @convention(c) (
            API, OpaquePointer?, UnsafePointer<CChar>?, UnsafeMutablePointer<UnsafePointer<UInt8>?>?,
            UnsafeMutablePointer<Int>?
        ) -> Int32 = {
            _, pointer, key, out, length in
            get(pointer, key) { parsed, name, value in
                guard case .map(let set) = value else { return ATRIUM_E_WRONG_KIND }
                let encoded = set.cborBytes()
                out?.pointee = parsed.bytes("\u{0}map:" + name, encoded)
                length?.pointee = encoded.count
                return ATRIUM_OK
            }
        }

    // MARK: Arrays and nested maps (ABI 1.2)

    /// Looks `key` up and hands the plugin what `nested` makes of its value as a message of
    /// its own (freed with `message_free`); nil from `nested` is another kind.
    static func getNested(
        _ pointer: OpaquePointer?, _ key: UnsafePointer<CChar>?, _ out: UnsafeMutablePointer<OpaquePointer?>?,
        _ nested: (Value) -> ParsedMessage?
    ) -> Int32 {
        get(pointer, key) { _, _, value in
            guard let parsed = nested(value) else { return ATRIUM_E_WRONG_KIND }
            guard let out else { return ATRIUM_E_INVALID_ARGUMENT }
            out.pointee = OpaquePointer(Unmanaged.passRetained(parsed).toOpaque())
            return ATRIUM_OK
        }
    }

    static let getArray:
        @convention(c) (API, OpaquePointer?, UnsafePointer<CChar>?, UnsafeMutablePointer<OpaquePointer?>?) -> Int32 = {
            _, pointer, key, out in getNested(pointer, key, out) { $0.array.map(ParsedMessage.init) }
        }

    static let getMessage:
        @convention(c) (API, OpaquePointer?, UnsafePointer<CChar>?, UnsafeMutablePointer<OpaquePointer?>?) -> Int32 = {
            _, pointer, key, out in getNested(pointer, key, out) { $0.map.map(ParsedMessage.init) }
        }

    // MARK: Building messages

    static func builder(_ pointer: OpaquePointer?) -> MessageBuilder? {
        pointer.map { Unmanaged<MessageBuilder>.fromOpaque(UnsafeRawPointer($0)).takeUnretainedValue() }
    }

    static let builderNew: @convention(c) (API) -> OpaquePointer? = { _ in
        OpaquePointer(Unmanaged.passRetained(MessageBuilder()).toOpaque())
    }

    static let builderFree: @convention(c) (API, OpaquePointer?) -> Void = { _, pointer in
        guard let pointer else { return }
        Unmanaged<MessageBuilder>.fromOpaque(UnsafeRawPointer(pointer)).release()
    }

    static let builderNewArray: @convention(c) (API) -> OpaquePointer? = { _ in
        OpaquePointer(Unmanaged.passRetained(MessageBuilder(array: true)).toOpaque())
    }

    /// Sets `key` (or, on an array builder with `key` NULL, appends) to `value()`, nil for an
    /// argument that is not valid.
    static func put(_ pointer: OpaquePointer?, _ key: UnsafePointer<CChar>?, _ value: () -> Value?) -> Int32 {
        guard let builder = builder(pointer) else { return ATRIUM_E_INVALID_ARGUMENT }
        let name: String?
        if let key {
            guard let valid = String(validatingCString: key) else { return ATRIUM_E_INVALID_ARGUMENT }
            name = valid
        } else {
            name = nil
        }
        guard let value = value() else { return ATRIUM_E_INVALID_ARGUMENT }
        return builder.put(name, value)
    }

    static let putBuilder: @convention(c) (API, OpaquePointer?, UnsafePointer<CChar>?, OpaquePointer?) -> Int32 = {
        _, pointer, key, other in
        // Copied as it is now: putting a builder into itself puts what it held.
        guard let other = builder(other) else { return ATRIUM_E_INVALID_ARGUMENT }
        return put(pointer, key) { other.value }
    }

    static let putString:
        @convention(c) (API, OpaquePointer?, UnsafePointer<CChar>?, UnsafePointer<CChar>?, Int) -> Int32 = {
            _, pointer, key, text, length in
            put(pointer, key) {
                guard let text, length >= 0 else { return nil }
                let bytes = UnsafeRawBufferPointer(start: text, count: length)
                guard let string = String(validating: bytes.bindMemory(to: UInt8.self), as: UTF8.self) else {
                    return nil
                }
                return .string(string)
            }
        }

    static let putInt: @convention(c) (API, OpaquePointer?, UnsafePointer<CChar>?, Int64) -> Int32 = {
        _, pointer, key, value in
        put(pointer, key) { .int(value) }
    }

    static let putDouble: @convention(c) (API, OpaquePointer?, UnsafePointer<CChar>?, Double) -> Int32 = {
        _, pointer, key, value in
        put(pointer, key) { .double(value) }
    }

    static let putBool: @convention(c) (API, OpaquePointer?, UnsafePointer<CChar>?, Int32) -> Int32 = {
        _, pointer, key, value in
        put(pointer, key) { .bool(value != 0) }
    }

    static let putDate: @convention(c) (API, OpaquePointer?, UnsafePointer<CChar>?, Double) -> Int32 = {
        _, pointer, key, value in
        put(pointer, key) { .date(Timestamp(secondsSince1970: value)) }
    }

    static let putUUID: @convention(c) (API, OpaquePointer?, UnsafePointer<CChar>?, UnsafePointer<UInt8>?) -> Int32 = {
        _, pointer, key, value in
        put(pointer, key) {
            guard let value else { return nil }
            return .uuid(UUID(uuid: UnsafeRawPointer(value).loadUnaligned(as: uuid_t.self)))
        }
    }

    static let putBytes:
        @convention(c) (API, OpaquePointer?, UnsafePointer<CChar>?, UnsafePointer<UInt8>?, Int) -> Int32 = {
            _, pointer, key, bytes, length in
            put(pointer, key) {
                guard bytes != nil || length == 0, length >= 0 else { return nil }
                return .bytes(Array(UnsafeBufferPointer(start: bytes, count: length)))
            }
        }

    static let putMap:
        @convention(c) (API, OpaquePointer?, UnsafePointer<CChar>?, UnsafePointer<UInt8>?, Int) -> Int32 = {
            _, pointer, key, bytes, length in
            guard bytes != nil || length == 0, length >= 0 else { return ATRIUM_E_INVALID_ARGUMENT }
            guard let set = try? ValueSet(cbor: UnsafeRawBufferPointer(start: bytes, count: length)) else {
                return ATRIUM_E_NOT_A_VALUESET
            }
            return put(pointer, key) { .map(set) }
        }

    static let builderBytes:
        @convention(c) (API, OpaquePointer?, UnsafeMutablePointer<UnsafePointer<UInt8>?>?, UnsafeMutablePointer<Int>?)
            -> Int32 = {
                _, pointer, out, length in
                guard let builder = builder(pointer), let encoded = builder.encoded() else {
                    return ATRIUM_E_INVALID_ARGUMENT
                }
                out?.pointee = UnsafePointer(encoded.baseAddress?.assumingMemoryBound(to: UInt8.self))
                length?.pointee = encoded.count
                return ATRIUM_OK
            }
}

extension BackendCallError {
    /// The ATRIUM_E_ code a plugin gets for it.
    var cCode: Int32 {
        switch self {
        case .unknownRequest: ATRIUM_E_UNKNOWN_REQUEST
        case .unknownChannel: ATRIUM_E_UNKNOWN_CHANNEL
        case .notAValueSet: ATRIUM_E_NOT_A_VALUESET
        case .tooLarge: ATRIUM_E_TOO_LARGE
        case .shuttingDown: ATRIUM_E_SHUTTING_DOWN
        case .busy: ATRIUM_E_BUSY
        }
    }
}

extension Result<Void, BackendCallError> {
    /// ATRIUM_OK, or the code of the refusal.
    var cStatus: Int32 {
        switch self {
        case .success: ATRIUM_OK
        case .failure(let refusal): refusal.cCode
        }
    }
}

extension Value {
    /// The ATRIUM_KIND_ of this value.
    var cKind: Int32 {
        switch self {
        case .string: ATRIUM_KIND_STRING
        case .int: ATRIUM_KIND_INT
        case .double: ATRIUM_KIND_DOUBLE
        case .bool: ATRIUM_KIND_BOOL
        case .date: ATRIUM_KIND_DATE
        case .uuid: ATRIUM_KIND_UUID
        case .bytes: ATRIUM_KIND_BYTES
        case .array: ATRIUM_KIND_ARRAY
        case .map: ATRIUM_KIND_MAP
        }
    }
}

/// An `atrium_message`: a parsed ValueSet (or, from `message_get_array`, an array read as a
/// message whose keys are its indices), plus the C copies of the strings and bytes handed out,
/// which live as long as the message. Used by one plugin thread at a time.
final class ParsedMessage {
    private enum Contents {
        case map(ValueSet)
        case array(ValueArray)
    }

    private let contents: Contents
    /// The C copies of the keys handed out, by index: made on demand, so that reading an
    /// array of many elements as a message costs nothing per element up front.
    private var keys: [Int: UnsafeMutablePointer<CChar>] = [:]
    private var owned: [String: UnsafeMutableRawPointer] = [:]
    let count: Int

    init(_ set: ValueSet) {
        contents = .map(set)
        count = set.count
    }

    init(_ array: ValueArray) {
        contents = .array(array)
        count = array.count
    }

    /// The value under `name`: a map's key, or an array's index in decimal ("0", "17"; no
    /// sign, no leading zero), found without building a map of the indices.
    func value(_ name: String) -> Value? {
        switch contents {
        case .map(let set):
            return set[name]
        case .array(let array):
            guard name.utf8.count <= 19, name == "0" || name.utf8.first != UInt8(ascii: "0"),
                name.utf8.allSatisfy({ (UInt8(ascii: "0")...UInt8(ascii: "9")).contains($0) }),
                let index = Int(name), index < array.count
            else { return nil }
            return array[index]
        }
    }

    func key(at index: Int) -> UnsafePointer<CChar>? {
        guard index >= 0, index < count else { return nil }
        if let made = keys[index] { return UnsafePointer(made) }
        let made: UnsafeMutablePointer<CChar>?
        switch contents {
        case .map(let set): made = strdup(set.keys[index])
        case .array: made = strdup(String(index))
        }
        keys[index] = made
        return UnsafePointer(made)
    }

    /// A NUL-terminated copy of all of `text`'s UTF-8 bytes, NULs inside it included, so that
    /// the length the table reports is the length of the block (strdup would stop at the
    /// first NUL and leave a plugin that copies `out_length` bytes reading past the block).
    func cString(_ name: String, _ text: String) -> UnsafePointer<CChar> {
        if let existing = owned[name] { return UnsafePointer(existing.assumingMemoryBound(to: CChar.self)) }
        let utf8 = text.utf8CString
        let copy = malloc(utf8.count)!
        utf8.withUnsafeBytes { copy.copyMemory(from: $0.baseAddress!, byteCount: $0.count) }
        owned[name] = copy
        return UnsafePointer(copy.assumingMemoryBound(to: CChar.self))
    }

    func bytes(_ name: String, _ bytes: [UInt8]) -> UnsafePointer<UInt8> {
        if let existing = owned[name] { return UnsafePointer(existing.assumingMemoryBound(to: UInt8.self)) }
        let copy = malloc(max(bytes.count, 1))!
        bytes.withUnsafeBytes { if let base = $0.baseAddress { copy.copyMemory(from: base, byteCount: $0.count) } }
        owned[name] = copy
        return UnsafePointer(copy.assumingMemoryBound(to: UInt8.self))
    }

    deinit {
        for (_, key) in keys { free(key) }
        for (_, pointer) in owned { free(pointer) }
    }
}

/// An `atrium_builder`: a ValueSet under construction (or, from `builder_new_array`, an
/// array), and its latest encoding.
final class MessageBuilder {
    private var set = ValueSet()
    /// An array builder's elements (all of one kind, none an array), or nil for a map.
    private var elements: [Value]?
    private var encoding: UnsafeMutableRawBufferPointer?

    init(array: Bool = false) {
        elements = array ? [] : nil
    }

    /// Sets `key`, or appends to an array (with `key` nil): ATRIUM_OK, or the code of the
    /// refusal.
    func put(_ key: String?, _ value: Value) -> Int32 {
        if let key {
            guard elements == nil else { return ATRIUM_E_INVALID_ARGUMENT }  // a key for an array
            set[key] = value
        } else {
            guard elements != nil else { return ATRIUM_E_INVALID_ARGUMENT }  // no key for a map
            // One kind per array (the first element's), and no arrays in it.
            guard value.kind != .array, value.kind == elements!.first?.kind ?? value.kind else {
                return ATRIUM_E_WRONG_KIND
            }
            elements!.append(value)  // in place: `elements` holds the only reference
        }
        release()
        return ATRIUM_OK
    }

    /// What it holds now, as a value: a map or an array.
    var value: Value {
        guard let elements else { return .map(set) }
        // Checked at each append: of one kind, no arrays.
        return .array((try? ValueArray(elements)) ?? ValueArray())
    }

    /// The message's encoding; nil for an array builder (a message is a map).
    func encoded() -> UnsafeRawBufferPointer? {
        guard elements == nil else { return nil }
        if let encoding { return UnsafeRawBufferPointer(encoding) }
        let bytes = set.cborBytes()
        let memory = UnsafeMutableRawBufferPointer.allocate(byteCount: bytes.count, alignment: 1)
        bytes.withUnsafeBytes { memory.copyMemory(from: $0) }
        encoding = memory
        return UnsafeRawBufferPointer(memory)
    }

    private func release() {
        encoding?.deallocate()
        encoding = nil
    }

    deinit { release() }
}

extension TransferService.OfferRefusal {
    /// The C ABI's code for the refusal.
    var cCode: Int32 {
        switch self {
        case .unknownRequest: ATRIUM_E_UNKNOWN_REQUEST
        case .file, .invalid: ATRIUM_E_INVALID_ARGUMENT
        case .limit, .storage: ATRIUM_E_LIMIT_EXCEEDED
        case .unavailable: ATRIUM_E_UNAVAILABLE
        }
    }
}
