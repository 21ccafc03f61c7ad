// SPDX-License-Identifier: Apache-2.0
//! Reads the values a kvkey writer (the C++ library, its kvkey tool, an
//! engine's connector) stored in Redis, and verifies each one whole before it
//! would serve it: header, payload digest (plain namespaces) or Poly1305 tag
//! (keyed ones).
//!
//!     cargo run --example redis_read -- [--secret HEX] HOST:PORT IDENTITY_FILE TOKENS...
//!
//! For each full block of the tokens it prints "block I KEY ok N" (N payload
//! bytes), "block I KEY miss" (no such key) or "block I KEY rejected REASON
//! FIELD". It speaks RESP over std::net: one GET per key.
#![forbid(unsafe_code)]

use std::error::Error;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;

/// GET key: the bulk-string reply, None when the key is absent.
fn get(conn: &mut TcpStream, reader: &mut BufReader<TcpStream>, key: &str) -> Result<Option<Vec<u8>>, Box<dyn Error>> {
    write!(conn, "*2\r\n$3\r\nGET\r\n${}\r\n{}\r\n", key.len(), key)?;
    let mut line = String::new();
    reader.read_line(&mut line)?;
    let body = line.strip_suffix("\r\n").ok_or_else(|| format!("GET {key}: malformed reply {line:?}"))?;
    let length = match body.as_bytes().first() {
        Some(b'$') => body[1..].parse::<i64>().map_err(|_| format!("GET {key}: malformed length {body:?}"))?,
        Some(b'-') => return Err(format!("GET {key}: {}", &body[1..]).into()),
        _ => return Err(format!("GET {key}: unexpected reply {body:?}").into()),
    };
    if length < 0 {
        return Ok(None);
    }
    let mut value = vec![0u8; usize::try_from(length)? + 2];
    reader.read_exact(&mut value)?;
    if value.split_off(value.len() - 2) != b"\r\n" {
        return Err(format!("GET {key}: bulk string not terminated").into());
    }
    Ok(Some(value))
}

fn main() -> Result<(), Box<dyn Error>> {
    let mut args: Vec<String> = std::env::args().skip(1).collect();
    let mut secret = None;
    if args.first().map(String::as_str) == Some("--secret") && args.len() > 1 {
        secret = Some(kvkey::from_hex(&args[1]).ok_or("--secret: expected hex digits")?);
        args.drain(..2);
    }
    if args.len() < 2 {
        return Err("usage: redis_read [--secret HEX] HOST:PORT IDENTITY_FILE TOKENS...".into());
    }
    let (identity, policy) = kvkey::Identity::from_file(&args[1])?;
    let mut builder = kvkey::Namespace::builder(&identity).policy(policy);
    if let Some(s) = &secret {
        builder = builder.secret(s);
    }
    let ns = builder.build()?;
    let tokens = args[2..].iter().map(|t| t.parse::<u32>()).collect::<Result<Vec<_>, _>>()?;
    let blocks = ns.block_hashes(&tokens, &kvkey::HashOptions::default())?;
    let mut conn = TcpStream::connect(&args[0])?;
    let mut reader = BufReader::new(conn.try_clone()?);
    for (i, block) in blocks.iter().enumerate() {
        let key = ns.store_key(block);
        match get(&mut conn, &mut reader, &key)? {
            None => println!("block {i} {key} miss"),
            Some(value) => match ns.open_value(&value, block) {
                (Some(payload), _) => println!("block {i} {key} ok {}", payload.len()),
                (None, v) => println!("block {i} {key} rejected {} {}", v.reason, v.field),
            },
        }
    }
    Ok(())
}
