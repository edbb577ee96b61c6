import AtriumValues
import CAtriumPlugin

/// The app service of a package that declares `functions`: a built-in plugin whose requests
/// are answered by calling the declared function their `Command` names. It goes through the
/// same ``PluginInstance`` machinery as any plugin (its own queue, serial unless the manifest
/// says `"concurrent": true`; timeouts; exactly-once answers).
final class FunctionService {
    let functions: DeclaredFunctions
    /// Set right after the instance is made, before any request.
    unowned(unsafe) var plugin: PluginInstance!

    init(functions: DeclaredFunctions) {
        self.functions = functions
    }

    func handle(request: UInt64, bytes: UnsafeRawBufferPointer) {
        let answer: ValueSet
        do {
            let message = try ValueSet(cbor: bytes)
            answer = try functions.call(message)
        } catch let refusal as DeclaredFunctions.Refusal {
            respond(request, status: .failure, message: [:], error: refusal.description)
            return
        } catch {
            respond(request, status: .failure, message: [:], error: "\(error)")
            return
        }
        respond(request, status: .success, message: answer, error: nil)
    }

    private func respond(_ request: UInt64, status: AppServiceResponseStatus, message: ValueSet, error: String?) {
        let bytes = message.cborBytes()
        _ = bytes.withUnsafeBytes {
            plugin.core.respond(request, from: plugin, status: status, bytes: $0, error: error)
        }
    }

    /// The descriptor every declared-functions package shares: only `request` is set.
    nonisolated(unsafe) static let descriptor: UnsafePointer<atrium_plugin> = {
        let descriptor = UnsafeMutablePointer<atrium_plugin>.allocate(capacity: 1)
        descriptor.initialize(to: atrium_plugin())
        descriptor.pointee.struct_size = UInt32(MemoryLayout<atrium_plugin>.size)
        descriptor.pointee.abi_major = UInt16(ATRIUM_PLUGIN_ABI_MAJOR)
        descriptor.pointee.abi_minor = UInt16(ATRIUM_PLUGIN_ABI_MINOR)
        descriptor.pointee.request = { instance, _, request, bytes, length in
            let service = Unmanaged<FunctionService>.fromOpaque(instance!).takeUnretainedValue()
            service.handle(request: request, bytes: UnsafeRawBufferPointer(start: bytes, count: length))
        }
        return UnsafePointer(descriptor)
    }()
}
