//! A minimal JSON reader, enough for cargo's `--message-format=json` lines (objects,
//! arrays, strings with escapes, numbers, booleans, null), so xtask needs no serde.

use anyhow::{Result, bail};

/// A parsed JSON value. Numbers are kept as their text.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Value {
    Null,
    Bool(bool),
    Number(String),
    String(String),
    Array(Vec<Value>),
    Object(Vec<(String, Value)>),
}

impl Value {
    /// The member `key` of an object; `None` for a missing key or a non-object.
    pub(crate) fn get(&self, key: &str) -> Option<&Value> {
        match self {
            Value::Object(members) => members.iter().find(|(k, _)| k == key).map(|(_, v)| v),
            _ => None,
        }
    }

    /// The string, if this is one.
    pub(crate) fn as_str(&self) -> Option<&str> {
        match self {
            Value::String(s) => Some(s),
            _ => None,
        }
    }

    /// The boolean, if this is one.
    pub(crate) fn as_bool(&self) -> Option<bool> {
        match self {
            Value::Bool(b) => Some(*b),
            _ => None,
        }
    }

    /// The elements, if this is an array.
    pub(crate) fn as_array(&self) -> Option<&[Value]> {
        match self {
            Value::Array(items) => Some(items),
            _ => None,
        }
    }
}

/// Parses one complete JSON document.
pub(crate) fn parse(text: &str) -> Result<Value> {
    let mut p = Parser {
        chars: text.chars().collect(),
        at: 0,
    };
    let value = p.value()?;
    p.skip_space();
    if p.at != p.chars.len() {
        bail!("trailing characters at {}", p.at);
    }
    Ok(value)
}

struct Parser {
    chars: Vec<char>,
    at: usize,
}

impl Parser {
    fn skip_space(&mut self) {
        while self.chars.get(self.at).is_some_and(|c| c.is_whitespace()) {
            self.at += 1;
        }
    }

    fn peek(&mut self) -> Option<char> {
        self.skip_space();
        self.chars.get(self.at).copied()
    }

    fn expect(&mut self, c: char) -> Result<()> {
        if self.peek() != Some(c) {
            bail!("expected {c:?} at {}", self.at);
        }
        self.at += 1;
        Ok(())
    }

    fn literal(&mut self, word: &str, value: Value) -> Result<Value> {
        let end = self.at + word.chars().count();
        if self
            .chars
            .get(self.at..end)
            .is_some_and(|s| s.iter().copied().eq(word.chars()))
        {
            self.at = end;
            Ok(value)
        } else {
            bail!("expected {word} at {}", self.at)
        }
    }

    fn value(&mut self) -> Result<Value> {
        match self.peek() {
            Some('{') => self.object(),
            Some('[') => self.array(),
            Some('"') => Ok(Value::String(self.string()?)),
            Some('t') => self.literal("true", Value::Bool(true)),
            Some('f') => self.literal("false", Value::Bool(false)),
            Some('n') => self.literal("null", Value::Null),
            Some(c) if c == '-' || c.is_ascii_digit() => {
                let start = self.at;
                while self
                    .chars
                    .get(self.at)
                    .is_some_and(|c| c.is_ascii_digit() || "+-.eE".contains(*c))
                {
                    self.at += 1;
                }
                Ok(Value::Number(self.chars[start..self.at].iter().collect()))
            }
            Some(c) => bail!("unexpected {c:?} at {}", self.at),
            None => bail!("unexpected end of input"),
        }
    }

    fn object(&mut self) -> Result<Value> {
        self.expect('{')?;
        let mut members = Vec::new();
        if self.peek() == Some('}') {
            self.at += 1;
            return Ok(Value::Object(members));
        }
        loop {
            if self.peek() != Some('"') {
                bail!("expected a key at {}", self.at);
            }
            let key = self.string()?;
            self.expect(':')?;
            members.push((key, self.value()?));
            match self.peek() {
                Some(',') => self.at += 1,
                Some('}') => {
                    self.at += 1;
                    return Ok(Value::Object(members));
                }
                _ => bail!("expected ',' or '}}' at {}", self.at),
            }
        }
    }

    fn array(&mut self) -> Result<Value> {
        self.expect('[')?;
        let mut items = Vec::new();
        if self.peek() == Some(']') {
            self.at += 1;
            return Ok(Value::Array(items));
        }
        loop {
            items.push(self.value()?);
            match self.peek() {
                Some(',') => self.at += 1,
                Some(']') => {
                    self.at += 1;
                    return Ok(Value::Array(items));
                }
                _ => bail!("expected ',' or ']' at {}", self.at),
            }
        }
    }

