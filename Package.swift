// swift-tools-version:6.1
import PackageDescription

let strict: [SwiftSetting] = [
    .enableUpcomingFeature("ExistentialAny"),
    .enableUpcomingFeature("InternalImportsByDefault"),
]

let nioCore: Target.Dependency = .product(name: "NIOCore", package: "swift-nio")
let nioPosix: Target.Dependency = .product(name: "NIOPosix", package: "swift-nio")
let logging: Target.Dependency = .product(name: "Logging", package: "swift-log")
let lifecycle: Target.Dependency = .product(name: "ServiceLifecycle", package: "swift-service-lifecycle")
let argumentParser: Target.Dependency = .product(name: "ArgumentParser", package: "swift-argument-parser")

let package = Package(
    name: "Atrium",
    platforms: [.macOS(.v15)],
    products: [
        .executable(name: "atriumd", targets: ["atriumd"]),
        .executable(name: "atrium", targets: ["atrium"]),
        .library(name: "AtriumValues", targets: ["AtriumValues"]),
        .library(name: "AtriumProtocol", targets: ["AtriumProtocol"]),
        .library(name: "AtriumPluginKit", targets: ["AtriumPluginKit"]),
        .library(name: "AtriumHost", targets: ["AtriumHost"]),
        .library(name: "AtriumClient", targets: ["AtriumClient"]),
        .library(name: "CAtriumPlugin", targets: ["CAtriumPlugin"]),
        // The reference services, built as the shared libraries that manifests/ declares.
        .library(name: "RomanPing", type: .dynamic, targets: ["RomanPing"]),
        .library(name: "Echo", type: .dynamic, targets: ["Echo"]),
        .library(name: "Files", type: .dynamic, targets: ["Files"]),
        // A service that misbehaves on request, for the host's tests.
        .library(name: "AtriumTestService", type: .dynamic, targets: ["AtriumTestService"]),
        // A C service that exercises the host's message accessors and builders.
        .library(name: "AtriumTestCService", type: .dynamic, targets: ["AtriumTestCService"]),
        // Plain C libraries exposed by manifests alone (declared functions).
        .library(name: "mathdemo", type: .dynamic, targets: ["MathDemo"]),
        .library(name: "ffitypes", type: .dynamic, targets: ["FFITypes"]),
        .executable(name: "atrium-codec-bench", targets: ["AtriumCodecBenchmark"]),
        .executable(name: "atrium-baseline", targets: ["AtriumBaselineServer"]),
        .executable(name: "atrium-ffi-bench", targets: ["AtriumFFIBenchmark"]),
        .executable(name: "atrium-metrics-bench", targets: ["AtriumMetricsBenchmark"]),
        .executable(name: "atrium-transfer-bench", targets: ["AtriumTransferBenchmark"]),
    ],
    dependencies: [
        .package(url: "https://github.com/apple/swift-nio.git", from: "2.101.2"),
        .package(url: "https://github.com/apple/swift-log.git", from: "1.16.2"),
        .package(url: "https://github.com/swift-server/swift-service-lifecycle.git", from: "2.13.0"),
        .package(url: "https://github.com/apple/swift-argument-parser.git", from: "1.8.2"),
        .package(url: "https://github.com/HdrHistogram/hdrhistogram-swift.git", from: "0.2.0"),
        .package(url: "https://github.com/apple/swift-crypto.git", from: "3.12.3"),
        .package(url: "https://github.com/apple/swift-nio-ssl.git", from: "2.37.6"),
        .package(url: "https://github.com/apple/swift-certificates.git", from: "1.21.1"),
        .package(url: "https://github.com/apple/swift-metrics.git", from: "2.13.0"),
        .package(url: "https://github.com/swift-server/swift-prometheus.git", from: "2.4.1"),
    ],
    targets: [
        // The values every message carries: ValueSet, Value, statuses, and their CBOR codec.
        .target(name: "AtriumValues", swiftSettings: strict),
        // The wire: frames, their CBOR map layout, and the NIO frame codec.
        .target(name: "AtriumProtocol", dependencies: ["AtriumValues", nioCore], swiftSettings: strict),
        // The C header plugin authors compile against.
        .target(name: "CAtriumPlugin"),
        // System calls Swift's Glibc module lacks (malloc_trim).
        .target(name: "CAtriumSystem"),
        // libffi, for calling the C functions that manifests declare (apt: libffi-dev).
        .target(name: "CAtriumFFI", linkerSettings: [.linkedLibrary("ffi")]),
        // Identities (a key pair and a self-signed certificate each) and TLS contexts whose
        // trust comes from pairing, for the host and its clients (CONTRACT section 7).
        .target(
            name: "AtriumTLS",
            dependencies: [
                nioCore, .product(name: "NIOSSL", package: "swift-nio-ssl"),
                .product(name: "X509", package: "swift-certificates"),
                .product(name: "Crypto", package: "swift-crypto"),
            ],
            swiftSettings: strict
        ),
        // Avahi's client library (apt: libavahi-client-dev), for DNS-SD. Its headers are in
        // /usr/include; no pkg-config flags are needed (its -D_REENTRANT is refused by SwiftPM).
        .systemLibrary(name: "CAvahi", providers: [.apt(["libavahi-client-dev"])]),
        // DNS-SD through avahi-daemon: the host advertises _atrium._tcp, clients browse for it.
        .target(name: "AtriumDiscovery", dependencies: ["CAvahi", logging], swiftSettings: strict),
        // Transfers (CONTRACT section 8): the table, the journal, the spool and each transfer's
        // windows, as plain types with no I/O framework inside.
        .target(name: "AtriumTransfers", dependencies: ["CAtriumSystem"], swiftSettings: strict),
        // The Swift SDK for writing plugins.
        .target(name: "AtriumPluginKit", dependencies: ["CAtriumPlugin", "AtriumValues"], swiftSettings: strict),
        // Manifests, plugin loading, routing, the server.
        .target(
            name: "AtriumHost",
            dependencies: [
                "AtriumValues", "AtriumProtocol", "AtriumTLS", "AtriumDiscovery", "AtriumTransfers", "CAtriumPlugin",
                "CAtriumFFI",
                "CAtriumSystem", nioCore,
                nioPosix, logging, lifecycle, .product(name: "Crypto", package: "swift-crypto"),
                .product(name: "NIOSSL", package: "swift-nio-ssl"),
                // --metrics: swift-metrics, kept by swift-prometheus, served over HTTP.
                .product(name: "CoreMetrics", package: "swift-metrics"),
                .product(name: "Prometheus", package: "swift-prometheus"),
                .product(name: "NIOHTTP1", package: "swift-nio"),
            ],
            swiftSettings: strict
        ),
        // The client library: connections, AppServiceConnection, apps, ping.
        .target(
            name: "AtriumClient",
            dependencies: [
                "AtriumValues", "AtriumProtocol", "AtriumTLS", "AtriumDiscovery", "CAtriumSystem", nioCore, nioPosix,
                .product(name: "NIOSSL", package: "swift-nio-ssl"),
                // The SHA-256 an upload's last chunk carries.
                .product(name: "Crypto", package: "swift-crypto"),
            ],
            swiftSettings: strict
        ),
        .executableTarget(
            name: "atriumd",
            dependencies: ["AtriumHost", "AtriumTLS", "AtriumDiscovery", argumentParser, logging, lifecycle],
            swiftSettings: strict
        ),
        // The load generator behind `atrium bench`, and the raw NIO baseline it compares with.
        .target(
            name: "AtriumBench",
            dependencies: [
                "AtriumProtocol", "AtriumValues", nioCore, nioPosix,
                .product(name: "Histogram", package: "hdrhistogram-swift"),
                .product(name: "NIOSSL", package: "swift-nio-ssl"),
            ],
            swiftSettings: strict
        ),
        .executableTarget(
            name: "AtriumFFIBenchmark",
            dependencies: ["AtriumBench", "AtriumHost", "AtriumProtocol", "AtriumValues"],
            path: "Benchmarks/FFIBenchmark",
            swiftSettings: strict
        ),
        .executableTarget(
            name: "AtriumMetricsBenchmark",
            dependencies: [
                "AtriumBench", "AtriumHost", "AtriumProtocol", "AtriumValues", nioCore,
                .product(name: "NIOEmbedded", package: "swift-nio"),
            ],
            path: "Benchmarks/MetricsBenchmark",
            swiftSettings: strict
        ),
        .executableTarget(
            name: "AtriumBaselineServer",
            dependencies: ["AtriumBench", "AtriumProtocol"],
            path: "Benchmarks/BaselineServer",
            swiftSettings: strict
        ),
        .executableTarget(
            name: "AtriumTransferBenchmark",
            dependencies: [
                "AtriumClient", "AtriumTLS", "AtriumValues", nioPosix,
                .product(name: "NIOSSL", package: "swift-nio-ssl"),
            ],
            path: "Benchmarks/TransferBenchmark",
            swiftSettings: strict
        ),
        .executableTarget(
            name: "atrium",
            dependencies: [
                "AtriumClient", "AtriumBench", "AtriumProtocol", "AtriumValues", "AtriumTLS", "AtriumDiscovery",
                argumentParser,
                .product(name: "NIOSSL", package: "swift-nio-ssl"),
            ],
            swiftSettings: strict
        ),
        .target(name: "RomanPing", dependencies: ["AtriumPluginKit"], path: "Plugins/RomanPing", swiftSettings: strict),
        .target(name: "Echo", dependencies: ["CAtriumPlugin"], path: "Plugins/Echo"),
        .target(name: "Files", dependencies: ["CAtriumPlugin"], path: "Plugins/Files"),
        .target(
            name: "AtriumTestService",
            dependencies: ["AtriumPluginKit"],
            path: "Tests/Fixtures/TestService",
            swiftSettings: strict
        ),
        .target(name: "AtriumTestCService", dependencies: ["CAtriumPlugin"], path: "Tests/Fixtures/CTestService"),
        .target(name: "MathDemo", path: "Plugins/MathDemo"),
        .target(name: "FFITypes", path: "Tests/Fixtures/FFITypes"),
        .executableTarget(
            name: "AtriumCodecBenchmark",
            dependencies: ["AtriumBench", "AtriumValues", "AtriumProtocol", nioCore],
            path: "Benchmarks/CodecBenchmark",
            swiftSettings: strict
        ),
        // Test helpers: start a host on port 0, a scripted client, find the built plugins.
        .target(
            name: "AtriumTesting",
            dependencies: ["AtriumValues", "AtriumProtocol", "CAtriumSystem", nioCore, nioPosix],
            swiftSettings: strict
        ),
        .testTarget(
            name: "AtriumValuesTests",
            dependencies: ["AtriumValues", "AtriumTesting"],
            exclude: ["TestVectors"],
            swiftSettings: strict
        ),
        .testTarget(
            name: "AtriumProtocolTests",
            dependencies: [
                "AtriumProtocol", "AtriumValues", "AtriumTesting", nioCore,
                .product(name: "NIOEmbedded", package: "swift-nio"),
                .product(name: "NIOTestUtils", package: "swift-nio"),
            ],
            swiftSettings: strict
        ),
        .testTarget(name: "AtriumTransfersTests", dependencies: ["AtriumTransfers"], swiftSettings: strict),
        .testTarget(
            name: "AtriumHostTests",
            dependencies: ["AtriumHost", "AtriumTesting", "AtriumValues", "AtriumProtocol", nioCore, nioPosix],
            swiftSettings: strict
        ),
        .testTarget(
            name: "AtriumClientTests",
            dependencies: [
                "AtriumClient", "AtriumTesting", "AtriumValues", "AtriumProtocol", "AtriumTLS", "AtriumDiscovery",
                nioCore,
                nioPosix,
                .product(name: "NIOSSL", package: "swift-nio-ssl"),
                .product(name: "NIOEmbedded", package: "swift-nio"),
            ],
            swiftSettings: strict
        ),
    ],
    swiftLanguageModes: [.v6]
)

// libFuzzer targets, only in a fuzzing build: `ATRIUM_FUZZ=1 swift build -Xswiftc -sanitize=fuzzer`
// (Scripts/fuzz.sh). libFuzzer supplies their `main`, so an ordinary build could not link them.
if Context.environment["ATRIUM_FUZZ"] != nil {
    for (name, dependencies) in [
        ("FrameFuzz", ["AtriumProtocol", "AtriumValues", nioCore]),
        ("ValueSetFuzz", ["AtriumValues"]),
        ("ManifestFuzz", ["AtriumHost"]),
        ("URIFuzz", ["AtriumHost", "AtriumProtocol"]),
        ("ELFFuzz", ["AtriumHost"]),
        ("HTTPFuzz", ["AtriumTLS", "AtriumTransfers"]),
    ] as [(String, [Target.Dependency])] {
        package.targets.append(
            .executableTarget(
                name: name, dependencies: dependencies + ["FuzzDriver"], path: "Fuzz/\(name)", swiftSettings: strict))
    }
    package.targets.append(.target(name: "FuzzDriver", path: "Fuzz/FuzzDriver", swiftSettings: strict))
}
