// SPDX-License-Identifier: Apache-2.0
//! The conformance testee survives any line: every line gets exactly one
//! strict-JSON answer, and it keeps going (docs/conformance.md).

use std::io::Write;
use std::process::{Command, Stdio};

use serde_json::Value;

const OK: &str = r#"{"id":1,"identity":{"tenant":"t","model":{"name":"m","revision":"r"},"kv":{"dtype":"fp16","block_size":2,"num_layers":2,"num_kv_heads":2,"head_dim":8,"layout":"l"}},"tokens":[1,2,3,4]}"#;

fn run(lines: &[Vec<u8>]) -> Vec<Value> {
    let mut child = Command::new(env!("CARGO_BIN_EXE_kvkey-testee"))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("the testee starts");
    let mut input = Vec::new();
    for l in lines {
        input.extend_from_slice(l);
        input.push(b'\n');
    }
    let mut stdin = child.stdin.take().expect("stdin");
    let writer = std::thread::spawn(move || stdin.write_all(&input));
    let out = child.wait_with_output().expect("the testee ends");
    writer.join().expect("written").expect("written");
    assert!(out.status.success(), "{:?}", out.status);
    let text = String::from_utf8(out.stdout).expect("UTF-8 answers");
    text.lines().map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{}: {}", l, e))).collect()
}

/// The error kind and field a line gets; None: an answer.
type Want = Option<(&'static str, &'static str)>;

fn with(from: &str, to: &str) -> Vec<u8> {
    assert!(OK.contains(from), "{}", from);
    OK.replacen(from, to, 1).into_bytes()
}

