// swift-tools-version:6.1
import PackageDescription

let strict: [SwiftSetting] = [
    .enableUpcomingFeature("ExistentialAny"),
    .enableUpcomingFeature("InternalImportsByDefault"),
]

let package = Package(
    name: "Atrium",
    platforms: [.macOS(.v15)],
    products: [
        .library(name: "AtriumValues", targets: ["AtriumValues"]),
        .library(name: "AtriumProtocol", targets: ["AtriumProtocol"]),
        .executable(name: "atrium-codec-bench", targets: ["AtriumCodecBenchmark"]),
    ],
    dependencies: [
        .package(url: "https://github.com/apple/swift-nio.git", from: "2.101.2")
    ],
    targets: [
        // The values every message carries: ValueSet, Value and their CBOR codec. No dependencies.
        .target(name: "AtriumValues", swiftSettings: strict),
        // The wire: frames, their CBOR map layout, status enums and the NIO frame codec.
        .target(
            name: "AtriumProtocol",
            dependencies: [
                "AtriumValues",
                .product(name: "NIOCore", package: "swift-nio"),
            ],
            swiftSettings: strict
        ),
        .executableTarget(
            name: "AtriumCodecBenchmark",
            dependencies: [
                "AtriumValues",
                "AtriumProtocol",
                .product(name: "NIOCore", package: "swift-nio"),
            ],
            path: "Benchmarks/CodecBenchmark",
            swiftSettings: strict
        ),
        .testTarget(
            name: "AtriumValuesTests",
            dependencies: ["AtriumValues"],
            exclude: ["TestVectors"],
            swiftSettings: strict
        ),
        .testTarget(
            name: "AtriumProtocolTests",
            dependencies: [
                "AtriumProtocol",
                "AtriumValues",
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOEmbedded", package: "swift-nio"),
                .product(name: "NIOTestUtils", package: "swift-nio"),
            ],
            swiftSettings: strict
        ),
    ],
    swiftLanguageModes: [.v6]
)