    fn string(&mut self) -> Result<String> {
        self.expect('"')?;
        let mut out = String::new();
        loop {
            let Some(&c) = self.chars.get(self.at) else {
                bail!("unterminated string");
            };
            self.at += 1;
            match c {
                '"' => return Ok(out),
                '\\' => {
                    let Some(&e) = self.chars.get(self.at) else {
                        bail!("unterminated escape");
                    };
                    self.at += 1;
                    match e {
                        '"' | '\\' | '/' => out.push(e),
                        'b' => out.push('\u{8}'),
                        'f' => out.push('\u{c}'),
                        'n' => out.push('\n'),
                        'r' => out.push('\r'),
                        't' => out.push('\t'),
                        'u' => {
                            let unit = self.hex4()?;
                            let code = if (0xD800..0xDC00).contains(&unit)
                                && self.chars.get(self.at..self.at + 2) == Some(&['\\', 'u'])
                            {
                                self.at += 2;
                                let low = self.hex4()?;
                                0x10000
                                    + ((unit - 0xD800) << 10)
                                    + (low.wrapping_sub(0xDC00) & 0x3FF)
                            } else {
                                unit
                            };
                            out.push(char::from_u32(code).unwrap_or('\u{FFFD}'));
                        }
                        other => bail!("bad escape \\{other} at {}", self.at),
                    }
                }
                c => out.push(c),
            }
        }
    }

    fn hex4(&mut self) -> Result<u32> {
        let digits: String = self
            .chars
            .get(self.at..self.at + 4)
            .map(|s| s.iter().collect())
            .unwrap_or_default();
        self.at += 4;
        u32::from_str_radix(&digits, 16).map_err(|_| anyhow::anyhow!("bad \\u escape {digits:?}"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cargo_artifact_line_is_read() {
        let line = r#"{"reason":"compiler-artifact","package_id":"path+file:///w/crates/capture-cuda#0.1.0","manifest_path":"/w/crates/capture-cuda/Cargo.toml","target":{"kind":["test"],"crate_types":["bin"],"name":"it","src_path":"/w/crates/capture-cuda/tests/it/main.rs","edition":"2024","doc":false,"doctest":false,"test":true},"profile":{"opt_level":"3","debuginfo":0,"debug_assertions":false,"overflow_checks":false,"test":true},"features":[],"filenames":["/w/target/release/deps/it-0123"],"executable":"/w/target/release/deps/it-0123","fresh":false}"#;
        let v = parse(line).unwrap();
        assert_eq!(
            v.get("reason").and_then(Value::as_str),
            Some("compiler-artifact")
        );
        let profile = v.get("profile").unwrap();
        assert_eq!(profile.get("test").and_then(Value::as_bool), Some(true));
        assert_eq!(profile.get("debuginfo"), Some(&Value::Number("0".into())));
        let target = v.get("target").unwrap();
        assert_eq!(target.get("name").and_then(Value::as_str), Some("it"));
        assert_eq!(
            target.get("kind").and_then(Value::as_array),
            Some(&[Value::String("test".into())][..])
        );
        assert_eq!(
            v.get("executable").and_then(Value::as_str),
            Some("/w/target/release/deps/it-0123")
        );
        assert_eq!(v.get("missing"), None);
    }

    #[test]
    fn escapes_nulls_and_empty_containers_are_read() {
        let v = parse(
            r#" { "a" : "q\"\\\n\u00e9\ud83d\ude00" , "b": null, "c": [], "d": {}, "e": -1.5e3 } "#,
        )
        .unwrap();
        assert_eq!(v.get("a").and_then(Value::as_str), Some("q\"\\\né😀"));
        assert_eq!(v.get("b"), Some(&Value::Null));
        assert_eq!(v.get("c").and_then(Value::as_array), Some(&[][..]));
        assert_eq!(v.get("d"), Some(&Value::Object(Vec::new())));
        assert_eq!(v.get("e"), Some(&Value::Number("-1.5e3".into())));
    }

    #[test]
    fn malformed_input_is_an_error() {
        for bad in [
            "",
            "{",
            r#"{"a":}"#,
            r#"{"a":1,}"#,
            "[1 2]",
            r#""open"#,
            "{} x",
            "tru",
        ] {
            assert!(parse(bad).is_err(), "{bad:?} parsed");
        }
    }
}
