// SPDX-License-Identifier: Apache-2.0
//! Strict JSON for identity files and the conformance testee: a document tree
//! read with serde_json that keeps every member of an object in order,
//! duplicates included, so that a duplicate key is refused with its path
//! rather than silently overwritten. serde_json refuses bytes that are not
//! UTF-8, lone surrogates, NaN and Infinity, trailing data, and nesting deeper
//! than 128 levels (an error, never a stack overflow). Integers are kept as
//! u64 or (negative) i64; any other number is a float.

use std::fmt;

use serde::de::{Deserialize, Deserializer, MapAccess, SeqAccess, Visitor};

/// A JSON value.
#[derive(Clone, Debug, PartialEq)]
pub enum Json {
    /// null
    Null,
    /// true or false
    Bool(bool),
    /// An integer written without a sign that fits 64 bits.
    Unsigned(u64),
    /// A negative integer that fits 64 bits.
    Signed(i64),
    /// Any other number ("1.0", "1e3", "-0", integers beyond 64 bits).
    Float(f64),
    /// A string.
    String(String),
    /// An array.
    Array(Vec<Json>),
    /// An object's members in document order, duplicates included.
    Object(Vec<(String, Json)>),
}

impl Json {
    /// Parses one JSON text (surrounding whitespace allowed, nothing else).
    pub fn parse(bytes: &[u8]) -> std::result::Result<Json, String> {
        serde_json::from_slice(bytes).map_err(|e| e.to_string())
    }

    /// The member `key` of an object (its last occurrence); None when absent
    /// or when self is not an object.
    pub fn get(&self, key: &str) -> Option<&Json> {
        match self {
            Json::Object(members) => members.iter().rev().find(|(k, _)| k == key).map(|(_, v)| v),
            _ => None,
        }
    }

    /// The member `key`, unless absent or null.
    pub fn member(&self, key: &str) -> Option<&Json> {
        self.get(key).filter(|v| **v != Json::Null)
    }

    /// The dotted path of the first duplicate key in document order (the keys
    /// of the enclosing objects, then the duplicate's).
    pub fn first_duplicate(&self) -> Option<String> {
        match self {
            Json::Object(members) => {
                let mut seen = std::collections::HashSet::with_capacity(members.len());
                for (k, v) in members {
                    if !seen.insert(k.as_str()) {
                        return Some(k.clone());
                    }
                    if let Some(inner) = v.first_duplicate() {
                        return Some(format!("{}.{}", k, inner));
                    }
                }
                None
            }
            Json::Array(items) => items.iter().find_map(Json::first_duplicate),
            _ => None,
        }
    }

    /// How many arrays and objects are nested at the deepest point (0 for a scalar).
    pub fn depth(&self) -> usize {
        match self {
            Json::Array(items) => 1 + items.iter().map(Json::depth).max().unwrap_or(0),
            Json::Object(members) => 1 + members.iter().map(|(_, v)| v.depth()).max().unwrap_or(0),
            _ => 0,
        }
    }

    /// The JSON type's name, for messages.
    pub fn type_name(&self) -> &'static str {
        match self {
            Json::Null => "null",
            Json::Bool(_) => "boolean",
            Json::Unsigned(_) | Json::Signed(_) | Json::Float(_) => "number",
            Json::String(_) => "string",
            Json::Array(_) => "array",
            Json::Object(_) => "object",
        }
    }

    /// The same value as a serde_json::Value (the last of duplicate members).
    pub fn to_value(&self) -> serde_json::Value {
        use serde_json::Value;
        match self {
            Json::Null => Value::Null,
            Json::Bool(b) => Value::Bool(*b),
            Json::Unsigned(n) => Value::from(*n),
            Json::Signed(n) => Value::from(*n),
            Json::Float(f) => serde_json::Number::from_f64(*f).map_or(Value::Null, Value::Number),
            Json::String(s) => Value::String(s.clone()),
            Json::Array(items) => Value::Array(items.iter().map(Json::to_value).collect()),
            Json::Object(members) => Value::Object(members.iter().map(|(k, v)| (k.clone(), v.to_value())).collect()),
        }
    }
}

struct JsonVisitor;

impl<'de> Visitor<'de> for JsonVisitor {
    type Value = Json;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a JSON value")
    }
    fn visit_unit<E>(self) -> Result<Json, E> {
        Ok(Json::Null)
    }
    fn visit_none<E>(self) -> Result<Json, E> {
        Ok(Json::Null)
    }
    fn visit_bool<E>(self, b: bool) -> Result<Json, E> {
        Ok(Json::Bool(b))
    }
    fn visit_u64<E>(self, n: u64) -> Result<Json, E> {
        Ok(Json::Unsigned(n))
    }
    fn visit_i64<E>(self, n: i64) -> Result<Json, E> {
        Ok(if n >= 0 { Json::Unsigned(n as u64) } else { Json::Signed(n) })
    }
    fn visit_f64<E>(self, f: f64) -> Result<Json, E> {
        Ok(Json::Float(f))
    }
    fn visit_str<E>(self, s: &str) -> Result<Json, E> {
        Ok(Json::String(s.to_string()))
    }
    fn visit_string<E>(self, s: String) -> Result<Json, E> {
        Ok(Json::String(s))
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Json, A::Error> {
        let mut items = Vec::new();
        while let Some(v) = seq.next_element()? {
            items.push(v);
        }
        Ok(Json::Array(items))
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Json, A::Error> {
        let mut members = Vec::new();
        while let Some((k, v)) = map.next_entry::<String, Json>()? {
            members.push((k, v));
        }
        Ok(Json::Object(members))
    }
}

impl<'de> Deserialize<'de> for Json {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Json, D::Error> {
        d.deserialize_any(JsonVisitor)
    }
}
