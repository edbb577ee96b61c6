import CAtriumPlugin
import Foundation
import Synchronization

#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

/// Why a plugin library could not be used. The package stays listed and answers `open`
/// with status 2 (AppUnavailable); the reason goes to the log and to `atriumd --check`.
public struct PluginLoadError: Error, Sendable, Hashable, CustomStringConvertible {
    public var reason: String
    public var description: String { reason }
}

/// Finding and opening plugin libraries, and checking their descriptors against the ABI.
enum PluginLibrary {
    /// Where a manifest's `library` may be: beside the manifest, then in each folder of the
    /// search path. An absolute path is taken as it is.
    static func candidates(for library: String, manifestFolder: URL, searchPath: [URL]) -> [URL] {
        if library.hasPrefix("/") { return [URL(fileURLWithPath: library)] }
        return [manifestFolder.appendingPathComponent(library)] + searchPath.map { $0.appendingPathComponent(library) }
    }

    /// Opens a library: the first existing candidate, or, when `loaderSearch` is set and the
    /// name has no '/', whatever the dynamic loader's own search finds (`libz.so.1`).
    /// With `strictModes`, a library found by path must be safe from other users
    /// (``FileTrust``); one the loader finds by name is in the system's library folders.
    static func openHandle(
        _ library: String, manifestFolder: URL, searchPath: [URL], loaderSearch: Bool = false,
        strictModes: Bool = true
    )
        throws(PluginLoadError) -> (path: URL, handle: UnsafeMutableRawPointer, replaced: Bool)
    {
        let (path, byLoader) = try find(
            library, manifestFolder: manifestFolder, searchPath: searchPath, loaderSearch: loaderSearch)
        if strictModes, !byLoader, let problem = FileTrust.problem(file: path.path, what: "plugin library") {
            throw PluginLoadError(reason: problem)
        }
        // RTLD_LOCAL keeps each plugin's symbols (each Swift plugin carries its own copy of
        // the SDK) to itself. The library is never closed: unloading Swift code is unsafe.
        let name = byLoader ? library : path.path
        let before = byLoader ? nil : FileIdentity(path.path)
        guard let handle = dlopen(name, RTLD_NOW | RTLD_LOCAL) else {
            let reason = dlerror().map { String(cString: $0) } ?? "unknown error"
            throw PluginLoadError(reason: "cannot load \(name): \(reason)")
        }
        let after = byLoader ? nil : FileIdentity(path.path)
        let replaced = opened.withLock { opened -> Bool in
            guard !byLoader else { return false }
            if let first = opened[path.path] {
                guard let first, let after else { return false }
                return first != after
            }
            // A file renamed over this one while it loaded leaves it unknown which was loaded:
            // then that is recorded, and nothing is claimed of the path later.
            opened[path.path] = before == after ? after : .some(nil)
            return false
        }
        return (path, handle, replaced)
    }

    /// The file at each path when this process first loaded it (nil: not known). `dlopen` of
    /// a path it has loaded before hands back the copy loaded then, whatever is at that path
    /// now.
    private static let opened = Mutex<[String: FileIdentity?]>([:])

    /// The file this process loaded from `path`, if it loaded one and knows which.
    static func loadedFile(_ path: URL) -> FileIdentity? {
        opened.withLock { $0[path.path] ?? nil }
    }

    /// Which file a path names: its device and inode. A library installed as package
    /// managers do (a new file renamed over the old), or by `install` (which removes the old
    /// first), is a new file; `touch` leaves it the same. (Copying over a loaded library in place, with `cp`, changes the
    /// code under a process that runs it, which may crash it: never do that.)
    struct FileIdentity: Equatable, Sendable {
        var device: UInt64
        var inode: UInt64

        init?(_ path: String) {
            var status = stat()
            guard stat(path, &status) == 0 else { return nil }
            device = UInt64(status.st_dev)
            inode = UInt64(status.st_ino)
        }
    }

    /// Why a library that was replaced after the host loaded it still runs its old code;
    /// `plugin`: a plugin's library (which a worker process could run), not declared functions'.
    static func replacedNote(_ path: URL, plugin: Bool = true) -> String {
        "\(path.path) was replaced after this host first loaded it, but loading a path again gives a process the copy it loaded first: this is still the old code; restart atriumd to load the new one"
            + (plugin
                ? " (a package with \"isolation\": \"process\" loads its library afresh in each new worker, and a reload restarts it when its library was replaced)"
                : "")
    }

    /// Where `library` is: the first existing candidate, or, when `loaderSearch` is set and
    /// the name has no '/', the bare name for the dynamic loader to find (`libz.so.1`).
    static func find(_ library: String, manifestFolder: URL, searchPath: [URL], loaderSearch: Bool)
        throws(PluginLoadError) -> (path: URL, byLoader: Bool)
    {
        let candidates = candidates(for: library, manifestFolder: manifestFolder, searchPath: searchPath)
        if let found = candidates.first(where: { FileManager.default.fileExists(atPath: $0.path) }) {
            return (found, false)
        }
        guard loaderSearch && !library.contains("/") else {
            let tried = candidates.map(\.path).joined(separator: ", ")
            throw PluginLoadError(reason: "library \(library) not found (looked at \(tried))")
        }
        return (URL(fileURLWithPath: library), true)
    }

