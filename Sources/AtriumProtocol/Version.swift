/// Atrium's release version: what `--version` prints, `host.status` reports and
/// `atrium status` shows. The protocol's own version is `atriumProtocolVersion`; this one
/// moves with every release of the host and tools.
public enum AtriumVersion {
    public static let current = "0.9.0"
}
