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

    /// The identity kept in `folder` as `NAME-key.pem` and `NAME-cert.pem`, made there
    /// (with the folder, mode 0700) when it does not exist yet. `commonName` names the
    /// certificate's subject; it is informative only.
    ///
    /// - Throws: ``TLSIdentityError`` when the files cannot be read or written, when the key
    ///   may be read by other users (as ssh does, it is then not used), or when the
    ///   certificate does not belong to the key.
    public static func loadOrCreate(in folder: URL, name: String, commonName: String) throws(TLSIdentityError)
        -> TLSIdentity
    {
        let keyFile = folder.appendingPathComponent("\(name)-key.pem")
        let certificateFile = folder.appendingPathComponent("\(name)-cert.pem")
        let manager = FileManager.default
        if !manager.fileExists(atPath: keyFile.path) {
            guard !manager.fileExists(atPath: certificateFile.path) else {
                throw TLSIdentityError(
                    "\(certificateFile.path) exists without its key \(keyFile.path): move the certificate away to make a new identity"
                )
            }
            try create(keyFile: keyFile, certificateFile: certificateFile, commonName: commonName)
        }
        return try load(keyFile: keyFile, certificateFile: certificateFile)
    }

    static func load(keyFile: URL, certificateFile: URL) throws(TLSIdentityError) -> TLSIdentity {
        var status = stat()
        guard stat(keyFile.path, &status) == 0 else {
            throw TLSIdentityError("cannot read \(keyFile.path): \(String(cString: strerror(errno)))")
        }
        guard status.st_mode & 0o077 == 0 else {
            throw TLSIdentityError(
                "\(keyFile.path) may be read by other users (mode \(String(status.st_mode & 0o777, radix: 8))): run chmod 600 on it, or remove it to make a new identity"
            )
        }
        let keyText: String
        let certificateText: String
        do {
            keyText = try String(contentsOf: keyFile, encoding: .utf8)
            certificateText = try String(contentsOf: certificateFile, encoding: .utf8)
        } catch {
            throw TLSIdentityError("cannot read the identity in \(keyFile.deletingLastPathComponent().path): \(error)")
        }
        let key: P256.Signing.PrivateKey
        let certificate: NIOSSLCertificate
        let privateKey: NIOSSLPrivateKey
        do {
            key = try P256.Signing.PrivateKey(pemRepresentation: keyText)
            privateKey = try NIOSSLPrivateKey(bytes: Array(keyText.utf8), format: .pem)
        } catch {
            throw TLSIdentityError("\(keyFile.path) is not a P-256 private key in PEM: \(error)")
        }
        do {
            certificate = try NIOSSLCertificate(bytes: Array(certificateText.utf8), format: .pem)
        } catch {
            throw TLSIdentityError("\(certificateFile.path) is not a certificate in PEM: \(error)")
        }
        let fingerprint = try Self.fingerprint(of: certificate)
        guard fingerprint == Self.fingerprint(spki: Array(key.publicKey.derRepresentation)) else {
            throw TLSIdentityError(
                "\(certificateFile.path) does not belong to the key \(keyFile.path): remove both to make a new identity"
            )
        }
        return TLSIdentity(certificate: certificate, privateKey: privateKey, fingerprint: fingerprint, keyFile: keyFile)
    }

    static func create(keyFile: URL, certificateFile: URL, commonName: String) throws(TLSIdentityError) {
        let folder = keyFile.deletingLastPathComponent()
        do {
            try FileManager.default.createDirectory(
                at: folder, withIntermediateDirectories: true, attributes: [.posixPermissions: 0o700])
        } catch {
            throw TLSIdentityError("cannot make the folder \(folder.path) for the identity: \(error)")
        }
        let key = P256.Signing.PrivateKey()
        let certificatePEM: String
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
            certificatePEM = try certificate.serializeAsPEM().pemString
        } catch {
            throw TLSIdentityError("cannot make a certificate: \(error)")
        }
        // The key first, so that a certificate never exists without it.
        try writeNew(keyFile, key.pemRepresentation + "\n")
        try writeNew(certificateFile, certificatePEM + "\n")
    }

    /// Writes `text` to a new file of mode 0600, through a temporary name, so that a reader
    /// never sees half a file and no one else could ever read it.
    static func writeNew(_ file: URL, _ text: String) throws(TLSIdentityError) {
        let temporary = file.path + ".new-\(getpid())"
        let descriptor = open(temporary, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0o600)
        guard descriptor >= 0 else {
            throw TLSIdentityError("cannot write \(temporary): \(String(cString: strerror(errno)))")
        }
        let bytes = Array(text.utf8)
        let written = bytes.withUnsafeBytes { write(descriptor, $0.baseAddress, $0.count) }
        let synced = fsync(descriptor) == 0
        close(descriptor)
        guard written == bytes.count, synced, rename(temporary, file.path) == 0 else {
            let reason = String(cString: strerror(errno))
            unlink(temporary)
            throw TLSIdentityError("cannot write \(file.path): \(reason)")
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
        SHA256.hash(data: spki).map { byte in
            let hex = String(byte, radix: 16)
            return byte < 16 ? "0" + hex : hex
        }.joined()
    }
}

/// Why an identity could not be loaded or made, in words for the log.
public struct TLSIdentityError: Error, Sendable, CustomStringConvertible {
    public var description: String
    init(_ description: String) { self.description = description }
}