    /// Opens the first existing candidate and returns its checked descriptor.
    static func open(_ library: String, manifestFolder: URL, searchPath: [URL], strictModes: Bool = true)
        throws(PluginLoadError) -> (path: URL, descriptor: UnsafePointer<atrium_plugin>, replaced: Bool)
    {
        let (path, handle, replaced) = try openHandle(
            library, manifestFolder: manifestFolder, searchPath: searchPath, strictModes: strictModes)
        do {
            return (path, try descriptor(handle, path: path, diagnose: !replaced), replaced)
        } catch {
            guard replaced else { throw error }
            throw PluginLoadError(reason: "\(error.reason); \(replacedNote(path))")
        }
    }

    /// The checked descriptor of a loaded library.
    /// `diagnose`: read the file's symbol tables for why the entry point is missing (not
    /// when the file on disk is no longer the one loaded).
    private static func descriptor(_ handle: UnsafeMutableRawPointer, path: URL, diagnose: Bool)
        throws(PluginLoadError) -> UnsafePointer<atrium_plugin>
    {
        guard let symbol = dlsym(handle, ATRIUM_PLUGIN_ENTRY_SYMBOL) else {
            // Its symbol tables may say why: a C++ or Swift name, hidden, another ABI's.
            if diagnose, let found = EntrySymbol.diagnose(library: path.path) {
                throw PluginLoadError(reason: found.reason(file: path.lastPathComponent))
            }
            throw PluginLoadError(
                reason:
                    "\(path.lastPathComponent) does not export \(ATRIUM_PLUGIN_ENTRY_SYMBOL): it is not an Atrium plugin, or its entry point lacks C linkage and default visibility (ATRIUM_PLUGIN_EXPORT from atrium_plugin.h in C and C++, @_cdecl in Swift)"
            )
        }
        let entry = unsafeBitCast(symbol, to: atrium_plugin_entry_fn.self)
        guard let returned = entry() else {
            throw PluginLoadError(reason: "\(ATRIUM_PLUGIN_ENTRY_SYMBOL) of \(path.lastPathComponent) returned NULL")
        }
        let descriptor = copy(returned)
        do {
            try check(descriptor, file: path.lastPathComponent)
        } catch {
            descriptor.deallocate()
            throw error
        }
        return UnsafePointer(descriptor)
    }

    /// The host's own copy of a plugin's descriptor: the bytes the plugin says it has
    /// (`struct_size`, never more than this header's struct), the rest zero, so that a field
    /// an older plugin lacks reads as NULL and nothing past the plugin's struct is ever read.
    static func copy(_ descriptor: UnsafePointer<atrium_plugin>) -> UnsafeMutablePointer<atrium_plugin> {
        let size = Int(UnsafeRawPointer(descriptor).loadUnaligned(as: UInt32.self))
        let copy = UnsafeMutablePointer<atrium_plugin>.allocate(capacity: 1)
        copy.initialize(to: atrium_plugin())
        UnsafeMutableRawPointer(copy).copyMemory(
            from: descriptor, byteCount: min(max(size, MemoryLayout<UInt32>.size), MemoryLayout<atrium_plugin>.size))
        return copy
    }

    /// The smallest descriptor this host can use: everything up to `create`.
    static let minimumDescriptorSize =
        MemoryLayout<atrium_plugin>.offset(of: \atrium_plugin.create)!
        + MemoryLayout<UnsafeRawPointer>.size

    static func check(_ descriptor: UnsafePointer<atrium_plugin>, file: String) throws(PluginLoadError) {
        let plugin = descriptor.pointee
        guard plugin.abi_major == UInt16(ATRIUM_PLUGIN_ABI_MAJOR) else {
            throw PluginLoadError(
                reason:
                    "\(file) was built for plugin ABI \(plugin.abi_major).\(plugin.abi_minor); this host speaks ABI \(ATRIUM_PLUGIN_ABI_MAJOR).\(ATRIUM_PLUGIN_ABI_MINOR)"
            )
        }
        guard plugin.abi_minor <= UInt16(ATRIUM_PLUGIN_ABI_MINOR) else {
            throw PluginLoadError(
                reason:
                    "\(file) needs plugin ABI \(plugin.abi_major).\(plugin.abi_minor), newer than this host's \(ATRIUM_PLUGIN_ABI_MAJOR).\(ATRIUM_PLUGIN_ABI_MINOR): update atriumd"
            )
        }
        guard Int(plugin.struct_size) >= minimumDescriptorSize else {
            throw PluginLoadError(
                reason: "\(file)'s descriptor is \(plugin.struct_size) bytes, too small to hold create()")
        }
        guard plugin.create != nil else {
            throw PluginLoadError(reason: "\(file)'s descriptor has no create() callback")
        }
    }
}

extension UnsafePointer where Pointee == atrium_plugin {
    /// Whether the plugin's descriptor (which may be older than this header) has `field`.
    func has<Field>(_ field: KeyPath<atrium_plugin, Field>) -> Bool {
        guard let offset = MemoryLayout<atrium_plugin>.offset(of: field) else { return false }
        return Int(pointee.struct_size) >= offset + MemoryLayout<Field>.size
    }
}
