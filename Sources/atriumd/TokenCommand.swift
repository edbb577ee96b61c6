import ArgumentParser
import AtriumHost
import AtriumTLS
import Foundation

/// `atriumd token`: tokens for scripts and servers, kept hashed in the host's state folder.
struct TokenCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "token",
        abstract: "Make, list and revoke tokens for scripts and servers.",
        discussion: """
            A client that presents a token in hello (AtriumConnection's token:) is served as a \
            paired device, within the token's services (--service, repeatable; every service \
            when left out). Only the token's SHA-256 is kept, in tokens.json (mode 0600) in the \
            state folder; the token itself is printed once, by create. A running atriumd sees \
            a new or revoked token at once, and cuts off the connections of a revoked one.

            Examples:
              atriumd token create --name backup-script \\
                --service atrium.examples.echo/atrium.echo
              atriumd token list
              atriumd token revoke backup-script
            """,
        subcommands: [Create.self, List.self, Revoke.self]
    )

    struct Create: ParsableCommand {
        static let configuration = CommandConfiguration(abstract: "Make a token and print it (once).")
        @OptionGroup var state: StateOptions
        @OptionGroup var configFile: ConfigOptions
        @Option(help: "A name for the token (what list shows, and revoke takes).") var name: String
        @Option(help: ArgumentHelp("A service it may open, as PACKAGE/SERVICE (repeatable).", valueName: "service"))
        var service: [String] = []

        func validate() throws {
            guard !name.isEmpty, name.count <= 64, name.allSatisfy({ $0.isLetter || $0.isNumber || "-_.".contains($0) })
            else {
                throw ValidationError("--name takes up to 64 letters, digits, '-', '_' or '.'")
            }
            for entry in service {
                let parts = entry.split(separator: "/", omittingEmptySubsequences: false)
                guard parts.count == 2, parts.allSatisfy({ !$0.isEmpty }) else {
                    throw ValidationError(
                        "--service takes PACKAGE/SERVICE (for example atrium.examples.echo/atrium.echo); got '\(entry)'"
                    )
                }
            }
        }

        func run() throws {
            let token = try state.store.create(name: name, services: service.isEmpty ? nil : service)
            print(token)
            FileHandle.standardError.write(
                Data(
                    "atriumd: token \"\(name)\" made for \(service.isEmpty ? "every service" : service.joined(separator: ", ")); it is shown only now, keep it secret\n"
                        .utf8))
        }
    }

    struct List: ParsableCommand {
        static let configuration = CommandConfiguration(abstract: "List the tokens (never the tokens themselves).")
        @OptionGroup var state: StateOptions
        @OptionGroup var configFile: ConfigOptions

        func run() throws {
            let tokens = try state.store.tokens()
            guard !tokens.isEmpty else {
                print("no tokens")
                return
            }
            for token in tokens {
                print(
                    "\(token.name)  made \(token.created.formatted(.iso8601))  \(token.services?.joined(separator: ", ") ?? "every service")"
                )
            }
        }
    }

    struct Revoke: ParsableCommand {
        static let configuration = CommandConfiguration(abstract: "Revoke a token: its connections are cut off.")
        @OptionGroup var state: StateOptions
        @OptionGroup var configFile: ConfigOptions
        @Argument(help: "The token's name.") var name: String

        func run() throws {
            guard try state.store.revoke(name: name) else {
                throw ValidationError("there is no token named \"\(name)\" (atriumd token list shows them)")
            }
            print("revoked \(name)")
        }
    }
}

/// The host's state folder: its identity, paired devices and tokens. Shared by atriumd and
/// `atriumd token`, so that `--state-dir` means the same folder wherever it is written.
struct StateOptions: ParsableArguments {
    @Option(
        name: .customLong("state-dir"),
        help: ArgumentHelp(
            "Where the host keeps its identity (key and certificate, mode 0600, made at first start), paired devices and tokens. Default: $XDG_STATE_HOME/atrium, or ~/.local/state/atrium.",
            valueName: "dir"))
    var stateDir: String?

    /// The state folder as named, through any link in its path (systemd's StateDirectory with
    /// DynamicUser is a link to private/NAME): what is inside it is still checked, links
    /// refused.
    var stateFolder: URL? {
        stateDir.map { URL(fileURLWithPath: $0).resolvingSymlinksInPath() }
    }

    var store: TokenStore {
        TokenStore(folder: stateFolder ?? TLSIdentity.defaultStateFolder())
    }
}
