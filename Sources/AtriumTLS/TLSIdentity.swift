import Crypto
public import Foundation
public import NIOSSL
import X509

#if canImport(Glibc)
    import Glibc
#endif

/// Who a host, or a client, is: a long-lived P-256 key pair and a self-signed certificate,
/// made at first start and kept in a folder of the owner's, both files mode 0600
/// (CONTRACT section 7). Trust comes from pairing, not from a certificate authority: the
/// certificate only carries the key, and its ``fingerprint`` is the identity.
public struct TLSIdentity: Sendable {
    public let certificate: NIOSSLCertificate
    public let privateKey: NIOSSLPrivateKey
    /// The identity: the SHA-256 of the certificate's SubjectPublicKeyInfo, lowercase hex.
    public let fingerprint: String
    /// Where the key is kept.
    public let keyFile: URL

    /// Where identities are kept unless told otherwise, the host's and a client's alike:
    /// `$XDG_STATE_HOME/atrium`, or `~/.local/state/atrium` without it.
    public static func defaultStateFolder() -> URL {
        if let state = ProcessInfo.processInfo.environment["XDG_STATE_HOME"], state.hasPrefix("/") {
            return URL(fileURLWithPath: state).appendingPathComponent("atrium")
        }
        return FileManager.default.homeDirectoryForCurrentUser.appendingPathComponent(".local/state/atrium")
    }

    /// The identity kept in `folder` as `NAME-key.pem` and `NAME-cert.pem`, made there
    /// (with the folder, mode 0700) when it does not exist yet. `commonName` names the
    /// certificate's subject; it is informative only. A certificate that is missing or does
    /// not belong to the key is made again from the key: the identity is the key's.
    ///
    /// - Throws: ``TLSIdentityError`` when the folder or the key may be changed or read by
    ///   other users (as ssh does, they are then not used), or cannot be read or written.
    public static func loadOrCreate(in folder: URL, name: String, commonName: String) throws(TLSIdentityError)
        -> TLSIdentity
    {
        let keyFile = folder.appendingPathComponent("\(name)-key.pem")
        let certificateFile = folder.appendingPathComponent("\(name)-cert.pem")
        try prepareFolder(folder)
        if access(keyFile.path, F_OK) != 0 { try createKey(keyFile) }
        let keyText = try readPrivate(keyFile)
        let key: P256.Signing.PrivateKey
        let privateKey: NIOSSLPrivateKey
        do {
            key = try P256.Signing.PrivateKey(pemRepresentation: keyText)
            privateKey = try NIOSSLPrivateKey(bytes: Array(keyText.utf8), format: .pem)
        } catch {
            throw TLSIdentityError("\(keyFile.path) is not a P-256 private key in PEM: \(error)")
        }
        let fingerprint = Self.fingerprint(spki: Array(key.publicKey.derRepresentation))
        if let text = try? readPrivate(certificateFile, mustBePrivate: false),
            let certificate = try? NIOSSLCertificate(bytes: Array(text.utf8), format: .pem),
            (try? Self.fingerprint(of: certificate)) == fingerprint
        {
            return TLSIdentity(
                certificate: certificate, privateKey: privateKey, fingerprint: fingerprint, keyFile: keyFile)
        }
        let pem = try makeCertificate(for: key, commonName: commonName)
        try writeNew(certificateFile, pem)
        do {
            let certificate = try NIOSSLCertificate(bytes: Array(pem.utf8), format: .pem)
            return TLSIdentity(
                certificate: certificate, privateKey: privateKey, fingerprint: fingerprint, keyFile: keyFile)
        } catch {
            throw TLSIdentityError("the certificate made for \(keyFile.path) does not load: \(error)")
        }
    }

    /// Makes `folder` (mode 0700) if it is missing, and checks that it is a real folder that
    /// belongs to this user (or root) and that no one else may write to.
    ///
    /// With `owner`, the folder may belong to that user instead (root managing a service's
    /// state folder: ``TokenStore``).
    public static func prepareFolder(_ folder: URL, owner: uid_t? = nil) throws(TLSIdentityError) {
        let parent = folder.deletingLastPathComponent()
        do {
            try FileManager.default.createDirectory(
                at: parent, withIntermediateDirectories: true, attributes: [.posixPermissions: 0o700])
        } catch {
            throw TLSIdentityError("cannot make the folder \(parent.path): \(error)")
        }
        if mkdir(folder.path, 0o700) != 0 && errno != EEXIST {
            throw TLSIdentityError("cannot make the folder \(folder.path): \(String(cString: strerror(errno)))")
        }
        var status = stat()
        guard lstat(folder.path, &status) == 0 else {
            throw TLSIdentityError("cannot read \(folder.path): \(String(cString: strerror(errno)))")
        }
        guard status.st_mode & S_IFMT == S_IFDIR else {
            throw TLSIdentityError("\(folder.path) is not a folder (a link or a file is not used for an identity)")
        }
        guard status.st_uid == geteuid() || status.st_uid == 0 || status.st_uid == owner else {
            throw TLSIdentityError(
                "\(folder.path) belongs to uid \(status.st_uid), not to this user (uid \(geteuid())): another user could change the identity in it"
            )
        }
        guard status.st_mode & 0o022 == 0 else {
            throw TLSIdentityError(
                "\(folder.path) may be written by other users (mode \(String(status.st_mode & 0o777, radix: 8))): run chmod 700 on it"
            )
        }
    }

