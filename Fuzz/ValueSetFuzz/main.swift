// libFuzzer target: the ValueSet decoder and the host's validator, differentially. They must
// agree on every input (the host passes on what the validator accepts, and plugins decode it),
// and what decodes must encode and decode again to the same value. Built and run by
// Scripts/fuzz.sh.
import AtriumValues
import FuzzDriver

@_cdecl("LLVMFuzzerTestOneInput")
func fuzzValueSets(_ data: UnsafePointer<UInt8>, _ size: Int) -> CInt {
    let bytes = UnsafeRawBufferPointer(start: data, count: size)
    let decoded = Result { () throws(ValueSetError) -> ValueSet in try ValueSet(cbor: bytes) }
    let validated = Result { () throws(ValueSetError) in try ValueSet.validate(cbor: bytes) }
    switch (decoded, validated) {
    case (.success(let set), .success):
        let again = try? ValueSet(cbor: set.cborBytes())
        precondition(again == set, "a ValueSet changed in a round trip: \(set)")
    case (.failure(let decodeError), .failure(let validateError)):
        precondition(
            decodeError.code == validateError.code,
            "decoder and validator disagree on why: \(decodeError) / \(validateError)")
    case (.success(let set), .failure(let error)):
        fatalError("the validator refused what the decoder accepts: \(error) for \(set)")
    case (.failure(let error), .success):
        fatalError("the validator accepted what the decoder refuses: \(error)")
    }
    return 0
}

runFuzzer { data, size in fuzzValueSets(data, size) }