#[test]
fn hostile_lines_get_one_answer_each() {
    let file = serde_json::to_string(
        r#"{"tenant":"t","model":{"name":"m","revision":"r"},"kv":{"dtype":"fp16","block_size":2,"num_layers":2,"num_kv_heads":2,"head_dim":8,"layout":"l"}}"#,
    )
    .expect("a string");
    let cases: Vec<(Vec<u8>, Want)> = vec![
        (OK.as_bytes().to_vec(), None),
        (b"\xff\xfe".to_vec(), Some(("input_error", "request"))),
        (with(r#""m""#, r#""\ud800""#), Some(("input_error", "request"))),
        (
            with(r#""m""#, "\"\u{0}\"").iter().map(|&b| if b == 0 { 0xff } else { b }).collect(),
            Some(("input_error", "request")),
        ),
        (with(r#""id":1"#, r#""id":1e400"#), Some(("input_error", "request"))),
        (with(r#""id":1"#, &format!(r#""id":{}"#, "9".repeat(400))), Some(("input_error", "request"))),
        (with(r#""id":1"#, r#""id":NaN"#), Some(("input_error", "request"))),
        (with(r#""id":1"#, r#""id":-Infinity"#), Some(("input_error", "request"))),
        (
            format!(r#"{{"id":{}{}}}"#, "[".repeat(100_000), "]".repeat(100_000)).into_bytes(),
            Some(("input_error", "request")),
        ),
        (
            format!(r#"{{"id":{}1{}}}"#, "{\"a\":".repeat(100_000), "}".repeat(100_000)).into_bytes(),
            Some(("input_error", "request")),
        ),
        ([OK.as_bytes(), b" {}"].concat(), Some(("input_error", "request"))),
        (with(r#""tokens""#, r#""tokens":[],"tokens""#), Some(("input_error", "request"))),
        (with(r#""tenant":"t""#, r#""tenant":"t","tenant":"u""#), Some(("input_error", "request"))),
        (with(r#""block_size":2"#, r#""zzz":1,"blocksize":2"#), Some(("input_error", "kv.blocksize"))),
        (with(r#""tenant":"t""#, r#""tenant":"t","zz":1,"aa":2"#), Some(("input_error", "aa"))),
        (with(r#""block_size":2"#, r#""block_size":-0"#), Some(("input_error", "kv.block_size"))),
        (with(r#""block_size":2"#, r#""block_size":2.0"#), Some(("input_error", "kv.block_size"))),
        (with(r#""block_size":2"#, r#""block_size":18446744073709551616"#), Some(("input_error", "kv.block_size"))),
        (
            with(r#""block_size":2"#, r#""block_size":0,"quant":{"group_size":4}"#),
            Some(("identity_error", "kv.block_size")),
        ),
        (b"[]".to_vec(), Some(("input_error", "request"))),
        (b"\"x\"".to_vec(), Some(("input_error", "request"))),
        (b"{\"id\":\"\xc3\"}".to_vec(), Some(("input_error", "request"))),
        (format!(r#"{{"id":2,"identity_file":{},"tokens":[1,2,3,4]}}"#, file).into_bytes(), None),
        (
            br#"{"id":3,"identity_file":"{\"tenant\":\"t\",\"model\":{\"name\":\"m\"},\"kv\":{}}"}"#.to_vec(),
            Some(("input_error", "model.revision")),
        ),
        (
            br#"{"id":4,"identity_file":"{\"tenant\":\"t\",\"tenant\":\"u\"}"}"#.to_vec(),
            Some(("input_error", "tenant")),
        ),
        (br#"{"id":5,"identity_file":"{\"tenant\":"}"#.to_vec(), Some(("input_error", "identity_file"))),
        (br#"{"id":6,"identity_file":7}"#.to_vec(), Some(("input_error", "identity_file"))),
        (Vec::new(), Some(("input_error", "request"))),
        (b" \t\r".to_vec(), Some(("input_error", "request"))),
        ([b"\xef\xbb\xbf", OK.as_bytes()].concat(), Some(("input_error", "request"))),
        (with(r#""id":1"#, &format!(r#""id":{}1{}"#, "[".repeat(31), "]".repeat(31))), None),
        (
            with(r#""id":1"#, &format!(r#""id":{}1{}"#, "[".repeat(32), "]".repeat(32))),
            Some(("input_error", "request")),
        ),
        (with(r#""tokens""#, r#""zeta":1,"identities":{},"tokens""#), Some(("input_error", "identities"))),
        (with(r#""tokens""#, &format!(r#""identity_file":{},"tokens""#, file)), Some(("input_error", "identity"))),
        (br#"{"id":7,"tokens":[]}"#.to_vec(), Some(("input_error", "identity"))),
        (br#"{"id":7,"identity":[]}"#.to_vec(), Some(("input_error", "identity"))),
        // Objects are decoded in table order, each when reached: model before kv's keys.
        (with(r#""name":"m""#, r#""name":5"#), Some(("input_error", "model.name"))),
        (with(r#""kv":{"#, r#""kv":{"zz":1,"#), Some(("input_error", "kv.zz"))),
        (
            String::from_utf8(with(r#""kv":{"#, r#""kv":{"zz":1,"#))
                .unwrap()
                .replacen(r#""name":"m""#, r#""name":5"#, 1)
                .into_bytes(),
            Some(("input_error", "model.name")),
        ),
        (
            with(r#""tenant":"t""#, r#""tenant":"t","shard":{"tp_size":"2"},"adapter":{"name":7}"#),
            Some(("input_error", "shard.tp_size")),
        ),
        (OK.as_bytes().to_vec(), None),
    ];
    let lines: Vec<Vec<u8>> = cases.iter().map(|(l, _)| l.clone()).collect();
    let answers = run(&lines);
    assert_eq!(answers.len(), cases.len());
    for (i, ((line, want), got)) in cases.iter().zip(&answers).enumerate() {
        let shown = String::from_utf8_lossy(&line[..line.len().min(80)]).into_owned();
        match want {
            None => assert!(got.get("error").is_none() && got["blocks"].as_array().map(Vec::len) == Some(2), "{}", got),
            Some((kind, field)) => {
                assert_eq!(
                    (got["error"]["kind"].as_str(), got["error"]["field"].as_str()),
                    (Some(*kind), Some(*field)),
                    "line {}: {}",
                    i,
                    shown
                )
            }
        }
    }
    // The same answer from the identity and from the identity file.
    assert_eq!(answers[0]["root"], answers[22]["root"]);
    // A line that is not a request is answered with id null, whatever id it holds.
    assert!(answers.iter().filter(|a| a["error"]["field"] == "request").all(|a| a["id"].is_null()));
}

#[test]
fn mutated_lines_get_one_answer_each() {
    // A fixed-seed xorshift: the same 3,000 mutations of a valid request every run.
    let mut state = 0x9e37_79b9_7f4a_7c15u64;
    let mut next = move |n: usize| {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        (state % n as u64) as usize
    };
    const BYTES: &[u8] = b"{}[]\",:0123456789-+.eE\\u tfnrl\xff\xc3\xed\xa0\x80";
    let mut lines = Vec::new();
    for _ in 0..3000 {
        let mut l = OK.as_bytes().to_vec();
        for _ in 0..1 + next(4) {
            if l.is_empty() {
                l.push(b'{'); // an empty line is skipped, not answered
            }
            let at = next(l.len());
            match next(4) {
                0 => l[at] = BYTES[next(BYTES.len())],
                1 => l.insert(at, BYTES[next(BYTES.len())]),
                2 if l.len() > 1 => {
                    l.remove(at);
                }
                _ => l.truncate(at.max(1)),
            }
        }
        lines.push(l);
    }
    let answers = run(&lines);
    assert_eq!(answers.len(), lines.len());
    for a in &answers {
        assert!(
            a.get("error").map_or(a.get("blocks").is_some(), |e| e["kind"].is_string() && e["field"].is_string()),
            "{}",
            a
        );
    }
}