    /// Reads a small regular file without following a link, checked on the open file: owned
    /// by this user (or `owner`), and (`mustBePrivate`) readable by no one else.
    public static func readPrivate(_ file: URL, mustBePrivate: Bool = true, owner: uid_t? = nil)
        throws(TLSIdentityError) -> String
    {
        let descriptor = open(file.path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK)
        guard descriptor >= 0 else {
            throw TLSIdentityError("cannot read \(file.path): \(String(cString: strerror(errno)))")
        }
        defer { close(descriptor) }
        var status = stat()
        guard fstat(descriptor, &status) == 0, status.st_mode & S_IFMT == S_IFREG else {
            throw TLSIdentityError("\(file.path) is not a regular file")
        }
        guard status.st_uid == (owner ?? geteuid()) else {
            throw TLSIdentityError(
                "\(file.path) belongs to uid \(status.st_uid), not to this user (uid \(owner ?? geteuid())): remove it to make a new identity"
            )
        }
        if mustBePrivate && status.st_mode & 0o077 != 0 {
            throw TLSIdentityError(
                "\(file.path) may be read by other users (mode \(String(status.st_mode & 0o777, radix: 8))): run chmod 600 on it, or remove it to make a new identity"
            )
        }
        guard status.st_size <= 64 << 10 else {
            throw TLSIdentityError("\(file.path) is too large for a key or certificate")
        }
        var bytes = [UInt8](repeating: 0, count: Int(status.st_size))
        let count = bytes.withUnsafeMutableBytes { read(descriptor, $0.baseAddress, $0.count) }
        guard count == bytes.count else { throw TLSIdentityError("cannot read all of \(file.path)") }
        return String(decoding: bytes, as: UTF8.self)
    }

    /// Makes a new key at `file`, unless another process made one first (then that one is used).
    static func createKey(_ file: URL) throws(TLSIdentityError) {
        let key = P256.Signing.PrivateKey()
        let temporary = file.path + ".new-\(getpid())"
        unlink(temporary)
        try writeFile(temporary, key.pemRepresentation + "\n")
        // link() never replaces: of two processes starting at once, the first key stays.
        let linked = link(temporary, file.path) == 0 || errno == EEXIST
        let reason = String(cString: strerror(errno))
        unlink(temporary)
        guard linked else { throw TLSIdentityError("cannot write \(file.path): \(reason)") }
    }

    /// A self-signed certificate for `key`, in PEM.
    static func makeCertificate(for key: P256.Signing.PrivateKey, commonName: String) throws(TLSIdentityError)
        -> String
    {
        do {
            let signingKey = Certificate.PrivateKey(key)
            let subject = try DistinguishedName { CommonName(commonName) }
            let now = Date()
            let certificate = try Certificate(
                version: .v3,
                serialNumber: Certificate.SerialNumber(),
                publicKey: signingKey.publicKey,
                notValidBefore: now.addingTimeInterval(-3600),
                // RFC 5280 4.1.2.5: a certificate with no well-defined expiry.
                notValidAfter: Date(timeIntervalSince1970: 253_402_300_799),
                issuer: subject,
                subject: subject,
                signatureAlgorithm: .ecdsaWithSHA256,
                extensions: try Certificate.Extensions {
                    Critical(BasicConstraints.notCertificateAuthority)
                    Critical(KeyUsage(digitalSignature: true))
                    try ExtendedKeyUsage([.serverAuth, .clientAuth])
                },
                issuerPrivateKey: signingKey
            )
            return try certificate.serializeAsPEM().pemString + "\n"
        } catch {
            throw TLSIdentityError("cannot make a certificate: \(error)")
        }
    }

    /// Writes `text` to a new file of mode 0600, through a temporary name, so that a reader
    /// never sees half a file and no one else could ever read it. An existing file of that
    /// name is replaced.
    ///
    /// With `owner` (a user and group), the file is given to them before it takes its place.
    public static func writeNew(_ file: URL, _ text: String, owner: (uid_t, gid_t)? = nil) throws(TLSIdentityError) {
        let temporary = file.path + ".new-\(getpid())"
        // One left by a process of the same pid that crashed is stale (the folder is ours).
        unlink(temporary)
        try writeFile(temporary, text)
        if let (user, group) = owner, chown(temporary, user, group) != 0 {
            let reason = String(cString: strerror(errno))
            unlink(temporary)
            throw TLSIdentityError("cannot give \(file.path) to uid \(user): \(reason)")
        }
        guard rename(temporary, file.path) == 0 else {
            let reason = String(cString: strerror(errno))
            unlink(temporary)
            throw TLSIdentityError("cannot write \(file.path): \(reason)")
        }
    }

    /// Writes `text` to the new file `path` (mode 0600, which must not exist yet), synced.
    static func writeFile(_ path: String, _ text: String) throws(TLSIdentityError) {
        let descriptor = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0o600)
        guard descriptor >= 0 else {
            throw TLSIdentityError("cannot write \(path): \(String(cString: strerror(errno)))")
        }
        let bytes = Array(text.utf8)
        let written = bytes.withUnsafeBytes { write(descriptor, $0.baseAddress, $0.count) }
        let synced = fsync(descriptor) == 0
        close(descriptor)
        guard written == bytes.count, synced else {
            unlink(path)
            throw TLSIdentityError("cannot write all of \(path)")
        }
    }

    /// The identity a certificate carries: the SHA-256 of its SubjectPublicKeyInfo, hex.
    public static func fingerprint(of certificate: NIOSSLCertificate) throws(TLSIdentityError) -> String {
        do {
            return fingerprint(spki: try certificate.extractPublicKey().toSPKIBytes())
        } catch {
            throw TLSIdentityError("the certificate's public key cannot be read: \(error)")
        }
    }

    static func fingerprint(spki: [UInt8]) -> String {
        hexString(SHA256.hash(data: spki))
    }
}

/// Why an identity could not be loaded or made, in words for the log.
public struct TLSIdentityError: Error, Sendable, CustomStringConvertible {
    public var description: String
    init(_ description: String) { self.description = description }
}
