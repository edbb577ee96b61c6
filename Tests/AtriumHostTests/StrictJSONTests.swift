import Foundation
import Testing

@testable import AtriumHost

/// Manifests are read as strict JSON (RFC 8259): what Foundation's reader lets through (a
/// trailing comma, a key given twice) is refused with its line and column.
struct StrictJSONTests {
    func problem(_ text: String) -> String? {
        do {
            _ = try StrictJSON(Array(text.utf8))
            return nil
        } catch {
            return error.description
        }
    }

    @Test func whatIsNotJSONIsRefusedWithWhere() {
        let cases: [(String, String)] = [
            (#"{"a": 1,}"#, "line 1, column 9: a key in double quotes should be here (a trailing comma is not JSON)"),
            ("[1, 2,]", "line 1, column 7: a value should be here (a trailing comma is not JSON)"),
            (
                "{\n  \"a\": 1,\n  \"a\": 2\n}",
                #"line 3, column 3: "a" is given twice in this object (first on line 2)"#
            ),
            ("{ // a comment\n}", "line 1, column 3: comments are not JSON"),
            (#"{"a": 01}"#, "line 1, column 7: numbers do not start with 0 in JSON"),
            (#"{"a": NaN}"#, "line 1, column 7: a value should be here, not 'N'"),
            (
                #"{"a": tru}"#,
                "line 1, column 7: not a JSON value (true, false and null are lowercase; NaN and Infinity are not JSON)"
            ),
            ("{'a': 1}", "line 1, column 2: strings take double quotes in JSON"),
            (
                "{\"a\": \"two\nlines\"}",
                "line 1, column 11: a string does not go on to the next line (end it, or write \\n)"
            ),
            (#"{"a": "\x"}"#, #"line 1, column 9: \x is not an escape JSON knows"#),
            (#"{"a": "\ud800"}"#, #"line 1, column 14: \ud800 is half of a surrogate pair"#),
            (#"{"a": 1} {}"#, "line 1, column 10: more after the end of the JSON value"),
            (#"{"a": 1e999}"#, "line 1, column 7: 1e999 is out of range"),
            (#"{"a": -}"#, "line 1, column 8: a number needs a digit here"),
            (#"{"a": 1.}"#, "line 1, column 9: a number needs a digit after '.'"),
            (#"{"a" 1}"#, "line 1, column 6: ':' after the key should be here, not '1'"),
            (#"{"a": "unended"#, "line 1, column 15: the file ends inside a string"),
            ("", "line 1, column 1: the file ends where a value should be"),
            (
                String(repeating: "[", count: 65) + String(repeating: "]", count: 65),
                "line 1, column 65: nested deeper than 64"
            ),
        ]
        for (text, expected) in cases {
            #expect(problem(text) == expected, "\(text)")
        }
        // Bytes that are not UTF-8: a stray continuation byte, an overlong form, a surrogate.
        for bytes: [UInt8] in [[0x80], [0xC0, 0xAF], [0xED, 0xA0, 0x80], [0xF5, 0x80, 0x80, 0x80]] {
            let text = Array("{\"a\": \"".utf8) + bytes + Array("\"}".utf8)
            #expect(throws: StrictJSON.Problem.self) { try StrictJSON(text) }
        }
    }

    @Test func aByteOrderMarkIsSkippedAndKeysAreComparedAsBytes() throws {
        let marked = [0xEF, 0xBB, 0xBF] + Array(#"{"a": 1}"#.utf8)
        #expect(try StrictJSON(marked).lines == ["a": 1])
        // "é" and "e" + U+0301: two keys to JSON, one to Swift: refused, and said so.
        #expect(
            problem("{\"\u{E9}\": 1, \"e\u{301}\": 2}")
                == "line 1, column 10: \"é\" is given twice in this object, in two spellings Unicode counts as the same"
        )
        // A key that is not a plain name is quoted in a path, so that paths do not collide.
        let odd = try StrictJSON(Array(#"{"a.b": {"c": 1}, "a": {"b": {"c": 2}}}"#.utf8))
        #expect(odd.lines[#"["a.b"].c"#] == 1 && odd.lines["a.b.c"] == 1)
        // Paths stop being recorded past their limits, and nothing grows with a crafted file.
        let longKey = String(repeating: "k", count: 600)
        let deep = try StrictJSON(Array("{\"\(longKey)\": [{\"a\": 0}, {\"a\": 1}]}".utf8))
        #expect(deep.lines.isEmpty)
        let many = "{" + (0...StrictJSON.maxRecordedLines).map { "\"k\($0)\": 0" }.joined(separator: ",") + "}"
        #expect(try StrictJSON(Array(many.utf8)).lines.count == StrictJSON.maxRecordedLines / 2)
        // A long array spends the elements' budget, not the keys': a key after it has its line.
        let longArray =
            "{\"config\": {\"a\": [" + (0...StrictJSON.maxRecordedLines).map { _ in "0" }.joined(separator: ",")
            + "]},\n\"after\": 1}"
        let read = try StrictJSON(Array(longArray.utf8))
        #expect(read.lines["after"] == 2 && read.lines["config.a[0]"] == 1)
        #expect(read.lines["config.a[\(StrictJSON.maxRecordedLines / 2)]"] == nil)
    }

    @Test func jsonIsReadWithTheLinesOfItsKeys() throws {
        let text = #"""
            {
              "manifestVersion": 1, "package": "a.b",
              "services": [
                { "name": "s", "supportsRemoteSystems": true },
                { "name": "t\u00e9\ud83d\ude00", "n": -1.5e2, "z": 0, "list": [], "o": {}, "x": null }
              ]
            }
            """#
        let read = try StrictJSON(Array(text.utf8))
        guard case .object(let root) = read.value, case .array(let services)? = root["services"],
            case .object(let second) = services[1]
        else {
            Issue.record("not the shape written: \(read.value)")
            return
        }
        #expect(root.count == 3)
        if case .string(let name)? = second["name"] { #expect(name == "té😀") } else { Issue.record("name") }
        if case .number(let number)? = second["n"] { #expect(number == -150) } else { Issue.record("n") }
        if case .null? = second["x"] {} else { Issue.record("x") }
        #expect(read.lines["manifestVersion"] == 2)
        #expect(read.lines["services"] == 3)
        #expect(read.lines["services[0].supportsRemoteSystems"] == 4)
        #expect(read.lines["services[1].list"] == 5)
        // Array elements have their lines too: an error in a service's entry points at it.
        #expect(read.lines["services[0]"] == 4 && read.lines["services[1]"] == 5)
        // Every byte sequence of a good document, cut short, is refused without a trap.
        let bytes = Array(text.utf8)
        for length in 0..<bytes.count {
            #expect(throws: StrictJSON.Problem.self) { try StrictJSON(Array(bytes[0..<length])) }
        }
    }
}
